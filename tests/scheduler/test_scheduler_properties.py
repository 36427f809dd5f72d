"""Properties of the scheduling pass over random groups, for every sequencer × selector.

1. No agent is ever over-allocated.
2. Reservations always sum to what is occupied.
3. No session is lost: each pending one is placed, failed, cancelled or untried, once.
4. With enough capacity, every finite workload drains (no starvation, no deadlock).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bai_jupyter.model import (
    Agent,
    ClusterMode,
    Session,
    SessionResult,
    SessionSpec,
    Status,
)
from bai_jupyter.resources import KNOWN_SLOTS, ResourceSlot
from bai_jupyter.scheduler import (
    AgentSelector,
    AgentState,
    OwnerPolicy,
    PassResult,
    SchedulerConfig,
    Sequencer,
    Snapshot,
    load_plugins,
    never_fits,
    schedule,
)
from bai_jupyter.scheduler.placement import Vector
from bai_jupyter.scheduler.selectors import (
    ConcentratedSelector,
    DispersedSelector,
    RoundRobinSelector,
)
from bai_jupyter.scheduler.sequencers import DRFSequencer, FIFOSequencer, LIFOSequencer

MIB = 1024**2
OWNERS = ["u0", "u1", "u2"]
PRIORITIES = [5, 10, 10, 20]

#: Sequencer variants: name → (plugin, options).
SEQUENCERS: dict[str, tuple[str, dict[str, Any]]] = {
    "fifo-strict": ("fifo", {}),
    "fifo-heuristic": ("fifo", {"num_retries_to_skip": 2, "hol_max_wait": 30}),
    "lifo": ("lifo", {}),
    "drf": ("drf", {}),
}
SELECTORS = ["concentrated", "dispersed", "roundrobin", "custom"]
COMBOS = [(seq, sel) for seq in SEQUENCERS for sel in SELECTORS]


class LargestIdSelector(AgentSelector):
    """A custom selector that implements only ``select``."""

    name = "largest-id"

    def select(self, candidates: Sequence[AgentState], request: Vector) -> AgentState | None:
        return max(candidates, key=lambda a: a.id)


SEQUENCER_CLASSES: dict[str, type[Sequencer]] = {
    "fifo": FIFOSequencer,
    "lifo": LIFOSequencer,
    "drf": DRFSequencer,
}
SELECTOR_CLASSES: dict[str, type[AgentSelector]] = {
    "concentrated": ConcentratedSelector,
    "dispersed": DispersedSelector,
    "roundrobin": RoundRobinSelector,
    "custom": LargestIdSelector,
}


def test_the_classes_are_the_registered_plugins() -> None:
    for seq_key, (name, options) in SEQUENCERS.items():
        for selector in SELECTORS[:3]:
            seq, sel = load_plugins(SchedulerConfig(name, selector, dict(options)))
            assert type(seq) is SEQUENCER_CLASSES[name], seq_key
            assert type(sel) is SELECTOR_CLASSES[selector]


def plugins(seq_key: str, selector: str) -> tuple[Sequencer, AgentSelector]:
    """Fresh plugin instances (the entry-point lookup is tested above, and is slow)."""
    name, options = SEQUENCERS[seq_key]
    return SEQUENCER_CLASSES[name](options), SELECTOR_CLASSES[selector]()


# --- strategies ----------------------------------------------------------------------------


def halves(low: int, high: int) -> st.SearchStrategy[Decimal]:
    """Decimal amounts in steps of 0.5, e.g. 0.5, 1, 1.5 …"""
    return st.integers(low, high).map(lambda n: Decimal(n) / 2)


@st.composite
def capacities(draw: st.DrawFn, min_cpu: int = 1) -> ResourceSlot:
    slots: dict[str, Decimal | int] = {
        "cpu": draw(halves(min_cpu, 64)),
        "mem": draw(st.integers(min_cpu, 64)) * 512 * MIB,
    }
    if draw(st.integers(0, 3)) == 0:
        slots["cuda.device"] = draw(halves(1, 8))
    return ResourceSlot(slots)


@st.composite
def partly_used(draw: st.DrawFn, capacity: ResourceSlot) -> ResourceSlot:
    """Some amount of each slot of ``capacity``, at most all of it."""
    used: dict[str, Decimal] = {}
    for slot, amount in capacity.items():
        fraction = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
        used[slot] = (
            (amount * fraction / 4).quantize(Decimal(1))
            if slot == "mem"
            else (amount * fraction / 4)
        )
    return ResourceSlot(used)


@st.composite
def request_slots(draw: st.DrawFn) -> ResourceSlot:
    """Per-kernel requests: mostly small next to an agent, sometimes larger than any."""
    big = draw(st.integers(0, 5)) == 0
    slots: dict[str, Decimal | int] = {
        "cpu": draw(halves(0, 40 if big else 8)),
        "mem": draw(st.integers(0, 40 if big else 12)) * 256 * MIB,
    }
    if draw(st.integers(0, 4)) == 0:
        slots["cuda.device"] = draw(halves(1, 4))
    return ResourceSlot(slots)


@st.composite
def specs(draw: st.DrawFn) -> SessionSpec:
    return SessionSpec(
        resources=draw(request_slots()),
        cluster_size=draw(st.sampled_from([1, 1, 1, 2, 3, 4])),
        cluster_mode=draw(st.sampled_from(list(ClusterMode))),
        priority=draw(st.sampled_from(PRIORITIES)),
    )


@dataclass
class World:
    """One resource group before a pass."""

    agents: list[Agent]
    #: Per agent, the kernel slots already there (the agents' occupancy, kernel by kernel).
    existing: dict[str, list[ResourceSlot]]
    pending: list[Session]
    deps: dict[str, tuple[Status, SessionResult]]
    config: SchedulerConfig
    owner_sessions: dict[str, int] = field(default_factory=dict)
    owner_occupied: dict[str, ResourceSlot] = field(default_factory=dict)
    now: float = 100.0

    def snapshot(self) -> Snapshot:
        return Snapshot(
            agents=copy.deepcopy(self.agents),
            pending=copy.deepcopy(self.pending),
            dependency_states=dict(self.deps),
            owner_sessions=dict(self.owner_sessions),
            owner_occupied=dict(self.owner_occupied),
            owner_group_occupied=dict(self.owner_occupied),
        )


EXTERNAL = {
    "ext-ok": (Status.TERMINATED, SessionResult.SUCCESS),
    "ext-failed": (Status.TERMINATED, SessionResult.FAILURE),
    "ext-running": (Status.RUNNING, SessionResult.UNDEFINED),
    "ext-cancelled": (Status.CANCELLED, SessionResult.UNDEFINED),
}


@st.composite
def configs(draw: st.DrawFn) -> SchedulerConfig:
    config = SchedulerConfig(
        pending_timeout=draw(st.sampled_from([None, None, None, 50.0, 200.0])),
        default_policy=OwnerPolicy(
            max_concurrent_sessions=draw(st.sampled_from([None, None, None, 0, 2, 4])),
            max_resources=draw(
                st.sampled_from(
                    [None, None, None, ResourceSlot({"cpu": 12}), ResourceSlot({"mem": "8g"})]
                )
            ),
        ),
    )
    if draw(st.integers(0, 3)) == 0:
        config.owner_policies["u0"] = OwnerPolicy(max_concurrent_sessions=2)
    return config


@st.composite
def worlds(draw: st.DrawFn) -> World:
    agents: list[Agent] = []
    existing: dict[str, list[ResourceSlot]] = {}
    for i in range(draw(st.integers(0, 12))):
        capacity = draw(capacities(min_cpu=1))
        used = draw(partly_used(capacity))
        agent_id = f"agent{i:02d}"
        agents.append(Agent(agent_id, capacity, used, schedulable=draw(st.integers(0, 7)) > 0))
        existing[agent_id] = [used] if used else []
    pending: list[Session] = []
    count = draw(st.integers(0, 15))
    for i in range(count):
        spec = draw(specs())
        earlier = [s.id for s in pending]
        spec.depends_on = draw(
            st.lists(st.sampled_from([*EXTERNAL, *earlier]), max_size=2, unique=True)
            if draw(st.integers(0, 4)) == 0
            else st.just([])
        )
        spec.starts_at = draw(st.sampled_from([None, None, None, None, None, 50.0, 150.0]))
        created = float(draw(st.integers(0, 100)))
        session = Session.create(spec, draw(st.sampled_from(OWNERS)), created, f"s{i:02d}")
        if draw(st.booleans()):
            data: dict[str, Any] = {"retries": draw(st.integers(0, 4))}
            if draw(st.booleans()):
                data["pushed_at"] = float(draw(st.integers(0, 100)))
            session.status_data = {"scheduler": data}
        pending.append(session)
    deps = dict(EXTERNAL)
    deps.update({s.id: (Status.PENDING, SessionResult.UNDEFINED) for s in pending})
    owner_sessions = {o: draw(st.integers(0, 2)) for o in OWNERS}
    owner_occupied = {o: ResourceSlot({"cpu": draw(halves(0, 8))}) for o in OWNERS}
    return World(agents, existing, pending, deps, draw(configs()), owner_sessions, owner_occupied)


# --- checks ----------------------------------------------------------------------------------


def check_pass(world: World, result: PassResult, seq_key: str) -> None:
    """Properties (1), (2) and (3), plus what every record must hold."""
    by_id = {s.id: s for s in world.pending}
    agents = {a.id: a for a in world.agents}
    # (3) every pending session is accounted for exactly once.
    outcomes = (
        [p.session_id for p in result.placements]
        + list(result.failures)
        + [c.session_id for c in result.cancellations]
        + list(result.untried)
    )
    assert sorted(outcomes) == sorted(by_id), "a session was lost or counted twice"
    if result.blocked_by is None:
        assert result.untried == []
    else:
        assert seq_key.startswith("fifo")
        assert result.blocked_by in result.failures
        assert result.failures[result.blocked_by]["failed_predicates"][0]["name"] == "resources"

    # (1) and (2): apply the placements kernel by kernel.
    kernels = {aid: list(slots) for aid, slots in world.existing.items()}
    occupied = {aid: a.occupied for aid, a in agents.items()}
    for placement in result.placements:
        session = by_id[placement.session_id]
        spec = session.spec
        assert len(placement.agent_ids) == spec.cluster_size == len(session.kernels)
        if spec.cluster_mode is ClusterMode.SINGLE_NODE:
            assert len(set(placement.agent_ids)) == 1
        for agent_id in placement.agent_ids:
            agent = agents[agent_id]
            assert agent.schedulable
            if "cuda.device" in spec.resources:
                assert "cuda.device" in agent.capacity
            occupied[agent_id] = occupied[agent_id] + spec.resources
            kernels[agent_id].append(spec.resources)
    for agent_id, agent in agents.items():
        for slot in KNOWN_SLOTS:
            assert occupied[agent_id].get_amount(slot) <= agent.capacity.get_amount(slot), (
                f"{agent_id} over-allocated in {slot}"
            )
        held = ResourceSlot()
        for slots in kernels[agent_id]:
            held = held + slots
        assert held == occupied[agent_id]
        assert Agent(agent_id, agent.capacity, occupied[agent_id]).free.fits_in(agent.capacity)

    # Bands: placements never go from a lower to a higher priority.
    priorities = [by_id[p.session_id].spec.priority for p in result.placements]
    assert priorities == sorted(priorities, reverse=True)

    # Predicates hold for whatever was placed.
    placed_per_owner: dict[str, list[Session]] = {}
    for placement in result.placements:
        session = by_id[placement.session_id]
        placed_per_owner.setdefault(session.owner, []).append(session)
        assert all(
            world.deps[d] == (Status.TERMINATED, SessionResult.SUCCESS)
            for d in session.spec.depends_on
        )
        assert session.spec.starts_at is None or session.spec.starts_at <= world.now
        if world.config.pending_timeout is not None:
            assert world.now - session.created_at < world.config.pending_timeout
    for owner, sessions in placed_per_owner.items():
        policy = world.config.policy(owner)
        before = world.owner_sessions.get(owner, 0)
        if policy.max_concurrent_sessions is not None:
            assert before + len(sessions) <= max(before, policy.max_concurrent_sessions)
        if policy.max_resources is not None:
            held = world.owner_occupied.get(owner, ResourceSlot())
            for session in sessions:
                held = held + session.spec.total_resources
            for slot, limit in policy.max_resources.items():
                assert held.get_amount(slot) <= limit

    # Records say why, and count the try.
    for sid, record in result.failures.items():
        before_data = by_id[sid].scheduler_data
        assert record["retries"] == before_data.get("retries", 0) + 1
        assert record["last_try"] == world.now
        assert record["failed_predicates"]
        assert all(set(p) == {"name", "msg"} and p["msg"] for p in record["failed_predicates"])
        assert record["msg"] == "; ".join(p["msg"] for p in record["failed_predicates"])
    for cancel in result.cancellations:
        assert cancel.status_info in {"pending-timeout", "dependency-failed"}
        assert cancel.msg


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds())
def test_one_pass_invariants(world: World) -> None:
    """Properties (1)-(3) of one pass, the same group under every sequencer × selector."""
    for seq_key, selector in COMBOS:
        seq, sel = plugins(seq_key, selector)
        result = schedule(world.snapshot(), world.config, seq, sel, world.now)
        check_pass(world, result, seq_key)
        # Deterministic: the same input gives the same decisions (fresh plugins, since
        # round-robin remembers where it stopped).
        seq, sel = plugins(seq_key, selector)
        assert schedule(world.snapshot(), world.config, seq, sel, world.now) == result


@settings(max_examples=100, deadline=None)
@given(
    agents=st.lists(capacities(), min_size=1, max_size=6),
    spec=specs(),
    selector=st.sampled_from(SELECTORS),
)
def test_never_fits_is_exact(agents: list[ResourceSlot], spec: SessionSpec, selector: str) -> None:
    """never_fits is None exactly when a pass places the session on the empty group."""
    group = [Agent(f"a{i}", capacity) for i, capacity in enumerate(agents)]
    config = SchedulerConfig()
    seq, sel = plugins("lifo", selector)
    session = Session.create(spec, "u0", 0.0, "s")
    result = schedule(Snapshot(group, [session]), config, seq, sel, 1.0)
    why = never_fits(spec, group)
    assert (why is None) == bool(result.placements), why
    if why is not None:
        assert why.startswith("needs ")


# --- (4) draining a workload ---------------------------------------------------------------


@dataclass
class Job:
    session: Session
    duration: float


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Agent], list[Job], SchedulerConfig]:
    capacities_ = draw(st.lists(capacities(min_cpu=8), min_size=1, max_size=6))
    agents = [Agent(f"agent{i}", capacity) for i, capacity in enumerate(capacities_)]
    limit = draw(st.sampled_from([None, None, ResourceSlot({"cpu": 16})]))
    config = SchedulerConfig(
        default_policy=OwnerPolicy(
            max_concurrent_sessions=draw(st.sampled_from([None, None, 1, 2])),
            max_resources=limit,
        )
    )
    jobs: list[Job] = []
    for i in range(draw(st.integers(1, 12))):
        spec = draw(specs())
        if never_fits(spec, agents) is not None:
            continue  # refused at submission; never queued
        if limit is not None and not spec.total_resources.fits_in(limit):
            continue  # could never pass its owner's limit
        earlier = [job.session.id for job in jobs]
        if len(earlier) > 0 and draw(st.booleans()):
            spec.depends_on = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True))
        created = float(draw(st.integers(0, 20)))
        session = Session.create(spec, draw(st.sampled_from(OWNERS)), created, f"s{i:02d}")
        jobs.append(Job(session, float(draw(st.integers(1, 10)))))
    return agents, jobs, config


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads())
def test_every_finite_workload_drains(
    workload: tuple[list[Agent], list[Job], SchedulerConfig],
) -> None:
    """Property (4), the same workload under every sequencer × selector."""
    agents, jobs, config = workload
    for seq_key, selector in COMBOS:
        drain(agents, copy.deepcopy(jobs), config, seq_key, selector)


def drain(
    agents: list[Agent], jobs: list[Job], config: SchedulerConfig, seq_key: str, selector: str
) -> None:
    """Pass, run, finish and release until nothing is left; check every pass."""
    seq, sel = plugins(seq_key, selector)  # one instance for every pass, as a manager keeps
    by_id = {job.session.id: job for job in jobs}
    pending = [job.session for job in jobs]
    running: dict[str, tuple[float, list[str]]] = {}  # id → (ends at, agent of each kernel)
    finished: set[str] = set()
    on_agent: dict[str, list[ResourceSlot]] = {a.id: [] for a in agents}
    now = 0.0
    passes = 0
    while pending or running:
        passes += 1
        assert passes <= 2 * len(jobs) + 1, f"{seq_key}/{selector}: the workload does not drain"
        states = {
            s.id: (Status.TERMINATED, SessionResult.SUCCESS)
            if s.id in finished
            else (Status.RUNNING if s.id in running else Status.PENDING, SessionResult.UNDEFINED)
            for s in (job.session for job in jobs)
        }
        owner_sessions: dict[str, int] = {}
        owner_occupied: dict[str, ResourceSlot] = {}
        for sid in running:
            session = by_id[sid].session
            owner_sessions[session.owner] = owner_sessions.get(session.owner, 0) + 1
            owner_occupied[session.owner] = (
                owner_occupied.get(session.owner, ResourceSlot()) + session.spec.total_resources
            )
        world = World(
            agents=agents,
            existing={aid: list(slots) for aid, slots in on_agent.items()},
            pending=pending,
            deps=states,
            config=config,
            owner_sessions=owner_sessions,
            owner_occupied=owner_occupied,
            now=now,
        )
        result = schedule(world.snapshot(), config, seq, sel, now)
        check_pass(world, result, seq_key)
        assert result.cancellations == []
        # Apply the pass as the store does: reserve, record why-pending.
        for placement in result.placements:
            session = by_id[placement.session_id].session
            for agent_id in placement.agent_ids:
                on_agent[agent_id].append(session.spec.resources)
            running[session.id] = (now + by_id[session.id].duration, placement.agent_ids)
        for session in pending:
            if session.id in result.failures:
                session.status_data = {"scheduler": result.failures[session.id]}
        pending = [s for s in pending if s.id not in running]
        if not running:
            assert not pending, f"{seq_key}/{selector}: nothing runs or was placed, yet some wait"
            break
        # Advance to the next finish and release those slots.
        now = min(end for end, _ in running.values())
        for sid in [sid for sid, (end, _) in running.items() if end == now]:
            _, agent_ids = running.pop(sid)
            for agent_id in agent_ids:
                on_agent[agent_id].remove(by_id[sid].session.spec.resources)
            finished.add(sid)
        agents = [
            Agent(a.id, a.capacity, _sum(on_agent[a.id]), schedulable=a.schedulable) for a in agents
        ]
    assert finished == set(by_id)
    assert all(not slots for slots in on_agent.values())


def _sum(slots: list[ResourceSlot]) -> ResourceSlot:
    held = ResourceSlot()
    for item in slots:
        held = held + item
    return held
