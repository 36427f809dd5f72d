"""The local backend: kernels as native processes on this machine.

The embedded default where no Docker engine answers (a laptop without Docker,
Binder). Each kernel is the stdlib runtime (``bai_jupyter/runtime``) run by the
*current* interpreter in its own process group, with its own directory::

    <root>/<session_id>/<hostname>/
        config/             bootstrap.json (0600) and what the runtime writes
        work/               the working directory; data folders are symlinks here
        output.log          the kernel's stdout and stderr (what :meth:`logs` returns)
        local-kernel.json   pid, ports, environment, exit code: for reconciliation

What it does not do: no SSH between kernels, no isolation (kernels run as the
user, see the whole file system and share the machine's network, so cluster
hostnames such as ``sub1`` do not resolve; ``MASTER_ADDR`` is set to the
loopback address instead), no resource enforcement (slots are bookkeeping for
the scheduler only), read-only data folders are not read-only.

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
import shutil
import signal as _signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..kernel_plan import KernelPlan
from ..model import ExecResult
from ..mounts import Mount
from ..resources import Amount, ResourceSlot
from ..runtime.protocol import CHANNELS, EXIT_TIMEOUT, TASK_TIMEOUT_LINE
from .base import (
    RUNTIME_DIR,
    AgentBackend,
    AgentError,
    KernelEvent,
    KernelEventKind,
    KernelStarted,
    LiveKernel,
)

#: Per-kernel metadata file, read back by a later agent.
META_FILE = "local-kernel.json"
#: :meth:`LocalAgent.logs` returns at most this many trailing bytes.
LOG_LIMIT = 8 * 1024 * 1024

#: Kernel processes started by any LocalAgent of this Python process that have not
#: been reaped yet. Kept here, not on the agent, so that a closed agent's children
#: are neither garbage-collected while running (a ResourceWarning) nor orphaned: a
#: later agent in the same process adopts them with exit codes intact.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
#: Linux-style /proc (process table and command lines without running ``ps``).
_HAVE_PROC = Path("/proc/self/stat").exists()


def default_root() -> Path:
    """``<jupyter runtime dir>/bai_jupyter/local-kernels``: per user, private, transient."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / "bai_jupyter" / "local-kernels"


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports nobody listens on right now (bound together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(eq=False)
class _Kernel:
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


class LocalAgent(AgentBackend):
    """Runs kernels as native processes of the current interpreter (see module doc)."""

    backend = "local"

    def __init__(
        self,
        agent_id: str = "local",
        resource_group: str = "default",
        *,
        root: str | os.PathLike[str] | None = None,
        capacity: ResourceSlot | Mapping[str, Amount] | None = None,
        reserve: ResourceSlot | Mapping[str, Amount] | None = None,
        python: str = sys.executable,
        runtime: str | os.PathLike[str] = RUNTIME_DIR,
        kill_grace: float = 3.0,
        poll_interval: float = 1.0,
    ) -> None:
        """``capacity`` overrides what the machine has; ``reserve`` (default ``mem=512m``)
        is kept back for the Jupyter server and the desktop. ``poll_interval`` is how
        often kernels adopted from an earlier agent are checked for liveness."""
        super().__init__(agent_id, resource_group)
        self.root = Path(root) if root is not None else default_root()
        self._capacity = ResourceSlot(capacity) if capacity is not None else None
        self._reserve = ResourceSlot(reserve if reserve is not None else {"mem": "512m"})
        self.python = python
        self.runtime = str(Path(runtime).resolve())
        self.kill_grace = kill_grace
        self.poll_interval = poll_interval
        self._kernels: dict[str, _Kernel] = {}
        self._events: asyncio.Queue[KernelEvent | None] = asyncio.Queue()
        self._scanned = False
        self._closed = False

    # ------------------------------------------------------------------ capacity

    async def host_address(self) -> str | None:
        return "127.0.0.1"  # kernels are processes of this host

    async def capacity(self) -> ResourceSlot:
        if self._capacity is not None:
            return self._capacity
        have = ResourceSlot({"cpu": os.cpu_count() or 1, "mem": await _total_memory()})
        # Clamp each slot at zero: a reserve larger than the machine leaves nothing.
        left = {slot: have[slot] - self._reserve.get_amount(slot) for slot in have}
        return ResourceSlot({slot: amount for slot, amount in left.items() if amount > 0})

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
                *(self._stop(self._kernels[s.kernel_id]) for s in started),
                return_exceptions=True,
            )
            await asyncio.gather(*(self._forget(plan.kernel_id) for plan in plans))
            await asyncio.to_thread(self._remove_kernel_dirs, session_id, hostnames)
            first = failures[0]
            if isinstance(first, AgentError):
                raise first
            raise AgentError(f"session {session_id}: could not start kernels: {first}") from first
        return [r for r in results if isinstance(r, KernelStarted)]

    def private_paths(self) -> list[str]:
        """The kernels' private dirs (Jupyter keys, bootstrap files)."""
        return [str(self.root)]

    def late_port(self, port: int) -> int | None:
        """A native kernel listens on this host itself: any port is reached as is."""
        return port

    async def _start_one(self, plan: KernelPlan) -> KernelStarted:
        kdir = self.root / plan.session_id / plan.hostname
        boot = copy.deepcopy(plan.bootstrap)
        boot["ssh"] = None  # no sshd natively: the runtime is told so too (--no-ssh)
        ports: dict[str, int] = {}
        connection = boot.get("connection")
        if isinstance(connection, dict):
            ports = _connection_ports(connection)
            connection.update({f"{name}_port": port for name, port in ports.items()})
            connection["ip"] = "127.0.0.1"
        for spec in boot.get("service_ports") or []:
            # Natively a service listens on its declared port itself: no mapping.
            name, _, port = str(spec).rpartition(":")
            name = name.split(":")[0]
            if name and port.isdigit():
                ports[f"service:{name}"] = int(port)  # the Docker backend's key
        env = dict(plan.env)
        if env.get("MASTER_ADDR") == "main1":
            # Cluster hostnames do not resolve natively; every kernel is on this machine.
            env["MASTER_ADDR"] = "127.0.0.1"
        await asyncio.to_thread(_prepare_dirs, kdir, boot, plan.mounts)
        argv = [
            self.python,
            self.runtime,
            "--config-dir",
            str(kdir / "config"),
            "--work-dir",
            _host_work_dir(plan) or str(kdir / "work"),
            "--no-ssh",
            "--kernel-ip",
            "127.0.0.1",  # the runtime's default, 0.0.0.0, would expose the kernel
        ]
        # Spawned and registered with no await in between: a start cancelled by the
        # manager's timeout cannot leave an untracked process behind.
        proc = _spawn(argv, kdir, {**os.environ, **env})
        _CHILDREN[proc.pid] = proc
        kernel = _Kernel(
            session_id=plan.session_id,
            kernel_id=plan.kernel_id,
            hostname=plan.hostname,
            dir=kdir,
            pid=proc.pid,
            env=env,
            ports=ports,
            proc=proc,
            runtime=self.runtime,
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
        await asyncio.gather(*(self._stop(k) for k in kernels))
        await asyncio.gather(*(self._forget(k.kernel_id) for k in kernels))
        await asyncio.to_thread(_remove_tree, self.root / session_id)

    async def _stop(self, kernel: _Kernel) -> None:
        """SIGTERM the runtime's group, SIGKILL what is left of its tree after the grace time.

        The runtime starts the ipykernel (or batch command) in a session of its own, so
        the groups of its descendants are collected too: a runtime that dies first must
        not leave a kernel behind.
        """
        kernel.destroying = True
        if kernel.proc is None and (kernel.ended.is_set() or not await self._is_ours(kernel)):
            # Adopted and no longer running our runtime: the pid (and its group id) may
            # belong to someone else by now, so send nothing.
            kernel.ended.set()
            return
        groups = {kernel.pid}
        table = await _process_table()
        if kernel.ended.is_set():
            if not _any_alive(table, groups):
                return
        else:
            groups |= _descendant_groups(table, kernel.pid)
        _killpg(kernel.pid, _signal.SIGTERM)
        if not await self._wait_tree(kernel, groups, self.kill_grace):
            for group in groups:
                _killpg(group, _signal.SIGKILL)
            await self._wait_tree(kernel, groups, 2.0)

    async def _wait_tree(self, kernel: _Kernel, groups: set[int], timeout: float) -> bool:
        """Wait until the runtime has ended and no live process is left in ``groups``,
        adding the groups of the runtime's descendants to ``groups`` while it lives."""
        deadline = time.monotonic() + timeout
        while True:
            table = await _process_table()
            if kernel.proc is not None and kernel.proc.poll() is not None:
                kernel.ended.set()  # the watcher records the exit code
            elif kernel.proc is None and not await self._is_ours(kernel):
                kernel.ended.set()
            if not kernel.ended.is_set():
                groups |= _descendant_groups(table, kernel.pid)
            elif not _any_alive(table, groups):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)

    async def _forget(self, kernel_id: str) -> None:
        """Drop a kernel and wait for its watcher to stop (before its dir is removed)."""
        kernel = self._kernels.pop(kernel_id, None)
        if kernel is None:
            return
        if kernel.proc is not None and kernel.proc.poll() is not None:
            _CHILDREN.pop(kernel.pid, None)
        if kernel.watcher is not None:
            kernel.watcher.cancel()
            await asyncio.gather(kernel.watcher, return_exceptions=True)

    def _remove_kernel_dirs(self, session_id: str, hostnames: list[str]) -> None:
        session_dir = self.root / session_id
        for hostname in hostnames:
            _remove_tree(session_dir / hostname)
        with contextlib.suppress(OSError):
            session_dir.rmdir()  # only if no other kernel of the session lives here

    # ------------------------------------------------------------------ inspect / act

    async def logs(self, kernel_id: str) -> str:
        kernel = await self._get(kernel_id)
        return await asyncio.to_thread(_read_tail, kernel.log_file, LOG_LIMIT)

    async def exec(self, kernel_id: str, command: list[str], timeout: float = 60) -> ExecResult:
        """Run ``command`` in the kernel's work dir with its environment (there is no
        container to enter); exit code 124 means it ran past ``timeout`` and was killed,
        as with the Docker backend."""
        kernel = await self._running(kernel_id)
        if not command:
            raise AgentError("exec: empty command")
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                cwd=kernel.work_dir,
                env={**os.environ, **kernel.env},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so a timeout kills what it started, too
            )
        except FileNotFoundError:
            return ExecResult(127, f"{command[0]}: command not found\n")
        except PermissionError:
            return ExecResult(126, f"{command[0]}: permission denied\n")
        assert proc.stdout is not None
        stdout = proc.stdout
        chunks: list[bytes] = []

        async def collect() -> int:
            while data := await stdout.read(65536):
                chunks.append(data)
            return await proc.wait()

        try:
            code = _exit_code(await asyncio.wait_for(collect(), timeout))
        except asyncio.TimeoutError:
            code = EXIT_TIMEOUT  # like coreutils ``timeout``
            _killpg(proc.pid, _signal.SIGKILL)  # also what it left running in the background
        finally:
            if proc.returncode is None:
                _killpg(proc.pid, _signal.SIGKILL)
                await proc.wait()
        return ExecResult(code, b"".join(chunks).decode(errors="replace"))

    async def signal(self, kernel_id: str, signum: int) -> None:
        """To the runtime only (the group leader): it forwards INT/HUP to the ipykernel."""
        kernel = await self._running(kernel_id)
        try:
            os.kill(kernel.pid, signum)
        except ProcessLookupError:
            raise AgentError(f"kernel {kernel.hostname} of {kernel.session_id} has ended") from None

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

    async def events(self) -> AsyncIterator[KernelEvent]:
        """Exits the agent did not cause, as they happen, until :meth:`close`."""
        while True:
            event = await self._events.get()
            if event is None:
                self._events.put_nowait(None)  # let other iterators end too
                return
            yield event

    async def close(self) -> None:
        """Stop the watchers; kernels keep running and a later agent can adopt them."""
        if self._closed:
            return
        self._closed = True
        watchers = [k.watcher for k in self._kernels.values() if k.watcher is not None]
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        self._events.put_nowait(None)

    # ------------------------------------------------------------------ internals

    async def _get(self, kernel_id: str) -> _Kernel:
        kernel = self._kernels.get(kernel_id)
        if kernel is None:
            await self._scan(force=True)
            kernel = self._kernels.get(kernel_id)
        if kernel is None:
            raise AgentError(f"no local kernel {kernel_id} (never started here, or destroyed)")
        return kernel

    async def _running(self, kernel_id: str) -> _Kernel:
        kernel = await self._get(kernel_id)
        if kernel.ended.is_set():
            raise AgentError(
                f"kernel {kernel.hostname} of {kernel.session_id} is not running "
                f"(exit code {kernel.exit_code})"
            )
        return kernel

    async def _is_ours(self, kernel: _Kernel) -> bool:
        """The pid still runs the runtime with this kernel's config dir (not a reused pid)."""
        argv = "\0".join(await _cmdline(kernel.pid))
        return kernel.runtime in argv and str(kernel.config_dir) in argv

    async def _save_meta(self, kernel: _Kernel) -> None:
        await asyncio.to_thread(
            _write_private, kernel.dir / META_FILE, json.dumps(kernel.meta(self.id), indent=1)
        )

    async def _scan(self, force: bool = False) -> None:
        """Adopt kernels that an earlier agent with our id left under ``root``."""
        if self._scanned and not force:
            return
        self._scanned = True
        for meta, kdir in await asyncio.to_thread(_read_metas, self.root):
            if meta.get("agent_id") != self.id or meta.get("kernel_id") in self._kernels:
                continue
            try:
                pid = int(meta["pid"])
                child = _CHILDREN.get(pid)
                if child is not None and str(kdir / "config") not in _argv(child):
                    child = None  # that pid was reused by another kernel of ours
                kernel = _Kernel(
                    session_id=str(meta["session_id"]),
                    kernel_id=str(meta["kernel_id"]),
                    hostname=str(meta["hostname"]),
                    dir=kdir,
                    pid=pid,
                    env={str(k): str(v) for k, v in dict(meta.get("env") or {}).items()},
                    ports={str(k): int(v) for k, v in dict(meta.get("ports") or {}).items()},
                    proc=child,
                    runtime=str(meta["runtime"]),
                    labels={str(k): str(v) for k, v in dict(meta.get("labels") or {}).items()},
                    exit_code=meta.get("exit_code"),
                )
            except (KeyError, TypeError, ValueError):
                continue  # not a file we wrote, or a damaged one: leave it alone
            if meta.get("ended"):
                kernel.ended.set()
            elif kernel.proc is not None:
                if kernel.proc.poll() is not None:
                    kernel.exit_code = _exit_code(kernel.proc.returncode)
                    kernel.ended.set()
            elif not await self._is_ours(kernel):
                kernel.ended.set()
            if kernel.kernel_id in self._kernels:
                continue  # a concurrent scan adopted it while we looked
            self._kernels[kernel.kernel_id] = kernel
            if not kernel.ended.is_set():
                self._watch(kernel)
            elif kernel.proc is not None or not meta.get("ended"):
                await self._save_meta(kernel)

    def _watch(self, kernel: _Kernel) -> None:
        if self._closed:
            return
        kernel.watcher = asyncio.get_running_loop().create_task(
            self._watch_kernel(kernel), name=f"bai-local-watch-{kernel.hostname}-{kernel.pid}"
        )

    async def _watch_kernel(self, kernel: _Kernel) -> None:
        if kernel.proc is not None:
            code: int | None = _exit_code(await _wait_child(kernel.proc))
            _CHILDREN.pop(kernel.pid, None)
        else:
            while True:
                if not await self._is_ours(kernel):
                    break
                await asyncio.sleep(self.poll_interval)
            code = None  # only the parent of a process can learn its exit status
        kernel.exit_code = code
        kernel.ended.set()
        if kernel.destroying or self._closed:
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
            if code == EXIT_TIMEOUT:
                tail = await asyncio.to_thread(_read_tail_bytes, kernel.log_file, 4096)
                if TASK_TIMEOUT_LINE.encode() in b"\n".join(tail.splitlines()[-10:]):
                    detail["task_timeout"] = True
            event = KernelEvent(
                KernelEventKind.EXITED, kernel.session_id, kernel.kernel_id, code, detail
            )
        self._events.put_nowait(event)
        with contextlib.suppress(OSError):  # destroyed meanwhile: nothing left to record
            await self._save_meta(kernel)


# ---------------------------------------------------------------------- helpers


def _connection_ports(connection: dict[str, Any]) -> dict[str, int]:
    """The caller's ports where the plan has them, fresh free ports for the rest."""
    given = {name: int(connection.get(f"{name}_port") or 0) for name in CHANNELS}
    missing = [name for name, port in given.items() if not port]
    fresh = iter(free_ports(len(missing))) if missing else iter(())
    return {name: port or next(fresh) for name, port in given.items()}


def _prepare_dirs(kdir: Path, boot: dict[str, Any], mounts: list[Mount]) -> None:
    """Private kernel dir, bootstrap.json, and data folders linked into the work dir."""
    kdir.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    kdir.parent.mkdir(exist_ok=True, mode=0o700)  # the session dir holds Jupyter keys
    kdir.mkdir(exist_ok=True, mode=0o700)
    config, work = kdir / "config", kdir / "work"
    config.mkdir(exist_ok=True, mode=0o700)
    work.mkdir(exist_ok=True)
    _write_private(config / "bootstrap.json", json.dumps(boot, indent=1))
    for mount in mounts:
        name = Path(mount.target).name
        if not name or name in {".", ".."}:
            raise AgentError(f"data folder target {mount.target!r} has no usable name")
        source = Path(mount.source).expanduser().resolve()
        if not source.exists():  # none is created here: the manager makes data folders
            raise AgentError(f"cannot mount {source}: no such host path")
        link = work / name
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise AgentError(f"cannot link data folder {source} at {link}: something is there")
        link.symlink_to(source, target_is_directory=True)


def _host_work_dir(plan: KernelPlan) -> str | None:
    """The plan's working dir on this host: natively the mounted folder itself, no link."""
    if not plan.work_dir:
        return None
    wanted = PurePosixPath(plan.work_dir)
    for mount in plan.mounts:
        target = PurePosixPath(mount.target)
        if wanted == target or target in wanted.parents:
            return str(Path(mount.source, wanted.relative_to(target)))
    return None


def _spawn(argv: list[str], kdir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The runtime in a new session (process group), output appended to output.log."""
    with (kdir / "output.log").open("ab") as log:
        return subprocess.Popen(
            argv,
            cwd=kdir / "work",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


async def _wait_child(proc: subprocess.Popen[bytes]) -> int:
    """The child's return code, without a thread: a pidfd on Linux, polling elsewhere."""
    pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    fd = None
    if pidfd_open is not None:
        with contextlib.suppress(OSError):
            fd = pidfd_open(proc.pid)
    if fd is None:
        while True:
            if proc.poll() is not None:
                return proc.returncode
            await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    readable: asyncio.Event = asyncio.Event()
    loop.add_reader(fd, readable.set)
    try:
        # Another caller (destroy) may reap it first; poll() then returns the cached code.
        while proc.poll() is None:
            readable.clear()
            await readable.wait()
        return proc.returncode
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _argv(proc: subprocess.Popen[bytes]) -> list[str]:
    args = proc.args
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(args)]
    return [os.fsdecode(arg) for arg in args]


def _exit_code(returncode: int) -> int:
    """Shell convention (as Docker reports it): killed by signal N → 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


#: (pid, ppid, pgid, alive): alive is False for zombies.
_Proc = tuple[int, int, int, bool]


async def _process_table() -> list[_Proc] | None:
    """Every process of the machine; None where it cannot be listed."""
    return await asyncio.to_thread(_read_process_table)


def _read_process_table() -> list[_Proc] | None:
    if _HAVE_PROC:
        table: list[_Proc] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
            fields = stat[stat.rfind(")") + 2 :].split()
            with contextlib.suppress(IndexError, ValueError):
                alive = fields[0] not in {"Z", "X"}
                table.append((int(entry.name), int(fields[1]), int(fields[2]), alive))
        return table
    try:
        out = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid=,pgid=,stat="],
            capture_output=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    table = []
    for line in out.decode(errors="replace").splitlines():
        parts = line.split()
        with contextlib.suppress(IndexError, ValueError):
            table.append(
                (int(parts[0]), int(parts[1]), int(parts[2]), not parts[3].startswith("Z"))
            )
    return table


def _descendant_groups(table: list[_Proc] | None, root: int) -> set[int]:
    """Process groups of every descendant of ``root`` (found through parent links)."""
    children: dict[int, list[_Proc]] = {}
    for proc in table or ():
        children.setdefault(proc[1], []).append(proc)
    groups: set[int] = set()
    todo = [root]
    while todo:
        for proc in children.get(todo.pop(), ()):
            groups.add(proc[2])
            todo.append(proc[0])
    return groups


def _any_alive(table: list[_Proc] | None, groups: set[int]) -> bool:
    """Whether a live process is in one of ``groups``. Zombies do not count: where PID 1
    does not reap orphans (some containers), an orphaned child stays a zombie forever."""
    if table is not None:
        return any(alive and pgid in groups for _pid, _ppid, pgid, alive in table)
    for group in groups:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        return True
    return False


async def _cmdline(pid: int) -> list[str]:
    """The argv of a live, non-zombie process; empty when gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        return []  # someone else's process: certainly not ours
    if _HAVE_PROC:
        # Right after a (v)fork+exec the new image may not have set its argv yet: the
        # command line reads empty although the process lives. Look again, briefly.
        for _ in range(50):
            raw, state = await asyncio.to_thread(_proc_cmdline_and_state, pid)
            if raw or state in {"", "Z", "X"}:
                return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]
            await asyncio.sleep(0.01)
        return []
    try:
        ps = await asyncio.create_subprocess_exec(
            "ps",
            "-ww",
            "-o",
            "command=",
            "-p",
            str(pid),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        out, _ = await ps.communicate()
    except OSError:
        return []
    # ps joins argv with spaces; good enough for a containment check of two paths.
    text = out.decode(errors="replace").strip()
    return [text] if text else []


def _proc_cmdline_and_state(pid: int) -> tuple[bytes, str]:
    """/proc/<pid>/cmdline and the state letter; ``(b"", "")`` when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return b"", ""
    return raw, stat[stat.rfind(")") + 2 : stat.rfind(")") + 3]


async def _total_memory() -> int:
    """Physical memory in bytes: /proc/meminfo, sysctl on macOS, else 4 GiB."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        text = await asyncio.to_thread(Path("/proc/meminfo").read_text)
        for line in text.splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    if sys.platform == "darwin":
        with contextlib.suppress(OSError, ValueError):
            proc = await asyncio.create_subprocess_exec(
                "sysctl",
                "-n",
                "hw.memsize",
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            out, _ = await proc.communicate()
            return int(out.strip())
    return 4 * 1024**3


def _write_private(path: Path, text: str) -> None:
    """Write a file only the user can read (it may hold the Jupyter key)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    tmp.replace(path)


def _read_metas(root: Path) -> list[tuple[dict[str, Any], Path]]:
    found: list[tuple[dict[str, Any], Path]] = []
    if not root.is_dir():
        return found
    for meta_file in sorted(root.glob(f"*/*/{META_FILE}")):
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            found.append((meta, meta_file.parent))
    return found


def _read_tail_bytes(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(size - limit, 0))
            return file.read()
    except FileNotFoundError:
        return b""


def _read_tail(path: Path, limit: int) -> str:
    data = _read_tail_bytes(path, limit + 1)
    if len(data) > limit:
        return "[… earlier output dropped …]\n" + data[-limit:].decode(errors="replace")
    return data.decode(errors="replace")


def _remove_tree(path: Path) -> None:
    """Remove a kernel or session dir; symlinked data folders are unlinked, not followed."""

    def retry_writable(func: Callable[[str], object], name: str, _exc: object) -> None:
        # A read-only dir the user made: make it writable, retry (never chmod through a
        # symlink: that would change the data folder it points to).
        target = Path(name)
        with contextlib.suppress(OSError):
            target.parent.chmod(0o700)
            if not target.is_symlink() and target.is_dir():
                target.chmod(0o700)
        func(name)

    if not path.exists() and not path.is_symlink():
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry_writable)
    else:
        shutil.rmtree(path, onerror=retry_writable)
