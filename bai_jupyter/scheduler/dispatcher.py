"""One scheduling pass over a resource group: deterministic, no I/O.

The pass updates the snapshot it is given as it places sessions (owner counters,
dependency states), so each pass gets a fresh one.

The store loads a :class:`Snapshot` inside a write transaction, :func:`schedule`
decides, and the store applies the :class:`PassResult` in that same
transaction, so reservations are atomic with the state change.
"""

from __future__ import annotations

import gc
import logging
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..model import ClusterMode, Session, SessionResult, Status
from ..resources import DEVICE_SLOTS, KNOWN_SLOTS, ResourceSlot
from .config import SchedulerConfig
from .context import PassContext, Snapshot
from .placement import AgentPool, Partition, Vector, fits
from .predicates import PREDICATES, Verdict
from .selectors import AgentSelector
from .sequencers import Sequencer

#: How many recently failed shapes a pass remembers to reject bigger ones at once.
_FAILED_SHAPES_KEPT = 64
#: ``status_info`` of a session the scheduler could not handle (cancelled, not retried).
SCHEDULER_ERROR = "scheduler-error"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    session_id: str
    #: The agent of each kernel, in the session's kernel order (main1, sub1 …).
    agent_ids: list[str]


@dataclass(frozen=True)
class Cancellation:
    session_id: str
    status_info: str
    msg: str


@dataclass
class PassResult:
    placements: list[Placement] = field(default_factory=list)
    #: Session id → its new ``status_data["scheduler"]`` record after a failed try.
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancellations: list[Cancellation] = field(default_factory=list)
    #: The session that blocked the queue (strict FIFO) and those left untried behind it.
    blocked_by: str | None = None
    untried: list[str] = field(default_factory=list)
    #: Until when the same inputs give the same decisions (None: for ever; the pass's own
    #: time: not even the next pass). A pass that placed and cancelled nothing is skipped
    #: until then while nothing in the store changes (``scheduler.queue.run_pass``).
    steady_until: float | None = field(default=None, compare=False)
    #: Whether the pass was skipped so (nothing changed since an idle pass).
    skipped: bool = field(default=False, compare=False)


class _Placer:
    """Finds room for sessions in a pool, remembering shapes that did not fit."""

    def __init__(self, pool: AgentPool, selector: AgentSelector) -> None:
        self.pool, self.selector = pool, selector
        self.failed: deque[tuple[bool, int, Vector]] = deque(maxlen=_FAILED_SHAPES_KEPT)

    def _known_to_fail(self, whole_only: bool, count: int, vector: Vector) -> bool:
        # Free space only shrinks during a pass: a shape ≥ a failed one fails too.
        for w, n, failed in self.failed:
            if whole_only == w and count >= n and fits(failed, vector):
                return True
        return False

    def _choose(self, parts: list[Partition], vector: Vector) -> str | None:
        for part in parts:
            agent = self.selector.choose(self.pool, part, vector)
            if agent is not None:
                return agent.id
        return None

    def _split(self, parts: list[Partition], vector: Vector, size: int) -> list[str] | None:
        """Kernel by kernel, all or nothing: no reservation is left when it fails."""
        chosen: list[str] = []
        for _ in range(size):
            agent_id = self._choose(parts, vector)
            if agent_id is None:
                for placed in chosen:
                    self.pool.release(placed, vector)
                return None
            self.pool.reserve(agent_id, vector)
            chosen.append(agent_id)
        return chosen

    def _split_each(self, kernels: list[ResourceSlot]) -> list[str] | None:
        """Kernels of different sizes one by one, largest first, all or nothing; each on
        the agents its own slots prefer (a CPU-only role stays off GPU agents)."""
        order = sorted(range(len(kernels)), key=lambda i: self.pool.vector(kernels[i]))
        chosen: dict[int, tuple[str, Vector]] = {}
        for index in reversed(order):
            vector = self.pool.vector(kernels[index])
            agent_id = self._choose(self.pool.preferred_partitions(kernels[index]), vector)
            if agent_id is None:
                for placed, amount in chosen.values():
                    self.pool.release(placed, amount)
                return None
            self.pool.reserve(agent_id, vector)
            chosen[index] = (agent_id, vector)
        return [chosen[i][0] for i in range(len(kernels))]

    def place(self, session: Session) -> list[str] | None:
        spec = session.spec
        size, whole = spec.cluster_size, spec.total_resources
        if self.pool.unknown_slots(whole):
            return None
        uniform = spec.uniform
        whole_vec, kernel_vec = self.pool.vector(whole), self.pool.vector(spec.resources)
        try_whole = not self._known_to_fail(True, 1, whole_vec)
        try_split = spec.cluster_mode is ClusterMode.MULTI_NODE and (
            not uniform or not self._known_to_fail(False, size, kernel_vec)
        )
        if not (try_whole or try_split):
            return None
        # The device preference comes first: agents with no device slot the session does
        # not need are tried (whole on one agent, then multi-node kernel by kernel) before
        # agents with more device slots are added, so a GPU agent is used only when
        # nothing else fits. Within a tier, the whole session on one agent goes first
        # (lower latency); in single-node it is the only choice.
        parts = self.pool.preferred_partitions(whole)
        wanted = frozenset(whole) & DEVICE_SLOTS
        start = 0
        for end in range(1, len(parts) + 1):
            needless = len(parts[end - 1].devices - wanted)
            if end < len(parts) and len(parts[end].devices - wanted) == needless:
                continue  # the tier goes on
            if try_whole:
                agent_id = self._choose(parts[start:end], whole_vec)
                if agent_id is not None:
                    self.pool.reserve(agent_id, whole_vec)
                    return [agent_id] * size
            if try_split and uniform:
                chosen = self._split(parts[:end], kernel_vec, size)
                if chosen is not None:
                    return chosen
            start = end
        if try_split and not uniform:
            return self._split_each(spec.kernel_slots())
        if try_whole:
            self.failed.append((True, 1, whole_vec))
        if try_split:
            self.failed.append((False, size, kernel_vec))
        return None


def _cancel(
    session: Session, info: str, msg: str, ctx: PassContext, result: PassResult, cancelled: set[str]
) -> None:
    cancelled.add(session.id)
    result.cancellations.append(Cancellation(session.id, info, msg))
    ctx.snapshot.dependency_states[session.id] = (Status.CANCELLED, SessionResult.UNDEFINED)


def _failed(
    session: Session, exc: Exception, ctx: PassContext, result: PassResult, cancelled: set[str]
) -> None:
    """One session the scheduler's code cannot handle is cancelled, never the whole queue."""
    log.error("bai-jupyter: scheduling session %s failed; cancelling it", session.id, exc_info=exc)
    msg = f"the scheduler failed on this session: {type(exc).__name__}: {exc}"
    _cancel(session, SCHEDULER_ERROR, msg, ctx, result, cancelled)


def _cascade_cancellations(
    pending: list[Session], ctx: PassContext, result: PassResult
) -> set[str]:
    """Cancel timed-out sessions and, transitively, sessions whose dependency failed."""
    dependants: dict[str, list[Session]] = defaultdict(list)
    for session in pending:
        for dep in session.spec.depends_on:
            dependants[dep].append(session)
    cancelled: set[str] = set()
    queue = deque(pending)
    while queue:
        session = queue.popleft()
        if session.id in cancelled:
            continue
        for predicate in PREDICATES[:2]:  # pending_timeout, dependencies
            try:
                verdict = predicate(session, ctx)
            except Exception as exc:
                _failed(session, exc, ctx, result, cancelled)
                queue.extend(dependants.get(session.id, ()))
                break
            if verdict is not None and verdict.cancel:
                _cancel(session, verdict.cancel, verdict.msg, ctx, result, cancelled)
                queue.extend(dependants.get(session.id, ()))
                break
    return cancelled


def _order(
    sequencer: Sequencer,
    band: list[Session],
    ctx: PassContext,
    result: PassResult,
    cancelled: set[str],
    retry: bool = True,
) -> Iterator[Session]:
    """The sequencer's order of a band, lazily (DRF reads the placements made so far).

    When the sequencer raises, the sessions it raises on alone are cancelled and the
    rest is ordered again (oldest first should that fail too)."""
    given: set[str] = set()
    try:
        for session in sequencer.order(band, ctx):
            given.add(session.id)
            yield session
        return
    except Exception:
        log.exception("bai-jupyter: the %s sequencer failed", type(sequencer).__name__)
    rest: list[Session] = []
    for session in band:
        if session.id in given:
            continue
        try:
            list(sequencer.order([session], ctx))
        except Exception as exc:
            _failed(session, exc, ctx, result, cancelled)
        else:
            rest.append(session)
    if retry:
        yield from _order(sequencer, rest, ctx, result, cancelled, retry=False)
    else:
        yield from sorted(rest, key=lambda s: (s.created_at, s.id))


def _failure_record(session: Session, verdicts: list[Verdict], now: float) -> dict[str, Any]:
    info = dict(session.scheduler_data)
    info["retries"] = int(info.get("retries", 0)) + 1
    info["last_try"] = now
    info["failed_predicates"] = [v.to_json() for v in verdicts]
    info["msg"] = "; ".join(v.msg for v in verdicts)
    return info


def _smallest_kernel(pending: list[Session]) -> ResourceSlot | None:
    """Per slot, the least any pending kernel asks: agents below it can be skipped."""
    if not pending:
        return None
    kernels = [
        slots
        for s in pending
        for slots in ([s.spec.resources] if s.spec.uniform else s.spec.kernel_slots())
    ]
    floor: dict[str, Decimal] = {}
    for slot in KNOWN_SLOTS:
        floor[slot] = min(k.get_amount(slot) for k in kernels)
    return ResourceSlot._exact(floor)


def schedule(
    snapshot: Snapshot,
    config: SchedulerConfig,
    sequencer: Sequencer,
    selector: AgentSelector,
    now: float,
) -> PassResult:
    """Decide which pending sessions start now and on which agents.

    The cyclic garbage collector is paused meanwhile: a pass makes no cycles, and
    full collections over a large queue would make its time grow faster than the queue.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _schedule(snapshot, config, sequencer, selector, now)
    finally:
        if collecting:
            gc.enable()


def _schedule(
    snapshot: Snapshot,
    config: SchedulerConfig,
    sequencer: Sequencer,
    selector: AgentSelector,
    now: float,
) -> PassResult:
    pool = AgentPool(snapshot.agents, _smallest_kernel(snapshot.pending))
    ctx = PassContext(now, config, snapshot, pool.capacity)
    result = PassResult()
    cancelled = _cascade_cancellations(snapshot.pending, ctx, result)
    placer = _Placer(pool, selector)
    bands: dict[int, list[Session]] = defaultdict(list)
    for session in snapshot.pending:
        if session.id not in cancelled:
            bands[session.spec.priority].append(session)
    tried: set[str] = set()
    result.steady_until = _steady_until(snapshot.pending, cancelled, ctx)
    for priority in sorted(bands, reverse=True):
        for session in _order(sequencer, bands[priority], ctx, result, cancelled):
            tried.add(session.id)
            try:
                blocked = _try(session, ctx, sequencer, placer, pool, result, now)
            except Exception as exc:
                result.failures.pop(session.id, None)
                _failed(session, exc, ctx, result, cancelled)
                continue
            if blocked:
                result.blocked_by = session.id
                result.untried = [
                    s.id for s in snapshot.pending if s.id not in tried and s.id not in cancelled
                ]
                return result
    return result


def _try(
    session: Session,
    ctx: PassContext,
    sequencer: Sequencer,
    placer: _Placer,
    pool: AgentPool,
    result: PassResult,
    now: float,
) -> bool:
    """Check and place one session; True when it blocks the queue behind it."""
    # pending_timeout and cancelling dependency verdicts were settled above; a
    # dependency still running is a wait and must be checked here too.
    verdicts = [v for p in PREDICATES[1:] if (v := p(session, ctx)) is not None]
    if verdicts:
        result.failures[session.id] = _failure_record(session, verdicts, now)
        return False
    agent_ids = placer.place(session)
    if agent_ids is not None:
        result.placements.append(Placement(session.id, agent_ids))
        ctx.record_placement(session)
        return False
    verdicts = [Verdict("resources", pool.describe_shortfall(session.spec))]
    info = _failure_record(session, verdicts, now)
    result.failures[session.id] = info
    blocks = sequencer.on_no_fit(session, info, ctx)
    result.steady_until = _earliest(result.steady_until, sequencer.steady_until(info, now))
    return blocks


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _steady_until(pending: list[Session], cancelled: set[str], ctx: PassContext) -> float | None:
    """When the first time-bound verdict changes: a pending timeout, a ``starts_at``."""
    limit, now, until = ctx.config.pending_timeout, ctx.now, None
    for session in pending:
        if session.id in cancelled:
            continue
        if limit is not None:
            until = _earliest(until, session.created_at + limit)
        starts = session.spec.starts_at
        if starts is not None and starts > now:
            until = _earliest(until, starts)
    return until
