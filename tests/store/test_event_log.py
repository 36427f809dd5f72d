"""The store's change log: every change of a session logs its event, in its transaction."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from bai_jupyter.model import Session, SessionSpec, Status
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.store import Store


def _session(owner: str = "alice") -> Session:
    spec = SessionSpec(image="python:3.12", resources=ResourceSlot({"cpu": 1}))
    return Session.create(spec, owner, time.time())


def _log(store: Store, after: int = 0) -> list[tuple[int, str, str]]:
    with store.read() as tx:
        return [(seq, e["session_id"], e["status"]) for seq, e in tx.events_after(after)]


def test_each_change_of_a_session_logs_its_event_in_order(store_url: str) -> None:
    store = Store(store_url)
    try:
        a, b = _session(), _session("bob")
        with store.write() as tx:
            tx.add_session(a)
            tx.add_session(b)
        with store.edit(a.id, notice={"kind": "note"}) as session:
            session.set_status(Status.CANCELLED, time.time(), "user-requested")
        logged = _log(store)
        assert [(sid, status) for _, sid, status in logged] == [
            (a.id, "PENDING"),
            (b.id, "PENDING"),
            (a.id, "CANCELLED"),
        ]
        seqs = [seq for seq, _, _ in logged]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3
        assert _log(store, seqs[1]) == logged[2:]  # a reader resumes after what it saw
        with store.read() as tx:
            (_, last), *_ = tx.events_after(seqs[1])
            assert last["notice"] == {"kind": "note"} and last["owner"] == "alice"
            assert tx.event_bounds() == (seqs[0] - 1, seqs[2])
    finally:
        store.close()


def test_a_change_rolled_back_logs_nothing(store_url: str) -> None:
    store = Store(store_url)
    try:
        with pytest.raises(RuntimeError), store.write() as tx:
            tx.add_session(_session())
            raise RuntimeError("the change fails half-way")
        assert _log(store) == []
    finally:
        store.close()


def test_seqs_never_repeat_after_the_log_is_pruned(store_url: str) -> None:
    """A reader resuming after seq N must see every later event: pruning the whole log
    must not let a new event reuse a seq (SQLite reuses the highest rowid otherwise)."""
    store = Store(store_url)
    try:
        with store.write() as tx:
            tx.add_session(_session())
            tx.add_session(_session())
        ((first, _, _), (second, _, _)) = _log(store)
        with store.write() as tx:
            assert tx.prune_events(time.time() + 1) == 2
            assert tx.event_bounds() == (0, 0)
        with store.write() as tx:
            tx.add_session(_session())
        ((third, _, _),) = _log(store, second)
        assert third > second > first
    finally:
        store.close()


def test_a_version_4_store_gains_the_change_log(store_url: str) -> None:
    store = Store(store_url)
    session = _session()
    with store.write() as tx:
        tx.add_session(session)
    store.close()
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE bai_events"))
        conn.execute(sa.text("UPDATE bai_meta SET value = '4' WHERE key = 'schema_version'"))
    engine.dispose()
    again = Store(store_url)
    try:
        assert _log(again) == []  # the log starts empty; the session is kept
        with again.edit(session.id) as s:
            s.set_status(Status.CANCELLED, time.time(), "user-requested")
        assert [status for _, _, status in _log(again)] == ["CANCELLED"]
    finally:
        again.close()
