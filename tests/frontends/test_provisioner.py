"""The ``bai`` kernel provisioner end to end: a real Jupyter server, real Docker.

The server is pytest-jupyter's, in this process; the session manager is
registered in-process as the bai server extension does, on a store and with an
agent capacity of each test's own. ``jupyter execute`` runs as a separate
process with no server, on the manager it embeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import kernel_client, make_manager
from harness.notebooks import run_notebook
from jupyter_client.asynchronous.client import AsyncKernelClient

# pytest-jupyter's server fixtures for this module only (as a plugin its hooks would take
# over every async test of the suite from pytest-asyncio).
from pytest_jupyter.jupyter_server import *  # noqa: F403
from tornado.httpclient import HTTPClientError, HTTPResponse
from traitlets.config import Config

from bai_jupyter import kernelspecs
from bai_jupyter.kernel_plan import LABEL_SCOPE, LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager, ScopedManager
from bai_jupyter.model import Session, Status
from bai_jupyter.provisioner import BaiProvisioner
from bai_jupyter.registry import local_owner, register_manager, unregister_manager
from bai_jupyter.runtime.protocol import READY_LINE
from bai_jupyter.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(120)]

Fetch = Callable[..., Awaitable[HTTPResponse]]
SMALL = {"cpu": "0.5", "mem": "512m"}


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's
async def jp_asyncio_loop() -> asyncio.AbstractEventLoop:
    """The server runs on pytest-asyncio's loop, the one the tests and the manager use."""
    return asyncio.get_running_loop()


@pytest.fixture
def pending_kernels() -> bool:
    return False


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's
def jp_server_config(pending_kernels: bool) -> Config:
    return Config(
        {
            "ServerApp": {"jpserver_extensions": {}},
            "MappingKernelManager": {"use_pending_kernels": pending_kernels},
        }
    )


@pytest.fixture
def capacity() -> dict[str, str] | None:
    """The test agent's capacity (``None``: the whole engine)."""
    return None


@pytest.fixture
async def manager(
    tmp_path: Path, kernel_image: str, capacity: dict[str, str] | None
) -> AsyncIterator[BaiSessionManager]:
    """A manager on the test's own store, registered in-process like the server extension's."""
    agents = [] if capacity is None else [{"id": "docker", "slots": capacity}]
    mgr = make_manager(tmp_path, "docker", agents=agents)
    await mgr.start()
    register_manager(mgr)
    try:
        yield mgr
    finally:
        unregister_manager(mgr)
        for session in await mgr.list_sessions():
            if not session.status.is_terminal:
                await mgr.destroy(session.id)
        await mgr.stop()


def _install(name: str, interrupt_mode: str = "signal", **config: Any) -> None:
    """Install a bai kernelspec into the test's Jupyter data dir (set by pytest-jupyter)."""
    spec = kernelspecs.kernelspec_json(name, config, interrupt_mode)
    kernelspecs.install(name, spec, user=True)


async def _start(fetch: Fetch, name: str) -> str:
    reply = await fetch("api", "kernels", method="POST", body=json.dumps({"name": name}))
    kernel_id: str = json.loads(reply.body)["id"]
    return kernel_id


@contextlib.asynccontextmanager
async def _client(serverapp: Any, kernel_id: str) -> AsyncIterator[AsyncKernelClient]:
    """A client of the Jupyter kernel, once it started; stopped whatever happens."""
    km = serverapp.kernel_manager.get_kernel(kernel_id)
    await km.ready
    client: AsyncKernelClient = km.client()
    async with kernel_client(client, timeout=30) as ready:
        yield ready


async def _ws_run(ws: Any, code: str) -> str:
    """Execute ``code`` over a kernel's WebSocket (the legacy JSON protocol); its stdout."""
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "session": "t", "version": "5.3"}
    content = {"code": code, "silent": False, "store_history": True, "allow_stdin": False}
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    ws.write_message(json.dumps({**message, "channel": "shell", "buffers": []}))
    out: list[str] = []
    replied = idle = False
    while not (replied and idle):  # the reply (shell) and the output (iopub) in any order
        reply = json.loads(await asyncio.wait_for(ws.read_message(), 60))
        if reply.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if reply["msg_type"] == "stream":
            out.append(reply["content"]["text"])
        elif reply["msg_type"] == "execute_reply":
            assert reply["content"]["status"] == "ok", reply["content"]
            replied = True
        elif reply["msg_type"] == "status":
            idle = reply["content"]["execution_state"] == "idle"
    return "".join(out)


async def _run(client: AsyncKernelClient, code: str) -> tuple[dict[str, Any], str]:
    """Execute ``code``; its reply's content and its stdout."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = await client.execute_interactive(code, timeout=30, output_hook=hook)
    content: dict[str, Any] = reply["content"]
    return content, "".join(out)


async def _session_of(manager: BaiSessionManager, kernel_id: str) -> Session:
    """The session of a Jupyter kernel (a pending kernel's may take a moment to appear)."""
    for _ in range(100):
        for session in await manager.list_sessions():
            if session.meta.get("jupyter_kernel_id") == kernel_id:
                return session
        await asyncio.sleep(0.1)
    raise AssertionError(f"no session records Jupyter kernel {kernel_id}")


def _containers(docker_engine: Any, label: str) -> list[Any]:
    found: list[Any] = docker_engine.containers.list(all=True, filters={"label": label})
    return found


SSH = (
    "import subprocess\n"
    "def sh(*cmd): return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()\n"
)


async def test_cluster_kernel_runs_in_main1_and_reaches_sub1(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    _install("bai-cluster-3", cluster_size=3, resources=SMALL)
    kernel_id = await _start(jp_fetch, "bai-cluster-3")
    async with _client(jp_serverapp, kernel_id) as client:
        session = await _session_of(manager, kernel_id)
        assert session.status is Status.RUNNING
        content, out = await _run(
            client,
            SSH + "import os, socket\n"
            "print(socket.gethostname())\n"
            "print(os.environ['BACKENDAI_SESSION_ID'], os.environ['BACKENDAI_CLUSTER_HOSTS'],"
            " os.environ['BACKENDAI_CLUSTER_ROLE'], os.environ['BACKENDAI_CLUSTER_SIZE'])\n"
            "print(sh('ssh', 'sub1', 'hostname'))",
        )
        assert content["status"] == "ok", content
        assert out.splitlines() == ["main1", f"{session.id} main1,sub1,sub2 main 3", "sub1"]


@pytest.mark.parametrize("mode", ["signal", "message"])
async def test_interrupt_stops_a_sleep_within_2s(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any, mode: str
) -> None:
    _install(f"bai-{mode}", interrupt_mode=mode, resources=SMALL)
    kernel_id = await _start(jp_fetch, f"bai-{mode}")
    async with _client(jp_serverapp, kernel_id) as client:
        msg_id = client.execute("import time; time.sleep(60)")
        while True:  # until the cell runs
            msg = await client.get_iopub_msg(timeout=10)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
                break
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await jp_fetch("api", "kernels", kernel_id, "interrupt", method="POST", body="")
        reply = await client.get_shell_msg(timeout=5)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = await client.get_shell_msg(timeout=5)
        assert time.monotonic() - started < 2
        assert reply["content"]["ename"] == "KeyboardInterrupt"


async def test_restart_keeps_the_cluster_sub1_and_its_files(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    _install("bai-cluster-3", cluster_size=3, resources=SMALL)
    kernel_id = await _start(jp_fetch, "bai-cluster-3")
    async with _client(jp_serverapp, kernel_id) as client:
        before = await _session_of(manager, kernel_id)
        content, _ = await _run(client, SSH + "x = 1\nsh('ssh', 'sub1', 'echo kept > /tmp/marker')")
        assert content["status"] == "ok", content

        await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body="")
        await client.wait_for_ready(timeout=30)
        content, out = await _run(client, SSH + "print(sh('ssh', 'sub1', 'cat /tmp/marker'))")
        assert out.strip() == "kept"
        content, _ = await _run(client, "x")
        assert content["ename"] == "NameError"  # a fresh ipykernel …
        after = await manager.get(before.id)  # … in the same session, same containers
        assert after.status is Status.RUNNING
        assert [k.container_id for k in after.kernels] == [k.container_id for k in before.kernels]


async def test_shutdown_leaves_no_container_and_provisioner_info_round_trips(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any, docker_engine: Any
) -> None:
    _install("bai-cluster-3", cluster_size=3, resources=SMALL)
    kernel_id = await _start(jp_fetch, "bai-cluster-3")
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await km.ready
    session = await _session_of(manager, kernel_id)
    assert len(_containers(docker_engine, f"{LABEL_SESSION}={session.id}")) == 3

    info = await km.provisioner.get_provisioner_info()
    again = BaiProvisioner(kernel_id=kernel_id, kernel_spec=km.kernel_spec, parent=km)
    await again.load_provisioner_info(json.loads(json.dumps(info, default=bytes.decode)))
    assert again.has_process
    assert await again.poll() is None

    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    assert (await manager.get(session.id)).status is Status.TERMINATED
    assert _containers(docker_engine, f"{LABEL_SESSION}={session.id}") == []
    assert await again.poll() == 0


@pytest.mark.parametrize("pending_kernels", [True])
@pytest.mark.parametrize("capacity", [{"cpu": "1", "mem": "2g"}])
async def test_a_queued_kernel_starts_when_capacity_frees(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_ws_fetch: Any, jp_serverapp: Any
) -> None:
    _install("bai-whole", resources={"cpu": "1", "mem": "512m"})
    first = await _start(jp_fetch, "bai-whole")
    await jp_serverapp.kernel_manager.get_kernel(first).ready
    second = await _start(jp_fetch, "bai-whole")  # returns at once: a pending kernel
    queued = await _session_of(manager, second)
    while queued.status is Status.PENDING and not queued.scheduler_data.get("retries"):
        await asyncio.sleep(0.1)
        queued = await manager.get(queued.id)
    assert queued.status is Status.PENDING
    assert "cpu" in queued.scheduler_data["msg"]
    assert not jp_serverapp.kernel_manager.get_kernel(second).ready.done()
    # JupyterLab opens the kernel's WebSocket at once; the server answers it only once
    # the kernel is up, so what the browser sends meanwhile waits in its own queue.
    connecting = asyncio.ensure_future(jp_ws_fetch("api", "kernels", second, "channels"))
    await asyncio.sleep(1)
    assert not connecting.done()

    await jp_fetch("api", "kernels", first, method="DELETE")
    await asyncio.wait_for(jp_serverapp.kernel_manager.get_kernel(second).ready, 60)
    ws = await asyncio.wait_for(connecting, 60)
    try:
        assert await _ws_run(ws, "print(6 * 7)") == "42\n"
    finally:
        ws.close()
    async with _client(jp_serverapp, second) as client:
        _, out = await _run(client, "import socket; print(socket.gethostname())")
        assert out.strip() == "main1"


@pytest.mark.parametrize("capacity", [{"cpu": "1", "mem": "2g"}])
async def test_launch_timeout_fails_clearly_and_leaves_no_session(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any, docker_engine: Any
) -> None:
    busy = await manager.create(
        {"type": "batch", "startup_command": "sleep 60", "resources": {"cpu": "1"}}, "someone"
    )
    await manager.wait_for(busy.id, {Status.RUNNING}, timeout=60)
    _install("bai-impatient", resources={"cpu": "1", "mem": "512m"}, launch_timeout=2)
    with pytest.raises(HTTPClientError) as failed:
        await _start(jp_fetch, "bai-impatient")
    assert failed.value.response is not None
    error = json.loads(failed.value.response.body)["message"]
    assert "did not start within launch_timeout=2 s and was cancelled" in error
    assert "needs cpu=1 but the largest agent has 0 free" in error
    sessions = [s for s in await manager.list_sessions() if s.id != busy.id]
    assert [(s.status, s.status_info) for s in sessions] == [(Status.CANCELLED, "launch-timeout")]
    assert _containers(docker_engine, f"{LABEL_SESSION}={sessions[0].id}") == []


def test_jupyter_execute_runs_a_notebook_and_its_bai_magics_without_a_server(
    tmp_path: Path, kernel_image: str, docker_engine: Any
) -> None:
    """``jupyter execute`` embeds a manager, which also serves its kernels' API: ``%bai``
    in main1 shows and lists the kernel's own session, and its log, with no Jupyter
    server anywhere."""
    data = tmp_path / "data"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))},
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    install = [sys.executable, "-m", "bai_jupyter.cli", "kernelspec", "install", "bai-py"]
    subprocess.run([*install, "--cpu", "0.5", "--mem", "512m"], env=env, check=True)
    source = (
        "import socket; print(socket.gethostname())\n"
        "%load_ext bai_jupyter\n"
        "%bai status --text\n"
        "%bai sessions --text\n"
        "%bai logs\n"
    )
    _, printed = run_notebook(tmp_path, source, env)
    assert printed.startswith("main1\n"), printed
    store = Store(f"sqlite:///{data}/bai_jupyter/store.sqlite")
    try:
        with store.read() as tx:
            sessions = tx.list_sessions()
        assert [s.status for s in sessions] == [Status.TERMINATED]
        own = sessions[0].id
        assert f"session {own} · interactive · RUNNING" in printed, printed  # %bai status
        assert re.search(rf"^{own[:8]} +interactive +RUNNING ", printed, re.M), printed
        assert f"\n{READY_LINE}\n" in printed, printed  # %bai logs: main1's output
        assert _containers(docker_engine, f"{LABEL_SCOPE}={store.id}") == []
    finally:
        store.close()


async def test_a_kernel_attached_to_a_session_leaves_it_running(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    session = await manager.create({"name": "shared", "resources": SMALL}, local_owner())
    await manager.wait_for(session.id, {Status.RUNNING}, timeout=60)
    _install("bai-attach", session="shared")
    kernel_id = await _start(jp_fetch, "bai-attach")
    async with _client(jp_serverapp, kernel_id) as client:
        _, out = await _run(client, "import os; print(os.environ['BACKENDAI_SESSION_ID'])")
        assert out.strip() == session.id
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    assert (await manager.get(session.id)).status is Status.RUNNING
    assert [s.id for s in await manager.list_sessions()] == [session.id]


async def _listed(fetch: Fetch) -> list[str]:
    return [k["id"] for k in json.loads((await fetch("api", "kernels")).body)]


async def test_a_session_ended_on_purpose_ends_its_kernel_without_a_restart(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any, caplog: Any
) -> None:
    _install("bai-small", resources=SMALL)
    kernel_id = await _start(jp_fetch, "bai-small")
    await jp_serverapp.kernel_manager.get_kernel(kernel_id).ready
    session = await _session_of(manager, kernel_id)
    # What the sidebar's Terminate and DELETE /bai/sessions/<id> call, as the owner.
    await ScopedManager(manager, local_owner()).destroy(session.id)
    for _ in range(30):
        if kernel_id not in await _listed(jp_fetch):
            break
        await asyncio.sleep(0.5)
    assert kernel_id not in await _listed(jp_fetch)  # Jupyter dropped the dead kernel
    await asyncio.sleep(4)  # longer than the restarter's poll: a restart would show now
    sessions = await manager.list_sessions()
    assert [(s.id, s.status) for s in sessions] == [(session.id, Status.TERMINATED)]
    assert f"was ended (user-requested) by {local_owner()}" in caplog.text


async def test_a_session_that_died_restarts_its_kernel_on_a_new_session(
    manager: BaiSessionManager, jp_fetch: Fetch, jp_serverapp: Any, docker_engine: Any
) -> None:
    _install("bai-small", resources=SMALL)
    kernel_id = await _start(jp_fetch, "bai-small")
    await jp_serverapp.kernel_manager.get_kernel(kernel_id).ready
    died = await _session_of(manager, kernel_id)
    (main1,) = _containers(docker_engine, f"{LABEL_SESSION}={died.id}")
    main1.kill()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        sessions = await manager.list_sessions()
        if len(sessions) == 2 and sessions[1].status is Status.RUNNING:
            break
        await asyncio.sleep(0.5)
    assert (await manager.get(died.id)).status is Status.ERROR
    assert [s.meta["jupyter_kernel_id"] for s in sessions] == [kernel_id, kernel_id]
    assert sessions[1].status is Status.RUNNING
    assert kernel_id in await _listed(jp_fetch)
