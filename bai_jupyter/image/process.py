"""Running the build's commands: short ones captured, long ones logged, failures explained."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: Where builds work and keep their logs (a root file system can be large: not a tmpfs /tmp).
WORK_PARENT = Path("/var/tmp")
#: Seconds one long build step (debootstrap, docker build, docker import) may take.
STEP_TIMEOUT = 1800.0
_TAIL_LINES = 30

Progress = Callable[[str], None]


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-_TAIL_LINES:])


class ImageBuildError(RuntimeError):
    """A build or check failed; the message says what, and shows the tail of its output."""

    def __init__(self, message: str, output: str = "") -> None:
        tail = _tail(output)
        super().__init__(f"{message}\n--- last lines of output ---\n{tail}" if tail else message)


class DockerUnavailable(ImageBuildError):
    """No docker CLI, or no engine answers: nothing to build with (tests skip or fail on it)."""


def say(message: str) -> None:
    """Default progress sink: one ``==>`` line on stderr (stdout stays the caller's)."""
    print(f"==> {message}", file=sys.stderr, flush=True)


def run_command(
    cmd: Sequence[str],
    what: str,
    *,
    timeout: float | None = 60.0,
    env: dict[str, str] | None = None,
) -> str:
    """Run a short command, return its stdout+stderr; ImageBuildError with its tail on failure."""
    try:
        proc = subprocess.run(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{what}: {cmd[0]} not found on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        out = exc.output if isinstance(exc.output, str) else ""
        raise ImageBuildError(f"{what}: timed out after {timeout:.0f} s", out) from exc
    if proc.returncode != 0:
        raise ImageBuildError(
            f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}", proc.stdout
        )
    return proc.stdout


def run_logged(
    cmd: Sequence[str], what: str, log: Path, *, env: dict[str, str] | None = None
) -> None:
    """Run a long, chatty command with its output appended to ``log`` (not kept in memory)."""
    with log.open("a", encoding="utf-8", errors="replace") as sink:
        sink.write(f"\n$ {shlex.join(cmd)}\n")
        sink.flush()
        try:
            rc = subprocess.run(
                list(cmd),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=STEP_TIMEOUT,
                env=env,
                check=False,
            ).returncode
        except FileNotFoundError as exc:
            raise ImageBuildError(f"{what}: {cmd[0]} not found on PATH") from exc
        except subprocess.TimeoutExpired as exc:
            raise ImageBuildError(
                f"{what}: timed out after {STEP_TIMEOUT:.0f} s",
                log.read_text(errors="replace"),
            ) from exc
    if rc != 0:
        raise ImageBuildError(
            f"{what} failed (exit {rc}): {shlex.join(cmd)}", log.read_text(errors="replace")
        )
