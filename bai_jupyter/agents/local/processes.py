"""This machine's processes: kernels spawned, short commands run, the process table, memory.

Linux's ``/proc`` is read where there is one (no ``ps`` run per look); elsewhere
``ps`` and ``sysctl`` answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ...model import ExecResult
from ...runtime.protocol import EXIT_TIMEOUT
from ..capped import OutputTail

__all__ = [
    "CHILDREN",
    "Proc",
    "any_alive",
    "argv_of",
    "child",
    "cmdline",
    "cpu_seconds",
    "descendant_groups",
    "exit_code",
    "free_ports",
    "group_usage",
    "killpg",
    "process_table",
    "read_process_table",
    "release",
    "run",
    "spawn",
    "total_memory",
    "wait_child",
]

#: Kernel processes started by any LocalAgent of this Python process that have not
#: been reaped yet. Kept here, not on the agent, so that a closed agent's children
#: are neither garbage-collected while running (a ResourceWarning) nor orphaned: a
#: later agent in the same process adopts them with exit codes intact. Read only
#: through the functions below (a test swaps it for a fresh process's empty table).
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
#: Linux-style /proc (process table and command lines without running ``ps``).
_HAVE_PROC = Path("/proc/self/stat").exists()

#: (pid, ppid, pgid, alive): alive is False for zombies.
Proc = tuple[int, int, int, bool]


def spawn(argv: list[str], kdir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The runtime in a new session (process group), output appended to output.log;
    registered in :data:`CHILDREN` before anything can interrupt the caller."""
    with (kdir / "output.log").open("ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=kdir / "work",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    CHILDREN[proc.pid] = proc
    return proc


def child(pid: int, config_dir: Path) -> subprocess.Popen[bytes] | None:
    """Our own child ``pid`` if it runs the kernel of ``config_dir`` (pids are reused)."""
    found = CHILDREN.get(pid)
    return found if found is not None and str(config_dir) in argv_of(found) else None


def release(pid: int) -> None:
    """Forget a reaped child."""
    CHILDREN.pop(pid, None)


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


async def wait_child(proc: subprocess.Popen[bytes]) -> int:
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


async def run(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float, limit: int
) -> ExecResult:
    """Run a short command and collect the last ``limit`` bytes of its output; exit code 124
    means it ran past ``timeout`` and was killed (like coreutils ``timeout``), with what
    it started."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=env,
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
    kept = OutputTail(limit)

    async def collect() -> int:
        while data := await stdout.read(65536):
            kept.feed(data)
        return await proc.wait()

    try:
        code = exit_code(await asyncio.wait_for(collect(), timeout))
    except asyncio.TimeoutError:
        code = EXIT_TIMEOUT
        killpg(proc.pid, signal.SIGKILL)  # also what it left running in the background
    finally:
        if proc.returncode is None:
            killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return ExecResult(code, kept.text(), kept.dropped)


def argv_of(proc: subprocess.Popen[bytes]) -> list[str]:
    args = proc.args
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(args)]
    return [os.fsdecode(arg) for arg in args]


def exit_code(returncode: int) -> int:
    """Shell convention (as Docker reports it): killed by signal N → 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def process_table() -> list[Proc] | None:
    """Every process of the machine; None where it cannot be listed."""
    return await asyncio.to_thread(read_process_table)


def _proc_stats() -> Iterator[tuple[int, list[str]]]:
    """Each process's pid and the fields of /proc/<pid>/stat after ``pid (comm)``:
    state ppid pgrp … (comm may contain spaces and parentheses)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def read_process_table() -> list[Proc] | None:
    if _HAVE_PROC:
        table: list[Proc] = []
        for pid, fields in _proc_stats():
            with contextlib.suppress(IndexError, ValueError):
                alive = fields[0] not in {"Z", "X"}
                table.append((pid, int(fields[1]), int(fields[2]), alive))
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


def cpu_seconds(groups: set[int]) -> float | None:
    """CPU time (user + system, their reaped children's included) of every process in
    ``groups``, in seconds; None without a Linux /proc."""
    if not _HAVE_PROC:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for _, fields in _proc_stats():  # … pgrp(2) … utime(11) stime cutime cstime(14)
        with contextlib.suppress(IndexError, ValueError):
            if int(fields[2]) in groups:
                total += sum(int(f) for f in fields[11:15])
    return total / ticks


def group_usage(groups: set[int]) -> tuple[float, int] | None:
    """CPU seconds (as :func:`cpu_seconds`) and resident memory in bytes of the processes
    in ``groups``; None without a Linux /proc."""
    if not _HAVE_PROC:
        return None
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu = rss = 0
    for _, fields in _proc_stats():  # … rss(24): index 21
        with contextlib.suppress(IndexError, ValueError):
            if int(fields[2]) in groups:
                cpu += sum(int(f) for f in fields[11:15])
                rss += int(fields[21]) * page
    return cpu / ticks, rss


def descendant_groups(table: list[Proc] | None, root: int) -> set[int]:
    """Process groups of every descendant of ``root`` (found through parent links)."""
    children: dict[int, list[Proc]] = {}
    for proc in table or ():
        children.setdefault(proc[1], []).append(proc)
    groups: set[int] = set()
    todo = [root]
    while todo:
        for proc in children.get(todo.pop(), ()):
            groups.add(proc[2])
            todo.append(proc[0])
    return groups


def any_alive(table: list[Proc] | None, groups: set[int]) -> bool:
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


async def cmdline(pid: int) -> list[str]:
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


async def total_memory() -> int:
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
