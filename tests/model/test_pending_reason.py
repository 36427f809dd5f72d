"""Why a pending session waits: one sentence, built once (bai_jupyter.model.pending)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bai_jupyter.model import Session, SessionSpec, Status, name_sessions, pending_reason
from bai_jupyter.scheduler.dispatcher import _failure_record
from bai_jupyter.scheduler.predicates import Verdict
from bai_jupyter.wire import session_from_json, session_to_json

NEEDS = "needs cpu=8 but the largest agent has 4 free"
LATER = "starts at 2026-11-25 10:00:00 UTC"


def test_each_reason_once_in_the_order_first_said() -> None:
    record = {
        "retries": 4,
        "failed_predicates": [
            {"name": "resources", "msg": NEEDS},
            {"name": "starts_at", "msg": LATER},
        ],
        "msg": f"{NEEDS}; {LATER}",  # what the dispatcher writes: its verdicts, joined
    }
    assert pending_reason(record) == f"{NEEDS}; {LATER}"


def test_the_queues_own_message_follows_the_predicates() -> None:
    record = {
        "failed_predicates": [{"name": "dependencies", "msg": "waiting for x to succeed"}],
        "msg": "waiting behind y (head of the queue)",
    }
    assert (
        pending_reason(record) == "waiting for x to succeed; waiting behind y (head of the queue)"
    )


def test_a_predicate_without_a_message_is_named() -> None:
    assert (
        pending_reason({"failed_predicates": [{"name": "concurrency", "msg": ""}]}) == "concurrency"
    )


def test_nothing_said_is_none() -> None:
    assert pending_reason(None) is None
    assert pending_reason({}) is None
    assert pending_reason({"retries": 0, "failed_predicates": [], "msg": ""}) is None


def test_the_dispatchers_record_reads_once() -> None:
    session = Session.create(SessionSpec(), "alice", 1.0)
    verdicts = [Verdict("resources", NEEDS), Verdict("starts_at", LATER)]
    session.status_data = {"scheduler": _failure_record(session, verdicts, now=2.0)}
    assert session.pending_reason == f"{NEEDS}; {LATER}"


def test_the_session_json_carries_it_and_reads_back() -> None:
    session = Session.create(SessionSpec(), "alice", 1.0)
    assert session_to_json(session)["pending_reason"] is None
    session.status_data = {"scheduler": {"retries": 1, "msg": NEEDS}}
    data = session_to_json(session)
    assert data["status"] == Status.PENDING.value and data["pending_reason"] == NEEDS
    assert session_to_json(session_from_json(data)) == data


_reason = st.text(st.characters(blacklist_characters=";"), min_size=1, max_size=12).map(str.strip)
_reasons = st.lists(_reason.filter(bool), max_size=5)


@given(
    st.lists(st.tuples(st.sampled_from(["resources", "starts_at", "dependencies"]), _reasons)),
    _reasons,
)
def test_never_repeats_a_reason_and_drops_none(
    predicates: list[tuple[str, list[str]]], msg: list[str]
) -> None:
    record: dict[str, Any] = {
        "failed_predicates": [
            {"name": name, "msg": "; ".join(parts)} for name, parts in predicates
        ],
        "msg": "; ".join(msg),
    }
    said = (pending_reason(record) or "").split("; ")
    said = [reason for reason in said if reason]
    assert len(said) == len(set(said))
    expected = [p for _, parts in predicates for p in (parts or [])] + msg
    expected += [name for name, parts in predicates if not parts]
    assert set(said) == set(expected)


def test_a_session_in_a_reason_reads_by_name_and_its_status_now() -> None:
    """The pass wrote an id and the status it saw; the reader names the session and says
    its status at read time; a session it may not see stays a short id."""
    mine, theirs = "a" * 32, "b" * 32
    text = f"waiting for {mine} (CREATING), {theirs} (PENDING) to succeed"
    states = {mine: ("train-1", "RUNNING")}
    assert (
        name_sessions(text, states.get)
        == "waiting for session train-1 (RUNNING), session bbbbbbbb to succeed"
    )
    assert name_sessions(f"dependency {mine} ended CANCELLED", states.get) == (
        "dependency session train-1 ended CANCELLED"
    )
