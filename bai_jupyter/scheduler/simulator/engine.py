"""The simulated clock: an event heap, virtual agents, and the production pass at each instant.

At one instant every finish is processed, then every submit, then one
scheduling pass (:func:`~bai_jupyter.scheduler.dispatcher.schedule`, with the
real plugins, on real :class:`~bai_jupyter.model.Session` objects that walk the
real lifecycle). A pass also runs where only the clock can change a waiting
session's fate: its ``starts_at``, its ``pending_timeout`` expiry, the end of a
FIFO head-of-line push-back. Nothing happens after ``until``.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from ...model import Agent, Session, SessionResult, Status
from ...resources import total
from ..config import SchedulerConfig
from ..context import Snapshot
from ..dispatcher import PassResult, schedule
from ..placement import never_fits
from ..selectors import AgentSelector
from ..sequencers import Sequencer
from .report import Metrics, SessionRow, SimulationResult
from .trace import Overrides, Trace, parse_trace, resolve_scheduler
from .usage import Usage

#: The states a placed session walks through at the instant it is placed.
_STARTING = (Status.SCHEDULED, Status.PREPARING, Status.PREPARED, Status.CREATING, Status.RUNNING)

# Event kinds, in the order they are processed at one instant.
_FINISH, _SUBMIT, _WAKE = 0, 1, 2


def simulate(trace: Any, overrides: Overrides | None = None) -> SimulationResult:
    """Replay ``trace`` (parsed JSON) with the production scheduler; pure, no I/O.

    Raises :class:`~bai_jupyter.scheduler.simulator.TraceError` for a malformed
    trace or scheduler choice.
    """
    parsed = parse_trace(trace)
    config, sequencer, selector = resolve_scheduler(parsed, overrides or Overrides())
    simulation = Simulation(parsed, config, sequencer, selector)
    simulation.run()
    return simulation.result()


class Simulation:
    """Simulated agents, the event heap and the counters a pass's snapshot needs."""

    def __init__(
        self,
        trace: Trace,
        config: SchedulerConfig,
        sequencer: Sequencer,
        selector: AgentSelector,
    ) -> None:
        self.until = trace.until
        self.config, self.sequencer, self.selector = config, sequencer, selector
        self.agents = {
            a.id: Agent(a.id, a.capacity, resource_group=a.resource_group) for a in trace.agents
        }
        self.agent_list = list(self.agents.values())
        self.requests = {req.id: req for req in trace.requests}
        self.order = [req.id for req in trace.requests if req.submit_at <= self.until]
        self.sessions: dict[str, Session] = {}
        #: Insertion-ordered, so building a pass's pending list is linear.
        self.pending: dict[str, Session] = {}
        #: (status, result) of every session of the trace, submitted or not.
        self.states: dict[str, tuple[Status, SessionResult]] = {
            req.id: (Status.PENDING, SessionResult.UNDEFINED) for req in trace.requests
        }
        #: Per owner, sessions holding resources (one group: held anywhere = held here).
        self.owner_sessions: dict[str, int] = {}
        self.scheduled_at: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.heap: list[tuple[float, int, int, str]] = []
        self.seq = 0
        self.wakes: set[float] = set()
        self.now = 0.0
        start = min((self.requests[sid].submit_at for sid in self.order), default=0.0)
        #: The integrals behind the metrics; its ``held`` is also each owner's occupancy.
        self.usage = Usage(total(a.capacity for a in self.agent_list), start)

    # Events

    def _push(self, at: float, kind: int, session_id: str) -> None:
        if at <= self.until:
            self.seq += 1
            heapq.heappush(self.heap, (at, kind, self.seq, session_id))

    def _wake(self, at: float) -> None:
        """Run a pass at ``at`` although nothing is submitted or finishes then."""
        if self.now < at <= self.until and at not in self.wakes:
            self.wakes.add(at)
            self._push(at, _WAKE, "")

    def run(self) -> None:
        for sid in self.order:
            self._push(self.requests[sid].submit_at, _SUBMIT, sid)
        while self.heap:
            self.now = now = self.heap[0][0]
            while self.heap and self.heap[0][0] == now:
                _, kind, _, sid = heapq.heappop(self.heap)
                if kind == _FINISH:
                    self._finish(sid)
                elif kind == _SUBMIT:
                    self._submit(sid)
            if self.pending:
                self._pass()

    def _submit(self, sid: str) -> None:
        req, now = self.requests[sid], self.now
        session = Session.create(req.spec, req.owner, now=now, session_id=sid)
        self.sessions[sid] = session
        self.usage.add_owner(req.owner)
        why = never_fits(req.spec, self.agent_list)
        if why is not None:
            self._cancel(session, "never-fits", why)
            return
        self.pending[sid] = session
        if req.spec.starts_at is not None:
            self._wake(req.spec.starts_at)
        if self.config.pending_timeout is not None:
            self._wake(now + self.config.pending_timeout)

    def _pass(self) -> None:
        pending = list(self.pending.values())
        states = self.states
        snapshot = Snapshot(
            agents=self.agent_list,
            pending=pending,
            dependency_states={dep: states[dep] for s in pending for dep in s.spec.depends_on},
            owner_sessions=dict(self.owner_sessions),
            owner_occupied=dict(self.usage.held),
            owner_group_occupied=dict(self.usage.held),
        )
        self._apply(schedule(snapshot, self.config, self.sequencer, self.selector, self.now))

    def _apply(self, result: PassResult) -> None:
        for cancellation in result.cancellations:
            session = self.pending.pop(cancellation.session_id)
            self._cancel(session, cancellation.status_info, cancellation.msg)
        for placement in result.placements:
            self._start(self.pending.pop(placement.session_id), placement.agent_ids)
        hol_max_wait = getattr(self.sequencer, "hol_max_wait", None)
        for sid, info in result.failures.items():
            session = self.pending[sid]
            newly_pushed = "pushed_at" in info and "pushed_at" not in session.scheduler_data
            session.status_data = {"scheduler": info}
            if newly_pushed and isinstance(hol_max_wait, (int, float)):
                # FIFO gives a pushed-back session the head again after hol_max_wait.
                self._wake(float(info["pushed_at"]) + hol_max_wait)
        # Sessions left untried behind a blocker keep their records: nothing to do.

    # The lifecycle, at one instant

    def _cancel(self, session: Session, info: str, msg: str) -> None:
        data: dict[str, Any] = {"msg": msg}
        if "retries" in session.scheduler_data:
            data = {"retries": session.scheduler_data["retries"], **data}
        session.set_status(Status.CANCELLED, self.now, info, {"scheduler": data})
        self.states[session.id] = (Status.CANCELLED, session.result)
        self.finished_at[session.id] = self.now

    def _start(self, session: Session, agent_ids: list[str]) -> None:
        now = self.now
        for kernel, agent_id in zip(session.kernels, agent_ids, strict=True):
            kernel.agent_id = agent_id
            agent = self.agents[agent_id]
            agent.occupied = agent.occupied + kernel.slots
            if not agent.occupied.fits_in(agent.capacity):
                raise AssertionError(f"over-allocation on agent {agent.id}")  # a scheduler bug
        # Containers start instantly here: the whole lifecycle walk happens at one instant.
        for status in _STARTING:
            for kernel in session.kernels:
                kernel.set_status(status)
            session.set_status(status, now)
        self.states[session.id] = (Status.RUNNING, session.result)
        self.scheduled_at[session.id] = now
        self._hold(session, +1)
        duration = self.requests[session.id].duration
        if duration is not None:
            self._push(now + duration, _FINISH, session.id)

    def _finish(self, sid: str) -> None:
        session, now = self.sessions[sid], self.now
        exit_code = self.requests[sid].exit_code
        info = "task-finished" if exit_code == 0 else "task-failed"
        for kernel in session.kernels:
            kernel.set_status(Status.TERMINATING)
        session.set_status(Status.TERMINATING, now, info)
        for kernel in session.kernels:
            kernel.set_status(Status.TERMINATED)
            assert kernel.agent_id is not None  # it ran, so it was placed
            agent = self.agents[kernel.agent_id]
            agent.occupied = agent.occupied - kernel.slots
        session.finish(exit_code)
        session.set_status(Status.TERMINATED, now, info)
        self.states[sid] = (Status.TERMINATED, session.result)
        self.finished_at[sid] = now
        self._hold(session, -1)

    def _hold(self, session: Session, sign: int) -> None:
        """Take (+1) or give back (-1) a session's slots in the counters and integrals."""
        owner = session.owner
        self.owner_sessions[owner] = self.owner_sessions.get(owner, 0) + sign
        self.usage.change(owner, session.spec.total_resources, sign, self.now)

    # Results

    def result(self) -> SimulationResult:
        rows: list[SessionRow] = []
        for sid in self.order:
            session = self.sessions[sid]
            agents = list(dict.fromkeys(k.agent_id for k in session.kernels if k.agent_id))
            rows.append(
                SessionRow(
                    id=sid,
                    owner=session.owner,
                    status=session.status,
                    result=session.result,
                    status_info=session.status_info,
                    submit_at=self.requests[sid].submit_at,
                    scheduled_at=self.scheduled_at.get(sid),
                    finished_at=self.finished_at.get(sid),
                    agents=agents,
                    status_data=session.status_data,
                )
            )
        usage = self.usage
        running = any(s.status is Status.RUNNING for s in self.sessions.values())
        ended = [
            self.finished_at[s.id] for s in self.sessions.values() if s.status is Status.TERMINATED
        ]
        end = self.until if running else max(ended, default=usage.start)
        length = end - usage.start
        waits = sorted(w for row in rows if (w := row.wait) is not None)

        def ratio(area: float) -> float:
            return round(area / length, 4) if length > 0 else 0.0

        metrics = Metrics(
            makespan=length,
            mean_wait=round(sum(waits) / len(waits), 4) if waits else 0.0,
            p95_wait=waits[math.ceil(0.95 * len(waits)) - 1] if waits else 0.0,
            utilization={slot: ratio(a) for slot, a in usage.utilization(end).items()},
            dominant_share={owner: ratio(a) for owner, a in usage.share_time(end).items()},
            dominant_share_at_until={o: round(float(s), 4) for o, s in usage.share.items()},
        )
        return SimulationResult(rows, metrics, self.until, (usage.start, end), self.config)
