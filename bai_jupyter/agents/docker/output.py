"""A kernel's output: its log read within a cap, an exec's output read as it comes, and
waiting for a line by following the log stream.

Nothing here holds a whole output: the engine's streams are read chunk by chunk
into an :class:`~bai_jupyter.agents.capped.OutputTail`, and a log is asked of the
engine with its own ``tail`` (the engine reads its file from the end).

The engine pushes each write to a followed log as it happens, so the manager
learns that a runtime is ready the moment it says so, with one request per
kernel instead of a ``docker logs`` call every few milliseconds. The SDK's
stream blocks: each wait reads it in a thread of its own (never the loop's
default executor, which many kernels starting at once would fill).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ..base import AgentError
from ..capped import OutputTail
from .engine import Engine

__all__ = ["exec_capped", "follow_output", "read_logs"]

#: The command an exec runs ``command`` under (argv[0] the seconds, then the command): the
#: time limit is enforced inside with coreutils ``timeout`` when the image has it.
_WITH_TIMEOUT = (
    'if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 "$0" "$@"; else exec "$@"; fi'
)


async def read_logs(engine: Engine, cid: str, tail: int | None, limit: int, what: str) -> str:
    """The container's last ``tail`` log lines (all: ``None``) within ``limit`` bytes;
    ``what`` begins an error's message."""
    api = await engine.api()

    def read() -> str:
        stream = api.logs(  # the SDK follows a stream unless told not to
            cid,
            stdout=True,
            stderr=True,
            stream=True,
            follow=False,
            tail="all" if tail is None else tail,
        )
        try:
            return OutputTail(limit).feed_all(stream).log_text()
        finally:
            _close(stream)

    return await engine.call(what, read)


async def exec_capped(
    engine: Engine, cid: str, command: list[str], timeout: float, limit: int, what: str
) -> tuple[int, bytes, int]:
    """Run ``command`` in the container: its exit code, the last ``limit`` bytes of its
    output (stdout and stderr as they came) and how many bytes came before them.

    Past ``timeout`` (and a grace for ``timeout -k``) the stream is closed, which ends the
    reading thread, and :class:`AgentError` says so."""
    api = await engine.api()
    wrapped = ["sh", "-c", _WITH_TIMEOUT, f"{timeout:g}", *command]

    def start() -> tuple[str, Any]:
        exec_id = api.exec_create(cid, wrapped, stdout=True, stderr=True)["Id"]
        return exec_id, api.exec_start(exec_id, stream=True)

    exec_id, stream = await engine.call(what, start)
    kept = OutputTail(limit)

    def read() -> int:
        try:
            kept.feed_all(stream)
        finally:
            _close(stream)
        return int(api.exec_inspect(exec_id)["ExitCode"])

    try:
        exit_code = await asyncio.wait_for(engine.call(what, read), timeout + 10)
    except asyncio.TimeoutError as exc:
        raise AgentError(f"{what}: {command[0]} did not end within {timeout:g}s") from exc
    finally:
        _close(stream)  # timed out or cancelled: ends the thread's read (else a no-op)
    return exit_code, kept.value(), kept.dropped


async def follow_output(engine: Engine, cid: str, text: str, timeout: float) -> bool:
    """Whether the container's output (stdout and stderr, from its start) contains ``text``
    within ``timeout`` seconds; False as soon as it ended without."""
    api = await engine.api()
    stream: Any = await engine.call(
        f"cannot follow the output of {cid[:12]}",
        api.logs,
        cid,
        stdout=True,
        stderr=True,
        stream=True,
        follow=True,
    )
    loop = asyncio.get_running_loop()
    found: asyncio.Future[bool] = loop.create_future()
    needle = text.encode()

    def settle(result: bool | BaseException) -> None:
        if found.done():
            return
        if isinstance(result, BaseException):
            found.set_exception(result)
        else:
            found.set_result(result)

    def read() -> None:
        seen = b""
        result: bool | BaseException = False
        try:
            for chunk in stream:
                # Keep what a match may straddle: the needle's length, less one byte.
                seen = seen[-(len(needle) - 1) :] + chunk if len(needle) > 1 else chunk
                if needle in seen:
                    result = True
                    break
        except Exception as exc:  # closed on time-out, or the engine went away
            result = AgentError(f"cannot follow the output of {cid[:12]}: {exc}")
        finally:
            _close(stream)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=read, name=f"bai-follow-{cid[:12]}", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(found), timeout)
    except asyncio.TimeoutError:
        return False
    finally:
        if not found.done():
            _close(stream)  # ends the reading thread
            found.cancel()


def _close(stream: Any) -> None:
    """Stop a followed log: the SDK's close shuts the socket down, and the response's close
    lets go of it (else the socket is left to the garbage collector, with a warning)."""
    with contextlib.suppress(Exception):
        stream.close()
    with contextlib.suppress(Exception):
        stream._response.close()
