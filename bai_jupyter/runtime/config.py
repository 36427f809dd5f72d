"""The bootstrap file the manager writes (validated) and the config files written from it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .protocol import CHANNEL_PORT_KEYS, ServicePort

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any

MODES = ("kernel", "batch", "serve", "wait")


#: Besides ``BACKENDAI_*``: the names distributed frameworks read.
EXTRA_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class BootstrapError(Exception):
    """The bootstrap file is missing or malformed (exit 2: a manager bug, not the user's)."""


# --- bootstrap ------------------------------------------------------------------------------


class Bootstrap:
    """The validated contents of ``bootstrap.json``; optional keys get harmless defaults."""

    def __init__(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise BootstrapError("top level must be a JSON object")
        mode = data.get("mode")
        if mode not in MODES:
            raise BootstrapError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode: str = mode
        self.hostname: str = _opt_str(data, "hostname") or ""
        hosts = data.get("hosts") or ([self.hostname] if self.hostname else [])
        if not isinstance(hosts, list) or not all(
            isinstance(h, str) and _HOST_RE.match(h) for h in hosts
        ):
            raise BootstrapError(f"hosts must be a list of host names, not {hosts!r}")
        self.hosts: list[str] = hosts
        resources = data.get("resources") or {}
        if not isinstance(resources, dict) or not all(
            isinstance(v, (str, int, float)) for v in resources.values()
        ):
            raise BootstrapError("resources must be an object of slot: amount")
        self.resources: dict[str, Any] = resources
        self.startup_command: str | None = _opt_str(data, "startup_command")
        if mode in ("batch", "serve") and not (self.startup_command or "").strip():
            raise BootstrapError(f"{mode} mode needs a non-empty startup_command")
        timeout = data.get("batch_timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
        ):
            raise BootstrapError(f"batch_timeout must be seconds >= 0 or null, not {timeout!r}")
        self.batch_timeout: float | None = timeout or None
        ports = data.get("service_ports") or []
        try:
            if not isinstance(ports, list) or not all(isinstance(p, str) for p in ports):
                raise ValueError("not a list of strings")
            self.service_ports: list[ServicePort] = [ServicePort.parse(p) for p in ports]
        except ValueError:
            raise BootstrapError(
                f"service_ports must be 'name:proto:port' strings, not {ports!r}"
            ) from None
        self.connection: dict[str, Any] | None = _opt_dict(data, "connection")
        if mode == "kernel":
            conn = self.connection
            if conn is None:
                raise BootstrapError("kernel mode needs the Jupyter connection info")
            bad = [k for k in CHANNEL_PORT_KEYS if not _is_port(conn.get(k))]
            if bad:
                raise BootstrapError(f"connection needs integer ports: {', '.join(bad)}")
            if not isinstance(conn.get("key"), str):
                raise BootstrapError("connection needs a string key")
        self.ssh: dict[str, Any] | None = _opt_dict(data, "ssh")
        if self.ssh is not None:
            keys = ("private_key", "public_key", "host_private_key", "host_public_key")
            if not _is_port(self.ssh.get("port")) or not all(
                isinstance(self.ssh.get(k), str) and self.ssh[k].strip() for k in keys
            ):
                raise BootstrapError(f"ssh needs an integer port and {', '.join(keys)}")
            if len(self.ssh["host_public_key"].split()) < 2:
                raise BootstrapError("ssh.host_public_key must be 'TYPE BASE64 [COMMENT]'")

    @classmethod
    def load(cls, path: Path) -> Bootstrap:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise BootstrapError(f"cannot read {path}: {e.strerror or e}") from e
        try:
            data = json.loads(text)
        except ValueError as e:
            raise BootstrapError(f"{path} is not valid JSON: {e}") from e
        try:
            return cls(data)
        except BootstrapError as e:
            raise BootstrapError(f"{path}: {e}") from e


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise BootstrapError(f"{key} must be a string or null, not {value!r}")
    return value


def _opt_dict(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise BootstrapError(f"{key} must be an object or null, not {value!r}")
    return value


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


# --- files ----------------------------------------------------------------------------------


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` with ``mode`` from the first byte (private keys never sit world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), mode)  # O_CREAT's mode is ignored for an existing file
        f.write(text)


def environ_text(env: dict[str, str]) -> str:
    """``environ.txt``: the cluster variables, sorted ``KEY=VALUE`` lines (Backend.AI's format)."""
    lines = sorted(
        f"{k}={v}" for k, v in env.items() if k.startswith("BACKENDAI_") or k in EXTRA_ENV
    )
    return "".join(line + "\n" for line in lines)


def resource_text(resources: dict[str, Any]) -> str:
    """``resource.txt``: one ``slot=amount`` line per slot, sorted."""
    return "".join(f"{slot}={resources[slot]}\n" for slot in sorted(resources))
