"""Child processes: the supervised ipykernel or task, signals passed on, shell-style exit codes."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any

#: Seconds between SIGTERM and SIGKILL when stopping a child.
GRACE = 2.0


class RuntimeFailure(Exception):
    """Preparing the kernel failed (exit 1); the message says what."""


# --- processes ------------------------------------------------------------------------------


def exit_code(returncode: int) -> int:
    """A shell-style exit code: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    """Signal the child's whole process group (it and whatever it spawned), like Jupyter."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)


class Supervisor:
    """One loop for signals and child exits, without threads, so it also works as PID 1.

    Signal handlers only record the signal; ``signal.set_wakeup_fd`` wakes the
    ``select`` in :meth:`wait`, so no signal or child exit is missed between checks.
    As PID 1 it reaps every orphan (``waitpid(-1)``) and hands our children's
    statuses to their ``Popen`` objects.
    """

    def __init__(self) -> None:
        self.reap_all = os.getpid() == 1
        self.children: dict[int, subprocess.Popen[Any]] = {}
        self._signals: list[int] = []
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    @property
    def signals_pending(self) -> bool:
        return bool(self._signals)

    def take_signals(self) -> list[int]:
        signals, self._signals = self._signals, []
        return signals

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a child in its own session: signals reach it only through us."""
        proc: subprocess.Popen[Any] = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.children[proc.pid] = proc
        return proc

    def reap(self) -> None:
        if not self.reap_all:
            for proc in list(self.children.values()):
                proc.poll()
            return
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.get(pid)
            if child is not None and child.returncode is None:
                child.returncode = os.waitstatus_to_exitcode(status)

    def _sleep(self, timeout: float | None, fds: tuple[int, ...] = ()) -> None:
        """Sleep until the wake-up pipe has bytes (a signal came), one of ``fds`` is
        readable, or ``timeout`` passes."""
        select.select([self._wake_r, *fds], [], [], timeout)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 512):
                pass

    def wait(self, timeout: float | None, fds: tuple[int, ...] = ()) -> None:
        """Block until a signal arrives, a child exits, one of ``fds`` is readable, or
        ``timeout`` seconds pass."""
        self.reap()
        if not self._signals:
            self._sleep(timeout, fds)
        self.reap()

    def stop(self, proc: subprocess.Popen[Any], grace: float = GRACE) -> None:
        """SIGTERM the child's group, SIGKILL after ``grace``; signals meanwhile stay queued."""
        signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        killed = False
        while True:
            self.reap()
            if proc.returncode is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0 and not killed:
                signal_group(proc, signal.SIGKILL)
                killed = True
            # Signals queue in self._signals; only the wake-up bytes are drained here.
            self._sleep(None if killed else left)
        # Stragglers in the group may hold the kernel's inherited sockets: end them too.
        signal_group(proc, signal.SIGKILL)

    def terminate_all(self) -> None:
        """SIGTERM whatever is still running (services); used on the way out, no waiting."""
        for proc in self.children.values():
            if proc.returncode is None:
                signal_group(proc, signal.SIGTERM)
