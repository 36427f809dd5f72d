"""What an endpoint is: a name, the request its replicas are made from, health and scaling.

An endpoint routes ``/bai/endpoints/<name>/…`` to the inference service of its
replica sessions. The request is kept as JSON (as the user wrote it), so a
change of it is a new *generation*, rolled out replica by replica; the scaling
rule may change without touching a replica.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..model import SessionType
from ..request import SpecError, parse_spec
from ..request.parsers import mapping_of, parse_name, show

__all__ = [
    "ENDPOINT_KEYS",
    "METRICS",
    "Decision",
    "Endpoint",
    "EndpointSpec",
    "Scaling",
    "merge_patch",
    "parse_endpoint",
    "parse_update",
]

#: What the load target counts: requests in flight per replica, or requests per second.
METRICS = ("inflight", "rps")
MAX_REPLICAS = 32
#: Decisions kept in the endpoint's record (the newest).
DECISIONS_KEPT = 50
ENDPOINT_KEYS = ("name", "replica", "service", "health_path", "health_interval", "scaling")
_SCALING_KEYS = ("min_replicas", "max_replicas", "metric", "target", "window")


@dataclass(frozen=True)
class Scaling:
    """Between ``min_replicas`` and ``max_replicas``, about ``target`` load per replica.

    The load is ``metric`` averaged over the last ``window`` seconds; replicas are
    added at once, and removed one per ``window`` while fewer would do.
    """

    min_replicas: int = 1
    max_replicas: int = 1
    metric: str = "inflight"
    target: float = 4.0
    window: float = 30.0

    def to_json(self) -> dict[str, Any]:
        return {
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "metric": self.metric,
            "target": self.target,
            "window": self.window,
        }


@dataclass(frozen=True)
class EndpointSpec:
    """What the owner asked for (all of it can change with an update)."""

    #: The session request of each replica (type ``inference``), as JSON.
    replica: dict[str, Any]
    #: The replicas' service port the endpoint routes to.
    service: str
    health_path: str = "/"
    health_interval: float = 5.0
    scaling: Scaling = Scaling()

    def to_json(self) -> dict[str, Any]:
        return {
            "replica": copy.deepcopy(self.replica),
            "service": self.service,
            "health_path": self.health_path,
            "health_interval": self.health_interval,
            "scaling": self.scaling.to_json(),
        }


@dataclass(frozen=True)
class Decision:
    """One change of the replica count or of the replicas, and why."""

    at: float
    replicas_from: int
    replicas_to: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "from": self.replicas_from, "to": self.replicas_to,
                "reason": self.reason}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(float(data["at"]), int(data["from"]), int(data["to"]), str(data["reason"]))


@dataclass
class Endpoint:
    """An endpoint's record: its spec, the generation of its replicas, the count it aims at."""

    id: str
    name: str
    owner: str
    spec: EndpointSpec
    created_at: float
    #: Bumped by every change of the replica request; replicas of older ones are replaced.
    generation: int = 1
    #: How many replicas the scaling rule wants now.
    desired: int = 1
    decisions: list[Decision] = field(default_factory=list)
    #: The last rolling update: ``{"state": "rolling" | "failed", "generation", "from",
    #: "since", "reason"}``; while rolling, ``previous`` keeps the replica request and
    #: service of generation ``from``, restored if the rollout gives up. None: none yet,
    #: or the last one completed.
    rollout: dict[str, Any] | None = None

    def begin_rollout(self, at: float) -> None:
        """A new replica request: a new generation (above any a failed rollout used),
        rolled out from the one that serves (an unfinished rollout's starting point)."""
        rolling = self.rollout if self.rollout and self.rollout["state"] == "rolling" else None
        failed = int(self.rollout["generation"]) if self.rollout else 0
        start = self.generation
        previous = {"replica": copy.deepcopy(self.spec.replica), "service": self.spec.service}
        if rolling is not None:
            start, previous = int(rolling["from"]), rolling["previous"]
        self.generation = max(self.generation, failed) + 1
        self.rollout = {"state": "rolling", "generation": self.generation, "from": start,
                        "since": at, "reason": None, "previous": previous}  # fmt: skip

    def give_up_rollout(self, at: float, reason: str) -> None:
        """Back to the generation the rollout started from (its replica request and
        service), the rollout marked failed with ``reason``."""
        assert self.rollout is not None and self.rollout["state"] == "rolling"
        rollout = self.rollout
        previous = rollout["previous"]
        self.spec = replace(self.spec, replica=previous["replica"], service=previous["service"])
        self.generation = int(rollout["from"])
        self.rollout = {"state": "failed", "generation": rollout["generation"],
                        "from": rollout["from"], "since": rollout["since"], "at": at,
                        "reason": reason}  # fmt: skip

    def end_rollout(self, generation: int, done: bool, reason: str, at: float) -> None:
        """The rolling update to ``generation`` is done, or given up (back to the
        generation it rolled from); a decision says ``reason``. Nothing if another
        update came meanwhile."""
        if not (self.rollout and self.rollout["generation"] == generation):
            return
        if done:
            self.rollout = None
        else:
            self.give_up_rollout(at, reason)
        self.decide(at, self.desired, reason)

    def decide(self, at: float, to: int, reason: str) -> None:
        """Record a decision (and move ``desired`` to ``to``)."""
        self.decisions.append(Decision(at, self.desired, to, reason))
        del self.decisions[:-DECISIONS_KEPT]
        self.desired = to

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "owner": self.owner,
            "spec": self.spec.to_json(),
            "created_at": self.created_at,
            "generation": self.generation,
            "desired": self.desired,
            "decisions": [d.to_json() for d in self.decisions],
            "rollout": copy.deepcopy(self.rollout),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Endpoint:
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            owner=str(data["owner"]),
            spec=_spec(data["spec"], "spec"),
            created_at=float(data["created_at"]),
            generation=int(data["generation"]),
            desired=int(data["desired"]),
            decisions=[Decision.from_json(d) for d in data.get("decisions") or []],
            rollout=dict(data["rollout"]) if data.get("rollout") else None,
        )


# --- parsing --------------------------------------------------------------------------------


def _number(value: Any, path: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(path, f"must be a number, got {show(value)}")
    if not (math.isfinite(value) and low <= value <= high):
        raise SpecError(path, f"must be from {low:g} to {high:g}, got {show(value)}")
    return float(value)


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPLICAS:
        raise SpecError(path, f"must be an integer from 1 to {MAX_REPLICAS}, got {show(value)}")
    return value


def _known(data: Mapping[str, Any], keys: tuple[str, ...], path: str) -> None:
    for key in data:
        if key not in keys:
            where = f"{path}.{key}" if path else key
            raise SpecError(where, f"unknown field; known fields: {', '.join(keys)}")


def _scaling(value: Any, base: Scaling, path: str = "scaling") -> Scaling:
    data = mapping_of(value, path, "an object such as {'min_replicas': 1, 'max_replicas': 4}")
    _known(data, _SCALING_KEYS, path)
    scaling = base
    if "min_replicas" in data:
        scaling = replace(
            scaling, min_replicas=_count(data["min_replicas"], f"{path}.min_replicas")
        )
    if "max_replicas" in data:
        scaling = replace(
            scaling, max_replicas=_count(data["max_replicas"], f"{path}.max_replicas")
        )
    elif "min_replicas" in data and scaling.max_replicas < scaling.min_replicas:
        scaling = replace(scaling, max_replicas=scaling.min_replicas)
    if scaling.max_replicas < scaling.min_replicas:
        raise SpecError(
            f"{path}.max_replicas",
            f"must be at least min_replicas ({scaling.min_replicas}), got {scaling.max_replicas}",
        )
    if "metric" in data:
        if data["metric"] not in METRICS:
            raise SpecError(
                f"{path}.metric",
                f"must be one of {', '.join(METRICS)} (requests in flight per replica, or "
                f"requests per second per replica), got {show(data['metric'])}",
            )
        scaling = replace(scaling, metric=str(data["metric"]))
    if "target" in data:
        scaling = replace(scaling, target=_number(data["target"], f"{path}.target", 0.01, 1e6))
    if "window" in data:
        scaling = replace(scaling, window=_number(data["window"], f"{path}.window", 1, 3600))
    return scaling


def _replica(value: Any, path: str = "replica") -> dict[str, Any]:
    """The replica request, checked as a session request of type inference."""
    data = dict(mapping_of(value, path, "a session request object (image, resources, …)"))
    if data.get("type", "inference") != "inference":
        raise SpecError(
            f"{path}.type", f"replicas are inference sessions, got {show(data['type'])}"
        )
    data["type"] = SessionType.INFERENCE.value
    for key in ("name", "depends_on", "starts_at"):
        if data.get(key) is not None:
            raise SpecError(f"{path}.{key}", "the endpoint names and starts its replicas itself")
    try:
        parse_spec(data)
    except SpecError as exc:
        raise SpecError(f"{path}.{exc.field}" if exc.field else path, exc.problem) from None
    return data


def merge_patch(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` over ``base`` key by key (JSON Merge Patch, RFC 7396): an object merges
    into the object it replaces (``env``, ``resources``), ``null`` removes a key, anything
    else (a list too) replaces the value."""
    merged = copy.deepcopy(dict(base))
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _proxied(replica: Mapping[str, Any]) -> list[str]:
    """The replica request's HTTP service ports, by name."""
    return [s.name for s in parse_spec(replica).services if s.proxied]


def _service(replica: Mapping[str, Any], value: Any, path: str) -> str:
    """The routed service: named, or the replica request's only HTTP one."""
    proxied = _proxied(replica)
    if value is None:
        if len(proxied) != 1:
            raise SpecError(
                path,
                "name the service port to route to "
                f"(the replica's HTTP service ports: {', '.join(proxied) or 'none'}; declare "
                "one in replica.service_ports, e.g. 'model:http:8000')",
            )
        return proxied[0]
    if value not in proxied:
        raise SpecError(
            path,
            f"{show(value)} is not an HTTP service port of the replica "
            f"(its HTTP service ports: {', '.join(proxied) or 'none'})",
        )
    return str(value)


def _health_path(value: Any, path: str) -> str:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or len(value) > 1024
        or any(c.isspace() or ord(c) < 32 for c in value)
    ):
        raise SpecError(path, f"must be a URL path starting with '/', got {show(value)}")
    return value


def _spec(data: Any, path: str = "", base: EndpointSpec | None = None) -> EndpointSpec:
    """An endpoint spec from JSON, over ``base`` (an update) or the defaults."""
    data = mapping_of(data, path or "body", "a JSON object")
    prefix = f"{path}." if path else ""
    if base is None and "replica" not in data:
        raise SpecError(f"{prefix}replica", "required: the session request of each replica")
    replica: dict[str, Any] | None = None
    if "replica" in data:
        given = data["replica"]
        if base is not None:  # an update: merged over the replica request it changes
            given = merge_patch(
                base.replica, mapping_of(given, f"{prefix}replica", "an object of the fields")
            )
        replica = _replica(given, f"{prefix}replica")
    if replica is None:
        assert base is not None
        replica = base.replica
    service_given = data.get("service")
    if "service" not in data and base is not None and base.service in _proxied(replica):
        service_given = base.service  # the routed port stays while the replica still has it
    return EndpointSpec(
        replica=replica,
        service=_service(replica, service_given, f"{prefix}service"),
        health_path=_health_path(data["health_path"], f"{prefix}health_path")
        if "health_path" in data
        else (base.health_path if base else "/"),
        health_interval=_number(data["health_interval"], f"{prefix}health_interval", 0.5, 300)
        if "health_interval" in data
        else (base.health_interval if base else 5.0),
        scaling=_scaling(data["scaling"], base.scaling if base else Scaling(), f"{prefix}scaling")
        if "scaling" in data
        else (base.scaling if base else Scaling()),
    )


def parse_endpoint(data: Any) -> tuple[str, EndpointSpec]:
    """A new endpoint's name and spec from the request body; SpecError names the field."""
    body = mapping_of(data, "body", "a JSON object")
    _known(body, ENDPOINT_KEYS, "")
    name = parse_name(body.get("name"), "name")
    return name, _spec({k: v for k, v in body.items() if k != "name"})


def parse_update(data: Any, base: EndpointSpec) -> EndpointSpec:
    """An endpoint's spec after an update: fields left out stay; ``scaling`` and
    ``replica`` merge key by key (``replica`` as a JSON merge patch: ``null`` removes a
    key; a changed ``replica`` is a new generation); ``service`` stays while the merged
    replica still has it."""
    body = mapping_of(data, "body", "a JSON object")
    _known(body, tuple(k for k in ENDPOINT_KEYS if k != "name"), "")
    return _spec(body, "", base)
