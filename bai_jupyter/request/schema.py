"""The schema of a session request: one table (:data:`FIELDS`) that parses and documents it."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

from ..model import ClusterMode, RoleSpec, SessionSpec, SessionType
from ..resources import ResourceSlot
from ..runtime.protocol import SERVICE_PROTOCOLS
from .bounds import (
    MAX_CLUSTER_SIZE,
    MAX_COMMAND,
    MAX_DEPENDS_ON,
    MAX_ENV,
    MAX_ENV_BYTES,
    MAX_MOUNTS,
    MAX_PRIORITY,
    MAX_PUBLIC_KEY,
    MAX_TEXT,
    RESERVED_PORTS_TEXT,
)
from .parsers import (
    SpecError,
    bound_count,
    bound_env,
    bound_image,
    bound_mounts,
    bound_name,
    bound_resources,
    bound_service_ports,
    bound_text,
    bound_timeout,
    bound_timestamp,
    enum_parser,
    int_parser,
    parse_command,
    parse_depends_on,
    parse_env,
    parse_image,
    parse_mounts,
    parse_name,
    parse_public_key,
    parse_resource_group,
    parse_resources,
    parse_service_ports_unbounded,
    parse_timeout,
    parse_timestamp,
    show,
)
from .roles import MAX_ROLES, bound_roles, parse_roles


@dataclass(frozen=True)
class SpecField:
    """One row of the schema: how to parse a field's JSON value, and its doc line.

    ``bound`` checks a new request's value (already parsed successfully) against the
    limits that keep one request from hurting others: sizes, ranges, reserved ports.
    """

    parse: Callable[[Any, str], Any]
    help: str
    bound: Callable[[Any, str], None] | None = None


#: The schema of a session request, in :class:`SessionSpec` field order.
FIELDS: Mapping[str, SpecField] = MappingProxyType(
    {
        "image": SpecField(parse_image, "container image to run, e.g. 'python:3.12'", bound_image),
        "name": SpecField(
            parse_name,
            "session name, unique per owner: 1-64 of [A-Za-z0-9._-], not 8-32 of [0-9a-f] "
            "alone (that reads as a session id)",
            bound_name,
        ),
        "type": SpecField(
            enum_parser(SessionType),
            f"session type: {', '.join(t.value for t in SessionType)}",
        ),
        "resources": SpecField(
            parse_resources,
            'per-kernel resource slots, e.g. {"cpu": 2, "mem": "4g"}; a slot left out takes '
            "the resource group's default",
            bound_resources,
        ),
        "cluster_size": SpecField(
            int_parser(1, MAX_CLUSTER_SIZE),
            f"number of kernels (main1, sub1 …), 1 to {MAX_CLUSTER_SIZE}",
        ),
        "cluster_mode": SpecField(
            enum_parser(ClusterMode),
            f"kernel placement: {', '.join(m.value for m in ClusterMode)}",
        ),
        "resource_group": SpecField(
            parse_resource_group,
            "resource group whose agents run the session",
            bound_text(MAX_TEXT),
        ),
        "priority": SpecField(
            int_parser(0, MAX_PRIORITY),
            f"scheduling priority, 0 to {MAX_PRIORITY}; higher is scheduled first",
        ),
        "depends_on": SpecField(
            parse_depends_on,
            f"session ids or names that must finish successfully before this one starts "
            f"(at most {MAX_DEPENDS_ON}; repeats are dropped)",
            bound_count(MAX_DEPENDS_ON, "sessions"),
        ),
        "starts_at": SpecField(
            parse_timestamp,
            "do not start before this time (seconds since the epoch, at most 9999-12-31)",
            bound_timestamp,
        ),
        "startup_command": SpecField(
            parse_command,
            f"command run in main1: a batch session's task (required), an inference session's "
            f"model server (at most {MAX_COMMAND} characters)",
            bound_text(MAX_COMMAND),
        ),
        "batch_timeout": SpecField(
            parse_timeout,
            "seconds a batch session may run before it is stopped (batch only; at most 366 days)",
            bound_timeout,
        ),
        "env": SpecField(
            parse_env,
            f"extra environment variables for every kernel (at most {MAX_ENV}, "
            f"{MAX_ENV_BYTES} characters in all)",
            bound_env,
        ),
        "mounts": SpecField(
            parse_mounts,
            f"data folders mounted into every kernel (at most {MAX_MOUNTS})",
            bound_mounts,
        ),
        "service_ports": SpecField(
            parse_service_ports_unbounded,
            f"extra service ports of main1, 'name:proto:port' "
            f"(proto: {', '.join(SERVICE_PROTOCOLS)}; ports {RESERVED_PORTS_TEXT} are reserved)",
            bound_service_ports,
        ),
        "roles": SpecField(
            parse_roles,
            f"cluster roles, each {{name, replicas, image, resources, env, mounts}}: "
            f"main1 and <name>1 … <name><replicas> (at most {MAX_ROLES} roles; a field a "
            f"role leaves out is the session's; cluster_size is then their count)",
            bound_roles,
        ),
        "ssh_public_key": SpecField(
            parse_public_key,
            "system sessions: an OpenSSH public key that may log in to its SFTP server "
            "(default: a key pair made for the session, its private key given to the owner)",
            bound_text(MAX_PUBLIC_KEY),
        ),
    }
)


def _to_json(value: Any) -> Any:
    if isinstance(value, ResourceSlot):
        return value.to_json()
    if isinstance(value, list) and value and isinstance(value[0], RoleSpec):
        return [role.to_json() for role in value]
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


def unknown_field(key: object, known: Mapping[str, object], prefix: str) -> SpecError:
    close = difflib.get_close_matches(str(key), list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return SpecError(f"{prefix}{key}", f"unknown field; {hint}known fields: {', '.join(known)}")


def parse_fields(data: Any, prefix: str, bounded: bool = True) -> dict[str, Any]:
    """Parse each present, non-null field on its own (no cross-field rules).

    ``bounded`` also applies each field's bounds (new requests and templates)."""
    if not isinstance(data, Mapping):
        where = prefix.rstrip(".")
        raise SpecError(where, f"must be a JSON object of session fields, got {show(data)}")
    parsed: dict[str, Any] = {}
    for key, value in data.items():
        row = FIELDS.get(key) if isinstance(key, str) else None
        if row is None:
            raise unknown_field(key, FIELDS, prefix)
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
    spec = SessionSpec(**parse_fields(data, "", bounded))
    if spec.roles:
        kernels = len(spec.kernel_shapes())
        if data.get("cluster_size") not in (None, kernels):
            raise SpecError(
                "cluster_size",
                f"{data['cluster_size']} differs from the {kernels} kernels the roles name "
                "(leave cluster_size out with roles)",
            )
        spec.cluster_size = kernels
    if spec.type is SessionType.BATCH and not (spec.startup_command or "").strip():
        raise SpecError(
            "startup_command", "required when type is batch: give the command to run in main1"
        )
    if spec.batch_timeout is not None and spec.type is not SessionType.BATCH:
        raise SpecError(
            "batch_timeout", f"only allowed when type is batch, got type {spec.type.value}"
        )
    if spec.ssh_public_key is not None and spec.type is not SessionType.SYSTEM:
        raise SpecError(
            "ssh_public_key", f"only allowed when type is system, got type {spec.type.value}"
        )
    if spec.type is SessionType.SYSTEM and spec.cluster_size != 1:
        raise SpecError(
            "cluster_size", f"a system (SFTP) session has one kernel, got {spec.cluster_size}"
        )
    if bounded and spec.type is SessionType.SYSTEM:
        _refuse_commands(spec)
    return spec


#: What a system (SFTP-only) session cannot use: anything that would run code or a service
#: (roles always add kernels, which ``cluster_size`` already refuses).
_NOT_FOR_SYSTEM = ("env", "service_ports", "startup_command")


def _refuse_commands(spec: SessionSpec) -> None:
    """A system session runs no user code: refuse a field it would never use, or that
    would run code in it (an ``env`` entry reaches its processes, running as root)."""
    for name in _NOT_FOR_SYSTEM:
        if getattr(spec, name):
            raise SpecError(
                name,
                "not allowed when type is system: a system session serves SFTP only and "
                "runs no code, services or commands (leave it out)",
            )


def validate_partial(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Check each field of a partial request (a template) on its own; return a copy.

    Cross-field rules are left to :func:`parse_spec`, because a template may
    leave a required field (e.g. a batch ``startup_command``) to the request.
    """
    parse_fields(data, prefix)
    return copy.deepcopy(dict(data))


# The schema must cover SessionSpec exactly, or a new field would be silently dropped.
assert list(FIELDS) == [f.name for f in dataclasses.fields(SessionSpec)], "FIELDS drifted"
