"""The schema of a session request, its validation, and templates merged under it.

A request (REST body, ``%bai`` options, kernelspec metadata) and a stored
template share one JSON shape. :data:`FIELDS` is the single table that parses
and documents that shape, so the docs (:func:`field_help`) and the validation
cannot drift apart.

``null`` means "not set" at every level: a top-level field that is ``null``
takes the :class:`~bai_jupyter.model.SessionSpec` default, and a ``null``
entry inside ``env`` or ``resources`` is dropped. Together with :func:`merge`,
where a ``null`` in the request replaces the template's value, this lets a
request clear what a template set (``{"env": {"DEBUG": null}}``).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from types import MappingProxyType
from typing import Any, TypeVar

from .cluster import SSH_PORT
from .model import ClusterMode, SessionSpec, SessionType
from .resources import KNOWN_SLOTS, ResourceError, ResourceSlot, SlotKind, parse_amount

__all__ = [
    "FIELDS",
    "IMAGE_RE",
    "NAME_RE",
    "RESERVED_PORTS",
    "SpecError",
    "SpecField",
    "Template",
    "apply_template",
    "field_help",
    "merge",
    "parse_service_ports",
    "parse_spec",
    "spec_to_json",
    "validate_partial",
]

#: Session and template names (use with ``fullmatch``).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SERVICE_NAME_RE = re.compile(r"[a-z][a-z0-9-]*")
SERVICE_PROTOCOLS = ("http", "tcp", "preopen")
MAX_CLUSTER_SIZE = 64
MAX_PRIORITY = 100

# Bounds a new request must keep (``bounded`` parsing). Records stored before a bound
# existed still load: the store and the API's client parse with ``bounded=False``.
#: 9999-12-31T23:59:59Z: the last second ``datetime`` can show.
MAX_TIMESTAMP = 253402300799
MAX_BATCH_TIMEOUT = 366 * 86400
MAX_COUNT = 2**20  # cpus, devices
MAX_BYTES = 2**60  # memory
MAX_DECIMALS = 3  # cpu 0.001 at the finest (Docker's NanoCpus would truncate finer ones)
MAX_DEPENDS_ON = 64
MAX_ENV = 256
MAX_ENV_BYTES = 64 * 1024  # all names and values together
MAX_COMMAND = 64 * 1024
MAX_MOUNTS = 64
MAX_SERVICE_PORTS = 32
MAX_TEXT = 4096  # image, resource group, a mount entry, a template description
#: Ports of main1 our runtime uses itself: sshd, and the Jupyter kernel's five channels
#: (``agents.docker.JUPYTER_PORTS``). A service port there could never start.
RESERVED_PORTS = frozenset({SSH_PORT, *range(2300, 2305)})
#: A Docker image reference (distribution/reference grammar): [host[:port]/]path[:tag][@digest].
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)

_E = TypeVar("_E", bound=Enum)


class SpecError(ValueError):
    """A wrong field in a request or template; the message says what to fix.

    ``field`` is the dotted path (``resources.mem``, ``env.FOO``,
    ``spec.cluster_size``, ``service_ports[1]``) so a front end can point at it;
    it is ``""`` when the whole document is wrong.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class SpecField:
    """One row of the schema: how to parse a field's JSON value, and its doc line.

    ``bound`` checks a new request's value (already parsed successfully) against the
    limits that keep one request from hurting others: sizes, ranges, reserved ports.
    """

    parse: Callable[[Any, str], Any]
    help: str
    bound: Callable[[Any, str], None] | None = None


# ---------------------------------------------------------------------------
# Field parsers: (JSON value, dotted path) → SessionSpec value; never see None.


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nonempty_str(value: Any, path: str, what: str = "a non-empty string") -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(path, f"must be {what}, got {_show(value)}")
    return value


def _mapping(value: Any, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be {what}, got {_show(value)}")
    for key in value:
        if not isinstance(key, str):
            raise SpecError(f"{path}.{key}", f"keys of {path} must be strings, got {_show(key)}")
    return value


def _list(value: Any, path: str, what: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(path, f"must be a list of {what}, got {_show(value)}")
    return list(value)


def _parse_image(value: Any, path: str) -> str:
    return _nonempty_str(value, path, "an image reference such as 'python:3.12'")


def _parse_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or NAME_RE.fullmatch(value) is None:
        raise SpecError(
            path,
            "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit, got {_show(value)}",
        )
    return value


def _enum_parser(enum: type[_E]) -> Callable[[Any, str], _E]:
    values = [str(member.value) for member in enum]

    def parse(value: Any, path: str) -> _E:
        if not isinstance(value, str) or value not in values:
            raise SpecError(path, f"must be one of {', '.join(values)}, got {_show(value)}")
        return enum(value)

    return parse


def _int_parser(low: int, high: int) -> Callable[[Any, str], int]:
    def parse(value: Any, path: str) -> int:
        if not _is_int(value) or not low <= value <= high:
            raise SpecError(path, f"must be an integer from {low} to {high}, got {_show(value)}")
        return int(value)

    return parse


def _parse_resources(value: Any, path: str) -> ResourceSlot:
    mapping = _mapping(value, path, 'a mapping of slot to amount, e.g. {"cpu": 2, "mem": "4g"}')
    amounts: dict[str, str | int | float] = {}
    for slot, amount in mapping.items():
        if amount is None:
            continue
        if isinstance(amount, Decimal):
            amount = f"{amount:f}"
        try:
            parsed = parse_amount(slot, amount)
        except ResourceError as exc:
            problem = str(exc).removeprefix(f"{slot}: ")
            raise SpecError(f"{path}.{slot}", problem) from exc
        if not parsed and slot in _NEVER_ZERO:
            # Zero would read as "unlimited" to Docker: leave the slot out for the default.
            raise SpecError(
                f"{path}.{slot}",
                f"must be more than 0, got {_show(amount)}; leave it out (or null) to get "
                "the resource group's default",
            )
        amounts[slot] = amount
    return ResourceSlot(amounts)


#: Slots a session always holds (the resource group's default fills them in).
_NEVER_ZERO = frozenset({"cpu", "mem"})


def _bound_resources(value: Any, path: str) -> None:
    for slot, amount in value.items():
        if amount is None:
            continue
        if isinstance(amount, Decimal):
            amount = f"{amount:f}"
        parsed = parse_amount(slot, amount)
        where = f"{path}.{slot}"
        if KNOWN_SLOTS[slot] is SlotKind.BYTES:
            if parsed > MAX_BYTES:
                raise SpecError(where, f"must be at most 2^60 bytes (1e), got {_show(amount)}")
            continue
        if parsed > MAX_COUNT:
            raise SpecError(where, f"must be at most {MAX_COUNT}, got {_show(amount)}")
        exponent = parsed.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -MAX_DECIMALS:
            raise SpecError(where, f"may have at most {MAX_DECIMALS} decimals, got {_show(amount)}")


def _parse_resource_group(value: Any, path: str) -> str:
    return _nonempty_str(value, path, "a non-empty resource group name")


def _parse_depends_on(value: Any, path: str) -> list[str]:
    """Session ids or names, each once (a repeat is dropped; the order is kept)."""
    items = _list(value, path, "session ids or names")
    names = [
        _nonempty_str(item, f"{path}[{i}]", "a session id or name") for i, item in enumerate(items)
    ]
    return list(dict.fromkeys(names))


def _bound_count(most: int, what: str) -> Callable[[Any, str], None]:
    def bound(value: Any, path: str) -> None:
        if len(value) > most:
            raise SpecError(path, f"may list at most {most} {what}, got {len(value)}")

    return bound


def _bound_text(most: int) -> Callable[[Any, str], None]:
    def bound(value: Any, path: str) -> None:
        if len(value) > most:
            raise SpecError(path, f"may be at most {most} characters long, got {len(value)}")

    return bound


def _bound_image(value: Any, path: str) -> None:
    if len(value) > 255 or IMAGE_RE.fullmatch(value) is None:
        raise SpecError(
            path,
            "is not a valid image reference: [registry/]name[:tag][@digest], lowercase "
            f"name parts, at most 255 characters (e.g. 'python:3.12'), got {_show(value)}",
        )


def _finite(value: Any) -> float | None:
    """``value`` as a finite float; None for non-numbers, NaN, ±inf and ints beyond floats."""
    if not _is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _parse_timestamp(value: Any, path: str) -> float:
    number = _finite(value)
    if number is None:
        raise SpecError(path, f"must be a time in seconds since the epoch, got {_show(value)}")
    return number


def _bound_timestamp(value: Any, path: str) -> None:
    if not 0 <= value <= MAX_TIMESTAMP:
        raise SpecError(
            path,
            f"must be from 0 to {MAX_TIMESTAMP} (9999-12-31) seconds since the epoch, "
            f"got {_show(value)}",
        )


def _parse_command(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SpecError(path, f"must be a shell command string, got {_show(value)}")
    return value


def _parse_timeout(value: Any, path: str) -> float:
    number = _finite(value)
    if number is None or number <= 0:
        raise SpecError(path, f"must be a number of seconds greater than 0, got {_show(value)}")
    return number


def _bound_timeout(value: Any, path: str) -> None:
    if not value <= MAX_BATCH_TIMEOUT:
        raise SpecError(
            path, f"must be at most {MAX_BATCH_TIMEOUT} seconds (366 days), got {_show(value)}"
        )


def _parse_env(value: Any, path: str) -> dict[str, str]:
    mapping = _mapping(value, path, 'a mapping of variable name to string, e.g. {"FOO": "1"}')
    env: dict[str, str] = {}
    for key, item in mapping.items():
        where = f"{path}.{key}"
        if _ENV_KEY_RE.fullmatch(key) is None:
            raise SpecError(
                where,
                "is not a valid variable name: use letters, digits and '_', not starting "
                "with a digit",
            )
        if item is None:
            continue
        if not isinstance(item, str):
            raise SpecError(where, f"must be a string (quote numbers), got {_show(item)}")
        env[key] = item
    return env


def _bound_env(value: Any, path: str) -> None:
    if len(value) > MAX_ENV:
        raise SpecError(path, f"may set at most {MAX_ENV} variables, got {len(value)}")
    size = sum(len(key) + len(item or "") for key, item in value.items())
    if size > MAX_ENV_BYTES:
        raise SpecError(
            path, f"names and values may total at most {MAX_ENV_BYTES} characters, got {size}"
        )


def _bound_mounts(value: Any, path: str) -> None:
    _bound_count(MAX_MOUNTS, "data folders")(value, path)
    for i, item in enumerate(value):
        _bound_text(MAX_TEXT)(item, f"{path}[{i}]")


def _parse_mounts(value: Any, path: str) -> list[str]:
    items = _list(value, path, "data folder names")
    return [
        _nonempty_str(item, f"{path}[{i}]", "a data folder name") for i, item in enumerate(items)
    ]


def _parse_service_port(value: Any, path: str) -> str:
    shape = f"must be 'name:proto:port' with proto one of {', '.join(SERVICE_PROTOCOLS)}"
    if not isinstance(value, str) or value.count(":") != 2:
        raise SpecError(path, f"{shape}, e.g. 'tensorboard:http:6006', got {_show(value)}")
    name, proto, port = value.split(":")
    if _SERVICE_NAME_RE.fullmatch(name) is None:
        raise SpecError(
            path, f"service name must be lowercase letters, digits and '-', got {_show(name)}"
        )
    if proto not in SERVICE_PROTOCOLS:
        raise SpecError(path, f"{shape}, got protocol {_show(proto)}")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise SpecError(path, f"port must be an integer from 1 to 65535, got {_show(port)}")
    return f"{name}:{proto}:{int(port)}"


def _parse_service_ports(value: Any, path: str) -> list[str]:
    ports: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(_list(value, path, "'name:proto:port' strings")):
        port = _parse_service_port(item, f"{path}[{i}]")
        name = port.split(":", 1)[0]
        if name in seen:
            raise SpecError(f"{path}[{i}]", f"service {name!r} is declared twice")
        seen.add(name)
        ports.append(port)
    return ports


def _bound_service_ports(value: Any, path: str) -> None:
    _bound_count(MAX_SERVICE_PORTS, "service ports")(value, path)
    for i, item in enumerate(value):
        port = int(item.rsplit(":", 1)[1])
        if port in RESERVED_PORTS:
            raise SpecError(
                f"{path}[{i}]",
                f"port {port} is reserved in every kernel (sshd 2200, the Jupyter kernel "
                "2300-2304): use another port",
            )


def parse_service_ports(value: Any, path: str = "service_ports") -> list[str]:
    """Service ports checked as a request's ``service_ports`` (shape, reserved ports, count).

    For front ends that take ports outside a request (the CLI, ``%bai ports add``)."""
    ports = _parse_service_ports(value, path)
    _bound_service_ports(ports, path)
    return ports


#: The schema of a session request, in :class:`SessionSpec` field order.
FIELDS: Mapping[str, SpecField] = MappingProxyType(
    {
        "image": SpecField(
            _parse_image, "container image to run, e.g. 'python:3.12'", _bound_image
        ),
        "name": SpecField(_parse_name, "session name, unique per owner: 1-64 of [A-Za-z0-9._-]"),
        "type": SpecField(
            _enum_parser(SessionType),
            f"session type: {', '.join(t.value for t in SessionType)}",
        ),
        "resources": SpecField(
            _parse_resources,
            'per-kernel resource slots, e.g. {"cpu": 2, "mem": "4g"}; a slot left out takes '
            "the resource group's default",
            _bound_resources,
        ),
        "cluster_size": SpecField(
            _int_parser(1, MAX_CLUSTER_SIZE),
            f"number of kernels (main1, sub1 …), 1 to {MAX_CLUSTER_SIZE}",
        ),
        "cluster_mode": SpecField(
            _enum_parser(ClusterMode),
            f"kernel placement: {', '.join(m.value for m in ClusterMode)}",
        ),
        "resource_group": SpecField(
            _parse_resource_group,
            "resource group whose agents run the session",
            _bound_text(MAX_TEXT),
        ),
        "priority": SpecField(
            _int_parser(0, MAX_PRIORITY),
            f"scheduling priority, 0 to {MAX_PRIORITY}; higher is scheduled first",
        ),
        "depends_on": SpecField(
            _parse_depends_on,
            f"session ids or names that must finish successfully before this one starts "
            f"(at most {MAX_DEPENDS_ON}; repeats are dropped)",
            _bound_count(MAX_DEPENDS_ON, "sessions"),
        ),
        "starts_at": SpecField(
            _parse_timestamp,
            "do not start before this time (seconds since the epoch, at most 9999-12-31)",
            _bound_timestamp,
        ),
        "startup_command": SpecField(
            _parse_command,
            f"command run in main1; required for batch sessions (at most {MAX_COMMAND} characters)",
            _bound_text(MAX_COMMAND),
        ),
        "batch_timeout": SpecField(
            _parse_timeout,
            "seconds a batch session may run before it is stopped (batch only; at most 366 days)",
            _bound_timeout,
        ),
        "env": SpecField(
            _parse_env,
            f"extra environment variables for every kernel (at most {MAX_ENV}, "
            f"{MAX_ENV_BYTES} characters in all)",
            _bound_env,
        ),
        "mounts": SpecField(
            _parse_mounts,
            f"data folders mounted into every kernel (at most {MAX_MOUNTS})",
            _bound_mounts,
        ),
        "service_ports": SpecField(
            _parse_service_ports,
            f"extra service ports of main1, 'name:proto:port' "
            f"(proto: {', '.join(SERVICE_PROTOCOLS)}; ports 2200 and 2300-2304 are reserved)",
            _bound_service_ports,
        ),
    }
)


def _to_json(value: Any) -> Any:
    if isinstance(value, ResourceSlot):
        return value.to_json()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def spec_to_json(spec: SessionSpec) -> dict[str, Any]:
    """The JSON form of ``spec`` (every field); :func:`parse_spec` reads it back equal."""
    return {name: _to_json(getattr(spec, name)) for name in FIELDS}


def field_help() -> dict[str, str]:
    """Field name → one doc line with its default, for docs, CLI and UI."""
    defaults = spec_to_json(SessionSpec())
    return {
        name: f"{row.help} (default: {json.dumps(defaults[name], ensure_ascii=False)})"
        for name, row in FIELDS.items()
    }


def _unknown_field(key: object, known: Mapping[str, object], prefix: str) -> SpecError:
    close = difflib.get_close_matches(str(key), list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return SpecError(f"{prefix}{key}", f"unknown field; {hint}known fields: {', '.join(known)}")


def _parse_fields(data: Any, prefix: str, bounded: bool = True) -> dict[str, Any]:
    """Parse each present, non-null field on its own (no cross-field rules).

    ``bounded`` also applies each field's bounds (new requests and templates)."""
    if not isinstance(data, Mapping):
        where = prefix.rstrip(".")
        raise SpecError(where, f"must be a JSON object of session fields, got {_show(data)}")
    parsed: dict[str, Any] = {}
    for key, value in data.items():
        row = FIELDS.get(key) if isinstance(key, str) else None
        if row is None:
            raise _unknown_field(key, FIELDS, prefix)
        if value is not None:
            parsed[key] = row.parse(value, f"{prefix}{key}")
            if bounded and row.bound is not None:
                row.bound(value, f"{prefix}{key}")
    return parsed


def parse_spec(data: Mapping[str, Any], bounded: bool = True) -> SessionSpec:
    """Validate a JSON-like request into a :class:`SessionSpec`, or raise :class:`SpecError`.

    Absent or ``null`` fields take the :class:`SessionSpec` default. ``bounded=False``
    skips the limits on sizes and ranges, for records stored before a limit existed.
    """
    spec = SessionSpec(**_parse_fields(data, "", bounded))
    if spec.type is SessionType.BATCH and not (spec.startup_command or "").strip():
        raise SpecError(
            "startup_command", "required when type is batch: give the command to run in main1"
        )
    if spec.batch_timeout is not None and spec.type is not SessionType.BATCH:
        raise SpecError(
            "batch_timeout", f"only allowed when type is batch, got type {spec.type.value}"
        )
    return spec


def validate_partial(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Check each field of a partial request (a template) on its own; return a copy.

    Cross-field rules are left to :func:`parse_spec`, because a template may
    leave a required field (e.g. a batch ``startup_command``) to the request.
    """
    _parse_fields(data, prefix)
    return copy.deepcopy(dict(data))


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` (a request) over ``base`` (a template) into a new dict.

    Where both sides hold a mapping (``env``, ``resources``) they merge key by
    key, recursively; anything else, lists included, is replaced by the
    override's value. A ``None`` in the override is a value like any other: it
    replaces, even a mapping, so a request can clear a template's setting (see
    the module docs for what ``null`` then means). Neither input is mutated and
    the result shares no mutable part with them.
    """
    result: dict[str, Any] = {}
    for key, value in base.items():
        if key not in override:
            result[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(override[key], Mapping):
            result[key] = merge(value, override[key])
        else:
            result[key] = copy.deepcopy(override[key])
    for key, value in override.items():
        if key not in result:
            result[key] = copy.deepcopy(value)
    return result


_TEMPLATE_KEYS: Mapping[str, None] = dict.fromkeys(("name", "spec", "description", "owner"))


@dataclass
class Template:
    """Named, stored defaults for creating a session; a request's fields override them.

    ``spec`` is a partial request in JSON form, each field valid on its own;
    ``owner`` ``None`` means the template is shared by all users.
    """

    name: str
    spec: dict[str, Any]
    description: str = ""
    owner: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Template:
        """Validate a stored or posted template; errors name ``spec.<field>``."""
        if not isinstance(data, Mapping):
            raise SpecError("", f"a template must be a JSON object, got {_show(data)}")
        for key in data:
            if key not in _TEMPLATE_KEYS:
                raise _unknown_field(key, _TEMPLATE_KEYS, "")
        if data.get("name") is None:
            raise SpecError("name", "required: give the template a name")
        name = _parse_name(data["name"], "name")
        raw_spec = data.get("spec")
        spec = validate_partial({} if raw_spec is None else raw_spec, "spec.")
        description = data.get("description")
        if description is None:
            description = ""
        if not isinstance(description, str):
            raise SpecError("description", f"must be a string, got {_show(description)}")
        _bound_text(MAX_TEXT)(description, "description")
        owner = data.get("owner")
        if owner is not None:
            owner = _nonempty_str(owner, "owner", "a user name, or null for a shared template")
        return cls(name=name, spec=spec, description=description, owner=owner)

    def to_json(self) -> dict[str, Any]:
        """JSON form that :meth:`from_json` reads back equal."""
        return {
            "name": self.name,
            "spec": copy.deepcopy(self.spec),
            "description": self.description,
            "owner": self.owner,
        }


def apply_template(template: Template | None, request: Mapping[str, Any]) -> SessionSpec:
    """The session spec for ``request`` created from ``template`` (cross-field rules run here)."""
    if not isinstance(request, Mapping):
        raise SpecError("", f"a request must be a JSON object, got {_show(request)}")
    return parse_spec(merge(template.spec, request) if template is not None else request)


# The schema must cover SessionSpec exactly, or a new field would be silently dropped.
assert list(FIELDS) == [f.name for f in dataclasses.fields(SessionSpec)], "FIELDS drifted"
