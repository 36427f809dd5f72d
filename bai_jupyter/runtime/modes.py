"""What main1 (and every other kernel) runs once set up: an ipykernel, a batch task, nothing,
or (a system session) an SFTP server (``sftp``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .config import Bootstrap, write_file
from .file_watch import watch_dir, written_names
from .processes import RuntimeFailure, Supervisor, exit_code, signal_group
from .protocol import CLAIM_FILE, EXIT_TIMEOUT, READY, TASK_TIMEOUT, say
from .sftp import run_sftp

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any

    from .ssh import SetUp

#: Seconds the runtime outlives an exited ipykernel, for a SIGHUP: Jupyter restarts a
#: kernel by asking it to shut down first, and only then (via the manager) sends SIGHUP.
RESTART_GRACE = 5.0
#: Seconds the runtime waits for a new ipykernel to listen before it says ready anyway.
KERNEL_LISTEN_TIMEOUT = 60.0


# --- modes ----------------------------------------------------------------------------------


def run_kernel(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, set_up: SetUp) -> int:
    """Supervise an ipykernel: INT interrupts, HUP restarts on the same ports, TERM ends.

    The ipykernel starts first and SSH and services are set up while it boots: its boot
    is what a user waits for."""
    connection = dict(boot.connection or {})
    connection["ip"] = args.kernel_ip
    kernel_file = Path(args.config_dir) / "kernel.json"
    argv = [args.python, "-m", "ipykernel_launcher", "-f", str(kernel_file)]

    def start() -> subprocess.Popen[Any]:
        # Rewritten each time: ipykernel rewrites it at start, so it must stay writable.
        write_file(kernel_file, json.dumps(connection, indent=2) + "\n", 0o600)
        written[0] = kernel_file.stat().st_mtime_ns
        try:
            cwd = _claimed_dir(Path(args.config_dir)) or args.work_dir
            return sup.spawn(argv, cwd=cwd, stdin=subprocess.DEVNULL)
        except OSError as e:
            raise RuntimeFailure(f"cannot start the kernel ({args.python}): {e}") from e

    written = [0]  # when we wrote the connection file: ipykernel's rewrite comes later
    kernel = start()
    say(f"kernel started (pid {kernel.pid})")
    try:
        sshd = set_up()
    except BaseException:
        sup.stop(kernel, grace=0)
        raise
    if sshd is not None:
        try:
            sshd.wait_ready()
        except RuntimeFailure:
            sup.stop(kernel, grace=0)
            raise
    _wait_up(sup, kernel, kernel_file, written[0], int(connection.get("hb_port") or 0))
    if kernel.returncode is not None:  # died while starting: the session never runs
        say(f"kernel exited with code {kernel.returncode} before it listened")
        return exit_code(kernel.returncode) or 1
    say(READY)
    exited_at: float | None = None
    while True:
        for signum in sup.take_signals():
            if signum == signal.SIGINT:
                signal_group(kernel, signal.SIGINT)
                say("interrupt sent to the kernel")
            elif signum == signal.SIGHUP:
                sup.stop(kernel)
                kernel, exited_at = start(), None
                say(f"kernel restarted (pid {kernel.pid})")
            elif signum == signal.SIGTERM:
                sup.stop(kernel)
                say("kernel stopped")
                return 0
        if kernel.returncode is not None:
            if exited_at is None:
                say(f"kernel exited with code {kernel.returncode}")
                exited_at = time.monotonic()
            left = exited_at + RESTART_GRACE - time.monotonic()
            if left <= 0:
                return exit_code(kernel.returncode)
            sup.wait(left)
            continue
        sup.wait(None)


def _claimed_dir(config_dir: Path) -> str | None:
    """The claiming notebook's folder of a warm session (see ``CLAIM_FILE``), if any."""
    try:
        folder = json.loads((config_dir / CLAIM_FILE).read_text(encoding="utf-8"))["work_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if isinstance(folder, str) and Path(folder).is_dir() else None


def _wait_up(
    sup: Supervisor, kernel: subprocess.Popen[Any], kernel_file: Path, written: int, hb_port: int
) -> None:
    """Until the ipykernel has bound its sockets, exits, or a signal comes; at most
    :data:`KERNEL_LISTEN_TIMEOUT` seconds.

    ipykernel rewrites its connection file once its sockets and heartbeat are bound:
    inotify tells (:mod:`.file_watch`), so waiting costs the kernel's CPU share
    nothing (a kernel of 0.05 cpu boots 20 times slower, and so would any poll that
    costs). Without inotify the file is looked at every 50 ms; either way, every
    second the heartbeat port is looked for too. So a kernel that dies at start (a
    broken image, a missing package) fails the session's start, with its log,
    instead of a RUNNING session whose kernel is dead."""
    deadline = time.monotonic() + KERNEL_LISTEN_TIMEOUT
    watch = watch_dir(kernel_file.parent)
    fds = () if watch is None else (watch,)
    try:
        while kernel.returncode is None and not sup.signals_pending:
            with contextlib.suppress(OSError):
                if kernel_file.stat().st_mtime_ns > written:
                    return
            if hb_port and _listening(hb_port):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            sup.wait(min(left, 1.0 if fds else 0.05), fds)
            if watch is not None:
                written_names(watch)  # drained: the stat above decides
    finally:
        if watch is not None:
            os.close(watch)


def _listening(port: int) -> bool:
    """Whether a TCP socket of this network namespace listens on ``port`` (Linux)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN
            if len(fields) > 3 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                return True
    return False


def run_command(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, set_up: SetUp) -> int:
    """Run ``startup_command``: a batch task (its exit code is the session's result), or
    an inference session's model server (``serve``: its exit ends the replica)."""
    sshd = set_up()
    if sshd is not None:
        sshd.wait_ready()  # the command may ssh right away; a dead sshd must stop it first
    say(READY)
    command = boot.startup_command or ""
    try:
        child = sup.spawn(["/bin/sh", "-c", command], cwd=args.work_dir, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise RuntimeFailure(f"cannot start the {boot.mode} command: {e}") from e
    say(f"{boot.mode} command started (pid {child.pid})")
    timeout = boot.batch_timeout
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        for signum in sup.take_signals():
            if signum == signal.SIGTERM:
                sup.stop(child)
                say(f"{boot.mode} command terminated")
                return 128 + signal.SIGTERM
            signal_group(child, signum)  # INT/HUP: the command decides
        if child.returncode is not None:
            say(f"{boot.mode} command exited with code {child.returncode}")
            return exit_code(child.returncode)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            say(f"{TASK_TIMEOUT} after {timeout:g} s")
            sup.stop(child)
            return EXIT_TIMEOUT
        sup.wait(left)


def run_wait(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, set_up: SetUp) -> int:
    """Idle (reaping orphans) until told to stop: sub kernels only host sshd and services."""
    sshd = set_up()
    if sshd is not None:
        sshd.wait_ready()
    say(READY)
    while True:
        signals = sup.take_signals()
        if signal.SIGTERM in signals or signal.SIGINT in signals:
            return 0
        sup.wait(None)


RUNNERS = {
    "kernel": run_kernel,
    "batch": run_command,
    "serve": run_command,
    "wait": run_wait,
    "sftp": run_sftp,
}
