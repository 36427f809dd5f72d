"""Warm pools: sessions started ahead of demand, claimed by matching launches.

On a real Docker engine: a notebook launched through a real ``jupyter server`` gets a
warm session made its user's (its owner, id, kernel token, SSH keys and folder, none of
the pool's), the pool refills; warm sessions give way to a user's session that does not
fit and never let a launch past the owner's limits or the queue; a killed server finds
its pool again, a changed setting drains it, a clean stop ends it. The pool's settings
are checked without an engine.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import docker_client, make_manager, started_manager, until
from harness.server import Server, end_all, free_port, serving, start_server, stdout_of

from bai_jupyter import kernelspecs
from bai_jupyter.errors import ConfigError, Forbidden
from bai_jupyter.kernel_plan import LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.manager.pools.config import POOL_OWNER, parse_pools, pool_key
from bai_jupyter.model import SessionSpec, Status
from bai_jupyter.request import parse_spec
from bai_jupyter.runtime.protocol import NOTEBOOK_DIR

SMALL = {"cpu": "0.5", "mem": "256m"}
#: The pool's kernelspec: a cluster of two, so that its SSH keys can be compared.
WARM = {"resources": SMALL, "cluster_size": 2}
PROBE = (
    "import os, json, urllib.request as u\n"
    "print(os.getcwd())\n"
    "print(open('data.txt').read())\n"
    "print(os.environ['BACKENDAI_SESSION_ID'])\n"
    "auth = {'Authorization': 'token ' + os.environ['BAI_JUPYTER_TOKEN']}\n"
    "url = os.environ['BAI_JUPYTER_URL'] + 'bai/api/v1/sessions'\n"
    "print(json.dumps([s['owner'] for s in json.load(u.urlopen(u.Request(url, headers=auth)))"
    "['sessions']]))\n"
)


# --- the settings, without an engine -------------------------------------------------------


def test_a_pool_setting_is_checked_and_names_the_bad_entry() -> None:
    cases: list[tuple[Any, str]] = [
        ([{"size": 1}], "warm_pools[0].name"),
        ([{"name": "a", "size": 99}], "warm_pools[0].size"),
        ([{"name": "a"}, {"name": "b", "bogus": 1}], "warm_pools[1]: unknown key 'bogus'"),
        ([{"name": "a", "request": {"type": "batch"}}], "only interactive"),
        ([{"name": "a", "request": {"mounts": ["data"]}}], "request.mounts"),
        ([{"name": "a", "request": {"name": "mine"}}], "request.name"),
        ([{"name": "a"}, {"name": "a"}], "used twice"),
        ([{"name": "a", "kernelspec": "nowhere"}], "no kernelspec named 'nowhere'"),
        ([{"name": "a", "kernelspec": "x", "template": "t"}], "set none of them"),
        ([{"name": "a", "max_slots": {"cpu": "lots"}}], "warm_pools[0].max_slots"),
    ]
    for setting, message in cases:
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_pools(setting)


def test_a_kernelspec_pool_asks_for_what_its_launch_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "kernels" / "bai-warm"
    folder.mkdir(parents=True)
    spec = kernelspecs.kernelspec_json("warm", {**WARM, "mount_notebook_dir": False})
    (folder / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    (pool,) = parse_pools([{"name": "py", "kernelspec": "bai-warm", "size": 2}])
    assert pool.request == {"type": "interactive", **WARM}
    assert (pool.size, pool.notebook, pool.template) == (2, False, None)


def test_the_key_a_launch_must_match_ignores_its_name_and_priority() -> None:
    base = parse_spec({"type": "interactive", "resources": SMALL})
    same = parse_spec({"type": "interactive", "resources": SMALL, "name": "x", "priority": 50})
    other = parse_spec({"type": "interactive", "resources": {"cpu": "1", "mem": "256m"}})
    assert pool_key(base) == pool_key(same) != pool_key(other)
    assert pool_key(SessionSpec()) == pool_key(SessionSpec())


# --- in one manager: pressure and limits ---------------------------------------------------


def _manager(tmp_path: Path, **traits: Any) -> BaiSessionManager:
    """Conftest's ``make_manager`` on one Docker agent of 2 CPUs and 4 GiB, its pools
    refilled every 0.3 s."""
    engine = {"backend": "docker", "id": "engine", "slots": {"cpu": "2", "mem": "4g"}}
    return make_manager(tmp_path, "docker", warm_pool_interval=0.3, agents=[engine], **traits)


async def _warm(mgr: BaiSessionManager, count: int = 1) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        (pool,) = await mgr.pools_view(admin=True)
        return pool if pool["warm"] == count and not pool["starting"] else None

    found: dict[str, Any] = await until(f"{count} warm sessions", check)
    return found


@pytest.mark.docker
@pytest.mark.timeout(240)
async def test_warm_sessions_give_way_to_a_users_session_that_does_not_fit(
    tmp_path: Path, kernel_image: str
) -> None:
    """The pool holds 1.5 of 2 cpus; a user asks for 1: the warm sessions it needs end
    (pool-pressure) and the user's runs; the pool waits while it cannot refill."""
    pools = [{"name": "py", "size": 3, "request": {"resources": SMALL}}]
    async with started_manager(_manager(tmp_path, warm_pools=pools)) as mgr:
        warm = (await _warm(mgr, 3))["sessions"]
        user = await mgr.create({"type": "interactive", "resources": {"cpu": "1"}}, "alice")
        user = await mgr.wait_for(user.id, {Status.RUNNING}, timeout=60)
        assert user.status is Status.RUNNING, user.status_data
        ended = [await mgr.get(sid) for sid in warm]
        gone = [s for s in ended if s.status.is_terminal]
        assert len(gone) == 1, [(s.status, s.status_info) for s in ended]  # one was enough
        assert (gone[0].status, gone[0].status_info) == (Status.TERMINATED, "pool-pressure")
        (pool,) = await mgr.pools_view(admin=True)
        assert pool["given_way"] == 1 and pool["warm"] == 2  # no room to refill
        await mgr.destroy(user.id)
        await _warm(mgr, 3)  # room again: refilled


@pytest.mark.docker
@pytest.mark.timeout(240)
async def test_a_claim_never_passes_a_limit_or_the_queue(tmp_path: Path, kernel_image: str) -> None:
    """alice may run one session: her second matching launch waits (a miss), not warm;
    while it waits, bob's matching launch waits behind it too."""
    policies = {"users": {"alice": {"max_concurrent_sessions": 1}}}
    pools = [{"name": "py", "size": 1, "request": {"resources": SMALL}}]
    request = {"type": "interactive", "resources": SMALL}
    async with started_manager(_manager(tmp_path, warm_pools=pools, policies=policies)) as mgr:
        await _warm(mgr)
        first = await mgr.create(request, "alice")
        assert first.status is Status.RUNNING  # claimed at once
        await _warm(mgr)
        second = await mgr.create(request, "alice")
        assert second.status is Status.PENDING
        third = await mgr.create(request, "bob")  # someone waits: the queue, not the pool
        assert third.status is Status.PENDING
        (pool,) = await mgr.pools_view(admin=True)
        assert (pool["claims"], pool["hits"], pool["misses"]) == (3, 1, 2)
        third = await mgr.wait_for(third.id, {Status.RUNNING}, timeout=60)
        assert third.status is Status.RUNNING
        second = await mgr.get(second.id)
        assert second.status is Status.PENDING
        assert "limit 1" in json.dumps(second.status_data["scheduler"])
        with pytest.raises(Forbidden, match="reserved"):
            await mgr.create(request, POOL_OWNER)


# --- through a real Jupyter server -----------------------------------------------------------


def _kernelspec(home: Path, name: str, config: dict[str, Any]) -> None:
    folder = home / "data" / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspecs.kernelspec_json(name, config)))


def _config(notebooks: Path, pool_spec: str = "bai-warm") -> str:
    pools = [{"name": "py", "size": 1, "kernelspec": pool_spec}]
    return (
        f"c.ServerApp.root_dir = {str(notebooks)!r}\n"
        "c.BaiSessionManager.backend = 'docker'\n"
        f"c.BaiSessionManager.warm_pools = {pools!r}\n"
        "c.BaiSessionManager.warm_pool_interval = 0.3\n"
    )


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("warm-notebooks")
    (root / "sub").mkdir()
    (root / "sub" / "data.txt").write_text("next to the notebook")
    return Path(os.path.realpath(root))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, notebooks: Path, kernel_image: str
) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("warm-server")
    _kernelspec(home, "bai-warm", WARM)
    with serving(home, _config(notebooks)) as running:
        yield running


async def _pools(server: Server) -> list[dict[str, Any]]:
    reply = await server.fetch("GET", "bai/api/v1/pools")
    assert reply.code == 200, reply.body
    found: list[dict[str, Any]] = json.loads(reply.body)["pools"]
    return found


async def _warm_ids(server: Server) -> list[str]:
    async def check() -> list[str] | None:
        (pool,) = await _pools(server)
        return pool["sessions"] if pool["warm"] == 1 and not pool["starting"] else None

    found: list[str] = await until("a warm session", check)
    return found


@contextlib.asynccontextmanager
async def _notebook(server: Server) -> AsyncIterator[tuple[str, str]]:
    """``sub/analysis.ipynb`` opened on ``bai-warm`` as JupyterLab does: (kernel id, session)."""
    body = {"path": "sub/analysis.ipynb", "type": "notebook", "kernel": {"name": "bai-warm"}}
    reply = await server.fetch("POST", "api/sessions", body)
    assert reply.code == 201, reply.body
    jupyter = json.loads(reply.body)
    try:
        kernel_id = jupyter["kernel"]["id"]
        mine = [
            s
            for s in await server.client().list_sessions()
            if s.meta.get("jupyter_kernel_id") == kernel_id
        ]
        assert len(mine) == 1 and mine[0].status is Status.RUNNING
        yield kernel_id, mine[0].id
    finally:
        await server.fetch("DELETE", f"api/sessions/{jupyter['id']}")


def _public_key(session_id: str) -> str:
    """main1's SSH key of a session, read from its container."""
    containers = docker_client().containers.list(filters={"label": f"{LABEL_SESSION}={session_id}"})
    main = next(c for c in containers if c.name.endswith("-main1"))
    out = main.exec_run(["cat", "/root/.ssh/id_ed25519.pub"]).output
    return str(out.decode().strip())


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_notebook_gets_a_warm_session_with_its_users_identity(
    server: Server, notebooks: Path
) -> None:
    (warm,) = await _warm_ids(server)
    async with _notebook(server) as (kernel_id, sid):
        assert sid == warm  # the warm session, now the user's
        session = await server.client().get(sid)
        assert session.owner != POOL_OWNER and session.status_data["warm_pool"]["pool"] == "py"
        cwd, data, own_id, owners = await stdout_of(server, sid, PROBE)
        assert (cwd, data, own_id) == (f"{NOTEBOOK_DIR}/sub", "next to the notebook", sid)
        assert set(json.loads(owners)) == {session.owner}  # its token: the user's, not the pool's
        (refill,) = await _warm_ids(server)
        assert refill != sid and _public_key(refill) != _public_key(sid)
        # A restart (in place) starts the fresh ipykernel in the notebook's folder again.
        reply = await server.fetch("POST", f"api/kernels/{kernel_id}/restart")
        assert reply.code == 200, reply.body
        lines = await until("the restarted kernel", lambda: _try_run(server, sid))
        assert lines[0] == f"{NOTEBOOK_DIR}/sub"
    (pool,) = await _pools(server)
    assert (pool["claims"], pool["hits"], pool["misses"]) == (1, 1, 0)
    assert "sessions" in pool  # the server's own user is its admin


async def _try_run(server: Server, sid: str) -> list[str] | None:
    with contextlib.suppress(AssertionError):
        return await stdout_of(server, sid, "import os; print(os.getcwd())")
    return None


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_killed_server_finds_its_pool_a_changed_one_drains_it(
    tmp_path: Path, notebooks: Path, kernel_image: str
) -> None:
    home = tmp_path / "srv"
    _kernelspec(home, "bai-warm", WARM)
    _kernelspec(home, "bai-warm-b", {"resources": SMALL})
    port = free_port()
    first = start_server(home, _config(notebooks), port=port)
    try:
        (warm,) = await _warm_ids(first)
    finally:
        first.kill()
    second = start_server(home, _config(notebooks), port=port)
    try:
        assert await _warm_ids(second) == [warm]  # found, not made again
    finally:
        second.kill()
    third = start_server(home, _config(notebooks, "bai-warm-b"), port=port)
    try:
        (fresh,) = await _warm_ids(third)  # the old one never counts as this pool's
        assert fresh != warm

        async def drained() -> bool:
            old = await third.client().get(warm)
            return (old.status, old.status_info) == (Status.TERMINATED, "pool-drained")

        await until("the old warm session drained", drained)
    finally:
        end_all(third)
        third.stop()  # a clean stop ends the warm sessions
    assert not docker_client().containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={fresh}"}
    )
