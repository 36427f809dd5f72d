"""Inference endpoints against real replicas: routing, scaling on load, replacement, rollout.

One server (Docker backend, two users) for the module; each test makes its own
endpoint of the stdlib model server in ``examples/inference/model_server.py``
and drives it with a load generator on loopback that retries nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from harness.endpoints import endpoint_request
from harness.server import MULTI_USER, Server, end_all, start_server
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from bai_jupyter.model import Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]

ALICE = "alice-token"
CONFIG = (
    MULTI_USER
    + """
c.BaiSessionManager.backend = "docker"
c.ReplicaKeeper.interval = 0.5
c.ReplicaKeeper.unhealthy_timeout = 3
c.ReplicaKeeper.rollout_timeout = 30
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("endpoints"), CONFIG)
    try:
        yield srv
    finally:
        with contextlib.suppress(Exception):
            for endpoint in json.loads(_get(srv, "bai/api/v1/endpoints?all=true"))["endpoints"]:
                _call(srv, "DELETE", f"bai/api/v1/endpoints/{endpoint['name']}", ALICE)
            time.sleep(3)  # the keeper ends the replicas
            end_all(srv, ALICE)
        srv.stop()


def _call(server: Server, method: str, path: str, token: str) -> bytes:
    import urllib.request

    request = urllib.request.Request(
        server.url + path, method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
        return body


def _get(server: Server, path: str) -> bytes:
    return _call(server, "GET", path, "admin-token")


async def docker(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "docker", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err


async def api(server: Server, method: str, path: str, body: Any = None, token: str = ALICE) -> Any:
    reply = await server.fetch(method, f"bai/api/v1/{path}", body, token=token)
    assert reply.code < 300, (method, path, reply.code, reply.body)
    return json.loads(reply.body)


async def wait_until(
    server: Server, name: str, test: Callable[[dict[str, Any]], bool], timeout: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = await api(server, "GET", f"endpoints/{name}")
        if test(view):
            return view
        assert time.monotonic() < deadline, json.dumps(view, indent=1)[-3000:]
        await asyncio.sleep(0.3)


def ready(count: int, generation: int | None = None) -> Callable[[dict[str, Any]], bool]:
    def test(view: dict[str, Any]) -> bool:
        good = [
            r
            for r in view["replicas"]
            if r["healthy"] and not r["draining"]
            and (generation is None or r["generation"] == generation)
        ]  # fmt: skip
        return len(good) == count == len(view["replicas"])

    return test


def replaced(gone: str) -> Callable[[dict[str, Any]], bool]:
    """Two ready replicas again, ``gone`` not among them."""
    return lambda v: ready(2)(v) and gone not in {r["session_id"] for r in v["replicas"]}


async def two_ready(server: Server, request: dict[str, Any]) -> dict[str, Any]:
    """Create the endpoint with two replicas; its view once both are ready."""
    body = {**request, "scaling": {"min_replicas": 2, "max_replicas": 2}}
    await api(server, "POST", "endpoints", body)
    return await wait_until(server, request["name"], ready(2))


@dataclass
class LoadGenerator:
    """Workers that each send one request after the other, and retry nothing."""

    server: Server
    name: str
    workers: int
    results: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)

    async def worker(self, stop: asyncio.Event) -> None:
        client = AsyncHTTPClient()
        url = f"{self.server.url}bai/endpoints/{self.name}/predict"
        while not stop.is_set():
            request = HTTPRequest(
                url, headers={"Authorization": f"token {ALICE}"}, request_timeout=30
            )
            response = await client.fetch(request, raise_error=False)
            body = json.loads(response.body) if response.code == 200 else {}
            self.results.append((time.monotonic(), response.code, body))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LoadGenerator]:
        AsyncHTTPClient.configure(None, max_clients=self.workers + 4)
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(self.worker(stop)) for _ in range(self.workers)]
        try:
            yield self
        finally:
            stop.set()
            await asyncio.gather(*tasks)

    def failures(self, since: float = 0.0) -> list[tuple[float, int, dict[str, Any]]]:
        return [r for r in self.results if r[0] >= since and r[1] != 200]


async def test_an_endpoint_routes_round_robin_and_only_for_its_owner(
    server: Server, kernel_image: str
) -> None:
    view = await two_ready(server, endpoint_request("rr", kernel_image))
    replicas = {r["session_id"] for r in view["replicas"]}
    seen = []
    for _ in range(8):
        reply = await server.fetch("GET", "bai/endpoints/rr/predict", token=ALICE)
        assert reply.code == 200, reply.body
        seen.append(json.loads(reply.body)["replica"])
    assert set(seen) == replicas
    assert all(a != b for a, b in pairwise(seen))  # round-robin: never twice in a row
    # Bob sees neither the endpoint nor its route; the replicas run no code.
    assert (await server.fetch("GET", "bai/endpoints/rr/predict", token="bob-token")).code == 404
    assert (await server.fetch("GET", "bai/api/v1/endpoints/rr", token="bob-token")).code == 404
    some = next(iter(replicas))
    ran = await server.fetch(
        "POST", f"bai/api/v1/sessions/{some}/exec", {"command": ["true"]}, token=ALICE
    )
    assert ran.code == 400 and b"inference session" in ran.body, ran.body
    # A name is everyone's: taken is 409; a wrong field names itself.
    taken = await server.fetch(
        "POST", "bai/api/v1/endpoints", endpoint_request("rr", kernel_image), token="bob-token"
    )
    assert taken.code == 409, taken.body
    wrong = await server.fetch(
        "POST",
        "bai/api/v1/endpoints",
        endpoint_request("bad", kernel_image, scaling={"min_replicas": 3, "max_replicas": 2}),
        token=ALICE,
    )
    assert wrong.code == 400 and b"scaling.max_replicas" in wrong.body, wrong.body
    gone = await api(server, "DELETE", "endpoints/rr")
    assert gone["name"] == "rr"
    for sid in replicas:
        session = await api(server, "GET", f"sessions/{sid}")
        while session["status"] not in ("TERMINATED", "ERROR"):
            await asyncio.sleep(0.3)
            session = await api(server, "GET", f"sessions/{sid}")
        assert session["status_info"] == "endpoint-deleted"
    assert (await server.fetch("GET", "bai/endpoints/rr/predict", token=ALICE)).code == 404


async def test_load_adds_replicas_and_quiet_removes_them(server: Server, kernel_image: str) -> None:
    scaling = {"min_replicas": 1, "max_replicas": 3, "metric": "inflight", "target": 1,
               "window": 3}  # fmt: skip
    await api(server, "POST", "endpoints", endpoint_request("up", kernel_image, scaling=scaling))
    await wait_until(server, "up", ready(1))
    load = LoadGenerator(server, "up", workers=6)
    async with load.running():
        view = await wait_until(server, "up", ready(3))
        await asyncio.sleep(1)  # the third one answers its share too
    assert view["desired"] == 3
    assert load.failures() == [], load.failures()[:5]
    assert len({r[2]["replica"] for r in load.results[-30:]}) == 3  # all three answer
    view = await wait_until(server, "up", lambda v: v["desired"] == 1 and ready(1)(v), 90)
    reasons = [d["reason"] for d in view["decisions"]]
    assert any("more replicas" in r for r in reasons), reasons
    assert any("one fewer" in r for r in reasons), reasons
    await api(server, "DELETE", "endpoints/up")


async def test_requests_per_second_add_replicas_and_quiet_removes_them(
    server: Server, kernel_image: str
) -> None:
    """The ``rps`` metric: requests answered per second over the window (the target is per
    replica), as the endpoint's load shows it."""
    window = 2
    scaling = {"min_replicas": 1, "max_replicas": 2, "metric": "rps", "target": 4, "window": window}
    await api(server, "POST", "endpoints", endpoint_request("rps", kernel_image, scaling=scaling))
    await wait_until(server, "rps", ready(1))
    load = LoadGenerator(server, "rps", workers=2)  # each ~10 requests/s: far above 4
    async with load.running():
        view = await wait_until(server, "rps", ready(2))
        await asyncio.sleep(window)
        shown = (await api(server, "GET", "endpoints/rps"))["load"]["rps"]
        now = time.monotonic()
        sent = len([r for r in load.results if r[0] > now - window])
    assert load.failures() == [], load.failures()[:5]
    assert 0.5 < shown / (sent / window) < 2, (shown, sent)  # what was sent
    reasons = [d["reason"] for d in view["decisions"]]
    assert any("requests/s over the last" in r and "more replicas" in r for r in reasons), reasons
    view = await wait_until(server, "rps", lambda v: v["desired"] == 1 and ready(1)(v), 60)
    assert any("one fewer" in d["reason"] for d in view["decisions"]), view["decisions"]
    await api(server, "DELETE", "endpoints/rps")


async def test_a_killed_replica_costs_only_its_requests_in_flight(
    server: Server, kernel_image: str
) -> None:
    view = await two_ready(server, endpoint_request("kill", kernel_image))
    victim = view["replicas"][0]["session_id"]
    load = LoadGenerator(server, "kill", workers=4)
    async with load.running():
        await asyncio.sleep(2)
        killed_at = time.monotonic()
        await docker("kill", f"bai-{victim[:12]}-main1")
        view = await wait_until(server, "kill", replaced(victim))
        await asyncio.sleep(2)
    failed = load.failures(killed_at - 1)
    # Each worker has one request in flight: at most those on the victim fail (about half).
    assert len(failed) <= load.workers, failed
    assert len(load.results) > 50
    reasons = [d["reason"] for d in view["decisions"]]
    assert any(victim[:12] in r and "replaced" in r for r in reasons), reasons
    await api(server, "DELETE", "endpoints/kill")


async def test_a_replica_waits_in_the_scheduler_queue_while_the_agent_is_full(
    server: Server, kernel_image: str
) -> None:
    """Replicas are sessions like any other: with no room, one waits in the queue (the
    endpoint, the session and the scheduler say so) and starts once room is made."""
    deadline = time.monotonic() + 60
    while True:  # the replicas of the tests before have ended
        (agent,) = (await api(server, "GET", "agents", token="admin-token"))["agents"]
        if not Decimal(str(agent["occupied"].get("cpu", 0))):
            break
        assert time.monotonic() < deadline, agent
        await asyncio.sleep(0.3)
    room = Decimal(str(agent["capacity"]["cpu"])) - Decimal("0.1")  # all but 0.1 cpu
    blocker = await api(server, "POST", "sessions", {"resources": {"cpu": str(room)}})
    try:
        running = await server.client(ALICE).wait_for(blocker["id"], {Status.RUNNING}, 120)
        assert running.status is Status.RUNNING, running.status_data
        await api(server, "POST", "endpoints", endpoint_request("full", kernel_image))
        view = await wait_until(
            server, "full", lambda v: v["state"] == "queued" and bool(v["replicas"])
        )
        (replica,) = view["replicas"]
        assert replica["status"] == "PENDING"
        sid = replica["session_id"]

        async def why() -> dict[str, Any]:
            queue = await api(server, "GET", "scheduler")
            entries = queue["resource_groups"]["default"]["queue"]
            return next((e for e in entries if e.get("session_id") == sid), {})

        deadline = time.monotonic() + 30
        while not (entry := await why()).get("scheduler", {}).get("retries"):
            assert time.monotonic() < deadline, entry
            await asyncio.sleep(0.3)
        assert entry["scheduler"]["msg"], entry  # why it waits
    finally:
        await api(server, "DELETE", f"sessions/{blocker['id']}")
    await wait_until(server, "full", ready(1))
    await api(server, "DELETE", "endpoints/full")


async def test_an_unhealthy_replica_is_taken_out_then_replaced(
    server: Server, kernel_image: str
) -> None:
    view = await two_ready(server, endpoint_request("sick", kernel_image))
    sick = view["replicas"][0]["session_id"]
    await docker("exec", f"bai-{sick[:12]}-main1", "touch", "/tmp/sick")
    await wait_until(
        server,
        "sick",
        lambda v: any(r["session_id"] == sick and not r["healthy"] for r in v["replicas"]),
        30,
    )
    load = LoadGenerator(server, "sick", workers=2)
    async with load.running():
        await asyncio.sleep(1)
    assert load.failures() == []
    assert sick not in {r[2]["replica"] for r in load.results}  # out of rotation
    view = await wait_until(server, "sick", replaced(sick))
    session = await api(server, "GET", f"sessions/{sick}")
    assert session["status_info"] == "endpoint-unhealthy", session["status_info"]
    await api(server, "DELETE", "endpoints/sick")


async def test_a_rolling_update_of_image_and_resources_fails_no_request(
    server: Server, kernel_image: str, docker_engine: Any
) -> None:
    request = endpoint_request("roll", kernel_image)
    await two_ready(server, request)
    rolled = "bai-jupyter/python:rolled-test"  # a second image, same content
    docker_engine.api.tag(kernel_image, *rolled.split(":"))
    try:
        load = LoadGenerator(server, "roll", workers=4)
        async with load.running():
            await asyncio.sleep(1)
            replica = {
                **request["replica"],
                "image": rolled,
                "resources": {"cpu": "0.5", "mem": "320m"},
                "env": {"MODEL_VERSION": "2"},
            }
            updated = await api(server, "PATCH", "endpoints/roll", {"replica": replica})
            assert updated["generation"] == 2
            view = await wait_until(server, "roll", ready(2, generation=2))
            await asyncio.sleep(1)
        assert load.failures() == [], load.failures()[:5]
        versions = [r[2]["version"] for r in load.results]
        assert versions[0] == "1" and versions[-1] == "2"
        assert "1" not in versions[versions.index("2") + len(versions) // 2 :]  # it moved on
        for new in view["replicas"]:  # the new replicas run the new image, with the new slots
            container = docker_engine.api.inspect_container(f"bai-{new['session_id'][:12]}-main1")
            limits = container["HostConfig"]
            assert container["Config"]["Image"] == rolled
            assert (limits["NanoCpus"], limits["Memory"]) == (500_000_000, 320 << 20)
        await api(server, "DELETE", "endpoints/roll")
    finally:
        with contextlib.suppress(Exception):
            docker_engine.api.remove_image(rolled, noprune=True)


async def test_a_patch_of_env_rolls_out_and_a_rollout_that_never_gets_healthy_gives_up(
    server: Server, kernel_image: str
) -> None:
    """``replica`` merges key by key: a PATCH of only ``env`` keeps the command and rolls
    out. A generation whose replicas never pass a health check gives up after
    ``rollout_timeout`` with a reason: back to the generation that serves, its replica
    untouched, the new one ended."""
    request = endpoint_request("patched", kernel_image)
    await api(server, "POST", "endpoints", request)
    await wait_until(server, "patched", ready(1))
    updated = await api(
        server, "PATCH", "endpoints/patched", {"replica": {"env": {"MODEL_VERSION": "2"}}}
    )
    assert updated["generation"] == 2 and updated["rollout"]["state"] == "rolling"
    kept = updated["spec"]["replica"]
    assert kept["startup_command"] == request["replica"]["startup_command"]
    assert kept["env"] == {"MODEL_VERSION": "2"} and kept["image"] == kernel_image
    view = await wait_until(
        server, "patched", lambda v: ready(1, generation=2)(v) and v["rollout"] is None
    )
    serving = view["replicas"][0]["session_id"]
    load = LoadGenerator(server, "patched", workers=2)
    async with load.running():
        await asyncio.sleep(0.5)
        broken = {"replica": {"startup_command": "sleep infinity"}}  # never listens
        assert (await api(server, "PATCH", "endpoints/patched", broken))["generation"] == 3
        view = await wait_until(
            server, "patched", lambda v: (v["rollout"] or {}).get("state") == "failed", 90
        )
        await asyncio.sleep(0.5)
    assert load.failures() == [], load.failures()[:5]
    assert {r[2]["version"] for r in load.results} == {"2"}
    rollout = view["rollout"]
    assert (rollout["generation"], rollout["from"], view["generation"]) == (3, 2, 2)
    assert rollout["reason"].startswith("rolling update to generation 3 given up: no new "
                                        "replica became healthy in 30 s ("), rollout  # fmt: skip
    assert rollout["reason"].endswith("back to generation 2, whose replicas keep serving")
    assert view["decisions"][-1]["reason"] == rollout["reason"]
    assert "startup_command" in view["spec"]["replica"]  # generation 2's request again
    assert view["spec"]["replica"]["startup_command"] != "sleep infinity"
    view = await wait_until(server, "patched", lambda v: len(v["replicas"]) == 1)
    assert [r["session_id"] for r in view["replicas"]] == [serving]
    sessions = (await api(server, "GET", "sessions?all=true", token="admin-token"))["sessions"]
    third = [s for s in sessions if (s["meta"].get("endpoint") or {}).get("generation") == 3]
    assert third and {s["status_info"] for s in third} == {"endpoint-rollout-failed"}, third
    await api(server, "DELETE", "endpoints/patched")


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bai_jupyter.cli", "endpoint", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_command_line_and_the_magic_drive_an_endpoint(
    server: Server, kernel_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    where = ["--url", server.url, "--token", ALICE]
    request = tmp_path / "cli.json"
    request.write_text(json.dumps(endpoint_request("cli", kernel_image)))
    code, out, err = await cli("create", str(request), *where)
    assert code == 0, err
    assert "endpoint cli (" in out and f"{server.url}bai/endpoints/cli/" in out
    await wait_until(server, "cli", ready(1))
    code, out, _ = await cli("list", *where)
    assert code == 0 and out.splitlines()[1].split()[:4] == ["cli", "ready", "1", "1"], out
    change = tmp_path / "scale.json"
    change.write_text(json.dumps({"scaling": {"min_replicas": 2}}))
    code, out, _ = await cli("update", "cli", str(change), *where, "--json")
    assert code == 0 and json.loads(out)["desired"] == 1  # the next round moves it
    await wait_until(server, "cli", ready(2))
    code, _, err = await cli("show", "nosuch", *where)
    assert code == 1 and "not-found: no endpoint 'nosuch'" in err, err
    monkeypatch.setenv("BAI_JUPYTER_URL", server.url)
    monkeypatch.setenv("BAI_JUPYTER_TOKEN", ALICE)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "bai_jupyter")
    with capture_output() as cap:
        shell.run_line_magic("bai", "endpoints cli")
    assert "2 ready of 2 wanted" in cap.stdout and "scaling is now 2 to 2" in cap.stdout, cap
    code, out, _ = await cli("delete", "cli", *where)
    assert code == 0 and "deleted endpoint cli" in out
