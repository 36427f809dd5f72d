"""Kernels cannot reach the host nor mount it, on a real server with Docker kernels.

A multi-user server (the tests' token-per-user identity) with the Docker backend: the
REST API refuses host internals as mounts (in a request or a template), code in main1
using its own ``BAI_JUPYTER_URL``/``BAI_JUPYTER_TOKEN`` is refused the same, and main1
reaches the host only at the kernel-access listener (the host firewall).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import until
from harness.server import MULTI_USER, Server, start_server

from bai_jupyter.agents.docker import FIREWALL_CHAIN
from bai_jupyter.agents.docker.firewall import OUTPUT_CHAIN
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


def _listener(server: Server) -> tuple[str, int]:
    """Where the server's kernels reach its API (the kernel-access listener its log names)."""
    found = re.search(r"kernels reach the API at (\S+)", server.log.read_text())
    assert found, server.tail()
    url = urlsplit(found.group(1))
    assert url.hostname and url.port, url
    return url.hostname, url.port


async def _run_code(client: Any, session_id: str, code: str) -> str:
    """Run ``code`` in the session's kernel; what it printed."""
    reply = await client.execute(session_id, code=code)
    console = list(reply["console"])
    while reply["status"] == "continued":
        reply = await client.execute(session_id, mode="continue", run_id=reply["run_id"])
        console += reply["console"]
    assert reply["exit_code"] == 0, reply
    return "".join(item[1] for item in console if item[0] == "stdout")


_CONNECT = """
import json, socket
out = {}
for name, (host, port) in TARGETS.items():
    sock = socket.socket()
    sock.settimeout(10)
    try:
        sock.connect((host, port))
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
    sock.close()
print(json.dumps(out))
"""


async def test_kernels_of_one_deployment_cannot_open_another_deployments_listener(
    server: Server, tmp_path: Path
) -> None:
    """Two servers (two stores) on one engine: each deployment's kernels have a bridge of
    their own, and the firewall lets them reach only their own listener."""
    other = await asyncio.to_thread(
        start_server, tmp_path / "other", MULTI_USER + 'c.BaiSessionManager.backend = "docker"\n'
    )
    client = server.client("alice-token")
    session = await client.create({"resources": {"cpu": "0.5", "mem": "256m"}})
    try:
        ready = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert ready.status is Status.RUNNING, ready.status_data
        targets = {"own": _listener(server), "other": _listener(other)}
        assert targets["own"] != targets["other"]
        out = json.loads(await _run_code(client, session.id, f"TARGETS = {targets!r}{_CONNECT}"))
        assert out == {"own": "connected", "other": "ConnectionRefusedError"}, (targets, out)
    finally:
        await client.destroy(session.id)
        await asyncio.to_thread(other.stop)


@pytest.fixture
def local_users() -> Iterator[tuple[str, str]]:
    """Two Linux users of this host (JupyterHub users with a terminal, say): ``bob``, who
    owns the session below, and another (removed afterwards; bob only if made here)."""
    made = []
    for name in ("bob", f"baifw{uuid.uuid4().hex[:8]}"):
        if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--no-create-home", name], check=True, capture_output=True)
            made.append(name)
    yield "bob", made[-1]
    for name in made:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _connect_as(user: str | None, host: str, port: int) -> str:
    """Open a TCP connection to host:port as ``user`` (None: this process's own user)."""
    code = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), 10).close()\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    prefix = ["runuser", "-u", user, "--"] if user else []
    done = subprocess.run(
        [*prefix, "/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_only_the_manager_and_the_owner_reach_a_kernels_ports(
    server: Server, local_users: tuple[str, str]
) -> None:
    """Another local user cannot open main1's ports; root (the manager's user here, and the
    engine's) and the local user named as the owner (a Hub user's own server) can."""
    owner, other = local_users
    client = server.client(f"{owner}-token")
    session = await client.create({"resources": {"cpu": "0.5", "mem": "256m"}})
    try:
        ready = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert ready.status is Status.RUNNING, ready.status_data
        info = ready.kernels[0].info
        host, ports = str(info["host"]), sorted(int(p) for p in info["ports"].values())
        assert ports, info
        for port in ports[:2]:
            reached = {
                user or "manager": await asyncio.to_thread(_connect_as, user, host, port)
                for user in (other, owner, None)
            }
            assert reached == {
                other: "ConnectionRefusedError",
                owner: "connected",
                "manager": "connected",
            }, (host, port, reached)
        # And the server still talks to the kernel.
        assert "42" in await _run_code(client, session.id, "print(6 * 7)")
    finally:
        await client.destroy(session.id)
    rules = await asyncio.to_thread(
        subprocess.run, ["iptables", "-w", "-S", OUTPUT_CHAIN], capture_output=True, text=True
    )
    assert session.id[:12] not in rules.stdout  # the owner's rule went with the session


async def test_an_image_of_an_unlisted_registry_is_refused_before_any_engine_contacts_it(
    server: Server,
) -> None:
    """The engine would otherwise connect to the named host (TLS hello, GET /v2/) first."""
    seen: list[object] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]

    def record() -> None:
        while True:
            try:
                conn, peer = sock.accept()
            except OSError:
                return
            seen.append(peer)
            conn.close()

    threading.Thread(target=record, daemon=True).start()
    try:
        reply = await server.fetch(
            "POST",
            "bai/api/v1/sessions",
            {"image": f"127.0.0.1:{port}/evil:1"},
            token="alice-token",
        )
        assert reply.code == 400, reply.body
        await asyncio.sleep(1)
        assert seen == [], "the engine connected to the image's registry"
        error = json.loads(reply.body)
        assert error["error"] == "invalid-request" and "registries" in error["message"], error
    finally:
        sock.close()


async def test_the_owners_access_to_main1_comes_back_after_a_server_restart(
    tmp_path: Path, local_users: tuple[str, str]
) -> None:
    """A stopped manager takes its rules with it; started again, it lets the owners of the
    kernels still running reach them again (and still no one else)."""
    owner, other = local_users
    config = MULTI_USER + 'c.BaiSessionManager.backend = "docker"\n'
    srv = await asyncio.to_thread(start_server, tmp_path, config)
    client = srv.client(f"{owner}-token")
    session = await client.create({"resources": {"cpu": "0.5", "mem": "256m"}})
    try:
        ready = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert ready.status is Status.RUNNING, ready.status_data
        host, port = (
            str(ready.kernels[0].info["host"]),
            int(ready.kernels[0].info["ports"]["shell"]),
        )
        await asyncio.to_thread(srv.stop)
        srv = await asyncio.to_thread(start_server, tmp_path, config)
        client = srv.client(f"{owner}-token")
        assert (await client.get(session.id)).status is Status.RUNNING

        async def owner_connects() -> bool:
            return await asyncio.to_thread(_connect_as, owner, host, port) == "connected"

        # The rules come back while the manager starts; on a loaded host, give it a moment.
        await until(f"{owner} to reach main1 again", owner_connects, timeout=30, interval=0.5)
        reached = await asyncio.to_thread(_connect_as, other, host, port)
        assert reached == "ConnectionRefusedError", reached
    finally:
        await client.destroy(session.id)
        await asyncio.to_thread(srv.stop)
