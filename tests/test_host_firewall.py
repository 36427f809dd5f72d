"""Kernels cannot reach the host nor mount it, on a real server with Docker kernels.

A multi-user server (the tests' token-per-user identity) with the Docker backend: the
REST API refuses host internals as mounts (in a request or a template), code in main1
using its own ``BAI_JUPYTER_URL``/``BAI_JUPYTER_TOKEN`` is refused the same, and main1
reaches the host only at the kernel-access listener (the host firewall).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_server_harness import MULTI_USER, Server, start_server

from bai_jupyter.agents.docker import FIREWALL_CHAIN
from bai_jupyter.model import Status

pytestmark = [pytest.mark.timeout(240), pytest.mark.docker]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("firewall")


@pytest.fixture(scope="module")
def server(root: Path, kernel_image: str) -> Iterator[Server]:
    srv = start_server(root, MULTI_USER + 'c.BaiSessionManager.backend = "docker"\n')
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def host_listener() -> Iterator[int]:
    """A host service on 0.0.0.0 (what main1 must not reach): accepts and closes."""
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield sock.getsockname()[1]
    sock.close()


def _refused(root: Path) -> list[str]:
    """Host internals a REST user or a kernel tries to mount (the store's dir included)."""
    return ["/", "/var/run", "/proc:/mnt/proc", f"{root}:/mnt/store", "/var/run/docker.sock:/s"]


async def test_rest_refuses_host_internals(server: Server, root: Path) -> None:
    for entry in _refused(root):
        reply = await server.fetch(
            "POST", "bai/api/v1/sessions", {"mounts": [entry]}, token="alice-token"
        )
        assert reply.code == 400, (entry, reply.body)
        error = json.loads(reply.body)
        assert error["error"] == "invalid-request" and "mounts:" in error["message"], error
    # The same through a template.
    reply = await server.fetch(
        "PUT", "bai/api/v1/templates/rooted", {"spec": {"mounts": ["/"]}}, token="alice-token"
    )
    assert reply.code in (200, 201), reply.body
    reply = await server.fetch(
        "POST", "bai/api/v1/sessions", {"template": "rooted"}, token="alice-token"
    )
    assert reply.code == 400 and b"mounts: /:" in reply.body, reply.body
    sessions = await server.client("alice-token").list_sessions()
    assert sessions == []


_PROBE = """
import json, os, socket, urllib.error, urllib.parse, urllib.request
url, token = os.environ["BAI_JUPYTER_URL"], os.environ["BAI_JUPYTER_TOKEN"]
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + "bai/api/v1/" + path, data=data, method=method,
                                 headers={"Authorization": "token " + token})
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status, reply.read().decode()[:300]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()[:300]
out = {"list": call("GET", "sessions")[0], "mounts": {}}
for entry in ENTRIES:
    out["mounts"][entry] = call("POST", "sessions", {"mounts": [entry]})
sock = socket.socket()
sock.settimeout(10)
try:
    sock.connect((urllib.parse.urlsplit(url).hostname, PORT))
    out["probe"] = "connected"
except OSError as exc:
    out["probe"] = type(exc).__name__
print(json.dumps(out))
"""


async def test_kernel_reaches_only_kernel_access_and_is_refused_mounts(
    server: Server, root: Path, host_listener: int
) -> None:
    client = server.client("alice-token")
    session = await client.create({"resources": {"cpu": "0.5", "mem": "256m"}})
    try:
        ready = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert ready.status is Status.RUNNING, ready.status_data
        code = _PROBE.replace("ENTRIES", repr(_refused(root))).replace("PORT", str(host_listener))
        reply = await client.execute(session.id, code=code)
        console = list(reply["console"])
        while reply["status"] == "continued":
            reply = await client.execute(session.id, mode="continue", run_id=reply["run_id"])
            console += reply["console"]
        printed = "".join(item[1] for item in console if item[0] == "stdout")
        assert reply["exit_code"] == 0, reply
        out: dict[str, Any] = json.loads(printed)
        assert out["list"] == 200  # the kernel-access listener answers
        for entry, (status, text) in out["mounts"].items():
            assert status == 400 and "mounts:" in text, (entry, status, text)
        assert out["probe"] == "ConnectionRefusedError", out
        # The chain is in place while the server runs.
        listing = await asyncio.to_thread(
            subprocess.run, ["iptables", "-w", "-S", FIREWALL_CHAIN], capture_output=True, text=True
        )
        rules = listing.stdout
        assert "REJECT" in rules
    finally:
        await client.destroy(session.id)
    assert [s for s in await client.list_sessions() if not s.status.is_terminal] == []
