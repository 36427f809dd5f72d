"""``bai-jupyter manager`` alone, for a team without JupyterHub: tokens of its own.

A real ``bai-jupyter manager`` process (``TokenIdentity``: alice, bob and the admin
boss, each with a token; sessions on the real Docker engine) is driven over its REST API
with each token; alice's single-user ``jupyter server`` in remote mode
(``BaiJupyterApp.manager_url`` / ``manager_token``) starts a kernel through it; bob's
kernel, with the token the service gave it, reaches nothing of alice's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.notebooks import run_notebook
from harness.server import kernel_cell, start_server
from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse

from bai_jupyter import kernelspecs
from bai_jupyter.client import RemoteManager
from bai_jupyter.errors import InvalidRequest, NotFound
from bai_jupyter.model import Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]

TOKENS = {"alice": "alice-secret", "bob": "bob-secret", "boss": "boss-secret"}
SMALL = {"resources": {"cpu": "0.5", "mem": "256m"}}


@dataclass
class Service:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    root: Path

    def as_(self, user: str) -> RemoteManager:
        return RemoteManager(self.url, TOKENS[user])

    async def fetch(self, method: str, path: str, token: str | None) -> HTTPResponse:
        headers = {"Authorization": f"token {token}"} if token else {}
        request = HTTPRequest(
            self.url + path,
            method=method,
            headers=headers,
            body=b"{}" if method == "POST" else None,
            request_timeout=60,
        )
        return await AsyncHTTPClient().fetch(request, raise_error=False)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


async def _end_all(service: Service) -> None:
    """End every live session of every user (the service's sessions outlive a test)."""
    for user in TOKENS:
        client = service.as_(user)
        for session in await client.list_sessions():
            if not session.status.is_terminal:
                await client.destroy(session.id)
        for session in await client.list_sessions():
            if not session.status.is_terminal:
                await client.wait_for(session.id, set(), timeout=60)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("manager-alone")
    config = root / "manager_config.py"
    config.write_text(
        f"""
c.TokenIdentity.users = {{v: k for k, v in {TOKENS!r}.items()}}
c.TokenIdentity.admin_users = ["boss"]
c.BaiSessionManager.backend = "docker"
c.BaiSessionManager.store_url = {f"sqlite:///{root}/store.sqlite"!r}
c.BaiSessionManager.data_folders_root = {str(root / "folders")!r}
c.BaiSessionManager.pass_interval = 1.0
c.BaiSessionManager.admin_host_paths = True
"""
    )
    port = _free_port()
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("BAI_JUPYTER", "JUPYTERHUB", "JUPYTER_"))
        },
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        "JUPYTER_CONFIG_DIR": str(root / "config"),
    }
    log = root / "manager.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("bai-jupyter")),
                "manager",
                f"--config={config}",
                "--ip=127.0.0.1",
                f"--port={port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,
        )
    running = Service(f"http://127.0.0.1:{port}/", proc, log, root)
    try:
        _wait_ready(running)
        yield running
    finally:
        try:
            if proc.poll() is None:
                asyncio.run(_end_all(running))
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _free_port() -> int:
    from harness.server import free_port

    return free_port()


def _wait_ready(service: Service, timeout: float = 60) -> None:
    request = urllib.request.Request(
        service.url + "bai/api/v1/agents", headers={"Authorization": f"token {TOKENS['alice']}"}
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            pytest.fail(f"bai-jupyter manager exited:\n{service.tail()}")
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                if json.load(reply)["agents"]:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    pytest.fail(f"bai-jupyter manager did not get ready:\n{service.tail()}")


async def test_each_token_is_its_user_and_reaches_only_their_sessions(service: Service) -> None:
    """A session of alice's on the real engine: bob gets 404, a bad token 401/403, boss sees it."""
    for token in (None, "not-a-token"):
        reply = await service.fetch("GET", "bai/api/v1/sessions", token)
        assert reply.code in (401, 403), (token, reply.code, reply.body)
    alice, bob = service.as_("alice"), service.as_("bob")
    made = await alice.create({**SMALL, "name": "alices"})
    try:
        running = await alice.wait_for(made.id, [Status.RUNNING], timeout=120)
        assert running.owner == "alice", running
        assert [k.hostname for k in running.kernels] == ["main1"]
        for method, path in [
            ("GET", f"sessions/{made.id}"),
            ("GET", "sessions/alices"),
            ("GET", f"sessions/{made.id}/logs"),
            ("POST", f"sessions/{made.id}/execute"),
            ("DELETE", f"sessions/{made.id}"),
        ]:
            reply = await service.fetch(method, f"bai/api/v1/{path}", TOKENS["bob"])
            assert reply.code == 404, (method, path, reply.code, reply.body)
        assert made.id not in {s.id for s in await bob.list_sessions()}
        with pytest.raises(NotFound):
            await bob.get(made.id)
        seen = await service.as_("boss").get(made.id)  # the admin acts on everyone's
        assert seen.owner == "alice"
        assert (await alice.get(made.id)).status is Status.RUNNING  # bob's DELETE did nothing
    finally:
        await alice.destroy(made.id)
    ended = await alice.wait_for(made.id, set(), timeout=120)
    assert ended.status is Status.TERMINATED


async def test_an_admin_may_mount_a_host_path_a_user_may_not(
    service: Service, tmp_path: Path
) -> None:
    """``admin_host_paths`` on: boss's batch session reads a host folder; alice is refused."""
    folder = tmp_path / "shared-data"
    folder.mkdir()
    (folder / "marker.txt").write_text("from the host\n")
    request = {
        **SMALL,
        "type": "batch",
        "mounts": [f"{folder}:/home/work/hostdata:ro"],
        "startup_command": "grep -q 'from the host' /home/work/hostdata/marker.txt",
    }
    with pytest.raises(InvalidRequest, match="allowed_host_paths"):
        await service.as_("alice").create(request)
    boss = service.as_("boss")
    made = await boss.create(request)
    done = await boss.wait_for(made.id, set(), timeout=180)
    assert (done.status, done.result.value) == (Status.TERMINATED, "SUCCESS"), (
        done.status_info,
        done.status_data,
        await boss.logs(made.id),
    )


async def test_alices_server_starts_a_kernel_through_the_service(
    service: Service, tmp_path: Path
) -> None:
    """A single-user ``jupyter server`` with the manager's URL and alice's token: its kernel
    is alice's session at the service, runs code, and bob cannot see it."""
    data = tmp_path / "server" / "data"
    folder = data / "kernels" / "bai-py"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspecs.kernelspec_json("bai-py", SMALL)))
    config = (
        f"c.BaiJupyterApp.manager_url = {service.url!r}\n"
        f"c.BaiJupyterApp.manager_token = {TOKENS['alice']!r}\n"
    )
    server = start_server(tmp_path / "server", config)
    try:
        reply = await server.fetch("POST", "api/kernels", {"name": "bai-py"})
        assert reply.code == 201, (reply.code, reply.body, server.tail())
        kernel_id = json.loads(reply.body)["id"]
        mine = await service.as_("alice").list_sessions()
        (session,) = [s for s in mine if s.meta.get("jupyter_kernel_id") == kernel_id]
        assert session.status is Status.RUNNING and session.owner == "alice", session
        assert session.id not in {s.id for s in await service.as_("bob").list_sessions()}
        output = await kernel_cell(server.url, server.token, kernel_id, "print('host', 6 * 7)")
        assert output == "host 42\n", output
        assert (await server.fetch("DELETE", f"api/kernels/{kernel_id}")).code == 204
        ended = await service.as_("alice").wait_for(session.id, set(), timeout=120)
        assert ended.status is Status.TERMINATED, ended.status_info
    finally:
        server.stop()
        await _end_all(service)


#: Run in bob's kernel (main1): its own BAI_JUPYTER_URL/TOKEN against alice's session, then
#: its event stream until bob's marker session is cancelled.
BOBS_CELL = """
import json, os, time, urllib.error, urllib.request
url = os.environ["BAI_JUPYTER_URL"].rstrip("/") + "/bai/api/v1/"
token = os.environ["BAI_JUPYTER_TOKEN"]
def call(method, path):
    request = urllib.request.Request(
        url + path, method=method, headers={"Authorization": "token " + token},
        data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
codes = {m + " " + p: call(m, p)[0] for m, p in [
    ("GET", "sessions/ALICE"), ("GET", "sessions/alices-pending"),
    ("GET", "sessions/ALICE/logs"), ("POST", "sessions/ALICE/execute"),
    ("DELETE", "sessions/ALICE")]}
listed = [s["owner"] for s in json.loads(call("GET", "sessions")[1])["sessions"]]
listed += [s["owner"] for s in json.loads(call("GET", "sessions?all=true")[1])["sessions"]]
seen = []
request = urllib.request.Request(url + "events", headers={"Authorization": "token " + token})
with urllib.request.urlopen(request, timeout=90) as stream:
    deadline = time.time() + 90
    for line in stream:
        line = line.decode()
        if line.startswith("data:"):
            event = json.loads(line[5:])
            seen.append([event.get("owner"), event.get("name"), event.get("status")])
            if str(event.get("name")).startswith("bob-mark") and event["status"] == "CANCELLED":
                break
        if time.time() > deadline:
            break
print(json.dumps({"same": token == "BOBS", "codes": codes, "listed": listed, "seen": seen}))
"""


async def test_bobs_kernel_token_reaches_nothing_of_alices(
    service: Service, tmp_path: Path
) -> None:
    """Bob's kernel (``jupyter execute`` with bob's token) gets the service's owner-scoped
    kernel token: 403/404 for alice's session (by id and name), logs, execute and cancel;
    its lists (``?all=true`` too) and its event stream carry only bob's sessions."""
    alice, bob = service.as_("alice"), service.as_("bob")
    pending = await alice.create({"name": "alices-pending", "starts_at": 4e9})
    data = tmp_path / "client-data"
    folder = data / "kernels" / "bai-py"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspecs.kernelspec_json("bai-py", SMALL)))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))},
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "client-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "client-runtime"),
        "BAI_JUPYTER_URL": service.url,
        "BAI_JUPYTER_TOKEN": TOKENS["bob"],
    }
    cell = BOBS_CELL.replace("ALICE", pending.id).replace("BOBS", TOKENS["bob"])
    run = asyncio.create_task(asyncio.to_thread(run_notebook, tmp_path, cell, env))
    try:
        marks = 0
        while not run.done():  # alice's then bob's status changes, until bob's kernel saw one
            made = await alice.create({"name": f"alice-mark-{marks}", "starts_at": 4e9})
            await alice.destroy(made.id)
            made = await bob.create({"name": f"bob-mark-{marks}", "starts_at": 4e9})
            await bob.destroy(made.id)
            marks += 1
            await asyncio.wait([run], timeout=1)
        _, printed = await run
        assert (await alice.get(pending.id)).status is Status.PENDING  # bob's DELETE: nothing
    finally:
        await alice.destroy(pending.id)
    result = json.loads(printed)
    assert result["same"] is False  # the kernel's token is its own, not bob's
    codes = result["codes"]
    assert set(codes.values()) <= {403, 404}, codes
    assert set(result["listed"]) == {"bob"}, result["listed"]
    seen = result["seen"]
    assert seen and all(owner == "bob" for owner, _, _ in seen), seen
    assert any(str(name).startswith("bob-mark") for _, name, _ in seen), seen


async def test_no_token_of_a_url_reaches_the_services_log(service: Service) -> None:
    """The service's access log (tornado's, not Jupyter's) and its error lines name a
    request with the token's value hidden."""
    secret = TOKENS["alice"]
    before = len(service.log.read_bytes())
    for path in ("bai/api/v1/sessions/0123456789abcdef", "bai/api/v1/nothing-here"):
        reply = await service.fetch("GET", f"{path}?x=1&token={secret}", None)
        assert reply.code == 404, reply.body
    await asyncio.sleep(0.5)  # written
    log = service.log.read_text(errors="replace")[before:]
    assert "nothing-here?x=1&token=[secret]" in log, log
    assert secret not in log, log


async def test_the_health_route_answers_a_load_balancer_without_credentials(
    service: Service,
) -> None:
    """``GET health`` (what HAProxy asks twice a second) says the replica serves and, alone
    on its store, leads; it needs no token and tells nothing of the sessions."""
    reply = await service.fetch("GET", "health", None)
    assert reply.code == 200, reply.body
    assert json.loads(reply.body) == {"status": "serving", "leads": True}
