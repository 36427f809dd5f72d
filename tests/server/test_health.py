"""Faults a live session meets, against a real server, real engine and real kernels.

A child process's OOM is a notice (the session goes on); the kernel's own OOM death
ends the session; a kernel cut from its network ends it; a service port nothing
listens on answers 502; a first execute waits for a slow kernel; and
jupyter-server-proxy's own ``/proxy/<port>`` routes stay closed in our install.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from harness.server import Server, start_server

from bai_jupyter.model import Session, Status

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

#: Every extension but ours off, except jupyter-server-proxy: left to the installed
#: config files, as in a user's ``jupyter lab`` (the harness turns it off explicitly).
_AS_INSTALLED = """
c.ServerApp.jpserver_extensions = {
    "bai_jupyter": True,
    "jupyterlab": False,
    "jupyter_lsp": False,
    "jupyter_server_terminals": False,
    "notebook_shim": False,
}
c.BaiSessionManager.backend = "docker"
"""
#: Far more than the sessions' 128m: the kernel (cgroup) OOM-kills whoever allocates it.
_ALLOCATE = "b = bytearray(512 * 1024 * 1024)"
_SMALL = {"cpu": "1", "mem": "128m"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("health"), _AS_INSTALLED)
    yield srv
    srv.stop()


async def _running(server: Server, request: dict[str, Any]) -> Session:
    client = server.client()
    session = await client.create(request)
    session = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
    assert session.status is Status.RUNNING, session.status_data
    return session


async def _finished(server: Server, sid: str, code: str) -> dict[str, Any]:
    client = server.client()
    reply = await client.execute(sid, code)
    while reply["status"] == "continued":
        reply = await client.execute(sid, mode="continue", run_id=reply["run_id"])
    return reply


def _stdout(reply: dict[str, Any]) -> str:
    return "".join(str(data) for kind, data in reply["console"] if kind == "stdout")


async def test_a_childs_oom_is_a_notice_and_the_session_goes_on(server: Server) -> None:
    session = await _running(server, {"resources": _SMALL})
    client = server.client()
    notices: list[dict[str, Any]] = []

    async def watch() -> None:
        async for event in client.events():
            if event.get("session_id") == session.id and "notice" in event:
                notices.append(event)
                return

    watching = asyncio.ensure_future(watch())
    await asyncio.sleep(0.5)  # the stream is connected
    try:
        child = (
            "import subprocess, sys\n"
            f"print(subprocess.run([sys.executable, '-c', {_ALLOCATE!r}]).returncode)"
        )
        reply = await _finished(server, session.id, child)
        assert _stdout(reply).strip() == "-9", reply  # the child was killed, not the kernel
        await asyncio.wait_for(watching, 30)
    finally:
        watching.cancel()
    (event,) = notices
    assert event["notice"]["kind"] == "oom" and event["notice"]["kernel"] == "main1"
    assert event["status"] == "RUNNING"
    now = await client.get(session.id)
    assert now.status is Status.RUNNING
    assert now.status_data["oom"]["count"] >= 1
    # main1's kernel lives on: it still runs code, its state intact.
    reply = await _finished(server, session.id, "print(6 * 7)")
    assert (_stdout(reply).strip(), reply["exit_code"]) == ("42", 0)
    assert (await client.get(session.id)).status is Status.RUNNING
    await client.destroy(session.id)


async def test_the_kernels_own_oom_ends_the_session_with_oom_killed(server: Server) -> None:
    session = await _running(server, {"resources": _SMALL})
    client = server.client()
    run = asyncio.ensure_future(client.execute(session.id, _ALLOCATE))
    try:
        ended = await client.wait_for(session.id, {Status.ERROR}, timeout=60)
    finally:
        run.cancel()
        with contextlib.suppress(BaseException):
            await run
    assert (ended.status, ended.status_info) == (Status.ERROR, "oom-killed")


async def test_a_kernel_cut_from_its_session_network_ends_the_session(
    server: Server, docker_engine: Any
) -> None:
    request = {"cluster_size": 2, "resources": {"cpu": "0.5", "mem": "256m"}}
    session = await _running(server, request)
    main = session.main
    network = docker_engine.networks.get(f"bai-{session.id[:12]}")
    network.disconnect(main.container_id)
    client = server.client()
    ended = await client.wait_for(session.id, {Status.ERROR}, timeout=60)
    assert (ended.status, ended.status_info) == (Status.ERROR, "network-disconnected")
    assert ended.status_data["kernel"] == "main1"


async def test_a_service_port_nothing_listens_on_answers_502(server: Server) -> None:
    session = await _running(server, {"resources": _SMALL, "service_ports": ["web:http:8080"]})
    before = len(server.log.read_bytes())
    reply = await server.fetch("GET", f"bai/sessions/{session.id}/proxy/web/")
    assert reply.code == 502, reply.body
    error = json.loads(reply.body)
    assert error["error"] == "bad-gateway" and "did not answer" in error["message"]
    assert b"Traceback" not in server.log.read_bytes()[before:]
    await server.client().destroy(session.id)


async def test_first_execute_waits_for_a_kernel_that_is_slow_to_answer(
    server: Server, docker_engine: Any
) -> None:
    session = await _running(server, {"resources": _SMALL})
    main = docker_engine.containers.get(session.kernels[0].container_id)
    # Frozen for a few seconds right after RUNNING: alive, but its heartbeat misses.
    main.pause()
    thawing = threading.Timer(4.0, main.unpause)
    thawing.start()
    try:
        reply = await _finished(server, session.id, "print('answered')")
    finally:
        thawing.join()
    assert (_stdout(reply).strip(), reply["exit_code"]) == ("answered", 0), reply
    await server.client().destroy(session.id)


async def test_jupyter_server_proxys_own_routes_are_closed(server: Server) -> None:
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    reply = await server.fetch("GET", f"proxy/{port}/api")  # a port that listens: ours
    assert reply.code == 404, (reply.code, reply.body[:200])
    # Our own proxy is there all the same.
    ours = await server.fetch("GET", "bai/sessions/0123456789abcdef/proxy/web/")
    assert ours.code == 404 and "0123456789abcdef" in json.loads(ours.body)["message"]
