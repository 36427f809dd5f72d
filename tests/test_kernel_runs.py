"""The execute API's kernel client never outlives a connect that failed or was cancelled.

A client dropped with its channels open is collected later, in whatever test or
request then runs, and each of its unclosed sockets warns there (in the test
suite: a ``PytestUnraisableExceptionWarning`` failing an unrelated test).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import time

import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient

from bai_jupyter.errors import Unavailable
from bai_jupyter.model import Session, SessionSpec, Status
from bai_jupyter.runtime.protocol import CHANNEL_PORT_KEYS
from bai_jupyter.server.kernel_runs import KernelRuns


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _silent_session() -> Session:
    """A RUNNING session whose main1 names ports where no kernel answers."""
    session = Session.create(SessionSpec(), "alice", time.time())
    session.status = Status.RUNNING
    ports = {key: _unused_port() for key in CHANNEL_PORT_KEYS}
    session.kernels[0].info["connection"] = {
        **ports,
        "ip": "127.0.0.1",
        "transport": "tcp",
        "key": "k",
        "signature_scheme": "hmac-sha256",
    }
    return session


def _open_clients() -> list[AsyncKernelClient]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, AsyncKernelClient) and o.channels_running]


async def test_a_failed_or_cancelled_connect_leaves_no_open_kernel_client() -> None:
    before = {id(client) for client in _open_clients()}
    runs = KernelRuns(
        chunk_timeout=1, connect_timeout=0.5, run_ttl=60, log=logging.getLogger(__name__)
    )
    with pytest.raises(Unavailable, match="did not answer"):
        await runs.step(_silent_session(), "query", "1", None)

    runs.connect_timeout = 30
    call = asyncio.ensure_future(runs.step(_silent_session(), "query", "1", None))
    await asyncio.sleep(0.5)  # waiting for kernel_info's reply
    call.cancel()  # the caller went away
    with pytest.raises(asyncio.CancelledError):
        await call

    left = [client for client in _open_clients() if id(client) not in before]
    assert left == [], "kernel clients left with open channels"
    runs.close()
