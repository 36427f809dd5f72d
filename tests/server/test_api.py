"""The REST API on a real Jupyter server shared by alice, bob and an admin (local backend)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness.server import MULTI_USER, Server, free_port, start_server
from jupyter_server.auth.decorator import authorized

from bai_jupyter.model import Session, SessionSpec
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime.protocol import DEFAULT_IMAGE
from bai_jupyter.scheduler.queue import enqueue
from bai_jupyter.server.openapi import openapi
from bai_jupyter.server.routes import API, api_routes, routes
from bai_jupyter.store import Store

pytestmark = pytest.mark.timeout(180)

_HTTP_METHODS = ("get", "head", "post", "put", "patch", "delete", "options")
_AUTHORIZED_CODE = authorized(lambda self: None).__code__
FUTURE = time.time() + 86400 * 365


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = MULTI_USER + (
        'c.BaiSessionManager.backend = "local"\nc.BaiJupyterApp.execute_chunk_timeout = 1.0\n'
        "c.BaiJupyterApp.execute_run_ttl = 3.0\n"
    )
    srv = start_server(tmp_path_factory.mktemp("api"), config)
    yield srv
    srv.stop()


def body(response: Any) -> Any:
    return json.loads(response.body)


# --- static checks -----------------------------------------------------------------------------


def test_every_handler_method_is_authenticated_and_authorized() -> None:
    checked = 0
    for route in routes(None):
        handler = route[1]
        for name in _HTTP_METHODS:
            method = getattr(handler, name)
            if not method.__module__.startswith("bai_jupyter"):
                continue  # inherited from Jupyter (e.g. its CORS preflight OPTIONS)
            checked += 1
            outer_ok = method.__code__.co_qualname.startswith("authenticated")
            inner = getattr(method, "__wrapped__", None)
            assert outer_ok, f"{handler.__name__}.{name} lacks @web.authenticated"
            assert inner is not None and inner.__code__ is _AUTHORIZED_CODE, (
                f"{handler.__name__}.{name} lacks @authorized under @web.authenticated"
            )
    assert checked >= 20


def _spec_routes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path, item in openapi()["paths"].items():
        pattern = API + "".join(
            "([^/]+)" if part.startswith("{") else part
            for part in path.replace("{", "\0{").replace("}", "}\0").split("\0")
        )
        found[pattern] = {m for m in item if m in _HTTP_METHODS}
    return found


def test_openapi_describes_exactly_the_routes() -> None:
    served = {
        pattern: {m for m in _HTTP_METHODS if getattr(h, m).__module__.startswith("bai_jupyter")}
        for pattern, h in api_routes()
    }
    assert _spec_routes() == served


async def test_the_managers_config_section_is_its_own(server: Server) -> None:
    """``c.BaiSessionManager`` configures the manager alone: jupyter_server's own
    ``SessionManager`` is another class, so the server warns about no option of ours."""
    from jupyter_server.services.sessions.sessionmanager import SessionManager

    from bai_jupyter.manager import BaiSessionManager

    assert BaiSessionManager.__name__ != SessionManager.__name__
    assert "not recognized" not in server.log.read_text(errors="replace")
    agents = body(await server.fetch("GET", "bai/api/v1/agents"))["agents"]
    assert [agent["backend"] for agent in agents] == ["local"]  # the config section applied


async def test_a_manager_that_cannot_start_says_why(tmp_path: Any) -> None:
    """A bad setting: the server stays up, its API's 503 says why, the log says it in one
    line (no traceback), not "not started" forever."""
    bad = 'c.BaiSessionManager.resource_groups = {"default": {"idle": {"idle_timeout": "1h"}}}\n'
    srv = start_server(tmp_path, MULTI_USER + bad, ready=False)
    try:
        reason = (
            "the session manager could not start: resource_groups.default.idle.idle_timeout: "
            "must be seconds (0: off), got '1h'"
        )
        for path in ("bai/api/v1/sessions", "bai/api/v1/agents"):
            reply = await srv.fetch("GET", path, token="alice-token")
            assert (reply.code, body(reply)) == (503, {"error": "unavailable", "message": reason})
        log = srv.log.read_text(errors="replace")
        said = [line for line in log.splitlines() if "idle_timeout" in line]
        (start,) = [line for line in said if "/bai/api/" not in line]  # not a request's line
        assert start.endswith(f"bai-jupyter: {reason}"), log
        assert "Traceback" not in log, log
    finally:
        srv.stop()


async def test_a_server_whose_manager_service_is_down_names_the_setting_that_points_there(
    tmp_path: Any,
) -> None:
    """Remote mode with nothing at the service's URL (as while a Hub restarts it): the 503
    says it may be restarting and names BAI_JUPYTER_MANAGER_URL, not the kernels'
    BAI_JUPYTER_URL, which a user would set to no effect."""
    gone = f"http://127.0.0.1:{free_port()}/services/bai-jupyter/"
    srv = start_server(tmp_path, f"c.BaiJupyterApp.manager_url = {gone!r}\n", ready=False)
    try:
        reply = await srv.fetch("GET", "bai/api/v1/sessions")
        assert reply.code == 503, reply.body
        message = body(reply)["message"]
        assert message.startswith(f"cannot reach the bai-jupyter server at {gone} ("), message
        assert "may be restarting" in message and "BAI_JUPYTER_MANAGER_URL" in message, message
        assert "BAI_JUPYTER_URL " not in message and "BAI_JUPYTER_TOKEN" not in message, message
    finally:
        srv.stop()


async def test_a_sessions_short_id_reaches_it_through_the_api(server: Server) -> None:
    """The 8 characters every view shows name the session (a unique prefix of its id)."""
    alice = server.client("alice-token")
    made = await alice.create({"starts_at": time.time() + 86400})
    try:
        short = made.id[:8]
        for path in (f"sessions/{short}", f"sessions/{short}/logs"):
            reply = await server.fetch("GET", f"bai/api/v1/{path}", token="alice-token")
            assert reply.code == 200, (path, reply.body)
        assert (await alice.get(short)).id == made.id
        bob = await server.fetch("GET", f"bai/api/v1/sessions/{short}", token="bob-token")
        assert bob.code == 404  # a prefix of someone else's id is no more his than the id
    finally:
        await alice.destroy(made.id[:12])


async def test_openapi_is_served(server: Server) -> None:
    reply = await server.fetch("GET", "bai/api/v1/openapi.json")
    assert reply.code == 200
    assert body(reply)["paths"] == openapi()["paths"]


@pytest.mark.parametrize(
    "path",
    [
        "bai/api/v1/sessions",
        "bai/api/v1/agents",
        "bai/api/v1/events",
        "bai/api/v1/openapi.json",
        "bai/api/v1/templates/x",
    ],
)
async def test_no_token_no_access(server: Server, path: str) -> None:
    for token in ("", "wrong"):
        reply = await server.fetch("GET", path, token=token)
        assert reply.code == 403
        assert body(reply)["error"] == "forbidden"


async def test_proxy_needs_a_token(server: Server) -> None:
    reply = await server.fetch("GET", "bai/sessions/x/proxy/web/", token="")
    assert reply.code in (302, 403)  # Jupyter's login redirect for a page, never the service


# --- sessions ----------------------------------------------------------------------------------


async def test_session_crud_and_ownership(server: Server) -> None:
    alice, bob, admin = "alice-token", "bob-token", "admin-token"
    request = {
        "name": "crud",
        "starts_at": FUTURE,
        "type": "batch",
        "startup_command": "true",
        "service_ports": ["web:http:8080", "raw:tcp:9000"],
        "meta": {"from": "test"},
    }
    created = await server.fetch("POST", "bai/api/v1/sessions", request, token=alice)
    assert created.code == 201, created.body
    session = body(created)
    sid = session["id"]
    assert created.headers["Location"].endswith(f"/bai/api/v1/sessions/{sid}")
    assert (session["owner"], session["status"], session["meta"]) == (
        "alice",
        "PENDING",
        {"from": "test"},
    )
    assert session["services"] == [
        {"name": "web", "protocol": "http", "port": 8080, "url": f"/bai/sessions/{sid}/proxy/web/"},
        {"name": "raw", "protocol": "tcp", "port": 9000, "url": None},
    ]
    by_name = body(await server.fetch("GET", "bai/api/v1/sessions/crud", token=alice))
    assert by_name["id"] == sid
    assert by_name["status_history"][0]["status"] == "PENDING"

    async def listed(query: str, token: str) -> list[str]:
        reply = await server.fetch("GET", f"bai/api/v1/sessions{query}", token=token)
        assert reply.code == 200, reply.body
        return [s["id"] for s in body(reply)["sessions"]]

    assert sid in await listed("?status=PENDING&type=batch", alice)
    assert sid in await listed("?status=running,pending", alice)
    assert sid not in await listed("?status=RUNNING", alice)
    assert sid not in await listed("?type=interactive", alice)
    assert sid not in await listed("", bob)
    assert sid not in await listed("?all=true", bob)  # all=true needs the admin resource
    assert sid in await listed("?all=true", admin)

    for method, path in [
        ("GET", f"sessions/{sid}"),
        ("GET", "sessions/crud"),
        ("DELETE", f"sessions/{sid}"),
        ("GET", f"sessions/{sid}/logs"),
        ("POST", f"sessions/{sid}/interrupt"),
        ("POST", f"sessions/{sid}/execute"),
    ]:
        reply = await server.fetch(method, f"bai/api/v1/{path}", token=bob)
        assert (reply.code, body(reply)["error"]) == (404, "not-found"), (method, path)
    assert body(await server.fetch("GET", f"bai/api/v1/sessions/{sid}", token=admin))["id"] == sid

    ended = await server.fetch(
        "DELETE", f"bai/api/v1/sessions/{sid}?reason=changed-my-mind", token=alice
    )
    assert (body(ended)["status"], body(ended)["status_info"]) == ("CANCELLED", "changed-my-mind")
    again = await server.fetch("DELETE", f"bai/api/v1/sessions/{sid}", token=alice)
    assert body(again)["status"] == "CANCELLED"


async def test_a_kernel_shows_its_roles_name(server: Server) -> None:
    """A role's kernels are ``worker`` in the API and ``session show``, as their container's
    label and ``BACKENDAI_CLUSTER_ROLE`` say, not ``sub``."""
    request = {
        "name": "roles-shown",
        "starts_at": FUTURE,
        "roles": [{"name": "main"}, {"name": "worker", "replicas": 2}],
    }
    created = await server.fetch("POST", "bai/api/v1/sessions", request, token="alice-token")
    assert created.code == 201, created.body
    sid = body(created)["id"]
    try:
        shown = body(await server.fetch("GET", f"bai/api/v1/sessions/{sid}", token="alice-token"))
        roles = [(k["hostname"], k["role"]) for k in shown["kernels"]]
        assert roles == [("main1", "main"), ("worker1", "worker"), ("worker2", "worker")]
        where = ("--url", server.url, "--token", "alice-token")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bai_jupyter.cli", "session", "show", sid, *where,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
        assert proc.returncode == 0, out
        rows = [line.split()[:2] for line in out.splitlines() if line.startswith("worker")]
        assert rows == [["worker1", "worker"], ["worker2", "worker"]], out
        # Local processes: no image to name (the server's default is no part of them).
        assert out.splitlines()[0].endswith("· PENDING · single-node"), out
    finally:
        await server.fetch("DELETE", f"bai/api/v1/sessions/{sid}", token="alice-token")


async def test_a_reason_to_end_a_session_is_a_bounded_kebab_case_word(server: Server) -> None:
    """What a user gives as ``?reason=`` becomes ``status_info``, shown everywhere."""
    from bai_jupyter.errors import InvalidRequest

    alice = "alice-token"
    made = await server.fetch("POST", "bai/api/v1/sessions", {"starts_at": FUTURE}, token=alice)
    sid = body(made)["id"]
    for reason in ("two%0Alines", "x" * 65, "Upper", "a%20b", "-lead", "trail-", "a--b", ""):
        reply = await server.fetch(
            "DELETE", f"bai/api/v1/sessions/{sid}?reason={reason}", token=alice
        )
        assert reply.code == 400, (reason, reply.body)
        error = body(reply)
        assert error["error"] == "invalid-request" and error["message"].startswith("reason: ")
        assert error["field"] == "reason"
        assert "kebab-case" in error["message"]
    with pytest.raises(InvalidRequest, match="reason: ") as refused:
        await server.client(alice).destroy(sid, reason="x" * 20_000)
    assert refused.value.field == "reason"  # the client keeps the body's field
    assert (
        body(await server.fetch("GET", f"bai/api/v1/sessions/{sid}", token=alice))["status"]
        == "PENDING"
    )
    ended = await server.fetch(
        "DELETE", f"bai/api/v1/sessions/{sid}?reason={'a' * 64}", token=alice
    )
    assert (body(ended)["status"], body(ended)["status_info"]) == ("CANCELLED", "a" * 64)


async def test_one_owners_pending_sessions_are_capped_by_default(tmp_path: Any) -> None:
    """With no policy at all, one user cannot fill the queue: the 51st pending is 403."""
    srv = start_server(tmp_path, MULTI_USER + 'c.BaiSessionManager.backend = "local"\n')
    try:
        pending = {"starts_at": FUTURE}
        for _ in range(50):
            reply = await srv.fetch("POST", "bai/api/v1/sessions", pending, token="bob-token")
            assert reply.code == 201, reply.body
        refused = await srv.fetch("POST", "bai/api/v1/sessions", pending, token="bob-token")
        assert refused.code == 403, refused.body
        message = body(refused)["message"]
        assert "BaiSessionManager.default_max_pending" in message and "50" in message
        # Another user is not held by bob's queue.
        other = await srv.fetch("POST", "bai/api/v1/sessions", pending, token="alice-token")
        assert other.code == 201, other.body
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "needle", "field"),
    [
        ("POST", "sessions", {"imgae": "x"}, 400, "did you mean 'image'", "imgae"),
        (
            "POST",
            "sessions",
            {"resources": {"cpu": "-1"}},
            400,
            "must not be negative",
            "resources.cpu",
        ),
        ("POST", "sessions", {"resources": {"cpu": "4096"}}, 400, "cpu", "resources"),
        ("POST", "sessions", {"cluster_size": 0}, 400, "cluster_size", "cluster_size"),
        ("POST", "sessions", {"template": "nope"}, 404, "nope", "template"),
        ("POST", "sessions", {"template": 3}, 400, "template", "template"),
        ("POST", "sessions", {"meta": []}, 400, "meta", "meta"),
        ("POST", "sessions", {"resource_group": "gpu"}, 400, "resource_group", "resource_group"),
        ("POST", "sessions", {"depends_on": ["ghost"]}, 400, "depends_on", "depends_on"),
        ("POST", "sessions", b"{not json", 400, "not valid JSON", None),
        ("POST", "sessions", b"[1, 2]", 400, "JSON object", None),
        ("GET", "sessions?status=SLEEPING", None, 400, "SLEEPING", "status"),
        ("GET", "sessions?type=quantum", None, 400, "quantum", "type"),
        ("GET", "sessions/0123456789abcdef", None, 404, "0123456789abcdef", None),
        ("GET", "templates/nothing", None, 404, "nothing", None),
        ("POST", "templates", {"name": "bad", "spec": {"cpu": 1}}, 400, "spec.cpu", "spec.cpu"),
        ("POST", "templates", {"name": "bad", "owner": "x"}, 400, "owner", "owner"),
        ("PUT", "templates/t1", {"name": "t2"}, 400, "differs", "name"),
        ("POST", "templates", {"name": "s", "shared": True}, 403, "admin", None),
        ("DELETE", "templates/none", None, 404, "none", None),
        ("PATCH", "sessions", None, 405, "", None),
    ],
)
async def test_errors_are_json_with_the_right_status(
    server: Server,
    method: str,
    path: str,
    payload: Any,
    status: int,
    needle: str,
    field: str | None,
) -> None:
    """Each error names its request field in ``field`` (a front end points at it), if any."""
    raw = payload if isinstance(payload, bytes) else None
    data = None if isinstance(payload, bytes) else payload
    reply = await server.fetch(
        method, f"bai/api/v1/{path}", data, token="alice-token", raw_body=raw
    )
    assert reply.code == status, reply.body
    error = body(reply)
    assert set(error) == {"error", "message"} | ({"field"} if field else set())
    assert needle in error["message"]
    assert error.get("field") == field


async def test_name_conflict_is_409(server: Server) -> None:
    request = {"name": "twice", "starts_at": FUTURE}
    first = await server.fetch("POST", "bai/api/v1/sessions", request, token="bob-token")
    assert first.code == 201
    second = await server.fetch("POST", "bai/api/v1/sessions", request, token="bob-token")
    assert (second.code, body(second)["error"]) == (409, "conflict")
    assert body(second)["field"] == "name"
    # Another user may use the same name.
    alices = await server.fetch("POST", "bai/api/v1/sessions", request, token="alice-token")
    assert alices.code == 201
    for token, sid in (("bob-token", body(first)["id"]), ("alice-token", body(alices)["id"])):
        await server.fetch("DELETE", f"bai/api/v1/sessions/{sid}", token=token)


async def test_dry_run_checks_a_request_and_creates_nothing(server: Server) -> None:
    url = "bai/api/v1/sessions?dry_run=true"
    ok = await server.fetch("POST", url, {"name": "dry", "starts_at": FUTURE}, token="bob-token")
    assert ok.code == 200, ok.body
    assert body(ok)["status"] == "PENDING" and body(ok)["name"] == "dry"
    listed = body(await server.fetch("GET", "bai/api/v1/sessions", token="bob-token"))
    assert all(s["name"] != "dry" for s in listed["sessions"])  # nothing was stored
    bad = await server.fetch("POST", url, {"resources": {"cpu": "-1"}}, token="bob-token")
    assert (bad.code, body(bad)["error"]) == (400, "invalid-request")
    assert body(bad)["message"].startswith("resources.cpu")
    # The name check runs too: a live session's name is taken.
    live = await server.fetch(
        "POST", "bai/api/v1/sessions", {"name": "taken", "starts_at": FUTURE}, token="bob-token"
    )
    try:
        clash = await server.fetch("POST", url, {"name": "taken"}, token="bob-token")
        assert (clash.code, body(clash)["error"]) == (409, "conflict")
        assert "taken" in body(clash)["message"]
    finally:
        await server.fetch("DELETE", f"bai/api/v1/sessions/{body(live)['id']}", token="bob-token")


async def test_attach_kernelspec_names_the_session_and_goes_with_it(server: Server) -> None:
    async def specs() -> dict[str, Any]:
        reply = await server.fetch("GET", "api/kernelspecs", token="alice-token")
        return dict(body(reply)["kernelspecs"])

    made = []
    for name in ("attach-a", "attach-b"):
        request = {"name": name, "starts_at": FUTURE}
        reply = await server.fetch("POST", "bai/api/v1/sessions", request, token="alice-token")
        made.append(body(reply)["id"])
    first = await server.fetch(
        "POST", "bai/api/v1/sessions/attach-a/kernelspec", token="alice-token"
    )
    assert first.code == 201, first.body
    name = body(first)["name"]
    assert name == f"bai-session-{made[0][:12]}"
    spec = (await specs())[name]["spec"]
    assert spec["display_name"] == "Python 3 · bai session attach-a"
    assert spec["metadata"]["kernel_provisioner"]["config"] == {"session": made[0]}
    # Another user cannot attach to it; a batch session runs no kernel.
    other = await server.fetch(
        "POST", f"bai/api/v1/sessions/{made[0]}/kernelspec", token="bob-token"
    )
    assert other.code == 404
    batch = await server.fetch(
        "POST",
        "bai/api/v1/sessions",
        {"type": "batch", "startup_command": "true", "starts_at": FUTURE},
        token="alice-token",
    )
    made.append(body(batch)["id"])
    refused = await server.fetch(
        "POST", f"bai/api/v1/sessions/{made[2]}/kernelspec", token="alice-token"
    )
    assert (refused.code, body(refused)["error"]) == (400, "invalid-request")
    # Once the session has ended: 409, and its kernelspec is gone.
    await server.fetch("DELETE", f"bai/api/v1/sessions/{made[0]}", token="alice-token")
    ended = await server.fetch(
        "POST", f"bai/api/v1/sessions/{made[0]}/kernelspec", token="alice-token"
    )
    assert (ended.code, body(ended)["error"]) == (409, "conflict")
    second = await server.fetch(
        "POST", "bai/api/v1/sessions/attach-b/kernelspec", token="alice-token"
    )
    assert second.code == 201
    assert name not in await specs() and body(second)["name"] in await specs()
    for sid in made[1:]:
        await server.fetch("DELETE", f"bai/api/v1/sessions/{sid}", token="alice-token")


async def test_an_ended_sessions_kernelspec_goes_and_a_stale_launch_says_so(server: Server) -> None:
    """JupyterLab's launcher shows a card per kernelspec: one of an ended session goes at
    once; a launch on one that is still there (a card clicked before it went) answers in
    one line, without the broken-image message and main1's log."""

    async def specs() -> dict[str, Any]:
        reply = await server.fetch("GET", "api/kernelspecs", token="alice-token")
        return dict(body(reply)["kernelspecs"])

    request = {"name": "attach-gone", "starts_at": FUTURE}
    sid = body(await server.fetch("POST", "bai/api/v1/sessions", request, token="alice-token"))[
        "id"
    ]
    made = await server.fetch("POST", f"bai/api/v1/sessions/{sid}/kernelspec", token="alice-token")
    name = body(made)["name"]
    spec = (await specs())[name]
    await server.fetch("DELETE", f"bai/api/v1/sessions/{sid}", token="alice-token")
    deadline = time.monotonic() + 5
    while name in await specs():
        assert time.monotonic() < deadline, f"{name} outlived its session\n{server.tail()}"
        await asyncio.sleep(0.2)
    line = "session attach-gone has ended (user-requested); start a new one"
    # A notebook on it from a card JupyterLab has not dropped yet (it has the spec cached).
    notebook = {"path": "stale.ipynb", "type": "notebook", "kernel": {"name": name}}
    reply = await server.fetch("POST", "api/sessions", notebook, token="alice-token")
    assert (reply.code, body(reply)["message"]) == (503, line), reply.body
    # The kernelspec itself back (its session ended while no server followed it).
    kernel_json = server.log.parent / "data" / "kernels" / name / "kernel.json"  # the root
    kernel_json.parent.mkdir(parents=True)
    kernel_json.write_text(json.dumps(spec["spec"]))
    reply = await server.fetch("POST", "api/kernels", {"name": name}, token="alice-token")
    assert reply.code == 503, (reply.code, reply.body)
    message = body(reply)["message"]
    assert message.endswith(": " + line) and "\n" not in message, message
    kernel_json.unlink()


# --- scheduler, agents, templates --------------------------------------------------------------


async def test_scheduler_queue_says_why_pending(server: Server) -> None:
    request = {"name": "later", "starts_at": FUTURE, "priority": 90}
    sid = body(await server.fetch("POST", "bai/api/v1/sessions", request, token="alice-token"))[
        "id"
    ]
    try:
        for _ in range(100):  # the manager's pass records why (a pass runs every second)
            queue = body(await server.fetch("GET", "bai/api/v1/scheduler", token="alice-token"))
            group = queue["resource_groups"]["default"]
            mine = [e for e in group["queue"] if e.get("session_id") == sid]
            if mine and mine[0]["scheduler"].get("failed_predicates"):
                break
            await asyncio.sleep(0.1)
        assert group["sequencer"] == "fifo"
        entry = mine[0]
        assert entry["position"] == 1 and entry["mine"] is True  # highest priority first
        assert [p["name"] for p in entry["scheduler"]["failed_predicates"]] == ["starts_at"]
        assert entry["scheduler"]["retries"] >= 1
        # One sentence, built on the server, in the queue entry and in the session itself.
        reason = entry["pending_reason"]
        assert reason and reason.startswith("starts at ") and reason.count("starts at") == 1
        mine = body(await server.fetch("GET", f"bai/api/v1/sessions/{sid}", token="alice-token"))
        assert mine["status"] == "PENDING" and mine["pending_reason"] == reason
        seen_by_bob = body(await server.fetch("GET", "bai/api/v1/scheduler", token="bob-token"))
        entry = seen_by_bob["resource_groups"]["default"]["queue"][0]
        assert entry == {"position": 1, "mine": False}
        # The server's manager is alone on its store: it answers, and it leads.
        assert seen_by_bob["leader"]["replica"] == seen_by_bob["replica"]
        assert seen_by_bob["leader"]["epoch"] >= 1 and seen_by_bob["leader"]["expires_in"] > 0
    finally:
        await server.fetch("DELETE", f"bai/api/v1/sessions/{sid}", token="alice-token")


async def test_agents_show_capacity_and_whose_kernels(server: Server) -> None:
    reply = body(await server.fetch("GET", "bai/api/v1/agents", token="bob-token"))
    (agent,) = reply["agents"]
    assert agent["id"] == "local" and agent["backend"] == "local"
    assert set(agent["capacity"]) >= {"cpu", "mem"}
    for kernel in agent["kernels"]:
        assert "session_id" not in kernel or kernel["owner"] == "bob"


async def test_posted_bodies_refuse_unknown_fields(server: Server) -> None:
    """A template's and an execute body's unknown field is named, with the known ones."""
    for path, known in (
        ("bai/api/v1/templates", "name, spec, description, shared"),
        ("bai/api/v1/sessions/nosuch/execute", "code, mode, run_id"),
    ):
        reply = await server.fetch("POST", path, {"bogus": 1}, token="alice-token")
        assert reply.code == 400, reply.body
        assert body(reply)["field"] == "bogus"
        assert body(reply)["message"] == f"bogus: unknown field; known fields: {known}"


async def test_templates_crud_shared_and_applied(server: Server) -> None:
    alice, bob, admin = "alice-token", "bob-token", "admin-token"
    spec = {"resources": {"cpu": "1", "mem": "128m"}, "env": {"A": "1"}, "starts_at": FUTURE}
    made = await server.fetch(
        "POST", "bai/api/v1/templates", {"name": "small", "spec": spec}, token=alice
    )
    assert made.code == 201, made.body
    assert body(made)["owner"] == "alice" and body(made)["shared"] is False
    dup = await server.fetch("POST", "bai/api/v1/templates", {"name": "small"}, token=alice)
    assert dup.code == 409
    replaced = await server.fetch(
        "PUT", "bai/api/v1/templates/small", {"spec": spec, "description": "one cpu"}, token=alice
    )
    assert body(replaced)["description"] == "one cpu"
    assert (await server.fetch("GET", "bai/api/v1/templates/small", token=bob)).code == 404

    created = await server.fetch(
        "POST",
        "bai/api/v1/sessions",
        {"template": "small", "env": {"B": "2"}, "resources": {"mem": "256m"}},
        token=alice,
    )
    assert created.code == 201, created.body
    got = body(created)["spec"]
    assert got["env"] == {"A": "1", "B": "2"}
    assert got["resources"] == {"cpu": "1", "mem": str(256 << 20)}
    await server.fetch("DELETE", f"bai/api/v1/sessions/{body(created)['id']}", token=alice)

    shared = await server.fetch(
        "POST", "bai/api/v1/templates", {"name": "team", "shared": True}, token=admin
    )
    assert shared.code == 201 and body(shared)["owner"] is None
    names = [
        t["name"]
        for t in body(await server.fetch("GET", "bai/api/v1/templates", token=bob))["templates"]
    ]
    assert names == ["team"]
    assert (
        await server.fetch("DELETE", "bai/api/v1/templates/team?shared=true", token=bob)
    ).code == 403
    assert (
        await server.fetch("DELETE", "bai/api/v1/templates/team?shared=true", token=admin)
    ).code == 204
    assert (await server.fetch("DELETE", "bai/api/v1/templates/small", token=alice)).code == 204
    assert (await server.fetch("GET", "bai/api/v1/templates/small", token=alice)).code == 404


# --- events ------------------------------------------------------------------------------------


async def test_events_stream_only_the_callers_sessions(server: Server) -> None:
    alice = server.client("alice-token")
    events = alice.events()
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(0.5)  # let the stream open before the sessions are made
    bobs = await server.client("bob-token").create({"starts_at": FUTURE})
    mine = await alice.create({"starts_at": FUTURE})
    try:
        event = await asyncio.wait_for(first, 30)
        assert (event["type"], event["session_id"], event["owner"]) == ("session", mine.id, "alice")
        assert event["status"] == "PENDING" and event["kernels"] == {"main1": "PENDING"}
    finally:
        await events.aclose()
        await alice.destroy(mine.id)
        await server.client("bob-token").destroy(bobs.id)


async def test_the_stream_tells_a_change_made_by_another_process_on_the_store(
    server: Server,
) -> None:
    """A session a console kernel's embedded manager makes on the server's store (here:
    this test process, writing as that manager does) reaches the server's event stream."""
    alice = server.client("alice-token")
    events = alice.events()
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(0.5)  # the stream is open
    store = Store(f"sqlite:///{server.log.parent / 'store.sqlite'}")
    spec = SessionSpec(image=DEFAULT_IMAGE, starts_at=FUTURE, resources=ResourceSlot({"cpu": 1}))
    made = Session.create(spec, "alice", time.time())
    try:
        await asyncio.to_thread(enqueue, store, made)
        event = await asyncio.wait_for(first, 30)
        assert (event["session_id"], event["status"]) == (made.id, "PENDING"), event
    finally:
        store.close()
        await events.aclose()
        await alice.destroy(made.id)


async def _frames(server: Server, headers: dict[str, str], count: int) -> list[str]:
    """The first ``count`` frames of a raw event stream opened with ``headers``."""
    host, port = server.url.split("//")[1].rstrip("/").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = ["GET /bai/api/v1/events HTTP/1.0", "Authorization: token alice-token"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        body = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
        assert body.startswith("HTTP/1.1 200"), body
        frames: list[str] = []
        while len(frames) < count:
            frame = (await asyncio.wait_for(reader.readuntil(b"\n\n"), 30)).decode()
            if not frame.startswith(":"):  # not a comment (connected, keep-alive)
                frames.append(frame)
        return frames
    finally:
        writer.close()


async def test_a_stream_resumed_after_its_last_seq_gets_what_it_missed_in_order(
    server: Server,
) -> None:
    """Each frame carries its seq as its SSE id; a client that comes back with it (``?since=``
    or ``Last-Event-ID``, as EventSource does) gets what happened while it was away."""
    alice = server.client("alice-token")
    events = alice.events()
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(0.5)
    a = await alice.create({"starts_at": FUTURE})
    seen = await asyncio.wait_for(first, 30)
    await events.aclose()  # away: what happens now is missed
    assert seen["session_id"] == a.id and isinstance(seen["seq"], int), seen
    await alice.destroy(a.id)
    b = await alice.create({"starts_at": FUTURE})
    try:
        resumed = alice.events(since=seen["seq"])
        missed: list[dict[str, Any]] = []
        while not any(e["session_id"] == b.id for e in missed):
            missed.append(await asyncio.wait_for(resumed.__anext__(), 30))
        await resumed.aclose()
        # (A pass may also have told a's why-pending record: still PENDING.)
        changes = [(e["session_id"], e["status"]) for e in missed]
        assert [c for c in changes if c != (a.id, "PENDING")] == [
            (a.id, "CANCELLED"),
            (b.id, "PENDING"),
        ], changes
        seqs = [e["seq"] for e in missed]
        assert seqs == sorted(set(seqs)) and seqs[0] > seen["seq"], seqs
        frames = await _frames(server, {"Last-Event-ID": str(seen["seq"])}, len(missed))
        assert [f.splitlines()[0] for f in frames] == [f"id: {seq}" for seq in seqs]
        # A seq the store does not hold: the client is told to read everything again.
        (reset,) = await _frames(server, {"Last-Event-ID": str(10**15)}, 1)
        assert "event: reset" in reset, reset
        bad = await server.fetch("GET", "bai/api/v1/events?since=soon", token="alice-token")
        assert bad.code == 400 and "since" in body(bad)["message"], bad.body
    finally:
        await alice.destroy(b.id)


# --- the code execution API --------------------------------------------------------------------


@pytest.fixture(scope="module")
def running(server: Server) -> Iterator[str]:
    """An interactive session of alice's, RUNNING (a local process kernel)."""

    async def make() -> str:
        client = server.client("alice-token")
        session = await client.create({"name": "exec", "resources": {"cpu": "0.5", "mem": "256m"}})
        from bai_jupyter.model import Status

        ready = await client.wait_for(session.id, {Status.RUNNING}, timeout=90)
        assert ready.status is Status.RUNNING, ready.status_data
        return session.id

    sid = asyncio.run(make())
    yield sid
    asyncio.run(server.client("alice-token").destroy(sid))


async def run_all(
    server: Server, sid: str, payload: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Run to the end (continuing as told); every reply, and the whole console."""
    replies: list[dict[str, Any]] = []
    reply = await server.client("alice-token").execute(sid, **payload)
    replies.append(reply)
    while reply["status"] == "continued":
        reply = await server.client("alice-token").execute(
            sid, mode="continue", run_id=reply["run_id"]
        )
        replies.append(reply)
    return replies, [item for r in replies for item in r["console"]]


async def test_execute_query_keeps_every_mime_type(server: Server, running: str) -> None:
    code = (
        "import sys\nfrom IPython.display import display, HTML, Markdown\n"
        "print('out'); print('err', file=sys.stderr)\n"
        "display({'text/html': '<b>b</b>', 'image/svg+xml': '<svg/>', 'text/plain': 'p'},"
        " raw=True)\n"
        "display(Markdown('*m*'))\n"
        "6 * 7"
    )
    replies, console = await run_all(server, running, {"code": code})
    assert replies[-1]["status"] == "finished" and replies[-1]["exit_code"] == 0
    kinds = [item[0] for item in console]
    assert ["stdout", "out\n"] in console and ["stderr", "err\n"] in console
    media = [item[1]["data"] for item in console if item[0] == "media"]
    assert media[0] == {"text/html": "<b>b</b>", "image/svg+xml": "<svg/>", "text/plain": "p"}
    assert media[1]["text/markdown"] == "*m*"
    assert kinds[-1] == "result" and console[-1][1]["data"]["text/plain"] == "42"


async def test_execute_errors_and_batch_exit_codes(server: Server, running: str) -> None:
    replies, console = await run_all(server, running, {"code": "1/0"})
    assert replies[-1]["exit_code"] == 1
    assert console[-1][0] == "error" and console[-1][1]["ename"] == "ZeroDivisionError"
    # Output without a newline, stderr into stdout, stdin at its end (never waits).
    command = "printf part; echo oops >&2; read x || echo ' eof'; exit 7"
    replies, console = await run_all(server, running, {"code": command, "mode": "batch"})
    assert replies[-1]["exit_code"] == 7
    assert "".join(item[1] for item in console if item[0] == "stdout") == "partoops\n eof\n"


async def test_execute_long_runs_come_in_chunks(server: Server, running: str) -> None:
    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.8)"
    replies, console = await run_all(server, running, {"code": code, "run_id": "chunks"})
    assert [r["status"] for r in replies][-1] == "finished"
    assert "continued" in [r["status"] for r in replies]  # 2.4 s of work, 1 s chunks
    assert {r["run_id"] for r in replies} == {"chunks"}
    assert "".join(text for kind, text in console if kind == "stdout") == "0\n1\n2\n"


async def test_execute_input(server: Server, running: str) -> None:
    client = server.client("alice-token")
    reply = await client.execute(running, "print('hi', input('name? '))", run_id="in")
    assert reply["status"] == "waiting-input"
    assert reply["prompt"] == {"prompt": "name? ", "password": False}
    reply = await client.execute(running, "ada", mode="input", run_id="in")
    while reply["status"] == "continued":
        reply = await client.execute(running, mode="continue", run_id="in")
    assert reply["status"] == "finished" and ["stdout", "hi ada\n"] in reply["console"]


async def test_execute_run_ids_conflict_and_unknown(server: Server, running: str) -> None:
    client = server.client("alice-token")
    from bai_jupyter.errors import Conflict, NotFound

    with pytest.raises(NotFound, match="no run"):
        await client.execute(running, mode="continue", run_id="never")
    reply = await client.execute(running, "import time; time.sleep(2)", run_id="busy")
    assert reply["status"] == "continued"
    with pytest.raises(Conflict, match="still going"):
        await client.execute(running, "1", run_id="busy")
    with pytest.raises(Conflict, match="not waiting for input"):
        await client.execute(running, "x", mode="input", run_id="busy")
    while reply["status"] == "continued":
        reply = await client.execute(running, mode="continue", run_id="busy")


async def test_runs_nobody_continues_are_dropped(server: Server, running: str) -> None:
    """An abandoned run (the client went away) does not keep its output forever."""
    import signal

    from bai_jupyter.errors import NotFound

    client = server.client("alice-token")
    reply = await client.execute(running, "import time; time.sleep(30)", run_id="left")
    assert reply["status"] == "continued"
    await asyncio.sleep(3.5)  # past execute_run_ttl = 3 s
    other = await client.execute(running, "1", run_id="other")  # any call drops old runs
    with pytest.raises(NotFound, match="no run 'left'"):
        await client.execute(running, mode="continue", run_id="left")
    await client.signal(running, signal.SIGINT)  # free the kernel for the next tests
    while other["status"] == "continued":
        other = await client.execute(running, mode="continue", run_id="other")


async def test_interrupt_and_restart(server: Server, running: str) -> None:
    client = server.client("alice-token")
    import signal

    reply = await client.execute(running, "x = 5\nimport time\ntime.sleep(60)", run_id="stuck")
    assert reply["status"] == "continued"
    await client.signal(running, signal.SIGINT)
    while reply["status"] == "continued":
        reply = await client.execute(running, mode="continue", run_id="stuck")
    assert reply["exit_code"] == 1
    assert reply["console"][-1][1]["ename"] == "KeyboardInterrupt"
    _, console = await run_all(server, running, {"code": "x"})
    assert console[-1][1]["data"]["text/plain"] == "5"

    await client.signal(running, signal.SIGHUP)  # a fresh ipykernel: x is gone
    # The 204 comes at once; the old ipykernel may answer once more while it is ending.
    deadline = time.monotonic() + 30
    while True:
        _, console = await run_all(server, running, {"code": "x"})
        if console[-1][0] == "error" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert console[-1][0] == "error" and console[-1][1]["ename"] == "NameError"


async def test_logs_of_a_running_session(server: Server, running: str) -> None:
    logs = await server.client("alice-token").logs(running)
    assert "bai-runtime" in logs
    reply = await server.fetch(
        "GET", f"bai/api/v1/sessions/{running}/logs?kernel=sub9", token="alice-token"
    )
    assert reply.code == 404 and "sub9" in body(reply)["message"]


async def test_logs_tail_gives_the_last_lines_and_is_checked(server: Server, running: str) -> None:
    client = server.client("alice-token")
    whole, last = await client.logs(running), await client.logs(running, tail=1)
    assert whole.count("\n") > 1 and last == whole.splitlines(keepends=True)[-1]
    path = f"bai/api/v1/sessions/{running}/logs"
    for bad in ("0", "-1", "abc", "1e3", "%C2%B2", str(10**7)):
        reply = await server.fetch("GET", f"{path}?tail={bad}", token="alice-token")
        assert reply.code == 400, bad
        assert body(reply)["error"] == "invalid-request" and "tail" in body(reply)["message"]
        assert body(reply)["field"] == "tail"


async def test_exec_output_past_the_limit_keeps_its_end_and_says_how_much_was_cut(
    server: Server, running: str
) -> None:
    script = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo the-end"
    reply = await server.fetch(
        "POST",
        f"bai/api/v1/sessions/{running}/exec",
        {"command": ["sh", "-c", script]},
        token="alice-token",
    )
    got = body(reply)
    limit = 1 << 20  # the manager's default exec_output_limit
    assert (got["exit_code"], got["truncated"]) == (0, True)
    assert got["dropped_bytes"] == 3_000_000 + len("\nthe-end\n") - limit
    assert len(got["output"]) == limit and got["output"].endswith("xxx\nthe-end\n")
    small = await server.client("alice-token").exec(running, ["echo", "hi"])
    assert (small.output, small.truncated, small.dropped) == ("hi\n", False, 0)


async def test_execute_is_503_before_running_and_409_after_the_end(server: Server) -> None:
    client = server.client("alice-token")
    session = await client.create({"starts_at": FUTURE})
    path = f"bai/api/v1/sessions/{session.id}"
    try:
        reply = await server.fetch("POST", f"{path}/execute", {"code": "1"}, token="alice-token")
        assert reply.code == 503 and reply.headers["Retry-After"]
        assert "PENDING" in body(reply)["message"]
    finally:
        await client.destroy(session.id)
    for action in ("execute", "interrupt", "restart"):
        reply = await server.fetch("POST", f"{path}/{action}", {}, token="alice-token")
        assert (reply.code, body(reply)["error"]) == (409, "conflict"), action
        assert "has ended (CANCELLED)" in body(reply)["message"]


async def test_proxy_is_for_the_owner_only(server: Server) -> None:
    client = server.client("alice-token")
    session = await client.create({"starts_at": FUTURE, "service_ports": ["web:http:8080"]})
    path = f"bai/sessions/{session.id}/proxy/web/"
    try:
        assert (await server.fetch("GET", path, token="bob-token")).code == 404
        assert (await server.fetch("GET", path, token="alice-token")).code == 503  # not RUNNING
        assert (await server.fetch("GET", path, token="admin-token")).code == 503
    finally:
        await client.destroy(session.id)
