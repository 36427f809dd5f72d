"""The scheduling pass: sequencers, selectors, placement, predicates, plugins."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest

from bai_jupyter.model import Agent, ClusterMode, Session, SessionResult, SessionSpec, Status
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.scheduler import (
    AgentSelector,
    AgentState,
    OwnerPolicy,
    PassResult,
    SchedulerConfig,
    SchedulerConfigError,
    Sequencer,
    Snapshot,
    load_plugins,
    never_fits,
    schedule,
)
from bai_jupyter.scheduler.config import non_negative_int, positive_seconds, resource_limit
from bai_jupyter.scheduler.context import PassContext
from bai_jupyter.scheduler.placement import AgentPool, Vector
from bai_jupyter.scheduler.plugins import available
from bai_jupyter.scheduler.selectors import ConcentratedSelector, RoundRobinSelector
from bai_jupyter.scheduler.sequencers import DRFSequencer, FIFOSequencer, LIFOSequencer

SEQUENCERS = ["fifo", "lifo", "drf"]
SELECTORS = ["concentrated", "dispersed", "roundrobin"]
SINGLE, MULTI = ClusterMode.SINGLE_NODE, ClusterMode.MULTI_NODE
NOW = 1_000.0


# --- helpers -------------------------------------------------------------------------------


def agent(
    agent_id: str,
    cpu: str | int = 8,
    mem: str = "64g",
    gpu: str | int | None = None,
    used: Mapping[str, str | int] | None = None,
    schedulable: bool = True,
) -> Agent:
    capacity: dict[str, str | int] = {"cpu": cpu, "mem": mem}
    if gpu is not None:
        capacity["cuda.device"] = gpu
    return Agent(
        agent_id,
        ResourceSlot(capacity),
        ResourceSlot(used or {}),
        schedulable=schedulable,
    )


def sess(
    sid: str,
    cpu: str | int = 1,
    mem: str = "1g",
    gpu: str | int | None = None,
    *,
    size: int = 1,
    mode: ClusterMode = SINGLE,
    owner: str = "alice",
    priority: int = 10,
    created: float | None = None,
    depends_on: Sequence[str] = (),
    starts_at: float | None = None,
    data: dict[str, Any] | None = None,
) -> Session:
    slots: dict[str, str | int] = {"cpu": cpu, "mem": mem}
    if gpu is not None:
        slots["cuda.device"] = gpu
    spec = SessionSpec(
        resources=ResourceSlot(slots),
        cluster_size=size,
        cluster_mode=mode,
        priority=priority,
        depends_on=list(depends_on),
        starts_at=starts_at,
    )
    session = Session.create(spec, owner, 0.0 if created is None else created, sid)
    if data is not None:
        session.status_data = {"scheduler": data}
    return session


def run(
    agents: list[Agent],
    pending: list[Session],
    sequencer: str | Sequencer = "fifo",
    selector: str | AgentSelector = "concentrated",
    *,
    options: Mapping[str, Any] | None = None,
    config: SchedulerConfig | None = None,
    now: float = NOW,
    deps: Mapping[str, tuple[Status, SessionResult]] | None = None,
    owner_sessions: Mapping[str, int] | None = None,
    owner_occupied: Mapping[str, ResourceSlot] | None = None,
    owner_group_occupied: Mapping[str, ResourceSlot] | None = None,
) -> PassResult:
    """One pass with plugins loaded by name (or given as instances)."""
    if config is None:
        config = SchedulerConfig.from_options(
            sequencer if isinstance(sequencer, str) else "fifo",
            selector if isinstance(selector, str) else "concentrated",
            options,
        )
    seq, sel = load_plugins(config)
    if isinstance(sequencer, Sequencer):
        seq = sequencer
    if isinstance(selector, AgentSelector):
        sel = selector
    snapshot = Snapshot(
        agents=agents,
        pending=pending,
        dependency_states=dict(deps or {}),
        owner_sessions=dict(owner_sessions or {}),
        owner_occupied=dict(owner_occupied or {}),
        owner_group_occupied=dict(owner_group_occupied or {}),
    )
    return schedule(snapshot, config, seq, sel, now)


def placed(result: PassResult) -> dict[str, list[str]]:
    return {p.session_id: p.agent_ids for p in result.placements}


def order(result: PassResult) -> list[str]:
    return [p.session_id for p in result.placements]


def apply_failures(pending: Iterable[Session], result: PassResult) -> None:
    """What the store does with the why-pending records."""
    for session in pending:
        if session.id in result.failures:
            session.status_data = {**session.status_data, "scheduler": result.failures[session.id]}


# --- priority bands ------------------------------------------------------------------------


@pytest.mark.parametrize("sequencer", SEQUENCERS)
@pytest.mark.parametrize("selector", SELECTORS)
def test_higher_priority_first_for_every_sequencer(sequencer: str, selector: str) -> None:
    pending = [
        sess("low-old", created=1, priority=10),
        sess("mid", created=2, priority=15),
        sess("high-new", created=3, priority=20, owner="bob"),
        sess("low-new", created=4, priority=10),
    ]
    # Room for one: the highest priority wins, however old the others are.
    result = run([agent("a", cpu=1)], pending, sequencer, selector)
    assert order(result) == ["high-new"]
    # Room for all: tried band by band.
    result = run([agent("a", cpu=8)], pending, sequencer, selector)
    assert order(result)[:2] == ["high-new", "mid"]
    assert set(order(result)[2:]) == {"low-old", "low-new"}


def test_priority_band_order_inside_band_is_the_sequencer_order() -> None:
    pending = [sess(f"s{i}", created=i, priority=20 if i % 2 else 10) for i in range(6)]
    big = [agent("a", cpu=64)]
    assert order(run(big, pending, "fifo")) == ["s1", "s3", "s5", "s0", "s2", "s4"]
    assert order(run(big, pending, "lifo")) == ["s5", "s3", "s1", "s4", "s2", "s0"]


# --- FIFO ------------------------------------------------------------------------------------


def test_strict_fifo_head_of_line_blocking() -> None:
    agents = [agent("a", cpu=4, used={"cpu": 2})]
    pending = [
        sess("small-later", cpu=1, created=3),
        sess("big-head", cpu=4, created=1),
        sess("small-low", cpu=1, created=0, priority=5),
        sess("small-later2", cpu=1, created=2),
    ]
    result = run(agents, pending, "fifo")
    assert result.placements == []
    assert result.blocked_by == "big-head"
    assert sorted(result.untried) == ["small-later", "small-later2", "small-low"]
    assert set(result.failures) == {"big-head"}
    record = result.failures["big-head"]
    assert record["retries"] == 1
    assert record["last_try"] == NOW
    assert record["failed_predicates"] == [
        {"name": "resources", "msg": "needs cpu=4 but the largest agent has 2 free"}
    ]
    assert record["msg"] == "needs cpu=4 but the largest agent has 2 free"


def test_strict_fifo_places_older_sessions_before_blocking() -> None:
    pending = [sess("s1", cpu=2, created=1), sess("s2", cpu=8, created=2), sess("s3", created=3)]
    result = run([agent("a", cpu=4)], pending, "fifo")
    assert order(result) == ["s1"]
    assert result.blocked_by == "s2"
    assert result.untried == ["s3"]


def test_strict_fifo_blocks_repeatedly_until_the_head_fits() -> None:
    pending = [sess("big", cpu=4, created=1), sess("small", cpu=1, created=2)]
    agents = [agent("a", cpu=4, used={"cpu": 1})]
    for i in range(5):
        result = run(agents, pending, "fifo", now=NOW + i)
        assert result.blocked_by == "big"
        assert result.untried == ["small"]
        assert result.failures["big"]["retries"] == i + 1
        apply_failures(pending, result)
    result = run([agent("a", cpu=4)], pending, "fifo")
    assert order(result) == ["big"]
    assert result.blocked_by == "small"


def test_heuristic_fifo_pushes_back_then_regains_head() -> None:
    options = {"num_retries_to_skip": 2, "hol_max_wait": 60}
    two_free = [agent("a", cpu=4, used={"cpu": 2})]
    one_free = [agent("a", cpu=4, used={"cpu": 3})]
    big = sess("big", cpu=4, created=1)
    pending = [big, sess("s0", cpu=1, created=2), sess("s1", cpu=1, created=3)]

    # Pass 1: fewer than N failures, the big head still blocks.
    result = run(two_free, pending, "fifo", options=options, now=100)
    assert result.placements == []
    assert result.blocked_by == "big"
    assert result.untried == ["s0", "s1"]
    assert result.failures["big"]["retries"] == 1
    assert "pushed_at" not in result.failures["big"]
    apply_failures(pending, result)

    # Pass 2: N failures: pushed back, the smaller ones are placed in the same pass.
    result = run(two_free, pending, "fifo", options=options, now=110)
    assert result.failures["big"]["retries"] == 2
    assert result.failures["big"]["pushed_at"] == 110
    assert result.blocked_by is None
    assert order(result) == ["s0", "s1"]
    apply_failures(pending, result)

    # Pass 3: within hol_max_wait it is tried after the others, and does not block.
    pending = [big, sess("s2", cpu=1, created=50)]
    fifo = FIFOSequencer(options)
    ctx = PassContext(150, SchedulerConfig(), Snapshot([], []), ResourceSlot())
    assert [s.id for s in fifo.order(pending, ctx)] == ["s2", "big"]
    result = run(one_free, pending, "fifo", options=options, now=150)
    assert order(result) == ["s2"]
    assert result.blocked_by is None
    assert result.failures["big"]["pushed_at"] == 110  # not reset
    assert result.failures["big"]["retries"] == 3
    # A newcomer that does not fit and has failed fewer than N times blocks, as usual.
    pending = [big, sess("s3", cpu=2, created=51), sess("s4", created=52)]
    result = run(one_free, pending, "fifo", options=options, now=150)
    assert result.blocked_by == "s3"
    assert sorted(result.untried) == ["big", "s4"]
    pending = [big]
    result = run(one_free, pending, "fifo", options=options, now=169)
    assert result.blocked_by is None
    apply_failures(pending, result)
    assert big.scheduler_data["retries"] == 3

    ctx = PassContext(170, SchedulerConfig(), Snapshot([], []), ResourceSlot())
    assert [s.id for s in fifo.order([big, sess("s5", created=99)], ctx)] == ["big", "s5"]

    # Pass 4: after hol_max_wait it regains the head and blocks until it fits.
    pending = [big, sess("later", cpu=1, created=60)]
    for now in (170, 200, 1_000):
        result = run(one_free, pending, "fifo", options=options, now=now)
        assert result.placements == []
        assert result.blocked_by == "big"
        assert result.untried == ["later"]
        apply_failures(pending, result)
    assert big.scheduler_data["retries"] == 6
    result = run([agent("a", cpu=5)], pending, "fifo", options=options, now=2_000)
    assert order(result) == ["big", "later"]


def test_heuristic_fifo_with_one_retry_never_blocks() -> None:
    pending = [sess("big", cpu=8, created=1), sess("small", created=2)]
    result = run([agent("a", cpu=4)], pending, "fifo", options={"num_retries_to_skip": 1})
    assert order(result) == ["small"]
    assert result.blocked_by is None
    assert result.failures["big"]["pushed_at"] == NOW


@pytest.mark.parametrize("options", [{}, {"num_retries_to_skip": 3}])
def test_predicate_failures_never_block_the_queue(options: dict[str, Any]) -> None:
    pending = [
        sess("future", created=1, starts_at=NOW + 3600),
        sess("waits", created=2, depends_on=["dep"]),
        sess("over-limit", created=3, owner="carol"),
        sess("ok", created=4),
    ]
    config = SchedulerConfig.from_options("fifo", "concentrated", options)
    config.owner_policies["carol"] = OwnerPolicy(max_concurrent_sessions=0)
    result = run(
        [agent("a")],
        pending,
        config=config,
        deps={"dep": (Status.RUNNING, SessionResult.UNDEFINED)},
    )
    assert order(result) == ["ok"]
    assert result.blocked_by is None
    assert result.untried == []
    assert {k: [p["name"] for p in v["failed_predicates"]] for k, v in result.failures.items()} == {
        "future": ["starts_at"],
        "waits": ["dependencies"],
        "over-limit": ["concurrency"],
    }


# --- LIFO --------------------------------------------------------------------------------------


def test_lifo_newest_first_and_skips_what_does_not_fit() -> None:
    pending = [sess(f"s{i}", cpu=1, created=i) for i in range(4)]
    assert order(run([agent("a", cpu=1)], pending, "lifo")) == ["s3"]
    pending.append(sess("huge", cpu=16, created=99))
    result = run([agent("a", cpu=2)], pending, "lifo")
    assert order(result) == ["s3", "s2"]
    assert result.blocked_by is None
    assert set(result.failures) == {"huge", "s1", "s0"}


# --- DRF -------------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("a_first", [True, False])
def test_drf_ghodsi_example(selector: str, a_first: bool) -> None:
    """NSDI 2011, section 4: 9 CPUs, 18 GB; A <1 CPU, 4 GB>, B <3 CPU, 1 GB>."""
    pending = []
    for i in range(10):
        a_time, b_time = (2 * i, 2 * i + 1) if a_first else (2 * i + 1, 2 * i)
        pending.append(sess(f"a{i}", cpu=1, mem="4g", owner="A", created=a_time))
        pending.append(sess(f"b{i}", cpu=3, mem="1g", owner="B", created=b_time))
    result = run([agent("node", cpu=9, mem="18g")], pending, "drf", selector)
    owners = [sid[0] for sid in order(result)]
    assert owners.count("a") == 3
    assert owners.count("b") == 2
    assert set(order(result)) == {"a0", "a1", "a2", "b0", "b1"}  # oldest of each owner
    assert result.blocked_by is None
    assert len(result.failures) == 15


def test_drf_owner_with_smaller_share_goes_first() -> None:
    pending = [sess("alice1", owner="alice", created=1), sess("bob1", owner="bob", created=2)]
    held = {"alice": ResourceSlot({"cpu": 4})}
    result = run([agent("a", cpu=8)], pending, "drf", owner_group_occupied=held)
    assert order(result) == ["bob1", "alice1"]
    result = run([agent("a", cpu=5, used={"cpu": 4})], pending, "drf", owner_group_occupied=held)
    assert order(result) == ["bob1"]


def test_dominant_share() -> None:
    snapshot = Snapshot(
        agents=[],
        pending=[],
        owner_group_occupied={
            "A": ResourceSlot({"cpu": 3, "mem": "12g"}),
            "B": ResourceSlot({"cpu": 6, "mem": "2g", "cuda.device": 1}),
        },
    )
    capacity = ResourceSlot({"cpu": 9, "mem": "18g"})
    ctx = PassContext(0.0, SchedulerConfig(), snapshot, capacity)
    assert ctx.dominant_share("A") == Decimal(12) / Decimal(18)
    assert ctx.dominant_share("B") == Decimal(6) / Decimal(9)  # cuda.device not in the group
    assert ctx.dominant_share("nobody") == 0


# --- selectors -----------------------------------------------------------------------------


def test_concentrated_is_best_fit() -> None:
    agents = [agent("a", cpu=8), agent("b", cpu=2), agent("c", cpu=4)]
    assert placed(run(agents, [sess("s", cpu=2)], selector="concentrated")) == {"s": ["b"]}
    assert placed(run(agents, [sess("s", cpu=3)], selector="concentrated")) == {"s": ["c"]}
    assert placed(run(agents, [sess("s", cpu=5)], selector="concentrated")) == {"s": ["a"]}
    # Packs: the second session goes where the first left the least room.
    pending = [sess("s1", cpu=1, created=1), sess("s2", cpu=1, created=2)]
    assert placed(run(agents, pending, selector="concentrated")) == {"s1": ["b"], "s2": ["b"]}


def test_dispersed_is_most_free() -> None:
    agents = [agent("a", cpu=8), agent("b", cpu=2), agent("c", cpu=4)]
    assert placed(run(agents, [sess("s", cpu=2)], selector="dispersed")) == {"s": ["a"]}
    # Spreads: the next goes to whichever has the most free now.
    even = [agent("a", cpu=4), agent("b", cpu=4), agent("c", cpu=4)]
    pending = [sess(f"s{i}", cpu=1, created=i) for i in range(3)]
    result = run(even, pending, selector="dispersed")
    assert sorted(ids[0] for ids in placed(result).values()) == ["a", "b", "c"]
    # Most free that fits: memory decides when the most-cpu agent lacks memory.
    agents = [agent("x", cpu=16, mem="1g"), agent("y", cpu=4, mem="8g")]
    assert placed(run(agents, [sess("s", mem="2g")], selector="dispersed")) == {"s": ["y"]}


def test_roundrobin_cycles_within_and_across_passes() -> None:
    agents = [agent("c"), agent("a"), agent("b")]
    pending = [sess(f"s{i}", created=i) for i in range(4)]
    result = run(agents, pending, selector="roundrobin")
    assert [ids[0] for ids in placed(result).values()] == ["a", "b", "c", "a"]
    selector = RoundRobinSelector()
    seen = []
    for i in range(7):
        result = run(agents, [sess(f"t{i}")], selector=selector)
        seen.append(result.placements[0].agent_ids[0])
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]
    # An agent without room is skipped, the cycle goes on after the one chosen.
    agents = [agent("a"), agent("b", cpu=1, used={"cpu": 1}), agent("c")]
    selector = RoundRobinSelector()
    seen = [
        run(agents, [sess(f"u{i}")], selector=selector).placements[0].agent_ids[0] for i in range(4)
    ]
    assert seen == ["a", "c", "a", "c"]


# --- device preference ------------------------------------------------------------------------


@pytest.mark.parametrize("selector", SELECTORS)
def test_session_without_gpu_avoids_gpu_agents(selector: str) -> None:
    agents = [agent("gpu", cpu=64, mem="256g", gpu=8), agent("cpu", cpu=4)]
    assert placed(run(agents, [sess("s", cpu=2)], selector=selector)) == {"s": ["cpu"]}
    # Only when nothing else fits does it go to a GPU agent.
    assert placed(run(agents, [sess("s", cpu=8)], selector=selector)) == {"s": ["gpu"]}
    pending = [sess(f"s{i}", cpu=2, created=i) for i in range(3)]
    assert [ids[0] for ids in placed(run(agents, pending, selector=selector)).values()] == [
        "cpu",
        "cpu",
        "gpu",
    ]


@pytest.mark.parametrize("selector", SELECTORS)
def test_session_with_gpu_only_on_gpu_agents(selector: str) -> None:
    agents = [agent("cpu", cpu=64), agent("gpu", cpu=4, gpu=2)]
    assert placed(run(agents, [sess("s", gpu=1)], selector=selector)) == {"s": ["gpu"]}
    assert placed(run(agents, [sess("s", gpu="0.5")], selector=selector)) == {"s": ["gpu"]}
    result = run(agents, [sess("s", gpu=4)], selector=selector)
    assert result.placements == []
    assert result.failures["s"]["msg"] == ("needs cuda.device=4 but the largest agent has 2 free")
    result = run([agent("cpu", cpu=64)], [sess("s", gpu=1)], selector=selector)
    assert result.failures["s"]["msg"] == "needs cuda.device but no agent in the group has any"


def test_a_session_that_waits_while_an_agent_is_lost_is_told_its_name() -> None:
    agents = [agent("up", cpu=4, used={"cpu": 3}), agent("far", cpu=4, schedulable=False)]
    result = run(agents, [sess("s", cpu=2)])
    assert result.placements == []
    assert result.failures["s"]["msg"] == (
        "needs cpu=2 but the largest agent has 1 free; agent far does not answer "
        "(lost: nothing is placed there until it answers again)"
    )
    result = run([agent("up", cpu=4, used={"cpu": 3})], [sess("s", cpu=2)])
    assert result.failures["s"]["msg"] == "needs cpu=2 but the largest agent has 1 free"


# --- single-node and multi-node -------------------------------------------------------------


@pytest.mark.parametrize("selector", SELECTORS)
def test_single_node_sum_must_fit_one_agent(selector: str) -> None:
    agents = [agent("a", cpu=4), agent("b", cpu=4)]
    result = run(agents, [sess("s", cpu=3, size=2)], selector=selector)
    assert result.placements == []
    assert result.failures["s"]["msg"] == "needs cpu=6 but the largest agent has 4 free"
    result = run(agents, [sess("s", cpu=2, size=2)], selector=selector)
    (ids,) = placed(result).values()
    assert ids in (["a", "a"], ["b", "b"])


@pytest.mark.parametrize("selector", SELECTORS)
def test_multi_node_kernel_by_kernel(selector: str) -> None:
    agents = [agent("a", cpu=4), agent("b", cpu=4), agent("c", cpu=2)]
    result = run(agents, [sess("s", cpu=3, size=2, mode=MULTI)], selector=selector)
    assert sorted(placed(result)["s"]) == ["a", "b"]
    result = run(agents, [sess("s", cpu=2, size=5, mode=MULTI)], selector=selector)
    assert sorted(placed(result)["s"]) == ["a", "a", "b", "b", "c"]


@pytest.mark.parametrize("selector", SELECTORS)
def test_multi_node_goes_whole_to_one_agent_when_it_can(selector: str) -> None:
    agents = [agent("a", cpu=8), agent("b", cpu=8), agent("c", cpu=8)]
    result = run(agents, [sess("s", cpu=2, size=3, mode=MULTI)], selector=selector)
    (ids,) = placed(result).values()
    assert len(set(ids)) == 1
    assert len(ids) == 3


@pytest.mark.parametrize("selector", SELECTORS)
def test_multi_node_all_or_nothing(selector: str) -> None:
    agents = [agent("a", cpu=2), agent("b", cpu=2)]
    pending = [
        sess("single-old", cpu=2, created=1),
        sess("single-older", cpu=2, created=0),
        sess("multi", cpu=2, size=3, mode=MULTI, created=5),  # LIFO tries it first
    ]
    result = run(agents, pending, "lifo", selector)
    assert set(placed(result)) == {"single-old", "single-older"}
    assert sorted(ids[0] for ids in placed(result).values()) == ["a", "b"]  # nothing left held
    assert result.failures["multi"]["msg"] == (
        "not enough free agents for 3 kernels of cpu=2 mem=1g each (cpu=6 mem=3g in all)"
    )


def test_multi_node_failure_message_names_the_biggest_agent() -> None:
    result = run([agent("a", cpu=2)], [sess("s", cpu=4, size=2, mode=MULTI)])
    assert result.failures["s"]["msg"] == "needs cpu=4 but the largest agent has 2 free"


def test_single_node_message_when_no_single_agent_has_everything() -> None:
    agents = [agent("a", cpu=8, mem="1g"), agent("b", cpu=1, mem="16g")]
    result = run(agents, [sess("s", cpu=4, mem="4g")])
    assert result.failures["s"]["msg"] == "no single agent has cpu=4 mem=4g free at once"


def test_unschedulable_agents_are_not_used() -> None:
    agents = [agent("a", cpu=64, schedulable=False), agent("b", cpu=1)]
    assert placed(run(agents, [sess("s", cpu=1)], selector="dispersed")) == {"s": ["b"]}
    result = run(agents, [sess("s", cpu=2)])
    assert result.placements == []


def test_no_agents_at_all() -> None:
    result = run([], [sess("s")])
    assert result.placements == []
    assert result.failures["s"]["msg"] == "needs cpu, mem but no agent in the group has any"


def test_existing_occupancy_is_respected() -> None:
    agents = [agent("a", cpu=4, mem="8g", used={"cpu": "3.5", "mem": "1g"})]
    result = run(agents, [sess("s1", cpu="0.5", created=1), sess("s2", cpu="0.5", created=2)])
    assert order(result) == ["s1"]
    assert result.blocked_by == "s2"


# --- predicates ----------------------------------------------------------------------------


def test_dependency_running_means_waiting() -> None:
    pending = [sess("s", depends_on=["d1", "d2"])]
    deps = {
        "d1": (Status.RUNNING, SessionResult.UNDEFINED),
        "d2": (Status.TERMINATED, SessionResult.SUCCESS),
    }
    result = run([agent("a")], pending, deps=deps)
    assert result.placements == []
    assert result.cancellations == []
    assert result.failures["s"]["failed_predicates"] == [
        {"name": "dependencies", "msg": "waiting for d1 (RUNNING) to succeed"}
    ]
    assert result.blocked_by is None


@pytest.mark.parametrize("status", [Status.PENDING, Status.SCHEDULED, Status.TERMINATING])
def test_dependency_not_yet_finished_means_waiting(status: Status) -> None:
    deps = {"d": (status, SessionResult.UNDEFINED)}
    result = run([agent("a")], [sess("s", depends_on=["d"])], deps=deps)
    assert result.placements == []
    assert result.failures["s"]["msg"] == f"waiting for d ({status.value}) to succeed"


def test_dependency_succeeded_means_go() -> None:
    deps = {"d": (Status.TERMINATED, SessionResult.SUCCESS)}
    result = run([agent("a")], [sess("s", depends_on=["d"])], deps=deps)
    assert order(result) == ["s"]


def test_dependency_placed_in_the_same_pass_still_waits() -> None:
    pending = [sess("d", created=1), sess("s", created=2, depends_on=["d"])]
    result = run([agent("a")], pending, deps={"d": (Status.PENDING, SessionResult.UNDEFINED)})
    assert order(result) == ["d"]
    assert result.failures["s"]["failed_predicates"][0]["name"] == "dependencies"


@pytest.mark.parametrize(
    ("state", "msg"),
    [
        ((Status.TERMINATED, SessionResult.FAILURE), "dependency d ended with FAILURE"),
        ((Status.TERMINATED, SessionResult.UNDEFINED), "dependency d ended with UNDEFINED"),
        ((Status.CANCELLED, SessionResult.UNDEFINED), "dependency d ended CANCELLED"),
        ((Status.ERROR, SessionResult.UNDEFINED), "dependency d ended ERROR"),
    ],
)
def test_dependency_ended_otherwise_cancels(state: tuple[Status, SessionResult], msg: str) -> None:
    result = run([agent("a")], [sess("s", depends_on=["d"])], deps={"d": state})
    assert result.placements == []
    assert result.failures == {}
    assert [(c.session_id, c.status_info, c.msg) for c in result.cancellations] == [
        ("s", "dependency-failed", msg)
    ]


def test_unknown_dependency_cancels() -> None:
    result = run([agent("a")], [sess("s", depends_on=["ghost"])])
    assert [(c.session_id, c.status_info) for c in result.cancellations] == [
        ("s", "dependency-failed")
    ]


@pytest.mark.parametrize("sequencer", SEQUENCERS)
def test_dependency_chain_cancelled_in_one_pass(sequencer: str) -> None:
    pending = [
        sess("C", created=3, depends_on=["B"]),
        sess("B", created=2, depends_on=["A"]),
        sess("other", created=4),
        sess("A", created=1, depends_on=["X"]),
    ]
    deps = {
        "X": (Status.TERMINATED, SessionResult.FAILURE),
        "A": (Status.PENDING, SessionResult.UNDEFINED),
        "B": (Status.PENDING, SessionResult.UNDEFINED),
    }
    result = run([agent("a")], pending, sequencer, deps=deps)
    assert sorted(c.session_id for c in result.cancellations) == ["A", "B", "C"]
    assert {c.status_info for c in result.cancellations} == {"dependency-failed"}
    assert order(result) == ["other"]
    assert result.failures == {}


def test_pending_timeout_cancels_and_cascades() -> None:
    pending = [
        sess("old", created=0),
        sess("child", created=NOW - 1, depends_on=["old"]),
        sess("young", created=NOW - 10),
    ]
    deps = {"old": (Status.PENDING, SessionResult.UNDEFINED)}
    result = run([agent("a")], pending, options={"pending_timeout": 60}, deps=deps)
    assert [(c.session_id, c.status_info) for c in result.cancellations] == [
        ("old", "pending-timeout"),
        ("child", "dependency-failed"),
    ]
    assert result.cancellations[0].msg == "still pending after 60 s"
    assert order(result) == ["young"]
    # Just under the limit: not cancelled.
    result = run([agent("a")], [sess("s", created=NOW - 59.5)], options={"pending_timeout": 60})
    assert result.cancellations == []


def test_starts_at() -> None:
    result = run([agent("a")], [sess("s", starts_at=NOW + 60)])
    assert result.placements == []
    (pred,) = result.failures["s"]["failed_predicates"]
    assert pred["name"] == "starts_at"
    assert pred["msg"] == "starts at t=1060"  # a small clock is a simulated one
    real = 1_700_000_000.0
    result = run([agent("a")], [sess("s", created=real, starts_at=real + 60)], now=real)
    assert result.failures["s"]["msg"] == "starts at 2023-11-14 22:14:20 UTC"
    assert order(run([agent("a")], [sess("s", starts_at=NOW)])) == ["s"]
    assert order(run([agent("a")], [sess("s", starts_at=NOW - 1)])) == ["s"]


def test_max_concurrent_sessions_per_owner() -> None:
    pending = [
        sess("a1", owner="alice", created=1),
        sess("a2", owner="alice", created=2),
        sess("a3", owner="alice", created=3),
        sess("b1", owner="bob", created=4),
    ]
    result = run(
        [agent("x", cpu=64)],
        pending,
        options={"max_concurrent_sessions": 2},
        owner_sessions={"alice": 1},
    )
    assert order(result) == ["a1", "b1"]  # this pass's placements count too
    assert result.failures["a2"]["failed_predicates"] == [
        {"name": "concurrency", "msg": "alice already has 2 active sessions (limit 2)"}
    ]
    assert "a3" in result.failures
    # Per-owner policies override the default.
    config = SchedulerConfig.from_options("fifo", "concentrated", {"max_concurrent_sessions": 1})
    config.owner_policies["alice"] = OwnerPolicy(max_concurrent_sessions=3)
    result = run([agent("x", cpu=64)], pending, config=config, owner_sessions={"bob": 1})
    assert order(result) == ["a1", "a2", "a3"]
    assert result.failures["b1"]["failed_predicates"][0]["name"] == "concurrency"


def test_max_resources_per_owner() -> None:
    pending = [
        sess("a1", cpu=2, mem="4g", owner="alice", created=1),
        sess("a2", cpu=1, mem="4g", owner="alice", created=2),
        sess("b1", cpu=4, owner="bob", created=3),
    ]
    held = {"alice": ResourceSlot({"cpu": 2, "mem": "8g"})}
    # Only cpu is limited: memory (not named in the limit) is not.
    result = run(
        [agent("x", cpu=64)], pending, options={"max_resources": "cpu=4"}, owner_occupied=held
    )
    assert order(result) == ["a1", "b1"]
    assert result.failures["a2"]["failed_predicates"] == [
        {"name": "owner_resources", "msg": "alice would hold cpu=5 (limit 4)"}
    ]
    config = SchedulerConfig.from_options(
        "fifo", "concentrated", {"max_resources": {"cpu": 64, "mem": "10g"}}
    )
    result = run([agent("x", cpu=64)], pending, config=config, owner_occupied=held)
    assert order(result) == ["b1"]
    assert result.failures["a1"]["msg"] == "alice would hold mem=12g (limit 10g)"


def test_failure_record_accumulates_and_keeps_other_keys() -> None:
    pending = [
        sess(
            "s",
            owner="carol",
            starts_at=NOW + 10,
            data={"retries": 4, "pushed_at": 5.0, "last_try": 1.0},
        )
    ]
    config = SchedulerConfig.from_options("fifo", "concentrated", {"max_concurrent_sessions": 0})
    result = run([agent("a")], pending, config=config)
    record = result.failures["s"]
    assert record["retries"] == 5
    assert record["last_try"] == NOW
    assert record["pushed_at"] == 5.0
    assert [p["name"] for p in record["failed_predicates"]] == ["starts_at", "concurrency"]
    assert record["msg"] == "; ".join(p["msg"] for p in record["failed_predicates"])
    assert pending[0].scheduler_data["retries"] == 4  # the pass does not touch the session


def test_resource_failure_message_example() -> None:
    result = run([agent("a", cpu=4), agent("b", cpu=2)], [sess("s", cpu=8)])
    assert result.failures["s"]["msg"] == "needs cpu=8 but the largest agent has 4 free"
    assert result.failures["s"]["failed_predicates"] == [
        {"name": "resources", "msg": "needs cpu=8 but the largest agent has 4 free"}
    ]
    result = run([agent("a", mem="4g")], [sess("s", mem="6g")])
    assert result.failures["s"]["msg"] == "needs mem=6g but the largest agent has 4 GiB free"


def test_free_memory_reads_in_human_units_not_kibibytes() -> None:
    """What an agent has is no amount a user wrote: ``10.8 GiB``, never ``11314740k``."""
    result = run([agent("a", mem="11314740k")], [sess("s", mem="16g")])
    assert result.failures["s"]["msg"] == "needs mem=16g but the largest agent has 10.8 GiB free"


def test_largest_free_follows_this_pass_reservations() -> None:
    agents = [agent("a", cpu=4), agent("b", cpu=3)]
    pending = [
        sess("s1", cpu=4, created=1),
        sess("s2", cpu=2, created=2),
        sess("s3", cpu=2, created=3),
    ]
    result = run(agents, pending, "lifo")
    # lifo: s3 → b (best fit), s2 → a, s1 finds a with 2 left and b with 1.
    assert placed(result) == {"s3": ["b"], "s2": ["a"]}
    assert result.failures["s1"]["msg"] == "needs cpu=4 but the largest agent has 2 free"


def test_pass_does_not_depend_on_input_order() -> None:
    pending = [sess(f"s{i}", cpu=1 + i % 3, created=i % 4, owner=f"u{i % 2}") for i in range(12)]
    agents = [agent(f"n{i}", cpu=3 + i) for i in range(4)]
    for sequencer in SEQUENCERS:
        first = run(agents, pending, sequencer)
        second = run(list(reversed(agents)), list(reversed(pending)), sequencer)
        assert first.placements == second.placements
        assert first.failures == second.failures
        assert (first.blocked_by, sorted(first.untried)) == (
            second.blocked_by,
            sorted(second.untried),
        )


# --- never_fits --------------------------------------------------------------------------------


def test_never_fits_single_node() -> None:
    agents = [agent("a", cpu=4, mem="8g"), agent("b", cpu=8, mem="4g", used={"cpu": 8})]
    assert never_fits(SessionSpec(resources=ResourceSlot({"cpu": 8, "mem": "4g"})), agents) is None
    spec = SessionSpec(resources=ResourceSlot({"cpu": 3}), cluster_size=3)
    assert never_fits(spec, agents) == (
        "needs cpu=9 (largest agent: 8) on one agent, more than any agent of the group has"
    )
    spec = SessionSpec(resources=ResourceSlot({"cpu": 4, "mem": "8g"}), cluster_size=2)
    why = never_fits(spec, agents)
    assert why is not None and "on one agent" in why
    # Neither agent holds both at once.
    spec = SessionSpec(resources=ResourceSlot({"cpu": 6, "mem": "6g"}))
    assert never_fits(spec, agents) is not None
    spec = SessionSpec(resources=ResourceSlot({"cuda.device": 1}))
    why = never_fits(spec, agents)
    assert why is not None and "cuda.device=1" in why


def test_never_fits_multi_node() -> None:
    agents = [agent("a", cpu=4), agent("b", cpu=4), agent("c", cpu=3)]
    spec = SessionSpec(resources=ResourceSlot({"cpu": 2}), cluster_size=5, cluster_mode=MULTI)
    assert never_fits(spec, agents) is None
    spec = SessionSpec(resources=ResourceSlot({"cpu": 2}), cluster_size=6, cluster_mode=MULTI)
    assert never_fits(spec, agents) == (
        "needs 6 kernels of cpu=2 but the whole group can hold only 5 of them"
    )
    spec = SessionSpec(resources=ResourceSlot({"cpu": 5}), cluster_size=2, cluster_mode=MULTI)
    assert never_fits(spec, agents) == (
        "needs 2 kernels of cpu=5 but the whole group can hold only 0 of them"
    )
    spec = SessionSpec(resources=ResourceSlot({"cpu": 1}), cluster_size=12, cluster_mode=MULTI)
    assert never_fits(spec, agents) == (
        "needs 12 kernels of cpu=1 but the whole group can hold only 11 of them"
    )


def test_never_fits_ignores_occupancy_and_unschedulable_agents() -> None:
    busy = [agent("a", cpu=4, used={"cpu": 4})]
    assert never_fits(SessionSpec(resources=ResourceSlot({"cpu": 4})), busy) is None
    off = [agent("a", cpu=64, schedulable=False)]
    assert never_fits(SessionSpec(), off) == "the resource group has no agents"
    assert never_fits(SessionSpec(), []) == "the resource group has no agents"
    assert never_fits(SessionSpec(), [agent("a")]) is None


def test_never_fits_agrees_with_a_pass_on_empty_agents() -> None:
    agents = [agent("a", cpu=4, mem="8g"), agent("b", cpu=2, mem="16g", gpu=1)]
    shapes: list[tuple[dict[str, str | int], int, ClusterMode]] = [
        ({"cpu": 2, "mem": "4g"}, 2, SINGLE),
        ({"cpu": 2, "mem": "4g"}, 3, SINGLE),
        ({"cpu": 2, "mem": "4g"}, 3, MULTI),
        ({"cpu": 2, "mem": "4g"}, 4, MULTI),
        ({"cpu": 1, "mem": "8g"}, 3, MULTI),
        ({"cpu": 1, "mem": "8g"}, 4, MULTI),
        ({"cpu": 1, "cuda.device": 1}, 1, SINGLE),
        ({"cpu": 1, "cuda.device": 1}, 2, MULTI),
    ]
    for slots, size, mode in shapes:
        spec = SessionSpec(resources=ResourceSlot(slots), cluster_size=size, cluster_mode=mode)
        session = Session.create(spec, "alice", 0.0, "s")
        fits_now = bool(run(agents, [session]).placements)
        assert (never_fits(spec, agents) is None) == fits_now, (slots, size, mode)


# --- plugins and configuration ------------------------------------------------------------------


def test_builtins_are_registered() -> None:
    assert available("bai_jupyter.sequencers") == ["drf", "fifo", "lifo"]
    assert available("bai_jupyter.agent_selectors") == ["concentrated", "dispersed", "roundrobin"]
    for seq_name in SEQUENCERS:
        for sel_name in SELECTORS:
            seq, sel = load_plugins(SchedulerConfig(seq_name, sel_name))
            assert seq.name == seq_name
            assert sel.name == sel_name
    seq, _ = load_plugins(SchedulerConfig("drf"))
    assert isinstance(seq, DRFSequencer)
    seq, _ = load_plugins(SchedulerConfig("lifo"))
    assert isinstance(seq, LIFOSequencer)


def test_unknown_sequencer_lists_the_available() -> None:
    with pytest.raises(SchedulerConfigError) as info:
        load_plugins(SchedulerConfig(sequencer="sjf"))
    assert str(info.value) == "unknown sequencer 'sjf' (available: drf, fifo, lifo)"


def test_unknown_selector_lists_the_available() -> None:
    with pytest.raises(SchedulerConfigError) as info:
        load_plugins(SchedulerConfig(selector="random"))
    assert str(info.value) == (
        "unknown agent selector 'random' (available: concentrated, dispersed, roundrobin)"
    )


def test_unknown_option_is_named() -> None:
    with pytest.raises(SchedulerConfigError) as info:
        load_plugins(SchedulerConfig("fifo", "dispersed", options={"num_retries": 3}))
    message = str(info.value)
    assert "unknown scheduler option 'num_retries'" in message
    assert "num_retries_to_skip" in message  # lists what is known
    with pytest.raises(SchedulerConfigError, match="'num_retries_to_skip'"):
        load_plugins(SchedulerConfig("lifo", options={"num_retries_to_skip": 3}))
    with pytest.raises(SchedulerConfigError, match="unknown option 'x'"):
        FIFOSequencer({"x": 1})
    with pytest.raises(SchedulerConfigError, match="unknown option 'x'"):
        ConcentratedSelector({"x": 1})


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"num_retries_to_skip": -1}, ["num_retries_to_skip", "negative"]),
        ({"num_retries_to_skip": 1.5}, ["num_retries_to_skip", "whole number"]),
        ({"num_retries_to_skip": "x"}, ["num_retries_to_skip"]),
        ({"num_retries_to_skip": True}, ["num_retries_to_skip"]),
        ({"hol_max_wait": 0}, ["hol_max_wait", "> 0"]),
        ({"hol_max_wait": "nan"}, ["hol_max_wait"]),
        ({"hol_max_wait": None}, ["hol_max_wait"]),
    ],
)
def test_bad_option_values_name_the_option(options: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(SchedulerConfigError) as info:
        load_plugins(SchedulerConfig("fifo", options=options))
    for word in words:
        assert word in str(info.value)


def test_option_parsers_accept_text() -> None:
    seq, _ = load_plugins(
        SchedulerConfig("fifo", options={"num_retries_to_skip": "3", "hol_max_wait": "1.5"})
    )
    assert isinstance(seq, FIFOSequencer)
    assert seq.num_retries_to_skip == 3
    assert seq.hol_max_wait == 1.5
    assert non_negative_int(2.0) == 2
    assert positive_seconds("0.5") == 0.5
    assert resource_limit("cpu=8, mem=16g") == ResourceSlot({"cpu": 8, "mem": "16g"})
    assert resource_limit({"cpu": "0.5"}) == ResourceSlot({"cpu": "0.5"})


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"pending_timeout": -5}, ["pending_timeout", "> 0"]),
        ({"max_concurrent_sessions": -1}, ["max_concurrent_sessions", "negative"]),
        ({"max_resources": "cpu"}, ["max_resources", "slot=amount"]),
        ({"max_resources": "gpu=1"}, ["max_resources", "unknown resource slot 'gpu'"]),
        ({"max_resources": {"cpu": "-1"}}, ["max_resources", "negative"]),
        ({"max_resources": 4}, ["max_resources", "mapping"]),
    ],
)
def test_common_options(options: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(SchedulerConfigError) as info:
        SchedulerConfig.from_options("fifo", "concentrated", options)
    for word in words:
        assert word in str(info.value)


def test_from_options_splits_common_and_plugin_options() -> None:
    config = SchedulerConfig.from_options(
        "fifo",
        "roundrobin",
        {
            "pending_timeout": "30",
            "max_concurrent_sessions": 2,
            "max_resources": "cpu=8",
            "num_retries_to_skip": 1,
        },
    )
    assert config.pending_timeout == 30.0
    assert config.default_policy == OwnerPolicy(2, ResourceSlot({"cpu": 8}))
    assert config.options == {"num_retries_to_skip": 1}
    assert config.policy("anyone") == config.default_policy
    config.owner_policies["vip"] = OwnerPolicy()
    assert config.policy("vip") == OwnerPolicy()
    load_plugins(config)  # the remaining option goes to the sequencer


class _PickHighestId(AgentSelector):
    """A custom selector implementing only ``select``."""

    name = "highest-id"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        self.calls.append([a.id for a in candidates])
        return max(candidates, key=lambda a: a.id)


class _Refuse(AgentSelector):
    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        return None


def test_custom_selector_through_schedule() -> None:
    selector = _PickHighestId()
    agents = [agent("a", cpu=4), agent("b", cpu=1), agent("c", cpu=2), agent("g", cpu=8, gpu=1)]
    pending = [sess("s1", cpu=2, created=1), sess("s2", cpu=2, created=2), sess("s3", created=3)]
    result = run(agents, pending, selector=selector)
    # Candidates are the fitting agents of the preferred (device-free) partition.
    assert selector.calls[0] == ["c", "a"]
    assert placed(result) == {"s1": ["c"], "s2": ["a"], "s3": ["b"]}
    result = run(agents, [sess("s", cpu=6)], selector=selector)
    assert placed(result) == {"s": ["g"]}
    result = run(agents, [sess("m", cpu=3, size=3, mode=MULTI)], selector=selector)
    assert sorted(placed(result)["m"]) == ["a", "g", "g"]


def test_custom_selector_may_refuse() -> None:
    result = run([agent("a")], [sess("s")], selector=_Refuse())
    assert result.placements == []
    assert result.blocked_by == "s"


def test_base_classes_are_abstract() -> None:
    with pytest.raises(NotImplementedError):
        AgentSelector().select([], ())
    with pytest.raises(NotImplementedError):
        Sequencer().order([], PassContext(0.0, SchedulerConfig(), Snapshot([], []), ResourceSlot()))


def test_agent_state_views() -> None:
    pool = AgentPool([agent("a", cpu=4, mem="8g", used={"cpu": 1}), agent("g", gpu=2)])
    state = pool.agents["a"]
    assert state.free == ResourceSlot({"cpu": 3, "mem": "8g"})
    assert state.occupied == ResourceSlot({"cpu": 1})
    assert pool.agents["g"].devices == frozenset({"cuda.device"})
    assert pool.capacity == ResourceSlot({"cpu": 12, "mem": "72g", "cuda.device": 2})
    pool.reserve("a", pool.vector(ResourceSlot({"cpu": 3})))
    assert pool.max_free() == (Decimal(8), Decimal(64 * 1024**3), Decimal(2))
    with pytest.raises(AssertionError, match="over-allocation"):
        pool.reserve("a", pool.vector(ResourceSlot({"cpu": 1})))
    pool.release("a", pool.vector(ResourceSlot({"cpu": 3})))
    assert pool.agents["a"].free == ResourceSlot({"cpu": 3, "mem": "8g"})


def test_snapshot_is_copied_safely_by_a_pass() -> None:
    pending = [sess("s", created=1)]
    snapshot_before = copy.deepcopy(pending)
    run([agent("a")], pending)
    assert pending[0].status_data == snapshot_before[0].status_data
    assert pending[0].status is Status.PENDING


@pytest.mark.parametrize("selector", SELECTORS)
def test_multi_node_without_gpu_spreads_over_cpu_agents_before_using_a_gpu_agent(
    selector: str,
) -> None:
    agents = [agent("cpu1", cpu=4), agent("cpu2", cpu=4), agent("gpu", cpu=16, gpu=1)]
    # No CPU agent holds it whole, the GPU agent would: the device preference wins.
    result = run(agents, [sess("m", cpu=3, size=2, mode=MULTI)], selector=selector)
    assert sorted(placed(result)["m"]) == ["cpu1", "cpu2"]
    # Whole on one CPU agent when one can hold it.
    result = run(agents, [sess("m", cpu=2, size=2, mode=MULTI)], selector=selector)
    (ids,) = placed(result).values()
    assert len(set(ids)) == 1 and ids[0].startswith("cpu")
    # CPU agents cannot hold it even split: then whole on the GPU agent.
    result = run(agents, [sess("m", cpu=3, size=3, mode=MULTI)], selector=selector)
    assert placed(result)["m"] == ["gpu", "gpu", "gpu"]
    # Neither alone: spread over both kinds, CPU agents first.
    agents = [agent("cpu1", cpu=4), agent("gpu", cpu=4, gpu=1)]
    result = run(agents, [sess("m", cpu=3, size=2, mode=MULTI)], selector=selector)
    assert placed(result)["m"] == ["cpu1", "gpu"]
    # A GPU session never goes to a CPU agent, whole or split.
    agents = [agent("cpu1", cpu=64), agent("g1", cpu=4, gpu=1), agent("g2", cpu=4, gpu=1)]
    result = run(agents, [sess("m", cpu=1, gpu=1, size=2, mode=MULTI)], selector=selector)
    assert sorted(placed(result)["m"]) == ["g1", "g2"]
