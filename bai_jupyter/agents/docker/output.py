"""Waiting for a line in a kernel's output by following its log stream.

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
from .engine import Engine

__all__ = ["follow_output"]


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
