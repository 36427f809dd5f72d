"""Service ports for a notebook's session: from a kernelspec, added to a running session,
and proxied by the session's name, against a real server and Docker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import jupyter_core.paths
import pytest
from harness.server import MULTI_USER, Server, start_server

from bai_jupyter.cli import main
from bai_jupyter.kernelspecs import kernelspec_json
from bai_jupyter.model import Status

SMALL = {"cpu": "0.5", "mem": "256m"}
ALICE, BOB = "alice-token", "bob-token"


def _http_server(port: int) -> str:
    """Code for main1: a tiny http.server on ``port`` in the background."""
    return (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-m', 'http.server', '{port}', '--directory', '/tmp'],"
        " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('started')\n"
    )


# --- kernelspec install --service-port (no engine needed) ---------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    monkeypatch.setattr(jupyter_core.paths, "ENV_JUPYTER_PATH", [str(tmp_path / "env")])
    monkeypatch.setattr(jupyter_core.paths, "SYSTEM_JUPYTER_PATH", [str(tmp_path / "system")])
    return tmp_path / "data"


def test_kernelspec_install_writes_service_ports(data_dir: Path) -> None:
    argv = ["kernelspec", "install", "web", "--cpu", "0.5", "--mem", "256m"]
    ports = ["--service-port", "web:http:8080", "--service-port", "tb:preopen:6006"]
    assert main([*argv, *ports]) == 0
    spec = json.loads((data_dir / "kernels" / "web" / "kernel.json").read_text())
    config = spec["metadata"]["kernel_provisioner"]["config"]
    assert config["service_ports"] == ["web:http:8080", "tb:preopen:6006"]


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ("ssh:tcp:2200", "service_ports[0]: port 2200 is reserved"),
        ("k:http:24000", "service_ports[0]: port 24000 is reserved"),
        ("web:udp:80", "proto one of http, tcp, preopen"),
        ("web-8080", "must be 'name:proto:port'"),
    ],
)
def test_kernelspec_install_refuses_bad_service_ports(
    data_dir: Path, capsys: pytest.CaptureFixture[str], port: str, message: str
) -> None:
    argv = ["kernelspec", "install", "bad", "--cpu", "0.5", "--mem", "256m"]
    assert main([*argv, "--service-port", port]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bai-jupyter kernelspec install: error: ")
    assert message in err
    assert not (data_dir / "kernels" / "bad").exists()


# --- a real multi-user server on the Docker engine -----------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("ports")
    spec_dir = root / "data" / "kernels" / "bai-web"
    spec_dir.mkdir(parents=True)
    spec = kernelspec_json("bai web", {"resources": SMALL, "service_ports": ["web:http:8080"]})
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    srv = start_server(root, MULTI_USER + 'c.BaiSessionManager.backend = "docker"\n')
    yield srv
    srv.stop()


async def _run(server: Server, key: str, code: str) -> str:
    """Run ``code`` in main1 through the execute API (alice); its console text."""
    client = server.client(ALICE)
    reply = await client.execute(key, code, mode="query")
    text = [reply]
    while reply["status"] == "continued":
        reply = await client.execute(key, mode="continue", run_id=reply["run_id"])
        text.append(reply)
    assert reply["status"] == "finished", reply
    return "".join(str(data) for r in text for _, data in r["console"])


async def _proxied(server: Server, path: str, token: str = ALICE) -> int:
    """The proxy's status for ``path`` once the service answers (or the last one seen)."""
    code = 0
    for _ in range(150):
        code = (await server.fetch("GET", path, token=token)).code
        if code == 200:
            return code
        await asyncio.sleep(0.2)
    return code


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_kernelspec_with_a_service_port_is_proxied(server: Server) -> None:
    reply = await server.fetch("POST", "api/kernels", {"name": "bai-web"}, token=ALICE)
    assert reply.code == 201, (reply.body, server.tail())
    kernel_id = json.loads(reply.body)["id"]
    try:
        listing = await server.fetch("GET", "bai/api/v1/sessions", token=ALICE)
        (session,) = json.loads(listing.body)["sessions"]
        assert [s["name"] for s in session["services"]] == ["web"]
        assert "started" in await _run(server, session["id"], _http_server(8080))
        path = f"bai/sessions/{session['id']}/proxy/web/"
        assert await _proxied(server, path) == 200, server.tail()
    finally:
        await server.fetch("DELETE", f"api/kernels/{kernel_id}", token=ALICE)


@pytest.fixture(scope="module")
def running(server: Server) -> Iterator[str]:
    """Alice's RUNNING session 'svc' declaring only 'pre' (8090), an http.server on 8090."""

    async def start() -> str:
        client = server.client(ALICE)
        request = {"name": "svc", "resources": SMALL, "service_ports": ["pre:http:8090"]}
        session = await client.create(request)
        session = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert session.status is Status.RUNNING, session.status_data
        assert "started" in await _run(server, session.id, _http_server(8090))
        return session.id

    session_id = asyncio.run(start())
    yield session_id
    asyncio.run(server.client(ALICE).destroy(session_id))


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_bai_ports_add_in_main1_makes_the_proxy_answer(server: Server, running: str) -> None:
    path = f"bai/sessions/{running}/proxy/web/"
    before = await server.fetch("GET", path, token=ALICE)
    assert before.code == 404 and "has no service 'web'" in json.loads(before.body)["message"]
    out = await _run(server, running, "%load_ext bai_jupyter\n%bai ports add web:http:8090\n")
    assert "web" in out and f"/bai/sessions/{running}/proxy/web/" in out, out
    assert await _proxied(server, path) == 200, server.tail()
    # Checked like a request: reserved ports and a second 'web' are refused, clearly.
    api = f"bai/api/v1/sessions/{running}/services"
    reply = await server.fetch("POST", api, {"service_port": "ssh:tcp:2200"}, token=ALICE)
    assert reply.code == 400 and "reserved" in json.loads(reply.body)["message"]
    reply = await server.fetch("POST", api, {"service_port": "web:http:9000"}, token=ALICE)
    assert reply.code == 409 and "already has a service 'web'" in json.loads(reply.body)["message"]
    # Another user cannot add a port to alice's session, by id or by name.
    for key in (running, "svc"):
        body = {"service_port": "x:http:9001"}
        reply = await server.fetch("POST", f"bai/api/v1/sessions/{key}/services", body, token=BOB)
        assert reply.code == 404, reply.body


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_the_proxy_takes_the_owners_session_name(server: Server, running: str) -> None:
    assert await _proxied(server, f"bai/sessions/{running}/proxy/pre/") == 200, server.tail()
    reply = await server.fetch("GET", "bai/sessions/svc/proxy/pre/", token=ALICE)
    assert reply.code == 200, reply.body
    # Bob has no session 'svc': alice's is not his to reach by its name (nor by its id).
    for key in ("svc", running):
        reply = await server.fetch("GET", f"bai/sessions/{key}/proxy/pre/", token=BOB)
        assert reply.code == 404 and "of bob" in json.loads(reply.body)["message"]


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_an_agent_that_publishes_ports_refuses_a_late_port_clearly(
    tmp_path: Path, kernel_image: str
) -> None:
    """Docker cannot publish a port on a running container: 409 saying what to do instead."""
    # With the host firewall on (root here), a local engine never publishes: turned off.
    pub = '{"id": "pub", "publish_ports": True, "host_firewall": False}'
    agents = f"c.BaiSessionManager.agents = [{pub}]\n"
    srv = start_server(tmp_path, 'c.BaiSessionManager.backend = "docker"\n' + agents)
    try:
        client = srv.client()
        session = await client.create({"resources": SMALL})
        session = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert session.status is Status.RUNNING, session.status_data
        api = f"bai/api/v1/sessions/{session.id}/services"
        reply = await srv.fetch("POST", api, {"service_port": "web:http:8080"})
        error = json.loads(reply.body)
        assert reply.code == 409 and error["error"] == "conflict", error
        assert "cannot add one to a running container" in error["message"]
        assert "service_ports" in error["message"]
        assert (await srv.fetch("GET", f"bai/sessions/{session.id}/proxy/web/")).code == 404
        await client.destroy(session.id)
    finally:
        srv.stop()
