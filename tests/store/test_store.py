"""The persistent store (bai_jupyter.store): schema, sessions, slots, templates."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import postgres_database

from bai_jupyter.model import (
    Agent,
    ClusterMode,
    IllegalTransition,
    Session,
    SessionResult,
    SessionSpec,
    SessionType,
    Status,
)
from bai_jupyter.request import Template
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.store import (
    SCHEMA_VERSION,
    AmbiguousKey,
    NameConflict,
    Store,
    StoreError,
    StoreVersionError,
    default_url,
)

T0 = 1_700_000_000.0
OUR_TABLES = {
    "bai_meta",
    "bai_sessions",
    "bai_kernels",
    "bai_agents",
    "bai_templates",
    "bai_owners",
    "bai_kernel_tokens",
    "bai_events",
    "bai_leases",
    "bai_servers",
    "bai_activity",
}


# --- helpers --------------------------------------------------------------------------------


def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A fresh store, on SQLite and on PostgreSQL, closed after the test."""
    opened = Store(store_url)
    yield opened
    opened.close()


def sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    """Run one statement on the store's database with an engine of our own (as an
    operator would, behind the store's back) and commit; the rows it returns."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.exec_driver_sql(statement)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def columns(url: str, table: str) -> list[tuple[str, str, bool]]:
    """A table's columns as (name, type, nullable), for before/after comparisons."""
    engine = sa.create_engine(url)
    try:
        found = sa.inspect(engine).get_columns(table)
    finally:
        engine.dispose()
    return [(c["name"], str(c["type"]), bool(c["nullable"])) for c in found]


def refusal(url: str, error: type[StoreError]) -> str:
    """The message of the ``error`` (that class, not a subclass) opening ``url`` fails with."""
    try:
        Store(url).close()
    except StoreError as exc:
        assert type(exc) is error, exc
        message = str(exc)
    else:
        pytest.fail(f"the store at {url} opened; expected {error.__name__}")
    return message


def table_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, for before/after comparisons."""
    return {t: sorted(sql(url, f'SELECT * FROM "{t}"'), key=repr) for t in sorted(tables(url))}


def cpu(amount: str | int, mem: str | None = None) -> ResourceSlot:
    return ResourceSlot({"cpu": amount} if mem is None else {"cpu": amount, "mem": mem})


def new_session(
    owner: str = "alice",
    *,
    name: str | None = None,
    resources: ResourceSlot | None = None,
    size: int = 1,
    group: str = "default",
    at: float = T0,
) -> Session:
    spec = SessionSpec(
        image="python:3.12",
        name=name,
        resources=resources if resources is not None else cpu(1),
        cluster_size=size,
        resource_group=group,
    )
    return Session.create(spec, owner, at)


def add(store: Store, *sessions: Session) -> None:
    with store.write() as tx:
        for session in sessions:
            tx.add_session(session)


def put_agents(store: Store, *agents: Agent) -> None:
    with store.write() as tx:
        for agent in agents:
            tx.put_agent(agent)


def agents_by_id(store: Store) -> dict[str, Agent]:
    with store.read() as tx:
        return {a.id: a for a in tx.list_agents()}


def get(store: Store, key: str, owner: str | None = None) -> Session:
    with store.read() as tx:
        found = tx.get_session(key, owner)
    assert found is not None, key
    return found


def schedule_on(session: Session, agent_id: str, now: float) -> None:
    """What a scheduling pass does to a session it places on one agent."""
    for kernel in session.kernels:
        kernel.agent_id = agent_id
        kernel.set_status(Status.SCHEDULED)
    session.set_status(Status.SCHEDULED, now)


def end(session: Session, now: float, exit_code: int | None = None) -> None:
    """Terminate every kernel, then the session (from SCHEDULED or RUNNING)."""
    for kernel in session.kernels:
        kernel.set_status(Status.TERMINATING)
        kernel.set_status(Status.TERMINATED, "user-requested")
    session.set_status(Status.TERMINATING, now, "user-requested")
    session.set_status(Status.TERMINATED, now + 1, "user-requested")
    if exit_code is not None:
        session.finish(exit_code)


# --- schema and opening ---------------------------------------------------------------------


def test_a_version_1_store_is_brought_up_to_date_keeping_its_sessions(store_url: str) -> None:
    """A store written before owners' groups and endpoints were kept opens, gains both
    tables (one migration step after the other), loses nothing."""
    store = Store(store_url)
    session = new_session()
    with store.write() as tx:
        tx.add_session(session)
    store.close()
    sql(store_url, "DROP TABLE bai_events")
    sql(store_url, "DROP TABLE bai_kernel_tokens")
    sql(store_url, "DROP TABLE bai_owners")
    sql(store_url, "DROP TABLE bai_endpoints")
    sql(store_url, "UPDATE bai_meta SET value = '1' WHERE key = 'schema_version'")
    again = Store(store_url)
    try:
        with again.write() as tx:
            assert tx.get_session(session.id) is not None
            tx.set_owner_groups("alice", ["physics", "ml"], T0)
        with again.read() as tx:
            assert tx.owner_groups(["alice", "bob"]) == {"alice": ["ml", "physics"]}
            assert tx.list_endpoints() == []
    finally:
        again.close()
    version = [(str(SCHEMA_VERSION),)]
    assert sql(store_url, "SELECT value FROM bai_meta WHERE key = 'schema_version'") == version


def test_new_store_records_schema_version(store_url: str) -> None:
    store = Store(store_url)
    store.close()
    assert SCHEMA_VERSION == 6
    assert dict(sql(store_url, "SELECT key, value FROM bai_meta")) == {
        "schema_version": "6",
        "store_id": store.id,
        "token_secret": store.token_secret,
    }
    assert len(store.id) == 32
    assert len(store.token_secret) == 64
    again = Store(store_url)
    again.close()
    assert again.token_secret == store.token_secret  # kept across opens
    assert tables(store_url) >= OUR_TABLES | {"bai_status_history"}


def test_replicas_opening_a_new_store_at_once_all_open_it_with_one_id_and_secret(
    store_url: str,
) -> None:
    """Manager replicas started together on an empty database: one creates the schema, the
    others wait for it and read the same store id and token secret (none fails)."""
    barrier = threading.Barrier(6)

    def open_one(_: int) -> tuple[str, str]:
        barrier.wait()
        store = Store(store_url)
        store.close()
        return store.id, store.token_secret

    with ThreadPoolExecutor(6) as pool:
        opened = list(pool.map(open_one, range(6)))
    assert len(set(opened)) == 1
    assert dict(sql(store_url, "SELECT key, value FROM bai_meta"))["store_id"] == opened[0][0]


def test_reopening_keeps_everything(store_url: str) -> None:
    first = Store(store_url)
    put_agents(first, Agent("a1", cpu(4, "8g")))
    session = new_session(name="keep")
    add(first, session)
    first.close()

    second = Store(store_url)
    try:
        assert list(agents_by_id(second)) == ["a1"]
        assert get(second, session.id) == session
        assert second.id == first.id  # the same store keeps its identity
    finally:
        second.close()
    version = "SELECT value FROM bai_meta WHERE key = 'schema_version'"
    assert sql(store_url, version) == [(str(SCHEMA_VERSION),)]


def test_other_schema_version_is_refused_and_nothing_changes(store_url: str) -> None:
    store = Store(store_url)
    put_agents(store, Agent("a1", cpu(4)))
    add(store, new_session(name="old"))
    store.close()
    sql(store_url, "UPDATE bai_meta SET value = '99' WHERE key = 'schema_version'")
    # On SQLite the whole file; on PostgreSQL, whose files are the server's, every row.
    file = Path(sa.make_url(store_url).database or "") if store_url.startswith("sqlite") else None
    before_bytes, before_rows = file.read_bytes() if file else b"", table_rows(store_url)

    message = refusal(store_url, StoreVersionError)
    assert "99" in message
    assert str(SCHEMA_VERSION) in message
    assert "nothing was changed" in message
    assert table_rows(store_url) == before_rows
    if file:
        assert file.read_bytes() == before_bytes
    # Still refused the second time: the first attempt did not "repair" anything.
    refusal(store_url, StoreVersionError)


def test_other_schema_version_in_rollback_journal_file_is_left_byte_identical(
    tmp_path: Path,
) -> None:
    """A store of another version that is not in WAL mode must not be touched either.

    Opening switches ``journal_mode`` to WAL on connect, before the version
    check, so the header of a non-WAL file is rewritten although the error says
    "nothing was changed". (SQLite only: journal modes and files are its own.)
    """
    path = db_path(tmp_path)
    Store(url_of(path)).close()
    sql(url_of(path), "UPDATE bai_meta SET value = '99'")
    assert sql(url_of(path), "PRAGMA journal_mode=DELETE") == [("delete",)]
    before = path.read_bytes()

    with pytest.raises(StoreVersionError, match="nothing was changed"):
        Store(url_of(path))
    assert sql(url_of(path), "PRAGMA journal_mode") == [("delete",)]
    assert path.read_bytes() == before


def test_bai_tables_without_meta_are_an_error(store_url: str) -> None:
    sql(store_url, "CREATE TABLE bai_sessions (id TEXT PRIMARY KEY)")
    assert "no schema version" in refusal(store_url, StoreError)  # not a version error
    assert tables(store_url) == {"bai_sessions"}


def test_a_refused_store_holds_no_connection(postgres_server: str) -> None:
    """A server that refuses a store lets go of the database (PostgreSQL counts them)."""
    others = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    with postgres_database(postgres_server) as url:
        sql(url, "CREATE TABLE bai_sessions (id TEXT PRIMARY KEY)")
        message = refusal(url, StoreError)
        assert sql(url, others) == [(0,)], message


def test_tables_of_another_app_are_left_alone(store_url: str) -> None:
    sql(store_url, "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    sql(store_url, "INSERT INTO notes (id, text) VALUES (1, 'theirs'), (2, 'also theirs')")
    schema = columns(store_url, "notes")

    store = Store(store_url)
    put_agents(store, Agent("a1", cpu(2)))
    store.close()
    Store(store_url).close()  # and it opens again

    assert tables(store_url) >= OUR_TABLES | {"notes"}
    assert sql(store_url, "SELECT * FROM notes ORDER BY id") == [(1, "theirs"), (2, "also theirs")]
    assert columns(store_url, "notes") == schema


def test_default_url_is_in_the_jupyter_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))
    expected = tmp_path / "bai_jupyter" / "store.sqlite"
    assert default_url() == f"sqlite:///{expected}"
    assert expected.parent.is_dir()

    store = Store()
    try:
        assert store.url == f"sqlite:///{expected}"
        put_agents(store, Agent("a1", cpu(1)))
    finally:
        store.close()
    assert expected.is_file()
    assert sql(url_of(expected), "SELECT id FROM bai_agents") == [("a1",)]


# --- sessions -------------------------------------------------------------------------------


def test_session_round_trips_with_everything(store: Store) -> None:
    spec = SessionSpec(
        image="python:3.12",
        name="train",
        type=SessionType.BATCH,
        resources=ResourceSlot({"cpu": "0.5", "mem": "512m"}),
        cluster_size=3,
        cluster_mode=ClusterMode.MULTI_NODE,
        resource_group="gpu",
        priority=42,
        starts_at=T0 + 0.25,
        startup_command="python train.py",
        batch_timeout=60.0,
        env={"FOO": "1"},
        mounts=["data"],
        service_ports=["tensorboard:http:6006"],
    )
    put_agents(store, Agent("a1", cpu(4, "4g"), resource_group="gpu"))
    session = Session.create(spec, "alice", T0)
    add(store, session)
    assert get(store, session.id) == session

    with store.edit(session.id) as editing:
        schedule_on(editing, "a1", T0 + 1)
        editing.status_data = {
            "scheduler": {"retries": 2, "msg": "ok"},
            "hang": {"note": [1, "two"]},
        }
    with store.edit(session.id) as editing:
        for kernel in editing.kernels:
            kernel.container_id = f"c-{kernel.hostname}"
        end(editing, T0 + 2, exit_code=3)
        expected = copy.deepcopy(editing)

    loaded = get(store, session.id)
    assert loaded == expected
    assert [k.hostname for k in loaded.kernels] == ["main1", "sub1", "sub2"]
    assert loaded.kernels[0].id == session.id
    assert loaded.result is SessionResult.FAILURE
    assert loaded.exit_code == 3
    assert loaded.status_data == {
        "scheduler": {"retries": 2, "msg": "ok"},
        "hang": {"note": [1, "two"]},
    }
    assert [(h.status, h.at) for h in loaded.status_history] == [
        (Status.PENDING, T0),
        (Status.SCHEDULED, T0 + 1),
        (Status.TERMINATING, T0 + 2),
        (Status.TERMINATED, T0 + 3),
    ]
    assert loaded.status_history[-1].info == "user-requested"
    assert loaded.spec == spec


def test_list_sessions_filters_and_is_oldest_first(store: Store) -> None:
    a1 = new_session("alice", at=T0 + 3)
    a2 = new_session("alice", group="gpu", at=T0 + 1)
    b1 = new_session("bob", at=T0 + 2)
    add(store, a1, a2, b1)
    with store.edit(b1.id) as editing:
        for kernel in editing.kernels:
            kernel.set_status(Status.CANCELLED)
        editing.set_status(Status.CANCELLED, T0 + 5, "user-requested")

    def ids(**filters: Any) -> list[str]:
        with store.read() as tx:
            return [s.id for s in tx.list_sessions(**filters)]

    assert ids() == [a2.id, b1.id, a1.id]
    assert ids(owner="alice") == [a2.id, a1.id]
    assert ids(owner="carol") == []
    assert ids(statuses=[Status.PENDING]) == [a2.id, a1.id]
    assert ids(statuses=[Status.CANCELLED, Status.TERMINATED]) == [b1.id]
    assert ids(resource_group="gpu") == [a2.id]
    assert ids(owner="alice", statuses=[Status.PENDING], resource_group="default") == [a1.id]
    with store.read() as tx:
        without = tx.list_sessions(owner="bob", history=False)
    assert without[0].status_history == []


def _with_id(session: Session, session_id: str) -> Session:
    session.id = session_id
    for kernel in session.kernels:
        kernel.session_id = session_id
    return session


def test_a_unique_id_prefix_of_8_or_more_finds_a_session_and_a_shared_one_says_which(
    store: Store,
) -> None:
    """Every view shows 8 characters of an id: those name the session where they are
    unique among the sessions looked at (the owner's, or everyone's); a prefix two ids
    share is refused naming them, never resolved to either."""
    twin_a = _with_id(new_session("alice"), "2e86fc72" + "a" * 24)
    twin_b = _with_id(new_session("alice"), "2e86fc72" + "b" * 24)
    lone = _with_id(new_session("alice"), "5cbf1d00" + "c" * 24)
    bobs = _with_id(new_session("bob"), "2e86fc72" + "d" * 24)
    add(store, twin_a, twin_b, lone, bobs)
    with store.read() as tx:
        found = tx.get_session("5cbf1d00", owner="alice")
        assert found is not None and found.id == lone.id
        found = tx.get_session("2e86fc72a", owner="alice")
        assert found is not None and found.id == twin_a.id
        assert tx.get_session("5cbf1d00", owner="bob") is None  # not bob's
        found = tx.get_session("2e86fc72", owner="bob")  # his own only: unique for him
        assert found is not None and found.id == bobs.id
        assert tx.get_session("5cbf1d0", owner="alice") is None  # 7: a name, not an id
        with pytest.raises(AmbiguousKey) as told:
            tx.get_session("2e86fc72", owner="alice")
        assert twin_a.id in str(told.value) and twin_b.id in str(told.value)
        assert bobs.id not in str(told.value)
        with pytest.raises(AmbiguousKey, match="give more of the id"):
            tx.get_session("2e86fc72")  # everyone's (an admin's lookup): three share it


def test_get_session_by_id_and_by_name_for_an_owner(store: Store) -> None:
    ended = new_session("alice", name="nb", at=T0)
    add(store, ended)
    with store.edit(ended.id) as editing:
        for kernel in editing.kernels:
            kernel.set_status(Status.CANCELLED)
        editing.set_status(Status.CANCELLED, T0 + 1)
    live = new_session("alice", name="nb", at=T0 + 2)
    bobs = new_session("bob", name="other", at=T0 + 3)
    add(store, live, bobs)

    assert get(store, live.id).owner == "alice"
    assert get(store, live.id, owner="alice").id == live.id
    assert get(store, "nb", owner="alice").id == live.id  # the live one wins over the ended
    assert get(store, "other", owner="bob").id == bobs.id
    with store.read() as tx:
        assert tx.get_session(live.id, owner="bob") is None  # not bob's
        assert tx.get_session("other", owner="alice") is None
        assert tx.get_session("nb") is None  # names need an owner
        assert tx.get_session("0" * 32) is None


def test_a_second_live_session_with_the_same_name_conflicts(store: Store) -> None:
    first = new_session("alice", name="nb")
    add(store, first)
    with pytest.raises(NameConflict, match="nb"):
        add(store, new_session("alice", name="nb", at=T0 + 1))
    with store.read() as tx:
        assert [s.id for s in tx.list_sessions()] == [first.id]

    add(store, new_session("bob", name="nb", at=T0 + 2))  # another owner: fine
    with store.edit(first.id) as editing:
        for kernel in editing.kernels:
            kernel.set_status(Status.CANCELLED)
        editing.set_status(Status.CANCELLED, T0 + 3)
    again = new_session("alice", name="nb", at=T0 + 4)
    add(store, again)  # the first one ended: fine
    assert get(store, "nb", owner="alice").id == again.id
    with pytest.raises(NameConflict):
        add(store, new_session("alice", name="nb", at=T0 + 5))


# --- slots follow kernel states -------------------------------------------------------------


def test_edit_reserves_and_releases_slots(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(8, "8g")), Agent("a2", cpu(8, "8g")))
    session = new_session(resources=cpu(2, "1g"), size=2)
    add(store, session)
    assert agents_by_id(store)["a1"].occupied == ResourceSlot()

    with store.edit(session.id) as editing:
        schedule_on(editing, "a1", T0 + 1)
    assert agents_by_id(store)["a1"].occupied == cpu(4, "2g")
    assert agents_by_id(store)["a2"].occupied == ResourceSlot()

    with store.edit(session.id) as editing:  # still occupying: no change
        for kernel in editing.kernels:
            kernel.set_status(Status.PREPARING)
        editing.set_status(Status.PREPARING, T0 + 2)
    assert agents_by_id(store)["a1"].occupied == cpu(4, "2g")

    with store.edit(session.id) as editing:  # one kernel fails: its slots come back
        editing.kernels[1].set_status(Status.ERROR, "failed-to-start")
        editing.set_status(Status.ERROR, T0 + 3)
    assert get(store, session.id).status is Status.ERROR
    assert agents_by_id(store)["a1"].occupied == cpu(2, "1g")

    with store.edit(session.id) as editing:
        editing.kernels[0].set_status(Status.TERMINATING)  # still holds its slots
    assert agents_by_id(store)["a1"].occupied == cpu(2, "1g")
    with store.edit(session.id) as editing:
        editing.kernels[0].set_status(Status.TERMINATED)
        editing.kernels[1].set_status(Status.TERMINATED)
        editing.set_status(Status.TERMINATED, T0 + 4)
    assert agents_by_id(store)["a1"].occupied == ResourceSlot()
    assert get(store, session.id).status is Status.TERMINATED


def test_illegal_transition_in_edit_writes_nothing(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    session = new_session(resources=cpu(2))
    add(store, session)
    before = get(store, session.id)

    with (
        pytest.raises(IllegalTransition, match="SCHEDULED → RUNNING"),
        store.edit(session.id) as editing,
    ):
        editing.status_data = {"admin_mounts": True}
        schedule_on(editing, "a1", T0 + 1)  # legal, and would reserve slots …
        editing.set_status(Status.RUNNING, T0 + 2)  # … but SCHEDULED → RUNNING is not
    assert get(store, session.id) == before
    assert agents_by_id(store)["a1"].occupied == ResourceSlot()

    with pytest.raises(IllegalTransition), store.edit(session.id) as editing:
        editing.kernels[0].set_status(Status.TERMINATED)  # PENDING → TERMINATED
    assert get(store, session.id) == before


def test_edit_of_an_unknown_session_raises_key_error(store: Store) -> None:
    with pytest.raises(KeyError), store.edit("0" * 32):
        pass  # pragma: no cover - never entered


def test_put_agent_recomputes_occupied_from_its_kernels(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4, "4g")), Agent("a2", cpu(4, "4g")))
    held, done, elsewhere = (new_session(resources=cpu(1, "1g"), size=2) for _ in range(3))
    add(store, held, done, elsewhere)
    for session, agent_id in ((held, "a1"), (done, "a1"), (elsewhere, "a2")):
        with store.edit(session.id) as editing:
            schedule_on(editing, agent_id, T0 + 1)
    with store.edit(done.id) as editing:
        end(editing, T0 + 2)

    # Re-register a1 with a bogus occupied and a new capacity: occupied comes from its kernels.
    put_agents(store, Agent("a1", cpu(6, "8g"), occupied=cpu(5), address="tcp://a1"))
    agent = agents_by_id(store)["a1"]
    assert agent.capacity == cpu(6, "8g")
    assert agent.address == "tcp://a1"
    assert agent.occupied == cpu(2, "2g")
    assert agents_by_id(store)["a2"].occupied == cpu(2, "2g")


def changes(store: Store) -> int:
    with store.read() as tx:
        return tx.change_count()


def test_the_change_counter_moves_only_with_what_can_make_room_or_add_work(
    store: Store,
) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    session = new_session(resources=cpu(1))
    start = changes(store)
    add(store, session)  # work added
    assert changes(store) == start + 1

    put_agents(store, Agent("a1", cpu(4)))  # a heartbeat that changes nothing
    with store.edit(session.id) as editing:  # a note, no status
        editing.meta = {"jupyter_kernel": "k1"}
        editing.status_data = {"scheduler": {"retries": 1}}
    with store.write() as tx:
        tx.set_owner_groups("alice", [], T0)  # no groups, as before
    assert changes(store) == start + 1

    with store.edit(session.id) as editing:  # room taken
        schedule_on(editing, "a1", T0 + 1)
    assert changes(store) == start + 2
    put_agents(store, Agent("a1", cpu(4), schedulable=False))  # room gone
    assert changes(store) == start + 3
    with store.write() as tx:
        tx.set_owner_groups("alice", ["physics"], T0)  # group fair share moves
    assert changes(store) == start + 4


def test_many_sessions_saved_at_once_adjust_each_agent_once(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(8, "8g")), Agent("a2", cpu(8, "8g")))
    sessions = [new_session(resources=cpu(1, "1g"), size=2) for _ in range(3)]
    add(store, *sessions)
    with store.write() as tx:
        loaded = [tx.get_session(s.id) for s in sessions]
        pairs = []
        for session, agent_id in zip(loaded, ("a1", "a1", "a2")):
            assert session is not None
            before = copy.deepcopy(session)
            schedule_on(session, agent_id, T0 + 1)
            pairs.append((session, before))
        tx.save_sessions(pairs)
    assert agents_by_id(store)["a1"].occupied == cpu(4, "4g")
    assert agents_by_id(store)["a2"].occupied == cpu(2, "2g")
    for session in sessions:
        saved = get(store, session.id)
        assert saved.status is Status.SCHEDULED
        assert [h.status for h in saved.status_history] == [Status.PENDING, Status.SCHEDULED]


# --- templates ------------------------------------------------------------------------------


def test_templates_shared_and_per_owner(store: Store) -> None:
    shared = Template("gpu", {"resources": {"cpu": 4}}, "shared GPU box")
    own = Template("gpu", {"resources": {"cpu": 1}, "env": {"A": "1"}}, "mine", owner="alice")
    only_bob = Template("tiny", {"cluster_size": 1}, owner="bob")
    with store.write() as tx:
        for template in (shared, own, only_bob):
            tx.put_template(template)

    with store.read() as tx:
        assert tx.get_template("gpu") == shared
        assert tx.get_template("gpu", owner="alice") == own  # her own shadows the shared
        assert tx.get_template("gpu", owner="bob") == shared
        assert tx.get_template("tiny", owner="bob") == only_bob
        assert tx.get_template("tiny", owner="alice") is None
        assert tx.get_template("tiny") is None
        assert tx.list_templates(owner="alice") == [shared, own]
        assert tx.list_templates(owner="carol") == [shared]
        assert tx.list_templates() == [shared, own, only_bob]

    updated = Template("gpu", {"resources": {"cpu": 2}}, "mine, v2", owner="alice")
    with store.write() as tx:
        tx.put_template(updated)  # replaces, does not duplicate
    with store.read() as tx:
        assert tx.get_template("gpu", owner="alice") == updated
        assert len(tx.list_templates(owner="alice")) == 2

    with store.write() as tx:
        assert tx.delete_template("gpu", owner="alice") is True
        assert tx.delete_template("gpu", owner="alice") is False
    with store.read() as tx:
        assert tx.get_template("gpu", owner="alice") == shared  # the shared one shows again
    with store.write() as tx:
        assert tx.delete_template("gpu") is True
    with store.read() as tx:
        assert tx.get_template("gpu", owner="alice") is None
        assert tx.list_templates() == [only_bob]


def test_a_token_secret_added_meanwhile_is_the_one_kept(store_url: str) -> None:
    """Two servers opening an older store at once: the second insert loses and reads back."""
    store = Store(store_url)
    store.close()
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:  # the row exists already, as if another process won
            assert Store._add_token_secret(conn) == store.token_secret
    finally:
        engine.dispose()


# --- endpoints ------------------------------------------------------------------------------


def test_endpoint_names_are_unique_and_records_round_trip(store: Store) -> None:
    from bai_jupyter.endpoints import Endpoint, parse_endpoint

    name, spec = parse_endpoint(
        {"name": "m", "replica": {"service_ports": ["model:http:8000"], "startup_command": "x"}}
    )
    endpoint = Endpoint("e1", name, "alice", spec, T0, desired=0)
    endpoint.decide(T0, 1, "created")
    with store.write() as tx:
        tx.add_endpoint(endpoint)
    with pytest.raises(NameConflict), store.write() as tx:
        tx.add_endpoint(Endpoint("e2", name, "bob", spec, T0))  # another owner: still taken
    endpoint.generation = 2
    with store.write() as tx:
        tx.save_endpoint(endpoint)
    with store.read() as tx:
        assert tx.get_endpoint("m") == endpoint
        assert tx.get_endpoint(endpoint_id="e1") == endpoint
        assert tx.list_endpoints("bob") == []
        assert [e.name for e in tx.list_endpoints()] == ["m"]
    with store.write() as tx:
        tx.delete_endpoint("e1")
        assert tx.get_endpoint("m") is None


# --- kernel tokens' records -----------------------------------------------------------------


def an_endpoint(endpoint_id: str, name: str) -> Any:
    from bai_jupyter.endpoints import Endpoint, parse_endpoint

    parsed, spec = parse_endpoint(
        {"name": name, "replica": {"service_ports": ["model:http:8000"], "startup_command": "x"}}
    )
    return Endpoint(endpoint_id, parsed, "alice", spec, T0)


def mentioning(url: str, *ids: str) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of every table that mention any of ``ids`` (in any column)."""
    found = {
        table: [row for row in rows if any(i in repr(row) for i in ids)]
        for table, rows in table_rows(url).items()
    }
    return {table: rows for table, rows in found.items() if rows}


def test_kernel_token_records_go_with_their_session(store_url: str) -> None:
    """Revocations and what a session's tokens created are kept until the session's record
    is deleted: then no row of the store mentions it, nor the sessions it created."""
    store = Store(store_url)
    try:
        parent, child, other = new_session(), new_session(), new_session()
        add(store, parent, child, other)
        with store.write() as tx:
            tx.add_endpoint(an_endpoint("e" * 32, "made"))
            tx.revoke_tokens(parent.id, 5000)
            tx.revoke_tokens(parent.id, 7000)  # a later revocation replaces the first
            tx.revoke_tokens(child.id, 6000)
            tx.note_token_created(parent.id, "session", child.id, 1)
            tx.note_token_created(parent.id, "endpoint", "e" * 32, 1)
            tx.note_token_created(other.id, "session", "f" * 32, 1)  # gone: not noted
            tx.revoke_tokens("0" * 32, 1)  # no such session: nothing to revoke
        with store.read() as tx:
            assert tx.tokens_revoked_at(parent.id) == 7000
            assert tx.tokens_revoked_at(other.id) is None
            assert tx.token_created(parent.id, "session", child.id)
            assert not tx.token_created(other.id, "session", child.id)
            assert tx.token_created(parent.id, "endpoint", "e" * 32)
            assert not tx.token_created(parent.id, "session", "f" * 32)
        # The created session goes (with its own revocation), the link to it too.
        with store.write() as tx:
            assert tx.delete_sessions([child.id]) == 1
            assert not tx.token_created(parent.id, "session", child.id)
        assert mentioning(store_url, child.id) == {}
        # A deleted endpoint takes the record of the token that created it along.
        with store.write() as tx:
            tx.delete_endpoint("e" * 32)
            assert not tx.token_created(parent.id, "endpoint", "e" * 32)
        with store.write() as tx:
            tx.add_endpoint(an_endpoint("d" * 32, "kept"))
            tx.note_token_created(parent.id, "endpoint", "d" * 32, 1)
            assert tx.delete_sessions([parent.id]) == 1
        assert mentioning(store_url, parent.id) == {}
        assert sql(store_url, "SELECT * FROM bai_kernel_tokens") == []
        with store.read() as tx:
            assert tx.get_endpoint("kept") is not None  # the endpoint itself stays
    finally:
        store.close()


def test_a_version_3_stores_kernel_token_keys_move_into_their_table(store_url: str) -> None:
    """Version 3 kept these records as meta keys that outlived their sessions: the ones
    about sessions and endpoints that still exist move, the others are dropped."""
    store = Store(store_url)
    parent, child, other = new_session(), new_session(), new_session()
    add(store, parent, child, other)
    with store.write() as tx:
        tx.add_endpoint(an_endpoint("e" * 32, "made"))
    store.close()
    gone = "9" * 32
    sql(store_url, "DROP TABLE bai_kernel_tokens")
    sql(store_url, "UPDATE bai_meta SET value = '3' WHERE key = 'schema_version'")
    old_keys = {
        f"kernel-tokens-revoked:{parent.id}": "5000",
        f"kernel-tokens-revoked:{gone}": "6000",  # a purged session's
        f"kernel-tokens-revoked:{other.id}": "garbled",
        f"kernel-token-child:{child.id}": parent.id,
        f"kernel-token-child:{gone}": parent.id,  # a purged child
        f"kernel-token-child:{other.id}": gone,  # created by a purged session
        f"kernel-token-endpoint:{'e' * 32}": parent.id,
        f"kernel-token-endpoint:{'d' * 32}": parent.id,  # a deleted endpoint
        "pool-stats:p": "{}",  # someone else's key: left alone
    }
    values = ", ".join(f"('{k}', '{v}')" for k, v in old_keys.items())
    sql(store_url, f"INSERT INTO bai_meta (key, value) VALUES {values}")
    again = Store(store_url)
    try:
        with again.read() as tx:
            assert tx.tokens_revoked_at(parent.id) == 5000
            assert tx.tokens_revoked_at(other.id) is None
            assert tx.token_created(parent.id, "session", child.id)
            assert tx.token_created(parent.id, "endpoint", "e" * 32)
            assert tx.get_meta("pool-stats:p") == "{}"
    finally:
        again.close()
    moved = sql(store_url, "SELECT session_id, kind, target, at FROM bai_kernel_tokens")
    assert sorted(moved) == sorted(
        [
            (parent.id, "revoked", "", 5000),
            (parent.id, "session", child.id, None),
            (parent.id, "endpoint", "e" * 32, None),
        ]
    )
    left = [key for (key,) in sql(store_url, "SELECT key FROM bai_meta")]
    assert [key for key in left if key.startswith("kernel-token")] == []
    version = [(str(SCHEMA_VERSION),)]
    assert sql(store_url, "SELECT value FROM bai_meta WHERE key = 'schema_version'") == version
