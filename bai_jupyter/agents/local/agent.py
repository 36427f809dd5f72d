"""``LocalAgent``: kernels as native processes of the current interpreter.

Kernel processes are started with :class:`subprocess.Popen` rather than
:func:`asyncio.create_subprocess_exec`: an asyncio subprocess transport kills
its child when it is closed or garbage-collected, and kernels must outlive
:meth:`LocalAgent.close` (and, ideally, the manager). Forking does not block
the loop any more than asyncio's own spawn does (asyncio calls ``Popen`` in the
loop thread too); exits are watched with a pidfd on Linux and by polling
elsewhere. Short-lived :meth:`LocalAgent.exec` commands do use asyncio.

A restarted manager finds the kernels of an earlier agent by scanning
``root`` for ``local-kernel.json`` files: it can list, signal, exec into and
destroy them (after checking that the pid still runs the runtime with that
kernel's config dir), but it cannot learn their exit codes, because only a
process's parent can; their end is reported as :attr:`KernelEventKind.GONE`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from traitlets import Float, Unicode, default

from ...kernel_plan import KernelPlan
from ...model import ExecResult
from ...resources import ResourceSlot
from ...runtime.protocol import CHANNEL_PORT_KEYS, CHANNELS
from ..base import (
    AgentBackend,
    AgentError,
    KernelEvent,
    KernelEventKind,
    KernelStarted,
    LiveKernel,
    declared_services,
    kernel_connection,
    task_timed_out,
)
from ..capped import EXEC_OUTPUT_LIMIT, LOG_BYTES_LIMIT
from ..traits import HostPath
from ..usage import KernelReading
from . import files, processes
from .kernels import LocalKernel

__all__ = ["LocalAgent"]


class LocalAgent(AgentBackend):
    """Runs kernels as native processes of the current interpreter (see the package doc)."""

    backend = "local"
    auto_rank = 1

    root = HostPath(
        config=True,
        help="Where kernels' working dirs, logs and metadata live; "
        "default: <jupyter runtime dir>/bai_jupyter/local-kernels.",
    )
    python = Unicode(
        sys.executable, config=True, help="The interpreter that runs each kernel's runtime."
    )
    kill_grace = Float(
        3.0,
        config=True,
        help="Seconds a destroyed kernel's processes get after SIGTERM before SIGKILL.",
    )
    poll_interval = Float(
        1.0,
        config=True,
        help="Seconds between liveness checks of kernels adopted from an earlier agent "
        "(only a process's parent learns of its exit at once).",
    )

    def __init__(self, agent_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(agent_id, **kwargs)
        self._kernels: dict[str, LocalKernel] = {}
        self._scanned = False

    @default("root")
    def _default_root(self) -> Path:
        return files.default_root()

    def announce(self, why: str) -> None:
        """A warning: what kernels lose as local processes."""
        self.log.warning(
            "bai-jupyter: %s; kernels run as local processes "
            "(no isolation, no SSH, no resource limits)",
            why,
        )

    async def machine_slots(self) -> ResourceSlot:
        return ResourceSlot({"cpu": os.cpu_count() or 1, "mem": await processes.total_memory()})

    async def host_address(self) -> str | None:
        return "127.0.0.1"  # kernels are processes of this host

    def private_paths(self) -> list[str]:
        """The kernels' private dirs (Jupyter keys, bootstrap files)."""
        return [str(self.root)]

    def late_port(self, port: int) -> int | None:
        """A native kernel listens on this host itself: any port is reached as is."""
        return port

    # ------------------------------------------------------------------ start

    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        await self._scan()
        hostnames = [plan.hostname for plan in plans]
        if len(set(hostnames)) != len(hostnames):
            raise AgentError(f"session {session_id}: duplicate hostnames in {hostnames}")
        for plan in plans:
            if plan.session_id != session_id:
                raise AgentError(f"kernel {plan.kernel_id} belongs to session {plan.session_id}")
            old = self._kernels.get(plan.kernel_id)
            if old is not None and not old.ended.is_set():
                raise AgentError(f"kernel {plan.hostname} of {session_id} is already running")
        results = await asyncio.gather(
            *(self._start_one(plan) for plan in plans), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            started = [r for r in results if isinstance(r, KernelStarted)]
            await asyncio.gather(
                *(self._kernels[s.kernel_id].stop(self.kill_grace) for s in started),
                return_exceptions=True,
            )
            await asyncio.gather(*(self._forget(plan.kernel_id) for plan in plans))
            await asyncio.to_thread(self._remove_kernel_dirs, session_id, hostnames)
            first = failures[0]
            if isinstance(first, AgentError):
                raise first
            raise AgentError(f"session {session_id}: could not start kernels: {first}") from first
        return [r for r in results if isinstance(r, KernelStarted)]

    async def _start_one(self, plan: KernelPlan) -> KernelStarted:
        kdir = self.root / plan.session_id / plan.hostname
        boot = copy.deepcopy(plan.bootstrap)
        boot["ssh"] = None  # no sshd natively: the runtime is told so too (--no-ssh)
        ports: dict[str, int] = {}
        connection = boot.get("connection")
        if isinstance(connection, dict):
            ports = _connection_ports(connection)
            boot["connection"] = kernel_connection(connection, "127.0.0.1", ports)
        # Natively a service listens on its declared port itself: no mapping.
        ports.update({s.port_key: s.port for s in declared_services(boot)})
        env = dict(plan.env)
        if env.get("MASTER_ADDR") == "main1":
            # Cluster hostnames do not resolve natively; every kernel is on this machine.
            env["MASTER_ADDR"] = "127.0.0.1"
        await asyncio.to_thread(files.prepare_dirs, kdir, boot, plan.mounts)
        runtime = str(self.runtime_dir.resolve())
        argv = [
            self.python,
            "-I",  # the runtime itself ignores the session's PYTHON* variables
            runtime,
            "--config-dir",
            str(kdir / "config"),
            "--work-dir",
            files.host_work_dir(plan) or str(kdir / "work"),
            "--no-ssh",
            "--kernel-ip",
            "127.0.0.1",  # the runtime's default, 0.0.0.0, would expose the kernel
        ]
        # Spawned and recorded with no await in between: a start cancelled by the
        # manager's timeout cannot leave an untracked process behind.
        proc = processes.spawn(argv, kdir, {**os.environ, **env})
        kernel = LocalKernel(
            session_id=plan.session_id,
            kernel_id=plan.kernel_id,
            hostname=plan.hostname,
            dir=kdir,
            pid=proc.pid,
            env=env,
            ports=ports,
            proc=proc,
            runtime=runtime,
            labels=dict(plan.labels),
        )
        self._kernels[plan.kernel_id] = kernel
        await self._save_meta(kernel)
        self._watch(kernel)
        return KernelStarted(plan.kernel_id, kernel.container_id, "127.0.0.1", dict(ports))

    # ------------------------------------------------------------------ destroy

    async def destroy_session(self, session_id: str) -> None:
        await self._scan()
        kernels = [k for k in self._kernels.values() if k.session_id == session_id]
        await asyncio.gather(*(k.stop(self.kill_grace) for k in kernels))
        await asyncio.gather(*(self._forget(k.kernel_id) for k in kernels))
        await asyncio.to_thread(files.remove_tree, self.root / session_id)

    async def _forget(self, kernel_id: str) -> None:
        """Drop a kernel and wait for its watcher to stop (before its dir is removed)."""
        kernel = self._kernels.pop(kernel_id, None)
        if kernel is None:
            return
        if kernel.proc is not None and kernel.proc.poll() is not None:
            processes.release(kernel.pid)
        if kernel.watcher is not None:
            kernel.watcher.cancel()
            await asyncio.gather(kernel.watcher, return_exceptions=True)

    def _remove_kernel_dirs(self, session_id: str, hostnames: list[str]) -> None:
        session_dir = self.root / session_id
        for hostname in hostnames:
            files.remove_tree(session_dir / hostname)
        with contextlib.suppress(OSError):
            session_dir.rmdir()  # only if no other kernel of the session lives here

    # ------------------------------------------------------------------ inspect / act

    async def logs(
        self, kernel_id: str, tail: int | None = None, limit: int = LOG_BYTES_LIMIT
    ) -> str:
        """Read from the end of the kernel's log file: never more than ``limit`` bytes."""
        kernel = await self._get(kernel_id)
        return await asyncio.to_thread(files.read_tail, kernel.log_file, limit, tail)

    async def exec(
        self,
        kernel_id: str,
        command: list[str],
        timeout: float = 60,
        limit: int = EXEC_OUTPUT_LIMIT,
    ) -> ExecResult:
        """Run ``command`` in the kernel's work dir with its environment (there is no
        container to enter); exit code 124 means it ran past ``timeout`` and was killed,
        as with the Docker backend. The pipe is read in chunks; the last ``limit`` bytes
        are kept."""
        kernel = await self._running(kernel_id)
        if not command:
            raise AgentError("exec: empty command")
        env = {**os.environ, **kernel.env}
        return await processes.run(command, kernel.work_dir, env, timeout, limit)

    async def signal(self, kernel_id: str, signum: int) -> None:
        """To the runtime only (the group leader): it forwards INT/HUP to the ipykernel."""
        kernel = await self._running(kernel_id)
        try:
            os.kill(kernel.pid, signum)
        except ProcessLookupError:
            raise AgentError(f"kernel {kernel.hostname} of {kernel.session_id} has ended") from None

    async def cpu_seconds(self, session_id: str) -> float | None:
        """The CPU time of the session's running kernel processes (each runtime's groups
        and its descendants'), from /proc; None elsewhere."""
        table = await processes.process_table()
        groups: set[int] = set()
        for kernel in self._kernels.values():
            if kernel.session_id == session_id and not kernel.ended.is_set():
                groups |= {kernel.pid} | processes.descendant_groups(table, kernel.pid)
        return await asyncio.to_thread(processes.cpu_seconds, groups)

    async def usage(self, kernels: Mapping[str, str | None]) -> list[KernelReading]:
        """CPU time and resident memory of each kernel's processes, from /proc."""
        table = await processes.process_table()
        readings = []
        for kernel_id in kernels:
            kernel = self._kernels.get(kernel_id)
            if kernel is not None and not kernel.ended.is_set():
                groups = {kernel.pid} | processes.descendant_groups(table, kernel.pid)
                used = await asyncio.to_thread(processes.group_usage, groups)
                if used is not None:
                    readings.append(KernelReading(kernel_id, time.monotonic(), *used))
        return readings

    async def live_kernels(self) -> list[LiveKernel]:
        """Every kernel under ``root`` started by an agent with this id, in this process or
        an earlier one; rescans ``root`` each time."""
        await self._scan(force=True)
        return [
            LiveKernel(
                k.session_id,
                k.kernel_id,
                k.container_id,
                not k.ended.is_set(),
                k.exit_code,
                dict(k.labels),
            )
            for k in self._kernels.values()
        ]

    async def _release(self) -> None:
        """Stop the watchers; kernels keep running and a later agent can adopt them."""
        watchers = [k.watcher for k in self._kernels.values() if k.watcher is not None]
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)

    # ------------------------------------------------------------------ internals

    async def _get(self, kernel_id: str) -> LocalKernel:
        kernel = self._kernels.get(kernel_id)
        if kernel is None:
            await self._scan(force=True)
            kernel = self._kernels.get(kernel_id)
        if kernel is None:
            raise AgentError(f"no local kernel {kernel_id} (never started here, or destroyed)")
        return kernel

    async def _running(self, kernel_id: str) -> LocalKernel:
        kernel = await self._get(kernel_id)
        if kernel.ended.is_set():
            raise AgentError(
                f"kernel {kernel.hostname} of {kernel.session_id} is not running "
                f"(exit code {kernel.exit_code})"
            )
        return kernel

    async def _save_meta(self, kernel: LocalKernel) -> None:
        await asyncio.to_thread(
            files.write_private,
            kernel.dir / files.META_FILE,
            json.dumps(kernel.meta(self.id), indent=1),
        )

    async def _scan(self, force: bool = False) -> None:
        """Adopt kernels that an earlier agent with our id left under ``root``."""
        if self._scanned and not force:
            return
        self._scanned = True
        for meta, kdir in await asyncio.to_thread(files.read_metas, self.root):
            if meta.get("agent_id") != self.id or meta.get("kernel_id") in self._kernels:
                continue
            try:
                kernel = LocalKernel.from_meta(meta, kdir)
            except (KeyError, TypeError, ValueError):
                continue  # not a file we wrote, or a damaged one: leave it alone
            await kernel.refresh()
            if kernel.kernel_id in self._kernels:
                continue  # a concurrent scan adopted it while we looked
            self._kernels[kernel.kernel_id] = kernel
            if not kernel.ended.is_set():
                self._watch(kernel)
            elif kernel.proc is not None or not meta.get("ended"):
                await self._save_meta(kernel)

    def _watch(self, kernel: LocalKernel) -> None:
        if self.closed:
            return
        kernel.watcher = asyncio.get_running_loop().create_task(
            self._watch_kernel(kernel), name=f"bai-local-watch-{kernel.hostname}-{kernel.pid}"
        )

    async def _watch_kernel(self, kernel: LocalKernel) -> None:
        if kernel.proc is not None:
            code: int | None = processes.exit_code(await processes.wait_child(kernel.proc))
            processes.release(kernel.pid)
        else:
            while True:
                if not await kernel.is_ours():
                    break
                await asyncio.sleep(self.poll_interval)
            code = None  # only the parent of a process can learn its exit status
        kernel.exit_code = code
        kernel.ended.set()
        if kernel.destroying or self.closed:
            return
        if code is None:
            event = KernelEvent(
                KernelEventKind.GONE,
                kernel.session_id,
                kernel.kernel_id,
                detail={"reason": "adopted kernel ended; its exit status is unknown"},
            )
        else:
            detail: dict[str, Any] = {}
            log_tail = partial(files.last_lines, kernel.log_file)
            if await asyncio.to_thread(task_timed_out, code, log_tail):
                detail["task_timeout"] = True
            event = KernelEvent(
                KernelEventKind.EXITED, kernel.session_id, kernel.kernel_id, code, detail
            )
        self._report(event)
        with contextlib.suppress(OSError):  # destroyed meanwhile: nothing left to record
            await self._save_meta(kernel)


def _connection_ports(connection: dict[str, Any]) -> dict[str, int]:
    """The caller's ports where the plan has them, fresh free ports for the rest."""
    given = {ch: int(connection.get(key) or 0) for ch, key in zip(CHANNELS, CHANNEL_PORT_KEYS)}
    missing = [name for name, port in given.items() if not port]
    fresh = iter(processes.free_ports(len(missing)))
    return {name: port or next(fresh) for name, port in given.items()}
