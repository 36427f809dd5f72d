"""Field parsers and bound checks of the request schema: (JSON value, dotted path) → value."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from enum import Enum
from typing import Any, TypeVar

from ..model import is_id_key
from ..resources import KNOWN_SLOTS, ResourceError, ResourceSlot, SlotKind, parse_amount
from ..runtime.protocol import SERVICE_PROTOCOLS, SSH_PORT, ServicePort
from .bounds import (
    ENV_KEY_RE,
    IMAGE_RE,
    KERNEL_PORT_RANGE,
    MAX_BATCH_TIMEOUT,
    MAX_BYTES,
    MAX_COUNT,
    MAX_DECIMALS,
    MAX_ENV,
    MAX_ENV_BYTES,
    MAX_MOUNTS,
    MAX_SERVICE_PORTS,
    MAX_TEXT,
    MAX_TIMESTAMP,
    NAME_RE,
    PUBLIC_KEY_RE,
    RESERVED_PORTS,
    SERVICE_NAME_RE,
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


# ---------------------------------------------------------------------------
# Field parsers: (JSON value, dotted path) → SessionSpec value; never see None.


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def nonempty_str(value: Any, path: str, what: str = "a non-empty string") -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(path, f"must be {what}, got {show(value)}")
    return value


def mapping_of(value: Any, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be {what}, got {show(value)}")
    for key in value:
        if not isinstance(key, str):
            raise SpecError(f"{path}.{key}", f"keys of {path} must be strings, got {show(key)}")
    return value


def list_of(value: Any, path: str, what: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(path, f"must be a list of {what}, got {show(value)}")
    return list(value)


def parse_image(value: Any, path: str) -> str:
    return nonempty_str(value, path, "an image reference such as 'python:3.12'")


def parse_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or NAME_RE.fullmatch(value) is None:
        raise SpecError(
            path,
            "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit, got {show(value)}",
        )
    return value


def bound_name(value: Any, path: str) -> None:
    """A new session's name never looks like an id (keys are read by that rule alone)."""
    if is_id_key(value):
        raise SpecError(
            path,
            f"looks like a session id (8 to 32 of 0-9a-f), and keys that look like ids are "
            f"read as ids; pick a name with another character, e.g. 'job-{value[:8]}', "
            f"got {show(value)}",
        )


def enum_parser(enum: type[_E]) -> Callable[[Any, str], _E]:
    values = [str(member.value) for member in enum]

    def parse(value: Any, path: str) -> _E:
        if not isinstance(value, str) or value not in values:
            raise SpecError(path, f"must be one of {', '.join(values)}, got {show(value)}")
        return enum(value)

    return parse


def int_parser(low: int, high: int) -> Callable[[Any, str], int]:
    def parse(value: Any, path: str) -> int:
        if not _is_int(value) or not low <= value <= high:
            raise SpecError(path, f"must be an integer from {low} to {high}, got {show(value)}")
        return int(value)

    return parse


def parse_resources(value: Any, path: str) -> ResourceSlot:
    mapping = mapping_of(value, path, 'a mapping of slot to amount, e.g. {"cpu": 2, "mem": "4g"}')
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
                f"must be more than 0, got {show(amount)}; leave it out (or null) to get "
                "the resource group's default",
            )
        amounts[slot] = amount
    return ResourceSlot(amounts)


#: Slots a session always holds (the resource group's default fills them in).
_NEVER_ZERO = frozenset({"cpu", "mem"})


def bound_resources(value: Any, path: str) -> None:
    for slot, amount in value.items():
        if amount is None:
            continue
        if isinstance(amount, Decimal):
            amount = f"{amount:f}"
        parsed = parse_amount(slot, amount)
        where = f"{path}.{slot}"
        if KNOWN_SLOTS[slot] is SlotKind.BYTES:
            if parsed > MAX_BYTES:
                raise SpecError(where, f"must be at most 2^60 bytes (1e), got {show(amount)}")
            continue
        if parsed > MAX_COUNT:
            raise SpecError(where, f"must be at most {MAX_COUNT}, got {show(amount)}")
        exponent = parsed.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -MAX_DECIMALS:
            raise SpecError(where, f"may have at most {MAX_DECIMALS} decimals, got {show(amount)}")


def parse_resource_group(value: Any, path: str) -> str:
    return nonempty_str(value, path, "a non-empty resource group name")


def parse_depends_on(value: Any, path: str) -> list[str]:
    """Session ids or names, each once (a repeat is dropped; the order is kept)."""
    items = list_of(value, path, "session ids or names")
    names = [
        nonempty_str(item, f"{path}[{i}]", "a session id or name") for i, item in enumerate(items)
    ]
    return list(dict.fromkeys(names))


def bound_count(most: int, what: str) -> Callable[[Any, str], None]:
    def bound(value: Any, path: str) -> None:
        if len(value) > most:
            raise SpecError(path, f"may list at most {most} {what}, got {len(value)}")

    return bound


def bound_text(most: int) -> Callable[[Any, str], None]:
    def bound(value: Any, path: str) -> None:
        if len(value) > most:
            raise SpecError(path, f"may be at most {most} characters long, got {len(value)}")

    return bound


def bound_image(value: Any, path: str) -> None:
    if len(value) > 255 or IMAGE_RE.fullmatch(value) is None:
        raise SpecError(
            path,
            "is not a valid image reference: [registry/]name[:tag][@digest], lowercase "
            f"name parts, at most 255 characters (e.g. 'python:3.12'), got {show(value)}",
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


def parse_timestamp(value: Any, path: str) -> float:
    number = _finite(value)
    if number is None:
        raise SpecError(path, f"must be a time in seconds since the epoch, got {show(value)}")
    return number


def bound_timestamp(value: Any, path: str) -> None:
    if not 0 <= value <= MAX_TIMESTAMP:
        raise SpecError(
            path,
            f"must be from 0 to {MAX_TIMESTAMP} (9999-12-31) seconds since the epoch, "
            f"got {show(value)}",
        )


def parse_command(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SpecError(path, f"must be a shell command string, got {show(value)}")
    return value


def parse_public_key(value: Any, path: str) -> str:
    """One OpenSSH public key line (``ssh-ed25519 AAAA… comment``), surrounding space dropped."""
    text = value.strip() if isinstance(value, str) else None
    if text is None or PUBLIC_KEY_RE.fullmatch(text) is None:
        raise SpecError(
            path,
            "must be one OpenSSH public key line such as 'ssh-ed25519 AAAAC3Nza… you@laptop' "
            f"(the content of ~/.ssh/id_ed25519.pub), got {show(value)}",
        )
    return text


def parse_timeout(value: Any, path: str) -> float:
    number = _finite(value)
    if number is None or number <= 0:
        raise SpecError(path, f"must be a number of seconds greater than 0, got {show(value)}")
    return number


def bound_timeout(value: Any, path: str) -> None:
    if not value <= MAX_BATCH_TIMEOUT:
        raise SpecError(
            path, f"must be at most {MAX_BATCH_TIMEOUT} seconds (366 days), got {show(value)}"
        )


def parse_env(value: Any, path: str) -> dict[str, str]:
    mapping = mapping_of(value, path, 'a mapping of variable name to string, e.g. {"FOO": "1"}')
    env: dict[str, str] = {}
    for key, item in mapping.items():
        where = f"{path}.{key}"
        if ENV_KEY_RE.fullmatch(key) is None:
            raise SpecError(
                where,
                "is not a valid variable name: use letters, digits and '_', not starting "
                "with a digit",
            )
        if item is None:
            continue
        if not isinstance(item, str):
            raise SpecError(where, f"must be a string (quote numbers), got {show(item)}")
        env[key] = item
    return env


def bound_env(value: Any, path: str) -> None:
    for key in value:
        if key.startswith("LD_"):  # read by the loader of every process, ours included
            raise SpecError(
                f"{path}.{key}",
                "the dynamic loader's variables (LD_*) are not accepted: they would load "
                "code into every process of the kernel, the runtime included; set them in "
                "the image or in your own commands",
            )
    if len(value) > MAX_ENV:
        raise SpecError(path, f"may set at most {MAX_ENV} variables, got {len(value)}")
    size = sum(len(key) + len(item or "") for key, item in value.items())
    if size > MAX_ENV_BYTES:
        raise SpecError(
            path, f"names and values may total at most {MAX_ENV_BYTES} characters, got {size}"
        )


def bound_mounts(value: Any, path: str) -> None:
    bound_count(MAX_MOUNTS, "data folders")(value, path)
    for i, item in enumerate(value):
        bound_text(MAX_TEXT)(item, f"{path}[{i}]")


def parse_mounts(value: Any, path: str) -> list[str]:
    items = list_of(value, path, "data folder names")
    return [
        nonempty_str(item, f"{path}[{i}]", "a data folder name") for i, item in enumerate(items)
    ]


def parse_service_port(value: Any, path: str) -> str:
    """``name:proto:port`` as :meth:`ServicePort.parse` reads it, normalized; a request's
    service names are stricter (lowercase, as in a URL) and each wrong part has its message."""
    shape = f"must be 'name:proto:port' with proto one of {', '.join(SERVICE_PROTOCOLS)}"
    if not isinstance(value, str) or value.count(":") != 2:
        raise SpecError(path, f"{shape}, e.g. 'tensorboard:http:6006', got {show(value)}")
    name, proto, port = value.split(":")
    if SERVICE_NAME_RE.fullmatch(name) is None:
        raise SpecError(
            path, f"service name must be lowercase letters, digits and '-', got {show(name)}"
        )
    if proto not in SERVICE_PROTOCOLS:
        raise SpecError(path, f"{shape}, got protocol {show(proto)}")
    try:
        parsed: ServicePort | None = ServicePort.parse(value)
    except ValueError:
        parsed = None
    # The protocol's pattern takes any script's digits; a request's port is ASCII.
    if parsed is None or not port.isascii():
        raise SpecError(path, f"port must be an integer from 1 to 65535, got {show(port)}")
    return str(parsed)


def parse_service_ports_unbounded(value: Any, path: str) -> list[str]:
    ports: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(list_of(value, path, "'name:proto:port' strings")):
        port = parse_service_port(item, f"{path}[{i}]")
        name = ServicePort.parse(port).name
        if name in seen:
            raise SpecError(f"{path}[{i}]", f"service {name!r} is declared twice")
        seen.add(name)
        ports.append(port)
    return ports


def bound_service_ports(value: Any, path: str) -> None:
    bound_count(MAX_SERVICE_PORTS, "service ports")(value, path)
    for i, item in enumerate(value):
        port = ServicePort.parse(item).port
        if port in RESERVED_PORTS:
            raise SpecError(
                f"{path}[{i}]",
                f"port {port} is reserved in every kernel (sshd {SSH_PORT}, the Jupyter "
                f"kernel {KERNEL_PORT_RANGE}): use another port",
            )


def parse_service_ports(value: Any, path: str = "service_ports") -> list[str]:
    """Service ports checked as a request's ``service_ports`` (shape, reserved ports, count).

    For front ends that take ports outside a request (the CLI, ``%bai ports add``)."""
    ports = parse_service_ports_unbounded(value, path)
    bound_service_ports(ports, path)
    return ports
