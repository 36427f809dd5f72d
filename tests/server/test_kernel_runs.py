"""The execute API's kernel client: never left open by a failed connect, never stuck
on a kernel that restarted under it.

A client dropped with its channels open is collected later, in whatever test or
request then runs, and each of its unclosed sockets warns there (in the test
suite: a ``PytestUnraisableExceptionWarning`` failing an unrelated test). A client
kept across a restart of the kernel (same ports: ZeroMQ reconnects quietly) would
wait forever for a reply the old kernel never sent.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

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


async def _until_finished(runs: KernelRuns, session: Session, reply: dict[str, Any]) -> Any:
    deadline = time.monotonic() + 30
    while reply["status"] == "continued":
        assert time.monotonic() < deadline, "the run never finished"
        reply = await runs.step(session, "continue", "", reply["run_id"])
    return reply


async def test_a_run_cut_by_a_kernel_restart_ends_and_the_next_reaches_the_new_kernel(
    tmp_path: Path,
) -> None:
    kernel = AsyncKernelManager(connection_file=str(tmp_path / "kernel.json"))
    await kernel.start_kernel()
    runs = KernelRuns(
        chunk_timeout=1, connect_timeout=30, run_ttl=60, log=logging.getLogger(__name__)
    )
    try:
        session = Session.create(SessionSpec(), "alice", time.time())
        session.status = Status.RUNNING
        info: dict[str, Any] = dict(kernel.get_connection_info())
        session.kernels[0].info["connection"] = {**info, "key": info["key"].decode()}
        pid = "import os; print(os.getpid())"
        first = await _until_finished(runs, session, await runs.step(session, "query", pid, None))
        cut = await runs.step(session, "query", "import time; time.sleep(120)", None)
        assert cut["status"] == "continued"

        await kernel.restart_kernel(now=True)  # the same ports, as main1's runtime does
        ended = await _until_finished(runs, session, cut)
        assert ended["exit_code"] == 1
        assert [item[1]["ename"] for item in ended["console"]] == ["KernelRestarted"]
        after = await _until_finished(runs, session, await runs.step(session, "query", pid, None))
        assert after["exit_code"] == 0 and after["console"] != first["console"], after
    finally:
        runs.close()
        await kernel.shutdown_kernel(now=True)
