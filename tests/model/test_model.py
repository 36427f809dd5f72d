"""Sessions, kernels, agents and the lifecycle table (bai_jupyter.model)."""

from __future__ import annotations

import itertools

import pytest

from bai_jupyter.model import (
    ACTIVE,
    NOT_ENDED,
    OCCUPYING,
    TERMINAL,
    TRANSITIONS,
    Agent,
    ClusterMode,
    HistoryEntry,
    IllegalTransition,
    Kernel,
    KernelRole,
    Session,
    SessionResult,
    SessionSpec,
    SessionType,
    Status,
    check_transition,
    cluster_hostnames,
    new_id,
)
from bai_jupyter.resources import ResourceError, ResourceSlot

S = Status
STARTING = [S.SCHEDULED, S.PREPARING, S.PULLING, S.PREPARED, S.CREATING]

#: The lifecycle of docs/architecture.md, pair by pair (independently of model.TRANSITIONS).
LEGAL: set[tuple[Status, Status]] = {
    # the main line, PULLING optional
    (S.PENDING, S.SCHEDULED),
    (S.SCHEDULED, S.PREPARING),
    (S.PREPARING, S.PULLING),
    (S.PREPARING, S.PREPARED),
    (S.PULLING, S.PREPARED),
    (S.PREPARED, S.CREATING),
    (S.CREATING, S.RUNNING),
    (S.RUNNING, S.TERMINATING),
    (S.TERMINATING, S.TERMINATED),
    # restarts
    (S.RUNNING, S.RESTARTING),
    (S.RESTARTING, S.RUNNING),
    (S.RESTARTING, S.TERMINATING),
    # cancelled while pending or failing to start; errors from any live state
    (S.PENDING, S.CANCELLED),
    (S.PENDING, S.ERROR),
    *((start, S.CANCELLED) for start in STARTING),
    *((start, S.ERROR) for start in STARTING),
    *((start, S.TERMINATING) for start in STARTING),
    (S.RUNNING, S.ERROR),
    (S.RESTARTING, S.ERROR),
    (S.TERMINATING, S.ERROR),
    # an errored session is still cleaned up
    (S.ERROR, S.TERMINATING),
    (S.ERROR, S.TERMINATED),
    # a start the store's previous leader left half-way is started again
    *((start, S.SCHEDULED) for start in STARTING[1:]),
}
ALL_PAIRS = list(itertools.product(Status, Status))


def test_table_covers_every_status() -> None:
    assert set(TRANSITIONS) == set(Status)
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == LEGAL


@pytest.mark.parametrize(("old", "new"), sorted(LEGAL), ids=lambda s: s.value)
def test_legal_transition_accepted(old: Status, new: Status) -> None:
    check_transition("thing", old, new)
    session = make_session()
    session.status = old
    session.set_status(new, 5.0, "why")
    assert session.status is new
    kernel = session.kernels[0]
    kernel.status = old
    kernel.set_status(new, "why")
    assert kernel.status is new
    assert kernel.status_info == "why"


@pytest.mark.parametrize(
    ("old", "new"), [pair for pair in ALL_PAIRS if pair not in LEGAL], ids=lambda s: s.value
)
def test_every_other_transition_raises(old: Status, new: Status) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition("session x", old, new)
    assert info.value.old is old
    assert info.value.new is new
    assert f"session x: illegal transition {old.value} → {new.value}" == str(info.value)
    session = make_session()
    session.status = old
    before = list(session.status_history)
    with pytest.raises(IllegalTransition):
        session.set_status(new, 5.0)
    assert session.status is old  # nothing changed
    assert session.status_history == before
    kernel = session.kernels[0]
    kernel.status = old
    with pytest.raises(IllegalTransition, match="kernel main1"):
        kernel.set_status(new)
    assert kernel.status is old


def test_pair_enumeration_is_complete() -> None:
    assert len(ALL_PAIRS) == len(Status) ** 2 == 144
    assert len(LEGAL) == 38


def test_terminal_and_occupying_states() -> None:
    assert {s for s in Status if s.is_terminal} == {S.TERMINATED, S.CANCELLED, S.ERROR}
    assert frozenset({S.TERMINATED, S.CANCELLED, S.ERROR}) == TERMINAL
    assert {s for s in Status if s.occupies} == {
        *STARTING,
        S.RUNNING,
        S.RESTARTING,
        S.TERMINATING,
    }
    assert OCCUPYING.isdisjoint({S.PENDING, *TERMINAL})
    assert {S.RUNNING, S.RESTARTING} == ACTIVE
    assert set(NOT_ENDED) == set(Status) - TERMINAL
    assert list(NOT_ENDED) == sorted(NOT_ENDED, key=list(Status).index)
    # TERMINATED and CANCELLED are dead ends; ERROR only moves on to clean-up.
    assert TRANSITIONS[S.TERMINATED] == frozenset()
    assert TRANSITIONS[S.CANCELLED] == frozenset()
    assert TRANSITIONS[S.ERROR] == {S.TERMINATING, S.TERMINATED}
    # Every non-terminal state can still end in ERROR.
    assert all(S.ERROR in TRANSITIONS[s] for s in Status if not s.is_terminal)


def test_every_state_is_reachable_and_can_end() -> None:
    reachable = {S.PENDING}
    frontier = [S.PENDING]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    assert reachable == set(Status)
    for state in Status:
        seen, todo = {state}, [state]
        while todo:
            for nxt in TRANSITIONS[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen & {S.TERMINATED, S.CANCELLED}, state


# --- sessions ---------------------------------------------------------------------------------


def make_session(size: int = 1, **kw: object) -> Session:
    spec = SessionSpec(
        resources=ResourceSlot({"cpu": 1, "mem": "1g"}),
        cluster_size=size,
        **kw,  # type: ignore[arg-type]
    )
    return Session.create(spec, "alice", 0.0)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_create_gives_main_and_subs(size: int) -> None:
    spec = SessionSpec(resources=ResourceSlot({"cpu": "0.5", "mem": "1g"}), cluster_size=size)
    session = Session.create(spec, "alice", 42.0)
    assert len(session.id) == 32
    int(session.id, 16)  # uuid4 hex
    assert session.owner == "alice"
    assert session.created_at == 42.0
    assert session.status is S.PENDING
    assert session.result is SessionResult.UNDEFINED
    assert session.exit_code is None
    assert [k.hostname for k in session.kernels] == [
        "main1",
        *(f"sub{i}" for i in range(1, size)),
    ]
    assert [k.hostname for k in session.kernels] == cluster_hostnames(size)
    main, *subs = session.kernels
    assert main.id == session.id
    assert session.main is main
    assert main.role is KernelRole.MAIN
    assert all(k.role is KernelRole.SUB for k in subs)
    assert len({k.id for k in session.kernels}) == size
    for kernel in session.kernels:
        assert kernel.session_id == session.id
        assert kernel.slots == spec.resources
        assert kernel.status is S.PENDING
        assert kernel.agent_id is None
        assert kernel.hostname == f"{kernel.role.value}{kernel.cluster_idx}"
    assert [h.status for h in session.status_history] == [S.PENDING]
    assert session.status_history[0].at == 42.0


def test_create_with_given_id_and_name() -> None:
    spec = SessionSpec(name="train", cluster_size=2)
    session = Session.create(spec, "bob", 1.0, session_id="abc123")
    assert session.id == "abc123"
    assert session.kernels[0].id == "abc123"
    assert session.kernels[1].id != "abc123"
    assert session.name == "train"
    assert Session.create(spec, "bob", 1.0).id != Session.create(spec, "bob", 1.0).id
    assert new_id() != new_id()


def test_main_is_required() -> None:
    session = make_session(size=2)
    del session.kernels[0]
    with pytest.raises(LookupError, match="no main kernel"):
        _ = session.main


def test_cluster_hostnames() -> None:
    assert cluster_hostnames(1) == ["main1"]
    assert cluster_hostnames(4) == ["main1", "sub1", "sub2", "sub3"]


def test_set_status_records_history_info_and_data() -> None:
    session = make_session()
    session.status_data = {"scheduler": {"retries": 3}}
    session.set_status(S.SCHEDULED, 10.0)
    assert session.status_data == {"scheduler": {"retries": 3}}  # kept when no data given
    session.set_status(S.ERROR, 11.0, "failed-to-start", {"error": "boom"})
    assert session.status is S.ERROR
    assert session.status_info == "failed-to-start"
    assert session.status_data == {"error": "boom"}
    session.set_status(S.TERMINATED, 12.0)
    assert session.status_history == [
        HistoryEntry(S.PENDING, 0.0),
        HistoryEntry(S.SCHEDULED, 10.0),
        HistoryEntry(S.ERROR, 11.0, "failed-to-start"),
        HistoryEntry(S.TERMINATED, 12.0),
    ]
    assert session.status_history[2].to_json() == {
        "status": "ERROR",
        "at": 11.0,
        "info": "failed-to-start",
    }


def test_scheduler_data() -> None:
    session = make_session()
    assert session.scheduler_data == {}
    session.status_data = {"scheduler": {"retries": 2, "msg": "x"}}
    assert session.scheduler_data == {"retries": 2, "msg": "x"}


@pytest.mark.parametrize(
    ("code", "result"),
    [
        (0, SessionResult.SUCCESS),
        (1, SessionResult.FAILURE),
        (2, SessionResult.FAILURE),
        (-9, SessionResult.FAILURE),
        (137, SessionResult.FAILURE),
        (None, SessionResult.FAILURE),
    ],
)
def test_batch_finish(code: int | None, result: SessionResult) -> None:
    session = make_session(type=SessionType.BATCH)
    session.finish(code)
    assert session.exit_code == code
    assert session.result is result


def test_spec_defaults_and_total_resources() -> None:
    spec = SessionSpec()
    assert spec.type is SessionType.INTERACTIVE
    assert spec.cluster_size == 1
    assert spec.cluster_mode is ClusterMode.SINGLE_NODE
    assert spec.priority == 10
    assert spec.resource_group == "default"
    assert spec.resources == ResourceSlot()
    spec = SessionSpec(resources=ResourceSlot({"cpu": "0.5", "mem": "1g"}), cluster_size=3)
    assert spec.total_resources == ResourceSlot({"cpu": "1.5", "mem": "3g"})


def test_agent_free() -> None:
    agent = Agent("a1", ResourceSlot({"cpu": 4, "mem": "8g"}), ResourceSlot({"cpu": "1.5"}))
    assert agent.free == ResourceSlot({"cpu": "2.5", "mem": "8g"})
    assert agent.schedulable
    assert agent.resource_group == "default"
    over = Agent("a2", ResourceSlot({"cpu": 1}), ResourceSlot({"cpu": 2}))
    with pytest.raises(ResourceError):
        _ = over.free


def test_kernel_dataclass_defaults() -> None:
    kernel = Kernel("k", "s", KernelRole.MAIN, 1, "main1", ResourceSlot({"cpu": 1}))
    assert kernel.status is S.PENDING
    assert kernel.status_info is None
    assert kernel.container_id is None
