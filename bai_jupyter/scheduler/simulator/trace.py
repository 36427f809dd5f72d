"""Reading and checking a trace: one error that names the bad field's path.

Session fields that are fields of a session request (``resources``,
``cluster_size`` …) are checked by the request schema itself
(:func:`~bai_jupyter.request.parse_spec`), so a trace accepts exactly what the
REST API accepts; this module checks only what a trace adds (ids, owners,
times, agents, the scheduler section) and turns every problem into one
:class:`TraceError` whose ``path`` points into the trace
(``sessions[3].resources.mem``, ``agents[0].slots``, ``--option hol_max_wait``).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...model import Agent, SessionSpec
from ...plugins import PluginError, check_known
from ...request import SpecError, parse_spec
from ...request.parsers import nonempty_str, show
from ...request.schema import unknown_field
from ...resources import ResourceError, ResourceSlot, parse_amount
from ..config import SchedulerConfig, SchedulerConfigError
from ..plugins import SELECTOR_GROUP, SEQUENCER_GROUP, load_plugins
from ..selectors import AgentSelector
from ..sequencers import Sequencer

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
    "roles",
)
_REQUIRED_SESSION_FIELDS = {
    "id": "a unique session id",
    "submit_at": "the time of the request, in seconds",
    "resources": 'per-kernel slots, e.g. {"cpu": "1", "mem": "4g"}',
}
#: Session fields that are :class:`SessionSpec` fields, validated by :func:`parse_spec`.
_SPEC_FIELDS = (
    "resources",
    "cluster_size",
    "cluster_mode",
    "priority",
    "depends_on",
    "starts_at",
    "roles",
)


class TraceError(SpecError):
    """A malformed trace or scheduler choice; ``path`` points at the culprit.

    A :class:`~bai_jupyter.request.SpecError` whose ``field`` is a path into the
    trace, so whoever handles request errors handles these too.
    """

    @property
    def path(self) -> str:
        return self.field


@dataclass(frozen=True)
class Overrides:
    """Command-line choices that win over the trace's ``scheduler`` section."""

    sequencer: str | None = None
    selector: str | None = None
    #: Merged over the trace's options key by key (values may be strings).
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """One session of the trace: when it comes, how long it runs, how it ends."""

    id: str
    owner: str
    submit_at: float
    duration: float | None
    exit_code: int
    spec: SessionSpec


@dataclass(frozen=True)
class Trace:
    """A checked trace (one resource group); the scheduler choice is not resolved yet."""

    until: float
    agents: list[Agent]
    requests: list[Request]
    sequencer: str
    selector: str
    options: dict[str, Any]


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


def parse_trace(data: Any) -> Trace:
    """Check a parsed trace; every problem is one :class:`TraceError`."""
    try:
        return _parse_trace(data)
    except SpecError as exc:  # the request schema's errors already carry the full path
        raise TraceError(exc.field or "trace", exc.problem) from None


def resolve_scheduler(
    trace: Trace, overrides: Overrides
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
        try:
            check_known(group, name, kind)
        except PluginError as exc:
            raise TraceError(path, exc.message) from None
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


# ---------------------------------------------------------------------------
# The parts of a trace


def _object(value: Any, path: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    """A JSON object whose keys are all in ``fields`` (``path`` "" is the whole trace)."""
    if not isinstance(value, Mapping):
        raise SpecError(path or "trace", f"must be a JSON object, got {show(value)}")
    for key in value:
        if key not in fields:
            raise unknown_field(key, dict.fromkeys(fields), f"{path}." if path else "")
    return value


def _list(data: Mapping[str, Any], key: str, what: str) -> list[Any]:
    if key not in data:
        raise SpecError(key, f"required: a list of {what}")
    value = data[key]
    if not isinstance(value, list):
        raise SpecError(key, f"must be a list of {what}, got {show(value)}")
    return value


def _seconds(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(path, f"must be a number of seconds, got {show(value)}")
    if value < 0:
        raise SpecError(path, f"must not be negative, got {show(value)}")
    return float(value)


def _capacity(value: Any, path: str) -> ResourceSlot:
    """An agent's slots: amounts as in a request, but zero is allowed (the slot is absent)."""
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be a mapping of slot to amount, got {show(value)}")
    for slot, amount in value.items():
        try:
            parse_amount(slot, amount)
        except ResourceError as exc:
            raise SpecError(f"{path}.{slot}", str(exc).removeprefix(f"{slot}: ")) from None
    capacity = ResourceSlot(value)
    if not capacity:
        raise SpecError(path, "must give the agent some capacity")
    return capacity


def _parse_agents(items: list[Any]) -> list[Agent]:
    agents: list[Agent] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        path = f"agents[{i}]"
        data = _object(item, path, _AGENT_FIELDS)
        if "id" not in data:
            raise SpecError(f"{path}.id", "required: a unique agent id")
        agent_id = nonempty_str(data["id"], f"{path}.id")
        if agent_id in seen:
            raise SpecError(
                f"{path}.id", f"duplicate id {agent_id!r} (also agents[{seen[agent_id]}])"
            )
        seen[agent_id] = i
        if "slots" not in data:
            raise SpecError(f"{path}.slots", 'required: capacity, e.g. {"cpu": "8", "mem": "32g"}')
        capacity = _capacity(data["slots"], f"{path}.slots")
        group = nonempty_str(data.get("resource_group", "default"), f"{path}.resource_group")
        if agents and group != agents[0].resource_group:
            raise SpecError(
                f"{path}.resource_group",
                f"a trace simulates one resource group, but agents[0] is in "
                f"{agents[0].resource_group!r} and this agent in {group!r}",
            )
        agents.append(Agent(id=agent_id, capacity=capacity, resource_group=group))
    if not agents:
        raise SpecError("agents", "must list at least one agent")
    return agents


def _parse_request(item: Any, path: str, group: str) -> Request:
    data = _object(item, path, _SESSION_FIELDS)
    for required, what in _REQUIRED_SESSION_FIELDS.items():
        if data.get(required) is None:
            raise SpecError(f"{path}.{required}", f"required: {what}")
    session_id = nonempty_str(data["id"], f"{path}.id")
    owner = nonempty_str(data.get("owner", "user"), f"{path}.owner")
    submit_at = _seconds(data["submit_at"], f"{path}.submit_at")
    duration = data.get("duration")
    if duration is not None:
        duration = _seconds(duration, f"{path}.duration")
    exit_code = data.get("exit_code", 0)
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        raise SpecError(f"{path}.exit_code", f"must be an integer, got {show(exit_code)}")
    try:
        spec = parse_spec({key: data[key] for key in _SPEC_FIELDS if key in data})
    except SpecError as exc:  # its path is relative to the session
        raise SpecError(f"{path}.{exc.field}" if exc.field else path, exc.problem) from None
    spec.resource_group = group
    return Request(session_id, owner, submit_at, duration, exit_code, spec)


def _check_dependencies(requests: list[Request]) -> None:
    """Every dependency names a session of the trace, and there is no cycle."""
    index = {req.id: i for i, req in enumerate(requests)}
    for i, req in enumerate(requests):
        for j, dep in enumerate(req.spec.depends_on):
            if dep not in index:
                raise SpecError(f"sessions[{i}].depends_on[{j}]", f"unknown session id {dep!r}")
            if dep == req.id:
                raise SpecError(
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
                raise SpecError(
                    f"sessions[{index[node]}].depends_on[{k}]",
                    f"dependency cycle {' -> '.join(cycle)}",
                )
            if dep not in colour:
                colour[dep] = 1
                stack.append((dep, 0))


def _parse_trace(data: Any) -> Trace:
    trace = _object(data, "", _TRACE_FIELDS)
    if "until" not in trace:
        raise SpecError("until", "required: the time at which the simulation stops")
    until = _seconds(trace["until"], "until")
    description = trace.get("description")
    if description is not None and not isinstance(description, str):
        raise SpecError("description", f"must be a string, got {show(description)}")
    agents = _parse_agents(_list(trace, "agents", 'agents {"id", "slots"}'))
    group = agents[0].resource_group
    requests: list[Request] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(_list(trace, "sessions", "session requests")):
        req = _parse_request(item, f"sessions[{i}]", group)
        if req.id in seen:
            raise SpecError(
                f"sessions[{i}].id", f"duplicate id {req.id!r} (also sessions[{seen[req.id]}])"
            )
        seen[req.id] = i
        requests.append(req)
    _check_dependencies(requests)
    scheduler = _object(trace.get("scheduler", {}), "scheduler", _SCHEDULER_FIELDS)
    defaults = SchedulerConfig()
    sequencer = nonempty_str(scheduler.get("sequencer", defaults.sequencer), "scheduler.sequencer")
    selector = nonempty_str(scheduler.get("selector", defaults.selector), "scheduler.selector")
    options = scheduler.get("options", {})
    if not isinstance(options, Mapping):
        raise SpecError("scheduler.options", f"must be a JSON object, got {show(options)}")
    return Trace(until, agents, requests, sequencer, selector, dict(options))
