"""One local kernel: its record, whether its pid is still ours, and stopping its tree.

A kernel is the runtime's process (our child, or adopted from an earlier agent
through its metadata file) and whatever it started: the runtime starts the
ipykernel or batch command in a session of its own, so stopping collects the
process groups of its descendants too.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import processes

__all__ = ["LocalKernel"]


@dataclass(eq=False)
class LocalKernel:
    """What the agent knows about one kernel process."""

    session_id: str
    kernel_id: str
    hostname: str
    dir: Path
    pid: int
    #: The plan's variables (the process also inherited the agent's os.environ).
    env: dict[str, str]
    ports: dict[str, int]
    #: Our own child (exit code observable); None when adopted from another process.
    proc: subprocess.Popen[bytes] | None
    runtime: str
    labels: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    destroying: bool = False
    watcher: asyncio.Task[None] | None = None

    @property
    def work_dir(self) -> Path:
        return self.dir / "work"

    @property
    def config_dir(self) -> Path:
        return self.dir / "config"

    @property
    def log_file(self) -> Path:
        return self.dir / "output.log"

    @property
    def container_id(self) -> str:
        return f"pid:{self.pid}"

    def meta(self, agent_id: str) -> dict[str, Any]:
        """The metadata file's content: enough for a later agent to adopt the kernel."""
        return {
            "agent_id": agent_id,
            "session_id": self.session_id,
            "kernel_id": self.kernel_id,
            "hostname": self.hostname,
            "pid": self.pid,
            "runtime": self.runtime,
            "labels": self.labels,
            "env": self.env,
            "ports": self.ports,
            "exit_code": self.exit_code,
            "ended": self.ended.is_set(),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any], kdir: Path) -> LocalKernel:
        """The kernel an earlier agent recorded in ``kdir`` (KeyError, TypeError or
        ValueError for a file we did not write, or a damaged one)."""
        pid = int(meta["pid"])
        kernel = cls(
            session_id=str(meta["session_id"]),
            kernel_id=str(meta["kernel_id"]),
            hostname=str(meta["hostname"]),
            dir=kdir,
            pid=pid,
            env={str(k): str(v) for k, v in dict(meta.get("env") or {}).items()},
            ports={str(k): int(v) for k, v in dict(meta.get("ports") or {}).items()},
            proc=processes.child(pid, kdir / "config"),
            runtime=str(meta["runtime"]),
            labels={str(k): str(v) for k, v in dict(meta.get("labels") or {}).items()},
            exit_code=meta.get("exit_code"),
        )
        if meta.get("ended"):
            kernel.ended.set()
        return kernel

    async def refresh(self) -> None:
        """Mark a kernel recorded as running ended if its process is gone (with the exit
        code where it is our child)."""
        if self.ended.is_set():
            return
        if self.proc is not None:
            if self.proc.poll() is not None:
                self.exit_code = processes.exit_code(self.proc.returncode)
                self.ended.set()
        elif not await self.is_ours():
            self.ended.set()

    async def is_ours(self) -> bool:
        """The pid still runs the runtime with this kernel's config dir (not a reused pid)."""
        argv = "\0".join(await processes.cmdline(self.pid))
        return self.runtime in argv and str(self.config_dir) in argv

    async def stop(self, grace: float) -> None:
        """SIGTERM the runtime's group, SIGKILL what is left of its tree after ``grace``.

        A runtime that dies first must not leave a kernel behind.
        """
        self.destroying = True
        if self.proc is None and (self.ended.is_set() or not await self.is_ours()):
            # Adopted and no longer running our runtime: the pid (and its group id) may
            # belong to someone else by now, so send nothing.
            self.ended.set()
            return
        groups = {self.pid}
        table = await processes.process_table()
        if self.ended.is_set():
            if not processes.any_alive(table, groups):
                return
        else:
            groups |= processes.descendant_groups(table, self.pid)
        processes.killpg(self.pid, signal.SIGTERM)
        if not await self._wait_tree(groups, grace):
            for group in groups:
                processes.killpg(group, signal.SIGKILL)
            await self._wait_tree(groups, 2.0)

    async def _wait_tree(self, groups: set[int], timeout: float) -> bool:
        """Wait until the runtime has ended and no live process is left in ``groups``,
        adding the groups of the runtime's descendants to ``groups`` while it lives."""
        deadline = time.monotonic() + timeout
        while True:
            table = await processes.process_table()
            if self.proc is not None and self.proc.poll() is not None:
                self.ended.set()  # the watcher records the exit code
            elif self.proc is None and not await self.is_ours():
                self.ended.set()
            if not self.ended.is_set():
                groups |= processes.descendant_groups(table, self.pid)
            elif not processes.any_alive(table, groups):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
