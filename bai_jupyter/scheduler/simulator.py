"""Replay a trace of session requests against virtual agents under a simulated clock.

An operator compares scheduling strategies here before changing them in
production, so the simulator runs the production code itself: every pass is
:func:`~bai_jupyter.scheduler.dispatcher.schedule` with plugins from
:func:`~bai_jupyter.scheduler.plugins.load_plugins`, on real
:class:`~bai_jupyter.model.Session` objects that walk the real lifecycle. Only
the clock, the agents and the containers are simulated.

Trace (JSON)::

    {"until": 1000,
     "agents": [{"id": "a1", "slots": {"cpu": "9", "mem": "18g"}}],
     "scheduler": {"sequencer": "fifo", "selector": "dispersed",
                   "options": {"num_retries_to_skip": 3}},
     "sessions": [{"id": "s1", "owner": "alice", "submit_at": 0, "duration": 100,
                   "resources": {"cpu": "1", "mem": "4g"}, "cluster_size": 1,
                   "cluster_mode": "single-node", "priority": 10,
                   "depends_on": [], "exit_code": 0, "starts_at": null}]}

``until``, ``agents`` and ``sessions`` are required; a top-level
``description`` is allowed for notes. ``resources`` are per kernel.
``duration: null`` runs until ``until``; a non-zero ``exit_code`` ends the
session with result FAILURE. Agents may name a ``resource_group``, but all of
them must name the same one: a trace is one group. Times are plain seconds.

Clock: events live on a heap. At one instant the simulator processes every
finish, then every submit, then runs one scheduling pass. A pass also runs at
an instant where only the clock can change a waiting session's fate: its
``starts_at``, its ``pending_timeout`` expiry, and the end of a FIFO
head-of-line push-back (``hol_max_wait``). Nothing happens after ``until``;
sessions submitted after it never enter the queue and are not listed. A
request that cannot fit even the empty agents is CANCELLED at submit with
``never-fits``.

Metrics:

* ``wait`` = ``scheduled_at`` − ``submit_at``; ``mean_wait`` and ``p95_wait``
  (nearest rank) are over the sessions that were scheduled, 0 when none was.
* The window is [first ``submit_at``, end], where end is the last time a
  session finished running, or ``until`` when one is still RUNNING at
  ``until``; ``makespan`` is its length.
* ``utilization[slot]`` = ∫ occupied dt / (group capacity × window length).
* ``dominant_share[owner]`` = time-average over the window of the owner's
  dominant share (max over slots of the owner's occupied / group capacity):
  how much of the group the owner held on average.
* ``dominant_share_at_until[owner]`` = the same share at the instant ``until``
  (after its events), every owner listed, 0 included: what DRF equalizes.

Ratios are rounded to 4 decimals.
"""

from __future__ import annotations

import difflib
import heapq
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..model import Agent, Session, SessionResult, SessionSpec, Status
from ..request import SpecError, parse_spec
from ..resources import KNOWN_SLOTS, ResourceError, ResourceSlot, parse_amount
from .config import SchedulerConfig, SchedulerConfigError
from .context import Snapshot
from .dispatcher import PassResult, schedule
from .placement import never_fits
from .plugins import SELECTOR_GROUP, SEQUENCER_GROUP, available, load_plugins
from .selectors import AgentSelector
from .sequencers import Sequencer

__all__ = [
    "METRICS_HELP",
    "Metrics",
    "Overrides",
    "SessionRow",
    "SimulationResult",
    "TraceError",
    "format_table",
    "load_trace",
    "simulate",
]

#: The metrics in words, for ``--help`` (kept next to the code that computes them).
METRICS_HELP = """\
metrics:
  wait                     scheduled_at - submit_at; mean_wait and p95_wait (nearest
                           rank) over the sessions that were scheduled, 0 when none
  makespan                 length of the window [first submit_at, end]; end is the
                           last finish, or `until` if a session still runs then
  utilization              per slot: integral of occupied dt / (capacity x window)
  dominant_share           per owner: time-average over the window of the owner's
                           dominant share (max over slots of occupied / capacity)
  dominant_share_at_until  per owner: that share at the instant `until` (0 included);
                           DRF equalizes this one
  ratios are rounded to 4 decimals"""

_TRACE_FIELDS = ("until", "agents", "sessions", "scheduler", "description")
_AGENT_FIELDS = ("id", "slots", "resource_group")
_SCHEDULER_FIELDS = ("sequencer", "selector", "options")
_SESSION_FIELDS = (
    "id",
    "owner",
    "submit_at",
    "duration",
    "resources",
    "cluster_size",
    "cluster_mode",
    "priority",
    "depends_on",
    "exit_code",
    "starts_at",
)
_REQUIRED_SESSION_FIELDS = {
    "id": "a unique session id",
    "submit_at": "the time of the request, in seconds",
    "resources": 'per-kernel slots, e.g. {"cpu": "1", "mem": "4g"}',
}
#: Session fields that are :class:`SessionSpec` fields, validated by :func:`parse_spec`.
_SPEC_FIELDS = ("resources", "cluster_size", "cluster_mode", "priority", "depends_on", "starts_at")
#: The states a placed session walks through at the instant it is placed.
_STARTING = (Status.SCHEDULED, Status.PREPARING, Status.PREPARED, Status.CREATING, Status.RUNNING)

# Event kinds, in the order they are processed at one instant.
_FINISH, _SUBMIT, _WAKE = 0, 1, 2


class TraceError(ValueError):
    """A malformed trace or scheduler choice; ``path`` points at the culprit."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


@dataclass(frozen=True)
class Overrides:
    """Command-line choices that win over the trace's ``scheduler`` section."""

    sequencer: str | None = None
    selector: str | None = None
    #: Merged over the trace's options key by key (values may be strings).
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionRow:
    """How one submitted session fared."""

    id: str
    owner: str
    status: Status
    result: SessionResult
    status_info: str | None
    submit_at: float
    scheduled_at: float | None
    finished_at: float | None
    agents: list[str]
    status_data: dict[str, Any]

    @property
    def wait(self) -> float | None:
        return None if self.scheduled_at is None else self.scheduled_at - self.submit_at

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": self.id,
            "status": self.status.value,
            "result": self.result.value,
            "status_info": self.status_info,
            "submit_at": _num(self.submit_at),
            "scheduled_at": _num(self.scheduled_at),
            "finished_at": _num(self.finished_at),
            "wait": _num(self.wait),
            "agents": list(self.agents),
        }
        if self.status in (Status.PENDING, Status.CANCELLED):
            row["status_data"] = self.status_data
        return row


@dataclass(frozen=True)
class Metrics:
    """Figures over the measured window (see the module docs)."""

    makespan: float
    mean_wait: float
    p95_wait: float
    utilization: dict[str, float]
    dominant_share: dict[str, float]
    dominant_share_at_until: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "makespan": _num(self.makespan),
            "mean_wait": _num(self.mean_wait),
            "p95_wait": _num(self.p95_wait),
            "utilization": {k: _num(v) for k, v in self.utilization.items()},
            "dominant_share": {k: _num(v) for k, v in self.dominant_share.items()},
            "dominant_share_at_until": {
                k: _num(v) for k, v in self.dominant_share_at_until.items()
            },
        }


@dataclass(frozen=True)
class SimulationResult:
    """Every submitted session in trace order, and the metrics."""

    sessions: list[SessionRow]
    metrics: Metrics
    until: float
    window: tuple[float, float]
    config: SchedulerConfig

    def to_json(self) -> dict[str, Any]:
        return {
            "sessions": [row.to_json() for row in self.sessions],
            "metrics": self.metrics.to_json(),
        }


# ---------------------------------------------------------------------------
# Reading and checking a trace


@dataclass(frozen=True)
class _Request:
    id: str
    owner: str
    submit_at: float
    duration: float | None
    exit_code: int
    spec: SessionSpec


@dataclass(frozen=True)
class _Trace:
    until: float
    agents: list[Agent]
    requests: list[_Request]
    sequencer: str
    selector: str
    options: dict[str, Any]


def _show(value: Any) -> str:
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _object(value: Any, path: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    """A JSON object whose keys are all in ``fields``."""
    if not isinstance(value, Mapping):
        raise TraceError(path, f"must be a JSON object, got {_show(value)}")
    for key in value:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            where = f"{path}.{key}" if path != "trace" else str(key)
            raise TraceError(where, f"unknown field; {hint}known fields: {', '.join(fields)}")
    return value


def _list(data: Mapping[str, Any], key: str, what: str) -> list[Any]:
    if key not in data:
        raise TraceError(key, f"required: a list of {what}")
    value = data[key]
    if not isinstance(value, list):
        raise TraceError(key, f"must be a list of {what}, got {_show(value)}")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TraceError(path, f"must be a non-empty string, got {_show(value)}")
    return value


def _seconds(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(path, f"must be a number of seconds, got {_show(value)}")
    if value < 0:
        raise TraceError(path, f"must not be negative, got {_show(value)}")
    return float(value)


def _parse_agents(items: list[Any]) -> list[Agent]:
    agents: list[Agent] = []
    seen: dict[str, int] = {}
    group: tuple[str, int] | None = None
    for i, item in enumerate(items):
        path = f"agents[{i}]"
        data = _object(item, path, _AGENT_FIELDS)
        if "id" not in data:
            raise TraceError(f"{path}.id", "required: a unique agent id")
        agent_id = _string(data["id"], f"{path}.id")
        if agent_id in seen:
            raise TraceError(
                f"{path}.id", f"duplicate id {agent_id!r} (also agents[{seen[agent_id]}])"
            )
        seen[agent_id] = i
        if "slots" not in data:
            raise TraceError(f"{path}.slots", 'required: capacity, e.g. {"cpu": "8", "mem": "32g"}')
        slots = data["slots"]
        if not isinstance(slots, Mapping):
            raise TraceError(
                f"{path}.slots", f"must be a mapping of slot to amount, got {_show(slots)}"
            )
        amounts: dict[str, str | int | float] = {}
        for slot, amount in slots.items():
            try:
                parse_amount(slot, amount)
            except ResourceError as exc:
                raise TraceError(
                    f"{path}.slots.{slot}", str(exc).removeprefix(f"{slot}: ")
                ) from None
            amounts[slot] = amount
        capacity = ResourceSlot(amounts)
        if not capacity:
            raise TraceError(f"{path}.slots", "must give the agent some capacity")
        name = _string(data.get("resource_group", "default"), f"{path}.resource_group")
        if group is None:
            group = (name, i)
        elif name != group[0]:
            raise TraceError(
                f"{path}.resource_group",
                f"a trace simulates one resource group, but agents[{group[1]}] is in "
                f"{group[0]!r} and this agent in {name!r}",
            )
        agents.append(Agent(id=agent_id, capacity=capacity, resource_group=name))
    if not agents:
        raise TraceError("agents", "must list at least one agent")
    return agents


def _parse_request(item: Any, path: str, group: str) -> _Request:
    data = _object(item, path, _SESSION_FIELDS)
    for required, what in _REQUIRED_SESSION_FIELDS.items():
        if data.get(required) is None:
            raise TraceError(f"{path}.{required}", f"required: {what}")
    session_id = _string(data["id"], f"{path}.id")
    owner = _string(data.get("owner", "user"), f"{path}.owner")
    submit_at = _seconds(data["submit_at"], f"{path}.submit_at")
    duration = data.get("duration")
    if duration is not None:
        duration = _seconds(duration, f"{path}.duration")
    exit_code = data.get("exit_code", 0)
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        raise TraceError(f"{path}.exit_code", f"must be an integer, got {_show(exit_code)}")
    try:
        spec = parse_spec({key: data[key] for key in _SPEC_FIELDS if key in data})
    except SpecError as exc:
        raise TraceError(f"{path}.{exc.field}" if exc.field else path, exc.problem) from None
    spec.resource_group = group
    return _Request(session_id, owner, submit_at, duration, exit_code, spec)


def _check_dependencies(requests: list[_Request]) -> None:
    """Every dependency names a session of the trace, and there is no cycle."""
    index = {req.id: i for i, req in enumerate(requests)}
    for i, req in enumerate(requests):
        for j, dep in enumerate(req.spec.depends_on):
            if dep not in index:
                raise TraceError(f"sessions[{i}].depends_on[{j}]", f"unknown session id {dep!r}")
            if dep == req.id:
                raise TraceError(
                    f"sessions[{i}].depends_on[{j}]", "a session cannot depend on itself"
                )
    # Iterative depth-first search; a grey node reached again closes a cycle.
    colour: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in requests:
        if root.id in colour:
            continue
        stack: list[tuple[str, int]] = [(root.id, 0)]
        colour[root.id] = 1
        while stack:
            node, k = stack[-1]
            deps = requests[index[node]].spec.depends_on
            if k == len(deps):
                colour[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, k + 1)
            dep = deps[k]
            if colour.get(dep) == 1:
                path = [n for n, _ in stack]
                cycle = [*path[path.index(dep) :], dep]
                raise TraceError(
                    f"sessions[{index[node]}].depends_on[{k}]",
                    f"dependency cycle {' -> '.join(cycle)}",
                )
            if dep not in colour:
                colour[dep] = 1
                stack.append((dep, 0))


def _parse_trace(data: Any) -> _Trace:
    trace = _object(data, "trace", _TRACE_FIELDS)
    if "until" not in trace:
        raise TraceError("until", "required: the time at which the simulation stops")
    until = _seconds(trace["until"], "until")
    description = trace.get("description")
    if description is not None and not isinstance(description, str):
        raise TraceError("description", f"must be a string, got {_show(description)}")
    agents = _parse_agents(_list(trace, "agents", 'agents {"id", "slots"}'))
    group = agents[0].resource_group
    requests: list[_Request] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(_list(trace, "sessions", "session requests")):
        req = _parse_request(item, f"sessions[{i}]", group)
        if req.id in seen:
            raise TraceError(
                f"sessions[{i}].id", f"duplicate id {req.id!r} (also sessions[{seen[req.id]}])"
            )
        seen[req.id] = i
        requests.append(req)
    _check_dependencies(requests)
    scheduler = _object(trace.get("scheduler", {}), "scheduler", _SCHEDULER_FIELDS)
    defaults = SchedulerConfig()
    sequencer = _string(scheduler.get("sequencer", defaults.sequencer), "scheduler.sequencer")
    selector = _string(scheduler.get("selector", defaults.selector), "scheduler.selector")
    options = scheduler.get("options", {})
    if not isinstance(options, Mapping):
        raise TraceError("scheduler.options", f"must be a JSON object, got {_show(options)}")
    return _Trace(until, agents, requests, sequencer, selector, dict(options))


def _resolve_scheduler(
    trace: _Trace, overrides: Overrides
) -> tuple[SchedulerConfig, Sequencer, AgentSelector]:
    """The trace's scheduler choice with the overrides applied, checked and instantiated."""
    seq_path, sel_path = "scheduler.sequencer", "scheduler.selector"
    sequencer, selector = trace.sequencer, trace.selector
    if overrides.sequencer is not None:
        sequencer, seq_path = overrides.sequencer, "--sequencer"
    if overrides.selector is not None:
        selector, sel_path = overrides.selector, "--selector"
    for name, group, kind, path in (
        (sequencer, SEQUENCER_GROUP, "sequencer", seq_path),
        (selector, SELECTOR_GROUP, "agent selector", sel_path),
    ):
        names = available(group)
        if name not in names:
            raise TraceError(path, f"unknown {kind} {name!r} (available: {', '.join(names)})")
    options = dict(trace.options)
    paths = {key: f"scheduler.options.{key}" for key in options}
    for key, value in overrides.options.items():
        options[key], paths[key] = value, f"--option {key}"

    def build(chosen: Mapping[str, Any]) -> tuple[SchedulerConfig, Sequencer, AgentSelector]:
        config = SchedulerConfig.from_options(sequencer, selector, chosen)
        return (config, *load_plugins(config))

    # One option at a time first, so that an error points at the option that caused it.
    for key, value in options.items():
        try:
            build({key: value})
        except SchedulerConfigError as exc:
            raise TraceError(paths[key], str(exc)) from None
    try:
        return build(options)
    except SchedulerConfigError as exc:
        raise TraceError("scheduler", str(exc)) from None


def load_trace(path: str) -> Any:
    """Read a trace file (``-`` for stdin) as JSON; a problem is a :class:`TraceError`."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot read the trace: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(
            path, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


# ---------------------------------------------------------------------------
# The simulation


class _Simulation:
    """Simulated agents, the event heap and the counters a pass's snapshot needs."""

    def __init__(
        self,
        trace: _Trace,
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
        self.capacity = ResourceSlot._exact(
            {
                s: sum((a.capacity.get_amount(s) for a in self.agent_list), Decimal(0))
                for s in KNOWN_SLOTS
            }
        )
        self.requests = {req.id: req for req in trace.requests}
        self.order = [req.id for req in trace.requests if req.submit_at <= self.until]
        self.sessions: dict[str, Session] = {}
        #: Insertion-ordered, so building a pass's pending list is linear.
        self.pending: dict[str, Session] = {}
        #: (status, result) of every session of the trace, submitted or not.
        self.states: dict[str, tuple[Status, SessionResult]] = {
            req.id: (Status.PENDING, SessionResult.UNDEFINED) for req in trace.requests
        }
        # Per-owner counters kept incrementally (one group: held anywhere = held here).
        self.owner_sessions: dict[str, int] = {}
        self.owner_occupied: dict[str, ResourceSlot] = {}
        self.scheduled_at: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.heap: list[tuple[float, int, int, str]] = []
        self.seq = 0
        self.wakes: set[float] = set()
        self.now = 0.0
        # Time integrals, accumulated lazily at each change of what they integrate.
        submits = [self.requests[sid].submit_at for sid in self.order]
        self.start = min(submits, default=0.0)
        self.used: dict[str, Decimal] = {s: Decimal(0) for s in self.capacity}
        self.used_area: dict[str, float] = {s: 0.0 for s in self.capacity}
        self.used_since = self.start
        self.owners: dict[str, None] = {}  # first-appearance order
        self.share: dict[str, Decimal] = {}
        self.share_area: dict[str, float] = {}
        self.share_since: dict[str, float] = {}

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
        if req.owner not in self.owners:
            self.owners[req.owner] = None
            self.share[req.owner] = Decimal(0)
            self.share_area[req.owner] = 0.0
            self.share_since[req.owner] = self.start
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
        dependency_states = {dep: states[dep] for s in pending for dep in s.spec.depends_on}
        snapshot = Snapshot(
            agents=self.agent_list,
            pending=pending,
            dependency_states=dependency_states,
            owner_sessions=dict(self.owner_sessions),
            owner_occupied=dict(self.owner_occupied),
            owner_group_occupied=dict(self.owner_occupied),
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
        now, owner, whole = self.now, session.owner, session.spec.total_resources
        for slot, area in self.used_area.items():
            self.used_area[slot] = area + float(self.used[slot]) * (now - self.used_since)
        self.used_since = now
        held = self.owner_occupied.get(owner, ResourceSlot())
        held = held + whole if sign > 0 else held - whole
        self.owner_occupied[owner] = held
        self.owner_sessions[owner] = self.owner_sessions.get(owner, 0) + sign
        for slot in self.used:
            self.used[slot] += sign * whole.get_amount(slot)
        self.share_area[owner] += float(self.share[owner]) * (now - self.share_since[owner])
        self.share_since[owner] = now
        self.share[owner] = max(
            (
                amount / self.capacity[slot]
                for slot, amount in held.items()
                if slot in self.capacity
            ),
            default=Decimal(0),
        )

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
        running = any(s.status is Status.RUNNING for s in self.sessions.values())
        ended = [
            self.finished_at[s.id] for s in self.sessions.values() if s.status is Status.TERMINATED
        ]
        end = self.until if running else max(ended, default=self.start)
        length = end - self.start
        waits = sorted(w for row in rows if (w := row.wait) is not None)

        def ratio(area: float) -> float:
            return round(area / length, 4) if length > 0 else 0.0

        utilization = {
            slot: ratio(
                (self.used_area[slot] + float(self.used[slot]) * (end - self.used_since))
                / float(self.capacity[slot])
            )
            for slot in self.capacity
        }
        dominant = {
            owner: ratio(
                self.share_area[owner] + float(self.share[owner]) * (end - self.share_since[owner])
            )
            for owner in self.owners
        }
        metrics = Metrics(
            makespan=length,
            mean_wait=round(sum(waits) / len(waits), 4) if waits else 0.0,
            p95_wait=waits[math.ceil(0.95 * len(waits)) - 1] if waits else 0.0,
            utilization=utilization,
            dominant_share=dominant,
            dominant_share_at_until={o: round(float(self.share[o]), 4) for o in self.owners},
        )
        return SimulationResult(rows, metrics, self.until, (self.start, end), self.config)


def simulate(trace: Any, overrides: Overrides | None = None) -> SimulationResult:
    """Replay ``trace`` (parsed JSON) with the production scheduler; pure, no I/O.

    Raises :class:`TraceError` for a malformed trace or scheduler choice.
    """
    parsed = _parse_trace(trace)
    config, sequencer, selector = _resolve_scheduler(parsed, overrides or Overrides())
    simulation = _Simulation(parsed, config, sequencer, selector)
    simulation.run()
    return simulation.result()


# ---------------------------------------------------------------------------
# Output


def _num(value: float | None) -> int | float | None:
    """JSON numbers as a person wrote them: ``100`` rather than ``100.0``."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


def _time(value: float | None) -> str:
    if value is None:
        return "-"
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _info(row: SessionRow) -> str:
    if row.status is Status.PENDING:
        retries = row.status_data.get("scheduler", {}).get("retries", 0)
        return f"waiting, {retries} {'try' if retries == 1 else 'tries'}" if retries else "waiting"
    parts = [row.result.value] if row.result is not SessionResult.UNDEFINED else []
    if row.status_info:
        parts.append(row.status_info)
    return " ".join(parts) or "-"


def _shares(shares: Mapping[str, float]) -> str:
    return ", ".join(f"{owner} {share:.4f}" for owner, share in shares.items()) or "-"


def format_table(result: SimulationResult) -> str:
    """A fixed-width table of the sessions, why some wait or were cancelled, and the metrics."""
    headers = (
        "ID",
        "OWNER",
        "STATUS",
        "RESULT/INFO",
        "SUBMIT",
        "START",
        "FINISH",
        "WAIT",
        "AGENTS",
    )
    numeric = {4, 5, 6, 7}
    rows = [
        (
            row.id,
            row.owner,
            row.status.value,
            _info(row),
            _time(row.submit_at),
            _time(row.scheduled_at),
            _time(row.finished_at),
            _time(row.wait),
            ",".join(row.agents) or "-",
        )
        for row in result.sessions
    ]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [line(headers), *(line(r) for r in rows)]
    notes = [
        f"  {row.id}: {msg}"
        for row in result.sessions
        if row.status in (Status.PENDING, Status.CANCELLED)
        and (msg := row.status_data.get("scheduler", {}).get("msg"))
    ]
    if notes:
        out += ["", "why waiting or cancelled:", *notes]
    m, config = result.metrics, result.config
    options = ", ".join(f"{k}={v}" for k, v in _config_options(config).items())
    counts: dict[str, int] = {}
    for row in result.sessions:
        counts[row.status.value] = counts.get(row.status.value, 0) + 1
    start, end = result.window
    out += [
        "",
        f"scheduler        {config.sequencer} / {config.selector}"
        + (f" ({options})" if options else ""),
        f"sessions         {len(result.sessions)}"
        + (f" ({', '.join(f'{n} {s}' for s, n in counts.items())})" if counts else ""),
        f"makespan         {_time(m.makespan)} "
        f"(window {_time(start)} to {_time(end)}, until {_time(result.until)})",
        f"wait             mean {_time(m.mean_wait)}, p95 {_time(m.p95_wait)}",
        "utilization      " + (", ".join(f"{s} {u:.2%}" for s, u in m.utilization.items()) or "-"),
        f"dominant share   {_shares(m.dominant_share)} (time-average over the window)",
        f"                 {_shares(m.dominant_share_at_until)} (at until)",
    ]
    return "\n".join(out)


def _config_options(config: SchedulerConfig) -> dict[str, Any]:
    """The options in effect, plugin ones and common limits, for the summary line."""
    shown: dict[str, Any] = dict(config.options)
    if config.pending_timeout is not None:
        shown["pending_timeout"] = config.pending_timeout
    policy = config.default_policy
    if policy.max_concurrent_sessions is not None:
        shown["max_concurrent_sessions"] = policy.max_concurrent_sessions
    if policy.max_resources is not None:
        shown["max_resources"] = policy.max_resources.describe()
    return shown
