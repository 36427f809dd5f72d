"""What main1 (and every other kernel) runs once set up: an ipykernel, a batch task, or nothing."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import time
from pathlib import Path

from .config import Bootstrap, write_file
from .processes import RuntimeFailure, Supervisor, exit_code, signal_group
from .protocol import EXIT_TIMEOUT, READY, TASK_TIMEOUT, say
from .ssh import SSHD

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any

#: Seconds the runtime outlives an exited ipykernel, for a SIGHUP: Jupyter restarts a
#: kernel by asking it to shut down first, and only then (via the manager) sends SIGHUP.
RESTART_GRACE = 5.0


# --- modes ----------------------------------------------------------------------------------


def run_kernel(
    sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, sshd: SSHD | None
) -> int:
    """Supervise an ipykernel: INT interrupts, HUP restarts on the same ports, TERM ends."""
    connection = dict(boot.connection or {})
    connection["ip"] = args.kernel_ip
    kernel_file = Path(args.config_dir) / "kernel.json"
    argv = [args.python, "-m", "ipykernel_launcher", "-f", str(kernel_file)]

    def start() -> subprocess.Popen[Any]:
        # Rewritten each time: ipykernel rewrites it at start, so it must stay writable.
        write_file(kernel_file, json.dumps(connection, indent=2) + "\n", 0o600)
        try:
            return sup.spawn(argv, cwd=args.work_dir, stdin=subprocess.DEVNULL)
        except OSError as e:
            raise RuntimeFailure(f"cannot start the kernel ({args.python}): {e}") from e

    kernel = start()
    say(f"kernel started (pid {kernel.pid})")
    if sshd is not None:
        try:
            sshd.wait_ready()
        except RuntimeFailure:
            sup.stop(kernel, grace=0)
            raise
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


def run_command(
    sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, sshd: SSHD | None
) -> int:
    """Run ``startup_command``: a batch task (its exit code is the session's result), or
    an inference session's model server (``serve``: its exit ends the replica)."""
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


def run_wait(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, sshd: SSHD | None) -> int:
    """Idle (reaping orphans) until told to stop: sub kernels only host sshd and services."""
    if sshd is not None:
        sshd.wait_ready()
    say(READY)
    while True:
        signals = sup.take_signals()
        if signal.SIGTERM in signals or signal.SIGINT in signals:
            return 0
        sup.wait(None)


RUNNERS = {"kernel": run_kernel, "batch": run_command, "serve": run_command, "wait": run_wait}
