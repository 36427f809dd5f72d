"""A server restart: SIGKILL the server with a running and a pending session; start it again."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from harness.server import Server, start_server

from bai_jupyter.model import Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]

_CONFIG = 'c.BaiSessionManager.backend = "docker"\n'
_SERVE = """
import subprocess, sys
open("/tmp/index.html", "w").write("still here")
subprocess.Popen([sys.executable, "-m", "http.server", "8080", "--directory", "/tmp"],
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
state = 41
"""


#: From inside main1: its own session through the kernel-access URL and its session token.
_CALL_HOME = """
import os, urllib.request as u
auth = {"Authorization": "token " + os.environ["BAI_JUPYTER_TOKEN"]}
url = os.environ["BAI_JUPYTER_URL"] + "bai/api/v1/sessions/survivor"
u.urlopen(u.Request(url, headers=auth), timeout=10).status
"""


#: The kernel's own URL and token, as JSON.
_KERNEL_ENV = """
import json, os
json.dumps([os.environ["BAI_JUPYTER_URL"], os.environ["BAI_JUPYTER_TOKEN"]])
"""


def _result(reply: dict[str, Any]) -> Any:
    return [data["data"]["text/plain"] for kind, data in reply["console"] if kind == "result"]


async def _proxied(server: Server, session_id: str) -> bytes:
    """The service's index page through the proxy, once it listens."""
    for _ in range(200):
        reply = await server.fetch("GET", f"bai/sessions/{session_id}/proxy/web/index.html")
        if reply.code == 200:
            return reply.body
        await asyncio.sleep(0.1)
    raise AssertionError(f"the service never answered: {reply.code} {reply.body!r}")


async def test_sessions_survive_a_killed_server(tmp_path: Path, kernel_image: str) -> None:
    root = tmp_path / "server"
    first = start_server(root, _CONFIG)
    ids: list[str] = []
    try:
        client = first.client()
        running = await client.create(
            {"name": "survivor", "service_ports": ["web:http:8080"], "resources": {"mem": "256m"}}
        )
        ids.append(running.id)
        running = await client.wait_for(running.id, {Status.RUNNING}, timeout=120)
        assert running.status is Status.RUNNING, running.status_data
        assert (await client.execute(running.id, _SERVE))["exit_code"] == 0
        assert await _proxied(first, running.id) == b"still here"
        assert _result(await client.execute(running.id, _CALL_HOME)) == ["200"]
        (env,) = _result(await client.execute(running.id, _KERNEL_ENV))
        url, token = json.loads(ast.literal_eval(env))
        assert token.startswith(f"bai2.{running.id}.")  # the session's own token
        pending = await client.create({"starts_at": time.time() + 3, "resources": {"mem": "256m"}})
        ids.append(pending.id)
        assert (await client.get(pending.id)).status is Status.PENDING
    finally:
        first.kill()
    killed_at = time.time()

    port = int(first.url.rsplit(":", 1)[1].strip("/"))
    second = start_server(root, _CONFIG, port=port)  # as an operator restarts it
    client = second.client()
    try:
        survivor = await client.get("survivor")
        assert survivor.status is Status.RUNNING
        later = await client.wait_for(pending.id, {Status.RUNNING}, timeout=120)
        assert later.status is Status.RUNNING, later.status_data
        scheduled = [h.at for h in later.status_history if h.status is Status.SCHEDULED]
        assert scheduled and scheduled[0] > killed_at  # only the new server could place it
        assert await _proxied(second, survivor.id) == b"still here"
        reply = await client.execute(survivor.id, "state + 1")
        assert reply["console"] == [["result", {"data": {"text/plain": "42"}, "metadata": {}}]]
        # The URL and token main1 was given still reach the restarted server.
        assert _result(await client.execute(survivor.id, _CALL_HOME)) == ["200"]
        # ... only while its session lives: ended, the same token is refused.
        await client.destroy(survivor.id)
        kernel = dataclasses.replace(second, url=url)
        ended = await kernel.fetch("GET", f"bai/api/v1/sessions/{survivor.id}", token=token)
        assert ended.code == 403, ended.body
        assert "has ended" in json.loads(ended.body)["message"]
    finally:
        for session_id in ids:
            await client.destroy(session_id)
        second.stop()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
async def test_a_clean_shutdown_ends_kernel_sessions_with_their_kernels(
    tmp_path: Path, kernel_image: str, docker_engine: Any, how: str
) -> None:
    """SIGTERM, or SIGINT with no terminal (JupyterHub's stop: the server's stdin is not a
    tty): Jupyter's kernels go first, while the manager can still remove containers."""
    import signal

    from bai_jupyter.kernel_plan import LABEL_SESSION
    from bai_jupyter.kernelspecs import kernelspec_json
    from bai_jupyter.store import Store

    root = tmp_path / "server"
    spec_dir = root / "data" / "kernels" / "bai-test"
    spec_dir.mkdir(parents=True)
    spec = kernelspec_json("bai test", {"resources": {"cpu": "0.5", "mem": "256m"}})
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    server = start_server(root, _CONFIG)
    try:
        reply = await server.fetch("POST", "api/kernels", {"name": "bai-test"})
        assert reply.code == 201, reply.body
        kernel_id = json.loads(reply.body)["id"]
        (session,) = await server.client().list_sessions(statuses=[Status.RUNNING])
        assert session.meta["jupyter_kernel_id"] == kernel_id
        api_made = await server.client().create({"starts_at": 4e9})  # not kernel-backed
        server.proc.send_signal(getattr(signal, how))
        server.proc.wait(timeout=60)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.tail()
    store = Store(f"sqlite:///{root}/store.sqlite")
    try:
        with store.read() as tx:
            ended = tx.get_session(session.id)
            kept = tx.get_session(api_made.id)
    finally:
        store.close()
    assert ended is not None and ended.status is Status.TERMINATED
    assert kept is not None and kept.status is Status.PENDING  # API sessions outlive the server
    left = docker_engine.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session.id}"}
    )
    assert left == []
