"""A real JupyterHub: alice and bob share one manager service (fair share, isolation, limits).

The Hub runs the sample ``examples/jupyterhub/jupyterhub_config.py``; the
manager service keeps its store in PostgreSQL and runs kernels on the real
Docker engine. Tests run in file order on one Hub (the service's restart, then the
Hub's shutdown, come last).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import postgres_database
from harness.endpoints import endpoint_request
from harness.hub import SERVICE, Hub, start_hub
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from bai_jupyter.client import RemoteManager
from bai_jupyter.errors import BaiError, Forbidden, InvalidRequest, NotFound, Unavailable
from bai_jupyter.kernel_plan import LABEL_SESSION
from bai_jupyter.model import Session, Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

#: How long a user's server may be silent before the service ends its kernels' sessions.
GONE = 6.0
#: One agent with room for two kernels of 0.5 cpu: enough to make sessions queue.
MANAGER = """
c.BaiSessionManager.agents = [
    {"id": "shared", "backend": "docker", "slots": {"cpu": "1", "mem": "3g"}}
]
c.BaiSessionManager.policies = {
    "users": {"bob": {"max_concurrent_sessions": 1, "max_pending": 3,
                       "allowed_images": ["bai-jupyter/*"]}},
    "groups": {"physics": {"max_concurrent_sessions": 1}},
}
"""
MANAGER += f"c.BaiSessionManager.server_gone_timeout = {GONE}\n"
HALF = {"resources": {"cpu": "0.5", "mem": "256m"}}


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: str, kernel_image: str
) -> Iterator[Hub]:
    with postgres_database(postgres_server) as store_url:
        running = start_hub(tmp_path_factory.mktemp("hub"), store_url, MANAGER)
        try:
            for user in ("alice", "bob"):
                running.add_user(user)
            running.add_user("carol", admin=True)  # a Hub admin
            yield running
        finally:
            running.stop()


async def _end_all(hub: Hub) -> None:
    admin = hub.service("carol")
    for session in await admin.list_sessions(everyone=True):
        if not session.status.is_terminal:
            await admin.destroy(session.id)


async def _running(hub: Hub, user: str, session_id: str, timeout: float = 120) -> Session:
    session = await hub.service(user).wait_for(session_id, {Status.RUNNING}, timeout=timeout)
    assert session.status is Status.RUNNING, (session.status, session.status_data, hub.tail())
    return session


async def test_each_user_starts_a_cluster_kernel_on_the_shared_agents(hub: Hub) -> None:
    kernels = {}
    for user in ("alice", "bob"):
        reply = await hub.fetch("POST", f"user/{user}/api/kernels", user, {"name": "bai-cluster"})
        assert reply.code == 201, (reply.body, hub.tail())
        kernels[user] = json.loads(reply.body)["id"]
    try:
        everyone = await hub.service("carol").list_sessions(everyone=True)
        mine = {s.owner: s for s in everyone if not s.status.is_terminal}
        assert set(mine) == {"alice", "bob"}
        for user, session in mine.items():
            running = await _running(hub, user, session.id)
            assert [k.hostname for k in running.kernels] == ["main1", "sub1"]
            assert {k.agent_id for k in running.kernels} == {"shared"}
            assert running.meta["jupyter_kernel_id"] == kernels[user]
        # Capacity is full: a third session waits in the one queue both see.
        waiting = await hub.service("alice").create(
            {**HALF, "type": "batch", "startup_command": "true"}
        )
        await asyncio.sleep(1)
        for user in ("alice", "bob"):
            queue = (await hub.service(user).queue())["default"]["queue"]
            assert [e["position"] for e in queue] == [1]
            assert queue[0]["mine"] is (user == "alice")
            assert ("session_id" in queue[0]) is (user == "alice")  # bob sees a position only
        assert (await hub.service("alice").get(waiting.id)).status is Status.PENDING
    finally:
        for user, kernel_id in kernels.items():
            await hub.fetch("DELETE", f"user/{user}/api/kernels/{kernel_id}", user)
        await _end_all(hub)


#: Run in bob's main1 with argv[1] = {"own", "alice", "alice_name", "targets"}: the API at
#: its kernel-access URL with its kernel token, a TCP probe of the listener (allowed) and
#: of alice's main1's ports, then its event stream until it has carried two of bob's marks.
BOBS_KERNEL = """
import json, os, socket, sys, urllib.error, urllib.parse, urllib.request
given = json.loads(sys.argv[1])
url = os.environ["BAI_JUPYTER_URL"].rstrip("/") + "/"
token = os.environ["BAI_JUPYTER_TOKEN"]
def call(method, path):
    request = urllib.request.Request(
        url + path, method=method, headers={"Authorization": "token " + token},
        data=b'{"code": "1"}' if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
def probe(host, port):
    try:
        socket.create_connection((host, port), 3).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
api, alice = "bai/api/v1/sessions/", given["alice"]
codes = {m + " " + p: call(m, p)[0] for m, p in [
    ("GET", api + given["own"]), ("GET", api + alice), ("GET", api + given["alice_name"]),
    ("GET", api + alice + "/logs"), ("POST", api + alice + "/execute"),
    ("DELETE", api + alice), ("GET", "bai/sessions/" + alice + "/proxy/web/")]}
everyone = json.loads(call("GET", "bai/api/v1/sessions?all=true")[1])["sessions"]
listed = [s["owner"] for s in everyone]
listener = urllib.parse.urlsplit(url)
probes = {"listener": probe(listener.hostname, listener.port)}
probes.update({f"{h}:{p}": probe(h, p) for h, p in given["targets"]})
seen, marks = [], set()
request = urllib.request.Request(
    url + "bai/api/v1/events", headers={"Authorization": "token " + token})
with urllib.request.urlopen(request, timeout=90) as stream:
    for line in stream:
        if line.startswith(b"data:"):
            event = json.loads(line[5:])
            seen.append([event["owner"], event["name"], event["status"]])
            if str(event["name"]).startswith("bob-mark") and event["status"] == "CANCELLED":
                marks.add(event["name"])
                if len(marks) == 2:
                    break
print(json.dumps({"codes": codes, "listed": listed, "probes": probes, "seen": seen}))
"""


class Events:
    """A client's event stream, read in the background into ``seen``."""

    def __init__(self, client: RemoteManager) -> None:
        self.seen: list[dict[str, Any]] = []
        self.task = asyncio.ensure_future(self._read(client))

    async def _read(self, client: RemoteManager) -> None:
        async for event in client.events():
            self.seen.append(event)

    async def carry(self, api: RemoteManager, name: str) -> None:
        """Make and cancel sessions as ``api``'s caller until the stream carries one's end:
        then it is connected, and has delivered everything published before (one process,
        in order)."""
        for attempt in range(30):
            made = await api.create({**HALF, "name": f"{name}-{attempt}", "starts_at": 4e9})
            await api.destroy(made.id)
            for _ in range(10):
                if any(
                    e["session_id"] == made.id and e["status"] == "CANCELLED" for e in self.seen
                ):
                    return
                if self.task.done():
                    await self.task  # its error, if any
                    raise AssertionError(f"the event stream ended after {self.seen}")
                await asyncio.sleep(0.1)
        raise AssertionError(f"the event stream carried none of {name}-*: {self.seen}")

    async def close(self) -> None:
        """Stop reading (how the stream ended is for ``carry`` or the test to check)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, BaiError):
            await self.task


async def test_bob_reaches_nothing_of_alices(hub: Hub) -> None:
    alice, bob = hub.service("alice"), hub.service("bob")
    web = await alice.create({**HALF, "name": "alices-web", "service_ports": ["web:http:8080"]})
    mine = await bob.create(HALF)
    try:
        web = await _running(hub, "alice", web.id)
        await alice.exec(
            web.id, ["sh", "-c", "nohup python3 -m http.server 8080 >/dev/null 2>&1 &"]
        )
        await _running(hub, "bob", mine.id)
        proxy = f"bai/sessions/{web.id}/proxy/web/"
        for _ in range(50):  # alice herself gets her service's page, through her server
            reply = await hub.fetch("GET", f"user/alice/{proxy}", "alice")
            if reply.code == 200:
                break
            await asyncio.sleep(0.2)
        assert reply.code == 200, reply.body
        # Bob's token, at the service and through his own server: nothing of alice's.
        for client in (bob, hub.server("bob")):
            with pytest.raises(NotFound):
                await client.get(web.id)
            with pytest.raises(NotFound):
                await client.logs(web.id)
            with pytest.raises(NotFound):
                await client.destroy(web.id)
            assert web.id not in {s.id for s in await client.list_sessions(everyone=True)}
        for path in (
            f"user/bob/bai/api/v1/sessions/{web.id}/execute",
            f"services/bai-jupyter/bai/api/v1/sessions/{web.id}/execute",
        ):
            reply = await hub.fetch("POST", path, "bob", {"code": "1"})
            assert reply.code == 404, reply.body
        for path in (f"user/bob/{proxy}", f"services/bai-jupyter/{proxy}"):
            reply = await hub.fetch("GET", path, "bob")
            assert reply.code == 404, reply.body

        # Alice's main1's ports (her Jupyter kernel's, her web service's) answer where the
        # service reaches them; bob's kernel tries the same with its own token and network.
        main1 = web.main
        host = main1.info["host"]
        targets = [[host, main1.info["connection"]["shell_port"]], [host, 8080]]
        for target_host, port in targets:
            _, writer = await asyncio.wait_for(asyncio.open_connection(target_host, port), 3)
            writer.close()
        given = {"own": mine.id, "alice": web.id, "alice_name": "alices-web", "targets": targets}
        kernel = asyncio.ensure_future(
            bob.exec(mine.id, ["python3", "-c", BOBS_KERNEL, json.dumps(given)], timeout=120)
        )
        # Bob's event stream through his server: connected (it carries his change), alice's
        # change, then his again: hers was published while his stream was connected.
        stream = Events(hub.server("bob"))
        try:
            await stream.carry(bob, "bob-hello")
            other = await alice.create({**HALF, "starts_at": 4e9})
            await alice.destroy(other.id)
            await stream.carry(bob, "bob-bye")
        finally:
            await stream.close()
        assert {e["owner"] for e in stream.seen} == {"bob"}, stream.seen
        marks = 0
        while not kernel.done():  # alice's change, then bob's, until his kernel saw two
            assert marks < 60, "bob's kernel saw none of his changes"
            for api, who in ((alice, "alice"), (bob, "bob")):
                made = await api.create({**HALF, "name": f"{who}-mark-{marks}", "starts_at": 4e9})
                await api.destroy(made.id)
            marks += 1
            await asyncio.wait([kernel], timeout=1)
        ran = await kernel
        assert ran.exit_code == 0, ran.output
        result = json.loads(ran.output.strip().splitlines()[-1])
        on = "bai/api/v1/sessions/"
        assert result["codes"] == {
            f"GET {on}{mine.id}": 200,  # the token works, for bob's own session
            f"GET {on}{web.id}": 403,
            f"GET {on}alices-web": 403,
            f"GET {on}{web.id}/logs": 403,
            f"POST {on}{web.id}/execute": 403,
            f"DELETE {on}{web.id}": 403,
            f"GET bai/sessions/{web.id}/proxy/web/": 404,  # the listener serves no proxy
        }, result["codes"]
        assert set(result["listed"]) == {"bob"}, result["listed"]
        assert {owner for owner, _, _ in result["seen"]} == {"bob"}, result["seen"]
        # The probe reaches what a kernel may (the listener); alice's ports time out.
        assert result["probes"] == {
            "listener": "connected",
            **{f"{h}:{p}": "TimeoutError" for h, p in targets},
        }, result["probes"]
        assert (await alice.get(web.id)).status is Status.RUNNING  # bob's DELETEs: nothing
    finally:
        await _end_all(hub)


async def test_a_kernelspec_is_sized_from_the_services_agents(hub: Hub, tmp_path: Path) -> None:
    """An operator installs kernelspecs for the Hub's users: a size left out is half of the
    service's agent (cpu 1, mem 3g here), not of the engine of the machine it runs on."""
    argv = ["kernelspec", "install", "hub-py", "--manager-url", hub.service_url()]
    env = {
        **os.environ,
        "JUPYTER_DATA_DIR": str(tmp_path),
        "BAI_JUPYTER_MANAGER_TOKEN": hub.tokens["alice"],
    }
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bai_jupyter.cli", *argv, env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await done.communicate()
    assert done.returncode == 0, err
    spec = json.loads((tmp_path / "kernels" / "hub-py" / "kernel.json").read_text())
    config = spec["metadata"]["kernel_provisioner"]["config"]
    assert config["resources"] == {"cpu": "0.5", "mem": "1.5g"}, config


async def test_a_token_without_the_services_scope_is_told_the_one_to_grant(hub: Hub) -> None:
    """Not the bare access:services, which opens every service of the Hub."""
    scopes = {"scopes": ["access:servers!server=alice/"], "note": "no service scope"}
    token = hub.api("POST", "users/alice/tokens", scopes)["token"]
    reply = await AsyncHTTPClient().fetch(
        HTTPRequest(
            f"{hub.service_url()}bai/api/v1/sessions", headers={"Authorization": f"token {token}"}
        ),
        raise_error=False,
    )
    assert reply.code == 403, reply.body
    assert f"lacks the scope access:services!service={SERVICE}" in reply.body.decode(), reply.body


#: Run in main1: serve a file on the service port, then ``%bai ports``.
_PORTS_CELL = """
import subprocess, sys
subprocess.Popen([sys.executable, "-m", "http.server", "8080"], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
open("hello.txt", "w").write("hello through the Hub")
get_ipython().run_line_magic("load_ext", "bai_jupyter")
get_ipython().run_line_magic("bai", "ports")
"""


async def test_a_bai_link_in_a_kernel_goes_through_the_hub(hub: Hub) -> None:
    """The sample sets the Hub's public URL; the service builds %bai's links on it: a link
    printed in main1 opens through the Hub's proxy (not the service's own port)."""
    session = await hub.service("alice").create({**HALF, "service_ports": ["web:http:8080"]})
    try:
        await _running(hub, "alice", session.id)
        run = await hub.fetch(
            "POST",
            f"user/alice/bai/api/v1/sessions/{session.id}/execute",
            "alice",
            {"code": _PORTS_CELL},
        )
        assert run.code == 200, run.body
        printed = "".join(i[1] for i in json.loads(run.body)["console"] if i[0] == "stdout")
        link = next((w for w in printed.split() if w.endswith("/proxy/web/")), printed)
        assert link.startswith(hub.service_url()), (link, hub.service_url())
        for _ in range(60):  # until http.server in main1 listens
            reply = await hub.fetch("GET", link[len(hub.url) :] + "hello.txt", "alice")
            if reply.code != 502:
                break
            await asyncio.sleep(1)
        assert (reply.code, reply.body) == (200, b"hello through the Hub"), reply.code
    finally:
        await _end_all(hub)


async def test_host_paths_are_refused(hub: Hub) -> None:
    for mount in ("/var/run/docker.sock:/home/work/sock", "/:/home/work/host"):
        with pytest.raises(InvalidRequest, match="mounts"):
            await hub.service("alice").create({**HALF, "mounts": [mount]})


async def test_the_service_describes_the_same_api_as_a_users_server(hub: Hub) -> None:
    """``bai-jupyter manager`` serves the server extension's OpenAPI document: the same
    handlers, so the same paths and schemas; only the server's URL is its own."""
    described = {}
    for prefix in (f"services/{SERVICE}/", "user/alice/"):
        reply = await hub.fetch("GET", prefix + "bai/api/v1/openapi.json", "alice")
        assert reply.code == 200, (prefix, reply.code, reply.body)
        document = json.loads(reply.body)
        assert document.pop("servers") == [{"url": f"/{prefix}bai/api/v1"}]
        described[prefix] = document
    service, server = described.values()
    assert "/sessions/{key}/execute" in service["paths"]
    assert service == server


async def test_drf_grants_to_the_user_holding_less_while_both_wait(hub: Hub) -> None:
    """Room for two at a time, alice asked first for three: each grant goes to the user
    who holds fewer sessions while the other waits."""
    # A session holding all the room, so that all six wait for the same pass.
    blocker = await hub.service("carol").create({"resources": {"cpu": "1", "mem": "256m"}})
    await _running(hub, "carol", blocker.id)
    batch = {**HALF, "type": "batch", "startup_command": "sleep 3"}
    made = [await hub.service("alice").create(batch) for _ in range(3)]
    made += [await hub.service("bob").create(batch) for _ in range(3)]
    await hub.service("carol").destroy(blocker.id)
    try:
        ended = []
        for session in made:
            done = await hub.service(session.owner).wait_for(session.id, set(), timeout=240)
            assert done.status is Status.TERMINATED, (done.status_info, done.status_data)
            ended.append(done)

        def at(session: Session, status: Status) -> float:
            return next(h.at for h in session.status_history if h.status is status)

        granted = sorted(ended, key=lambda s: at(s, Status.SCHEDULED))
        owners = [s.owner for s in granted]
        # DRF: whenever one user is granted a session while the other still waits, the
        # one granted holds no more sessions than the other at that moment (plain FIFO
        # would give alice her three first). Checked per grant, not as pairs: which user's
        # session ends first depends on how fast each starts on a loaded machine.
        for i, session in enumerate(granted):
            moment = at(session, Status.SCHEDULED)
            held = {
                user: sum(
                    1 for g in granted[:i] if g.owner == user and at(g, Status.TERMINATED) > moment
                )
                for user in ("alice", "bob")
            }
            other = "bob" if session.owner == "alice" else "alice"
            if other in owners[i + 1 :]:
                assert held[session.owner] <= held[other], (i, owners, held)
    finally:
        await _end_all(hub)


async def _second_waits_for_the_first(hub: Hub, user: str, policy: str) -> None:
    """Under a limit of one session, ``user``'s second waits, naming ``policy``."""
    api = hub.service(user)
    first, second = await api.create(HALF), await api.create(HALF)
    await _running(hub, user, first.id)
    await asyncio.sleep(1)
    waiting = await api.get(second.id)
    assert waiting.status is Status.PENDING
    why = json.dumps(waiting.status_data)
    assert "limit 1" in why and policy in why, why


async def test_a_hub_groups_policy_holds_for_its_members(hub: Hub) -> None:
    """dave is in the Hub group physics (made through the Hub's API, as an admin would):
    the service learns it from the Hub and applies the group's policy to him."""
    if "dave" not in {u["name"] for u in hub.api("GET", "users")}:
        hub.api("POST", "users/dave")
        hub.api("POST", "groups/physics", {"users": ["dave"]})
    hub.add_user("dave")
    try:
        await _second_waits_for_the_first(hub, "dave", "policies.groups.physics")
    finally:
        await _end_all(hub)


async def test_per_user_limits_hold(hub: Hub) -> None:
    bob = hub.service("bob")
    with pytest.raises(Forbidden, match=r"policies\.users\.bob\.allowed_images"):
        await bob.create({**HALF, "image": "python:3.12"})
    try:
        await _second_waits_for_the_first(hub, "bob", "policies.users.bob")
        await bob.create({**HALF, "type": "batch", "startup_command": "true"})
        await bob.create({**HALF, "type": "batch", "startup_command": "true"})
        with pytest.raises(Forbidden, match=r"policies\.users\.bob\.max_pending"):
            await bob.create(HALF)
    finally:
        await _end_all(hub)


async def test_bai_in_a_kernel_reaches_the_service_as_its_owner(hub: Hub) -> None:
    reply = await hub.fetch("POST", "user/alice/api/kernels", "alice", {"name": "bai-py"})
    assert reply.code == 201, reply.body
    kernel_id = json.loads(reply.body)["id"]
    other = await hub.service("bob").create(HALF)
    try:
        (session,) = [
            s for s in await hub.service("alice").list_sessions() if not s.status.is_terminal
        ]
        await _running(hub, "alice", session.id)
        code = "%load_ext bai_jupyter\n%bai sessions --text"
        run = await hub.fetch(
            "POST",
            f"user/alice/bai/api/v1/sessions/{session.id}/execute",
            "alice",
            {"code": code},
        )
        assert run.code == 200, run.body
        shown = json.dumps(json.loads(run.body)["console"])
        assert session.id[:8] in shown, shown  # her own, through the service
        assert other.id[:8] not in shown, shown  # never bob's
    finally:
        await hub.fetch("DELETE", f"user/alice/api/kernels/{kernel_id}", "alice")
        await _end_all(hub)


async def test_an_endpoint_made_through_a_users_server_is_served_by_the_service(
    hub: Hub, kernel_image: str
) -> None:
    """The user's server forwards the API; the route lives where the manager runs."""
    made = await hub.server("alice").create_endpoint(endpoint_request("hub-model", kernel_image))
    route = f"services/{SERVICE}/bai/endpoints/hub-model/"
    assert made["url"] == "/" + route
    try:
        for _ in range(600):
            view = await hub.server("alice").get_endpoint("hub-model")
            if view["ready_replicas"] == 1:
                break
            await asyncio.sleep(0.2)
        assert view["ready_replicas"] == 1, (view, hub.tail())
        reply = await hub.fetch("GET", route + "predict", "alice")
        assert reply.code == 200, (reply.code, reply.body)
        assert json.loads(reply.body)["replica"] == view["replicas"][0]["session_id"]
        assert (await hub.fetch("GET", route + "predict", "bob")).code == 404
        on_server = await hub.fetch("GET", "user/alice/bai/endpoints/hub-model/predict", "alice")
        assert on_server.code == 404 and b"does not run the session manager" in on_server.body
    finally:
        await hub.server("alice").delete_endpoint("hub-model")
        await asyncio.sleep(2)  # the service's keeper ends the replica
        await _end_all(hub)


def test_a_browser_signs_in_to_the_service_through_the_hub(hub: Hub, browser: Any) -> None:
    """OAuth: a logged-in Hub user opening the service is signed in with no prompt."""
    page = browser.new_page()
    page.goto(f"{hub.url}hub/login")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "any")
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url("**/user/alice/**", timeout=60_000)
    # The API answers 403 to a request without credentials; the service's login page
    # runs the Hub's OAuth (no prompt) and comes back to where it was sent.
    api = f"{hub.service_url()}bai/api/v1/sessions"
    page.goto(f"{hub.service_url()}login?next={urlsplit(api).path}")
    page.wait_for_url(api, timeout=60_000)
    body = json.loads(page.inner_text("body"))
    assert "sessions" in body, body
    assert all(s["owner"] == "alice" for s in body["sessions"])


def _server_pid(hub: Hub, user: str) -> int:
    """The pid of ``user``'s single-user server (a child of the Hub: a local spawner)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == hub.proc.pid and f"JUPYTERHUB_USER={user}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"{user}'s server is not running")


async def _kernel_session(hub: Hub, user: str, kernelspec: str) -> tuple[str, Session]:
    """Start a ``kernelspec`` kernel in ``user``'s server: its id and its running session."""
    reply = await hub.fetch("POST", f"user/{user}/api/kernels", user, {"name": kernelspec})
    assert reply.code == 201, (reply.body, hub.tail())
    kernel_id = json.loads(reply.body)["id"]
    (session,) = [
        s
        for s in await hub.service(user).list_sessions()
        if s.meta.get("jupyter_kernel_id") == kernel_id
    ]
    return kernel_id, await _running(hub, user, session.id)


async def _server_stopped(hub: Hub, user: str) -> None:
    """Wait until the Hub has ``user``'s server stopped (it stops it in the background)."""
    deadline = time.monotonic() + 60
    while (server := (hub.api("GET", f"users/{user}").get("servers") or {}).get("")) is not None:
        if not server.get("ready") and not server.get("pending"):
            break
        assert time.monotonic() < deadline, (server, hub.tail())
        await asyncio.sleep(0.3)


async def _ends_alone(hub: Hub, user: str, session_id: str, engine: Any) -> Session:
    """The session ends within the grace period and a few seconds, its containers removed."""
    ended = await hub.service(user).wait_for(session_id, {Status.TERMINATED}, timeout=GONE + 15)
    assert ended.status is Status.TERMINATED, (ended.status, ended.status_data, hub.tail())
    left = engine.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={session_id}"})
    assert left == [], [c.name for c in left]
    return ended


async def test_a_server_the_hub_stops_ends_its_kernels_sessions(
    hub: Hub, docker_engine: Any
) -> None:
    """``DELETE /hub/api/users/alice/server`` (Stop My Server, the idle culler): her
    notebook kernel's cluster session ends with its containers; a session she made through
    her server's API keeps running."""
    try:
        _, session = await _kernel_session(hub, "alice", "bai-cluster")
        kept = await hub.server("alice").create({"resources": {"cpu": "0.25", "mem": "256m"}})
        await _running(hub, "alice", kept.id)
        hub.api("DELETE", "users/alice/server")
        await _ends_alone(hub, "alice", session.id, docker_engine)
        await _server_stopped(hub, "alice")
        await asyncio.sleep(GONE + 3)  # past the grace period: the API's session stays
        assert (await hub.service("alice").get(kept.id)).status is Status.RUNNING
    finally:
        await _server_stopped(hub, "alice")
        hub.add_user("alice")
        await _end_all(hub)


async def test_a_killed_servers_kernel_sessions_end_after_the_grace_period(
    hub: Hub, docker_engine: Any
) -> None:
    """alice's server SIGKILLed (no shutdown at all): the service ends her kernel's
    session (server-gone) once the server has been silent for server_gone_timeout; bob's
    kernel's session, whose server lives, stays."""
    try:
        _, session = await _kernel_session(hub, "alice", "bai-py")
        _, bobs = await _kernel_session(hub, "bob", "bai-py")
        os.kill(_server_pid(hub, "alice"), signal.SIGKILL)
        killed = time.monotonic()
        ended = await _ends_alone(hub, "alice", session.id, docker_engine)
        assert ended.status_info == "server-gone", ended.status_data
        assert time.monotonic() - killed >= GONE - 3  # not before its server was silent
        assert (await hub.service("bob").get(bobs.id)).status is Status.RUNNING
    finally:
        hub.add_user("alice")  # the Hub finds her server dead and starts it again
        await _end_all(hub)


def _service_pid(hub: Hub) -> int:
    config = str(hub.state / "bai_manager_config.py")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"manager" in argv and config.encode() in argv:
                return int(entry.name)
    raise AssertionError("the manager service process is not running")


async def _kernel_state(hub: Hub, user: str, session_id: str) -> list[Any]:
    """What a restart must keep of a session: status, history, each kernel's container."""
    session = await hub.service(user).get(session_id)
    kernels = [(k.id, k.hostname, k.status, k.agent_id, k.container_id) for k in session.kernels]
    return [session.status, session.status_history, kernels]


async def test_the_service_restarts_and_loses_nothing(hub: Hub) -> None:
    """SIGKILL of the service; the Hub starts it again. Every session is as it was; alice's
    notebook kernel runs a cell over her server's kernel channels; bob's session is the
    same containers; alice's server's event stream delivers again."""
    reply = await hub.fetch("POST", "user/alice/api/kernels", "alice", {"name": "bai-py"})
    assert reply.code == 201, reply.body
    kernel_id = json.loads(reply.body)["id"]
    bobs = await hub.service("bob").create(HALF)
    early = Events(hub.server("alice"))  # open across the restart
    try:
        (session,) = [
            s for s in await hub.service("alice").list_sessions() if not s.status.is_terminal
        ]
        await _running(hub, "alice", session.id)
        await _running(hub, "bob", bobs.id)
        await hub.service("bob").exec(bobs.id, ["sh", "-c", "echo before > /tmp/mark"])
        bobs_state = await _kernel_state(hub, "bob", bobs.id)
        await early.carry(hub.server("alice"), "before")
        before = {s.id: s.status for s in await hub.service("carol").list_sessions(everyone=True)}
        pid = _service_pid(hub)
        os.kill(pid, signal.SIGKILL)
        # The Hub starts it again (it polls its managed services).
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(BaiError, AssertionError, OSError):
                after = await hub.service("carol").list_sessions(everyone=True)
                if _service_pid(hub) != pid:
                    break
            assert time.monotonic() < deadline, hub.tail()
            await asyncio.sleep(1)
        assert {s.id: s.status for s in after} == before  # no session lost or changed
        # A stream open across the restart ends, cut or closed (the sidebar then reconnects).
        with contextlib.suppress(Unavailable):
            await asyncio.wait_for(early.task, 30)
        # Alice's notebook kernel, over her server's kernel channels (no manager in the path).
        output = await hub.run_cell("alice", kernel_id, "print(6 * 7)")
        assert output == "42\n", output
        # Bob's session is the same containers, in the same state, and still works.
        assert await _kernel_state(hub, "bob", bobs.id) == bobs_state
        run = await hub.server("bob").exec(bobs.id, ["cat", "/tmp/mark"])
        assert (run.exit_code, run.output.strip()) == (0, "before"), run
        # A new stream through alice's server delivers her changes again.
        later = Events(hub.server("alice"))
        try:
            await later.carry(hub.server("alice"), "after")
        finally:
            await later.close()
    finally:
        await early.close()
        await hub.fetch("DELETE", f"user/alice/api/kernels/{kernel_id}", "alice")
        await _end_all(hub)


async def test_sessions_a_hub_shutdown_left_end_when_the_service_is_back(
    hub: Hub, tmp_path_factory: pytest.TempPathFactory, docker_engine: Any
) -> None:
    """The Hub's shutdown stops the manager service before the users' servers, whose
    kernels' shutdowns cannot reach it. A Hub started again on the same store: the service
    ends the session of alice's kernel (her server never comes back) after the grace
    period; the session she made through the API keeps running. Last: it stops the Hub."""
    _, session = await _kernel_session(hub, "alice", "bai-py")
    kept = await hub.server("alice").create({"resources": {"cpu": "0.25", "mem": "256m"}})
    await _running(hub, "alice", kept.id)
    hub.stop()
    again = start_hub(tmp_path_factory.mktemp("hub-again"), hub.store_url, MANAGER)
    try:
        again.add_user("carol", admin=True)
        admin = again.service("carol")
        ended = await admin.wait_for(session.id, {Status.TERMINATED}, timeout=GONE + 30)
        assert ended.status.is_terminal, (ended.status, again.tail())
        # server-gone after the grace period; kernel-lost at once where main1's ipykernel
        # got its shutdown request from the stopping server and its container went.
        ended_as = (ended.status, ended.status_info)
        assert ended_as in {(Status.TERMINATED, "server-gone"), (Status.ERROR, "kernel-lost")}, (
            ended.status_data,
            again.tail(),
        )
        labels = {"label": f"{LABEL_SESSION}={session.id}"}
        assert docker_engine.containers.list(all=True, filters=labels) == []
        assert (await admin.get(kept.id)).status is Status.RUNNING
        await admin.destroy(kept.id)
    finally:
        again.stop()
