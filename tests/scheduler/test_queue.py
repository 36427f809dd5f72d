"""The scheduler against the store (bai_jupyter.scheduler.queue), across passes and processes."""

from __future__ import annotations

import multiprocessing
import random
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bai_jupyter.model import Agent, ClusterMode, Session, SessionSpec, Status
from bai_jupyter.resources import ResourceSlot, total
from bai_jupyter.scheduler import PassResult, SchedulerConfig
from bai_jupyter.scheduler.queue import NeverFits, UnknownDependency, enqueue, run_pass
from bai_jupyter.scheduler.selectors import (
    AgentSelector,
    ConcentratedSelector,
    DispersedSelector,
)
from bai_jupyter.scheduler.sequencers import FIFOSequencer
from bai_jupyter.store import Store

T0 = 1_700_000_000.0


# --- helpers --------------------------------------------------------------------------------


def url_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A fresh store, on SQLite and on PostgreSQL, closed after the test."""
    opened = Store(store_url)
    yield opened
    opened.close()


def cpu(amount: str | int, mem: str | None = None) -> ResourceSlot:
    return ResourceSlot({"cpu": amount} if mem is None else {"cpu": amount, "mem": mem})


def new_session(
    owner: str = "alice",
    resources: ResourceSlot | None = None,
    *,
    size: int = 1,
    mode: ClusterMode = ClusterMode.SINGLE_NODE,
    depends_on: list[str] | None = None,
    at: float = T0,
) -> Session:
    spec = SessionSpec(
        image="python:3.12",
        resources=resources if resources is not None else cpu(1),
        cluster_size=size,
        cluster_mode=mode,
        depends_on=depends_on or [],
    )
    return Session.create(spec, owner, at)


def put_agents(store: Store, *agents: Agent) -> None:
    with store.write() as tx:
        for agent in agents:
            tx.put_agent(agent)


def occupied(store: Store) -> dict[str, ResourceSlot]:
    with store.read() as tx:
        return {a.id: a.occupied for a in tx.list_agents()}


def get(store: Store, session_id: str) -> Session:
    with store.read() as tx:
        found = tx.get_session(session_id)
    assert found is not None, session_id
    return found


def count(store: Store) -> int:
    with store.read() as tx:
        return len(tx.list_sessions())


def one_pass(
    store: Store, now: float, selector: AgentSelector | None = None, group: str = "default"
) -> PassResult:
    """A strict-FIFO pass with the default settings."""
    return run_pass(
        store, group, SchedulerConfig(), FIFOSequencer(), selector or ConcentratedSelector(), now
    )


def finish(store: Store, session_id: str, now: float, exit_code: int) -> None:
    """End a scheduled session with a batch exit code (releases its slots)."""
    with store.edit(session_id) as session:
        for kernel in session.kernels:
            kernel.set_status(Status.TERMINATING)
            kernel.set_status(Status.TERMINATED, "task-finished")
        session.set_status(Status.TERMINATING, now)
        session.set_status(Status.TERMINATED, now, "task-finished")
        session.finish(exit_code)


def cancel(store: Store, session_id: str, now: float) -> None:
    with store.edit(session_id) as session:
        for kernel in session.kernels:
            kernel.set_status(Status.CANCELLED, "user-requested")
        session.set_status(Status.CANCELLED, now, "user-requested")


# --- enqueue --------------------------------------------------------------------------------


def test_enqueue_refuses_what_never_fits(store: Store) -> None:
    with pytest.raises(NeverFits, match="no agents"):
        enqueue(store, new_session(resources=cpu(1)))

    put_agents(store, Agent("a1", cpu(4, "8g")), Agent("a2", cpu(2, "16g")))
    with pytest.raises(NeverFits) as info:
        enqueue(store, new_session(resources=cpu(8)))
    assert "cpu=8" in str(info.value)
    assert "largest agent" in str(info.value)
    with pytest.raises(NeverFits, match="cpu=6"):  # 3 × 2 cpus on one agent
        enqueue(store, new_session(resources=cpu(2), size=3))
    with pytest.raises(NeverFits, match="only 2 of them"):
        enqueue(store, new_session(resources=cpu(2, "8g"), size=3, mode=ClusterMode.MULTI_NODE))
    assert count(store) == 0

    fits = new_session(resources=cpu(2, "8g"), size=2, mode=ClusterMode.MULTI_NODE)
    enqueue(store, fits)  # one kernel on each agent
    assert get(store, fits.id).status is Status.PENDING


def test_what_a_lost_agent_would_hold_waits_for_it(store: Store) -> None:
    """An agent that stopped answering is not schedulable for now; it may come back, so a
    request only it could hold queues rather than being refused."""
    put_agents(store, Agent("a1", cpu(2, "8g")), Agent("a2", cpu(4, "8g"), schedulable=False))
    waiting = new_session(resources=cpu(4, "8g"))
    enqueue(store, waiting)
    assert not one_pass(store, T0 + 1).placements  # nothing placed on a lost agent
    assert get(store, waiting.id).status is Status.PENDING
    with pytest.raises(NeverFits):  # beyond even the lost agent: refused as before
        enqueue(store, new_session(resources=cpu(8, "8g")))


def test_enqueue_refuses_unknown_dependencies(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    first = new_session()
    enqueue(store, first)
    with pytest.raises(UnknownDependency, match="nope"):
        enqueue(store, new_session(depends_on=[first.id, "nope"], at=T0 + 1))
    assert count(store) == 1
    enqueue(store, new_session(depends_on=[first.id], at=T0 + 1))
    assert count(store) == 2


# --- passes ---------------------------------------------------------------------------------


def test_pass_reserves_slots_and_schedules(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4, "4g")), Agent("a2", cpu(4, "4g")))
    big = new_session(resources=cpu(3, "1g"), at=T0)
    pair = new_session(resources=cpu(2, "1g"), size=2, mode=ClusterMode.MULTI_NODE, at=T0 + 1)
    for session in (big, pair):
        enqueue(store, session)

    result = one_pass(store, T0 + 10)
    assert {p.session_id for p in result.placements} == {big.id, pair.id}
    assert result.failures == {}
    for sid in (big.id, pair.id):
        placed = get(store, sid)
        assert placed.status is Status.SCHEDULED
        assert [(h.status, h.at) for h in placed.status_history] == [
            (Status.PENDING, T0 + (sid == pair.id)),
            (Status.SCHEDULED, T0 + 10),
        ]
        assert all(k.status is Status.SCHEDULED and k.agent_id for k in placed.kernels)
    # Best fit puts big on a1 (ties go by id); the pair fits whole on a2, so it stays together.
    assert get(store, big.id).kernels[0].agent_id == "a1"
    assert [k.agent_id for k in get(store, pair.id).kernels] == ["a2", "a2"]
    assert occupied(store) == {"a1": cpu(3, "1g"), "a2": cpu(4, "2g")}

    assert one_pass(store, T0 + 11) == PassResult()  # nothing left to do


def test_a_pass_given_no_time_dates_its_placements_after_the_changes_it_saw(
    store: Store,
) -> None:
    """A pass that waited for the write lock while a session ended places into the room
    that end made: its SCHEDULED time comes after that TERMINATED, never before (the
    order a reader of the histories sees is the order things happened)."""
    import threading

    put_agents(store, Agent("a1", cpu(1, "1g")))
    first, second = new_session(at=time.time()), new_session(owner="bob", at=time.time())
    for session in (first, second):
        enqueue(store, session)
    assert [p.session_id for p in one_pass(store, time.time()).placements] == [first.id]
    ending = threading.Event()
    result: list[PassResult] = []
    with store.edit(first.id) as session:  # the end holds the lock; the pass waits for it

        def pass_now() -> None:
            ending.set()
            config, fifo = SchedulerConfig(), FIFOSequencer()
            result.append(run_pass(store, "default", config, fifo, ConcentratedSelector(), None))

        waiting = threading.Thread(target=pass_now)
        waiting.start()
        ending.wait(5)
        time.sleep(0.3)  # the pass is blocked on the lock meanwhile
        for kernel in session.kernels:
            kernel.set_status(Status.TERMINATING)
            kernel.set_status(Status.TERMINATED, "task-finished")
        now = time.time()
        session.set_status(Status.TERMINATING, now)
        session.set_status(Status.TERMINATED, now, "task-finished")
        session.finish(0)
    waiting.join(30)
    assert [p.session_id for p in result[0].placements] == [second.id]
    ended = get(store, first.id).status_history[-1].at
    scheduled = get(store, second.id).status_history[-1]
    assert scheduled.status is Status.SCHEDULED and scheduled.at >= ended


def test_a_pass_logs_each_placement_and_cancellation_with_its_kernels(store: Store) -> None:
    """What a pass decides reaches every event stream: its events are in the store's log,
    written in the pass's own transaction, each kernel with its session's new status."""
    put_agents(store, Agent("a1", cpu(4)))
    gone = new_session(resources=cpu(1), at=T0)
    enqueue(store, gone)
    cancel(store, gone.id, T0 + 1)
    pair = new_session(resources=cpu(1), size=2, at=T0 + 2)
    orphan = new_session(depends_on=[gone.id], at=T0 + 3)
    for session in (pair, orphan):
        enqueue(store, session)
    with store.read() as tx:
        (seen, _), *_ = reversed(tx.events_after(0))
    one_pass(store, T0 + 10)
    with store.read() as tx:
        logged = [e for _, e in tx.events_after(seen)]
    assert {(e["session_id"], e["status"], tuple(e["kernels"].items())) for e in logged} == {
        (pair.id, "SCHEDULED", (("main1", "SCHEDULED"), ("sub1", "SCHEDULED"))),
        (orphan.id, "CANCELLED", (("main1", "CANCELLED"),)),
    }


def test_why_pending_is_recorded_and_retries_count_up(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    first = new_session(resources=cpu(3), at=T0)
    waiting = new_session(resources=cpu(2), at=T0 + 1)
    enqueue(store, first)
    enqueue(store, waiting)

    for attempt in (1, 2, 3):
        result = one_pass(store, T0 + 10 * attempt)
        assert result.blocked_by == waiting.id
        record = get(store, waiting.id).status_data["scheduler"]
        assert record["retries"] == attempt
        assert record["last_try"] == T0 + 10 * attempt
        assert [p["name"] for p in record["failed_predicates"]] == ["resources"]
        assert "cpu=2" in record["msg"]
        assert record["msg"] == record["failed_predicates"][0]["msg"]
        assert get(store, waiting.id).status is Status.PENDING

    finish(store, first.id, T0 + 40, 0)
    assert [p.session_id for p in one_pass(store, T0 + 50).placements] == [waiting.id]
    assert occupied(store) == {"a1": cpu(2)}


def test_strict_fifo_makes_later_sessions_wait_behind_the_head(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    running = new_session(resources=cpu(3), at=T0)
    enqueue(store, running)
    one_pass(store, T0 + 1)
    head = new_session(resources=cpu(2), at=T0 + 2)
    small = new_session(resources=cpu(1), at=T0 + 3)  # would fit, but must wait its turn
    other = new_session("bob", resources=cpu(1), at=T0 + 4)
    for session in (head, small, other):
        enqueue(store, session)

    result = one_pass(store, T0 + 5)
    assert result.placements == []
    assert result.blocked_by == head.id
    assert set(result.untried) == {small.id, other.id}
    for sid in (small.id, other.id):
        session = get(store, sid)
        assert session.status is Status.PENDING
        assert session.status_data["scheduler"]["msg"] == (
            f"waiting behind {head.id} (head of the queue)"
        )
    assert get(store, head.id).status_data["scheduler"]["retries"] == 1
    assert occupied(store) == {"a1": cpu(3)}


@pytest.mark.parametrize("how", ["cancelled", "failed"])
def test_a_failed_dependency_cancels_the_whole_chain(store: Store, how: str) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    root = new_session(resources=cpu(1), at=T0)
    enqueue(store, root)
    if how == "cancelled":
        cancel(store, root.id, T0 + 1)
    else:
        one_pass(store, T0 + 1)
        finish(store, root.id, T0 + 2, exit_code=1)
    child = new_session(depends_on=[root.id], at=T0 + 3)
    enqueue(store, child)
    grandchild = new_session(depends_on=[child.id], at=T0 + 4)
    enqueue(store, grandchild)
    unrelated = new_session(at=T0 + 5)
    enqueue(store, unrelated)

    result = one_pass(store, T0 + 10)
    assert {c.session_id for c in result.cancellations} == {child.id, grandchild.id}
    assert [p.session_id for p in result.placements] == [unrelated.id]
    for sid in (child.id, grandchild.id):
        session = get(store, sid)
        assert session.status is Status.CANCELLED
        assert session.status_info == "dependency-failed"
        assert session.status_history[-1].status is Status.CANCELLED
        assert session.status_history[-1].info == "dependency-failed"
        assert all(k.status is Status.CANCELLED for k in session.kernels)
        assert session.status_data["scheduler"]["msg"]
    assert root.id in get(store, child.id).status_data["scheduler"]["msg"]
    assert occupied(store) == {"a1": cpu(1)}


def test_a_successful_dependency_releases_the_dependant(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    root = new_session(at=T0)
    enqueue(store, root)
    child = new_session(depends_on=[root.id], at=T0 + 1)
    enqueue(store, child)

    assert [p.session_id for p in one_pass(store, T0 + 2).placements] == [root.id]
    record = get(store, child.id).status_data["scheduler"]
    assert [p["name"] for p in record["failed_predicates"]] == ["dependencies"]
    assert root.id in record["msg"]
    finish(store, root.id, T0 + 3, exit_code=0)
    assert [p.session_id for p in one_pass(store, T0 + 4).placements] == [child.id]


def test_state_survives_a_restart(tmp_path: Path) -> None:
    store = Store(url_of(tmp_path))
    put_agents(store, Agent("a1", cpu(4)))
    first = new_session(resources=cpu(3), at=T0)
    second = new_session(resources=cpu(2), at=T0 + 1)
    enqueue(store, first)
    enqueue(store, second)
    one_pass(store, T0 + 2)
    store.close()

    store = Store(url_of(tmp_path))  # a restarted server
    try:
        assert get(store, first.id).status is Status.SCHEDULED
        assert get(store, first.id).kernels[0].agent_id == "a1"
        assert occupied(store) == {"a1": cpu(3)}
        assert get(store, second.id).status_data["scheduler"]["retries"] == 1
        one_pass(store, T0 + 3)  # the count goes on from the stored record
        assert get(store, second.id).status_data["scheduler"]["retries"] == 2
        finish(store, first.id, T0 + 4, 0)
        assert [p.session_id for p in one_pass(store, T0 + 5).placements] == [second.id]
        history = [h.status for h in get(store, second.id).status_history]
        assert history == [Status.PENDING, Status.SCHEDULED]
    finally:
        store.close()


# --- two processes on one store -------------------------------------------------------------

WORKER_PASSES = 30
AGENTS = [Agent(f"a{i}", cpu(4, "8g")) for i in range(3)]
SHAPES = [(cpu(1, "1g"), 1), (cpu(2, "2g"), 1), (cpu(3, "1g"), 1), (cpu(2, "2g"), 2)]


def _worker(
    url: str, index: int, barrier: Barrier, results: Queue[tuple[int, int, int, str]]
) -> None:
    """Enqueue, schedule and end sessions in a loop; report placements made and ended."""
    try:
        rng = random.Random(index)
        store = Store(url)
        selector: AgentSelector = ConcentratedSelector() if index == 0 else DispersedSelector()
        placed = ended = 0
        barrier.wait(timeout=60)
        for step in range(WORKER_PASSES):
            resources, size = rng.choice(SHAPES)
            mode = ClusterMode.MULTI_NODE if size > 1 and step % 2 else ClusterMode.SINGLE_NODE
            enqueue(
                store, new_session(f"w{index}", resources, size=size, mode=mode, at=time.time())
            )
            placed += len(one_pass(store, time.time(), selector).placements)
            if step % 3 == index:  # end one scheduled session, maybe one the other just ended
                with store.read() as tx:
                    scheduled = tx.list_sessions(statuses=[Status.SCHEDULED], history=False)
                if scheduled:
                    with store.edit(rng.choice(scheduled).id) as session:
                        if session.status is Status.SCHEDULED:
                            for kernel in session.kernels:
                                kernel.set_status(Status.TERMINATING)
                                kernel.set_status(Status.TERMINATED)
                            session.set_status(Status.TERMINATING, time.time())
                            session.set_status(Status.TERMINATED, time.time())
                            ended += 1
            time.sleep(0.003)
        store.close()
        results.put((index, placed, ended, ""))
    except BaseException:  # pragma: no cover - reported to the parent
        results.put((index, 0, 0, traceback.format_exc()))


def test_two_processes_never_double_allocate(store_url: str) -> None:
    """Concurrent passes in two processes: no slot given twice, no session placed twice."""
    url = store_url
    store = Store(url)
    put_agents(store, *AGENTS)
    for i in range(12):  # demand well above the 12 cpus there are, from the start
        resources, size = SHAPES[i % len(SHAPES)]
        enqueue(store, new_session("parent", resources, size=size, at=T0 + i))

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: Queue[tuple[int, int, int, str]] = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(url, i, barrier, results)) for i in range(2)]
    for worker in workers:
        worker.start()
    try:
        reports = sorted(results.get(timeout=60) for _ in workers)
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():  # pragma: no cover
                worker.kill()
                worker.join()
    for index, _, _, error in reports:
        assert not error, f"worker {index} failed:\n{error}"
    placed = sum(r[1] for r in reports)
    assert all(r[1] > 0 for r in reports), f"both processes must place sessions: {reports}"

    with store.read() as tx:
        agents = tx.list_agents()
        sessions = tx.list_sessions()
    store.close()
    assert len(sessions) == 12 + 2 * WORKER_PASSES
    assert sum(s.status is Status.PENDING for s in sessions) > 0, "demand must exceed capacity"

    held: dict[str, list[ResourceSlot]] = {a.id: [] for a in agents}
    scheduled_sessions = 0
    for session in sessions:
        times = Counter(h.status for h in session.status_history)[Status.SCHEDULED]
        assert times <= 1, f"{session.id} was placed {times} times"
        scheduled_sessions += times
        if times:
            assert all(k.agent_id in held for k in session.kernels), session
        else:
            assert session.status is Status.PENDING
            assert all(k.agent_id is None for k in session.kernels), session
        for kernel in session.kernels:
            if kernel.status.occupies:
                assert kernel.agent_id is not None
                held[kernel.agent_id].append(kernel.slots)
    assert scheduled_sessions == placed  # every placement a pass reported is there, once
    for agent in agents:
        assert agent.occupied.fits_in(agent.capacity), agent
        assert agent.occupied == total(held[agent.id]), agent


# --- passes that scale ----------------------------------------------------------------------


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """The SQL statements ``store`` runs meanwhile (an executemany counts once)."""
    seen: list[str] = []

    def note(*args: Any) -> None:
        seen.append(args[2])

    sa.event.listen(store.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", note)


def test_a_pass_writes_its_decisions_in_a_few_statements(store: Store) -> None:
    put_agents(store, *(Agent(f"a{i:02d}", cpu(4, "4g")) for i in range(20)))
    sessions = [new_session(f"u{i % 5}", cpu(1, "1g"), at=T0 + i) for i in range(40)]
    sessions += [
        new_session("u9", cpu(1, "1g"), size=2, mode=ClusterMode.MULTI_NODE, at=T0 + 50 + i)
        for i in range(10)
    ]
    for session in sessions:
        enqueue(store, session)

    with statements(store) as seen:
        result = one_pass(store, T0 + 100)
    assert len(result.placements) == 50
    # Load, decide, write: the same few statements for 50 placements as for one.
    assert len(seen) <= 20, "\n".join(seen)
    with store.read() as tx:
        agents = tx.list_agents()
        placed = tx.list_sessions()
    assert all(s.status is Status.SCHEDULED for s in placed)
    assert all([h.status for h in s.status_history] == [Status.PENDING, Status.SCHEDULED]
               for s in placed)  # fmt: skip
    kernels = [k for s in placed for k in s.kernels]
    assert all(k.status is Status.SCHEDULED and k.agent_id for k in kernels)
    for agent in agents:
        assert agent.occupied == total([k.slots for k in kernels if k.agent_id == agent.id])


def test_an_unchanged_queue_is_not_loaded_again(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    first = new_session(resources=cpu(3), at=T0)
    waiting = new_session(resources=cpu(2), at=T0 + 1)
    enqueue(store, first)
    enqueue(store, waiting)
    one_pass(store, T0 + 10)  # places first
    looked = one_pass(store, T0 + 20)  # must look: the store changed; places nothing

    with statements(store) as seen:
        again = one_pass(store, T0 + 30)
    assert again.skipped and not looked.skipped
    assert not [sql for sql in seen if "bai_kernels" in sql or "bai_agents" in sql], seen
    # What a full pass would have said and recorded.
    assert again.blocked_by == looked.blocked_by == waiting.id
    assert again.failures[waiting.id]["retries"] == 3
    assert get(store, waiting.id).status_data["scheduler"]["retries"] == 3
    assert get(store, waiting.id).status_data["scheduler"]["last_try"] == T0 + 30

    finish(store, first.id, T0 + 40, 0)  # makes room: the next pass looks again
    assert [p.session_id for p in one_pass(store, T0 + 50).placements] == [waiting.id]


def test_an_idle_pass_is_skipped_by_every_process_until_any_changes_the_store(
    store_url: str,
) -> None:
    """The idle mark and the change counter live in the store: two managers (two Store
    objects, as two processes have) see each other's passes and changes."""
    one, other = Store(store_url), Store(store_url)
    try:
        put_agents(one, Agent("a1", cpu(4)))
        first = new_session(resources=cpu(3), at=T0)
        waiting = new_session(resources=cpu(2), at=T0 + 1)
        enqueue(one, first)
        enqueue(one, waiting)
        one_pass(one, T0 + 10)
        assert not one_pass(one, T0 + 20).skipped  # idle: leaves its mark
        assert one_pass(other, T0 + 30).skipped  # the other sees the mark

        finish(other, first.id, T0 + 40, 0)  # a change by the other
        assert [p.session_id for p in one_pass(one, T0 + 50).placements] == [waiting.id]
    finally:
        one.close()
        other.close()


def test_a_pass_under_other_settings_is_not_skipped(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    enqueue(store, new_session(resources=cpu(3), at=T0))
    waiting = new_session(resources=cpu(2), at=T0 + 1)
    enqueue(store, waiting)
    one_pass(store, T0 + 10)
    one_pass(store, T0 + 20)
    assert one_pass(store, T0 + 30).skipped
    limited = SchedulerConfig(pending_timeout=5)  # another manager's settings
    result = run_pass(store, "default", limited, FIFOSequencer(), ConcentratedSelector(), T0 + 40)
    assert not result.skipped
    assert [c.session_id for c in result.cancellations] == [waiting.id]


def test_a_heuristic_fifo_head_is_pushed_back_though_nothing_changes(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    enqueue(store, new_session(resources=cpu(3), at=T0))
    one_pass(store, T0 + 1)
    big = new_session(resources=cpu(2), at=T0 + 2)
    small = new_session(resources=cpu(1), at=T0 + 3)
    enqueue(store, big)
    enqueue(store, small)
    fifo = FIFOSequencer({"num_retries_to_skip": 3})

    def heuristic_pass(now: float) -> PassResult:
        return run_pass(store, "default", SchedulerConfig(), fifo, ConcentratedSelector(), now)

    # Every try counts towards pushing the head back: no pass is skipped until it is.
    assert heuristic_pass(T0 + 10).blocked_by == big.id
    assert heuristic_pass(T0 + 20).blocked_by == big.id
    result = heuristic_pass(T0 + 30)
    assert not result.skipped
    assert [p.session_id for p in result.placements] == [small.id]


def test_a_session_is_placed_at_its_start_time_without_any_change(store: Store) -> None:
    put_agents(store, Agent("a1", cpu(4)))
    later = new_session(resources=cpu(1), at=T0)
    later.spec.starts_at = T0 + 100
    enqueue(store, later)
    assert one_pass(store, T0 + 10).placements == []
    assert one_pass(store, T0 + 50).skipped
    assert [p.session_id for p in one_pass(store, T0 + 100).placements] == [later.id]
