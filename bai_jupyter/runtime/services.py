"""The image's service ports that have a Backend.AI service definition, started at boot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from .processes import Supervisor
from .protocol import ServicePort, say

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import IO

# --- service ports --------------------------------------------------------------------------


_stdout_lock = threading.Lock()


def _pump(name: str, stream: IO[bytes]) -> None:
    """Copy a service's output to our stdout, each line prefixed with ``[name]``."""
    prefix = f"[{name}] ".encode()
    out = sys.stdout.buffer
    for line in iter(stream.readline, b""):
        with _stdout_lock:
            out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            out.flush()
    stream.close()


def _fill(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def start_services(
    sup: Supervisor, service_ports: list[ServicePort], defs_dir: Path, work_dir: Path, python: str
) -> list[threading.Thread]:
    """Start every declared service that has a Backend.AI service definition in the image.

    A definition is ``{"command": [...], "env": {...}}`` where ``${ports[0]}`` stands for
    the port and ``${runtime_path}`` for the image's Python (Backend.AI's placeholders).
    Services without one are the user's to start; a broken one is reported and
    skipped rather than failing the whole session.
    """
    pumps: list[threading.Thread] = []
    for service in service_ports:
        name, port = service.name, str(service.port)
        path = defs_dir / f"{name}.json"
        if not path.is_file():
            continue
        try:
            definition = json.loads(path.read_text(encoding="utf-8"))
            command = definition["command"]
            extra = definition.get("env") or {}
            if not (
                isinstance(command, list)
                and command
                and all(isinstance(c, str) for c in command)
                and isinstance(extra, dict)
                and all(isinstance(v, str) for v in extra.values())
            ):
                raise ValueError("needs a command list of strings and an env of strings")
        except (OSError, ValueError, KeyError, TypeError) as e:
            say(f"service {name}: bad definition {path}: {e}")
            continue
        values = {"${ports[0]}": port, "${runtime_path}": python}
        env = dict(os.environ)
        env.update({k: _fill(v, values) for k, v in extra.items()})
        argv = [_fill(c, values) for c in command]
        try:
            proc = sup.spawn(
                argv,
                cwd=str(work_dir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as e:
            say(f"service {name}: cannot start {argv[0]}: {e.strerror or e}")
            continue
        assert proc.stdout is not None
        pump = threading.Thread(target=_pump, args=(name, proc.stdout), daemon=True)
        pump.start()
        pumps.append(pump)
        say(f"service {name} started on port {port} (pid {proc.pid})")
    return pumps
