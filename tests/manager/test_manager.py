"""The session manager end to end, on a real Docker engine and on local processes.

Every test that does not need containers runs on both backends; the others
are Docker only. Nothing is mocked: real containers, real processes, a real
SQLite store.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager, started_manager

from bai_jupyter.agents.docker import EGRESS_NETWORK, DockerAgent
from bai_jupyter.errors import InvalidRequest
from bai_jupyter.kernel_plan import LABEL_KERNEL, LABEL_ROOT, LABEL_SCOPE, LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import SessionResult, Status
from bai_jupyter.request import Template
from bai_jupyter.store import Store

pytestmark = pytest.mark.timeout(180)

RUNNING = {Status.RUNNING}


@asynccontextmanager
async def _started(tmp_path: Path, backend: str, **traits: Any) -> AsyncIterator[BaiSessionManager]:
    """A started manager whose sessions are all gone afterwards, whatever happened."""
    mgr = make_manager(tmp_path, backend, **traits)
    async with started_manager(mgr):
        yield mgr


@pytest.fixture
async def docker_manager(tmp_path: Path, kernel_image: str) -> AsyncIterator[BaiSessionManager]:
    async with _started(tmp_path, "docker") as mgr:
        yield mgr


async def _run(mgr: BaiSessionManager, request: dict[str, Any], owner: str = "alice") -> str:
    session = await mgr.create(request, owner)
    session = await mgr.wait_for(session.id, RUNNING, timeout=90)
    assert session.status is Status.RUNNING, (session.status, session.status_data)
    return session.id


async def _sh(mgr: BaiSessionManager, sid: str, script: str, kernel: str = "main1") -> str:
    result = await mgr.exec(sid, ["/bin/sh", "-c", script], kernel=kernel)
    assert result.exit_code == 0, result.output
    return result.output.strip()


async def test_cluster_environment_and_shared_data_folder(
    manager: BaiSessionManager, backend: str
) -> None:
    sid = await _run(
        manager,
        {"cluster_size": 3, "resources": {"cpu": "0.5", "mem": "256m"}, "mounts": ["data"]},
    )
    session = await manager.get(sid)
    hosts = ["main1", "sub1", "sub2"]
    for rank, host in enumerate(hosts):
        env = dict(
            line.split("=", 1)
            for line in (await _sh(manager, sid, "env", kernel=host)).splitlines()
            if "=" in line
        )
        kernel = session.kernels[rank]
        assert env["BACKENDAI_SESSION_ID"] == sid
        assert env["BACKENDAI_KERNEL_ID"] == kernel.id
        assert env["BACKENDAI_CLUSTER_HOST"] == host
        assert env["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1,sub2"
        assert env["BACKENDAI_CLUSTER_ROLE"] == ("main" if rank == 0 else "sub")
        assert env["BACKENDAI_CLUSTER_IDX"] == str(max(rank, 1))
        assert env["BACKENDAI_CLUSTER_SIZE"] == "3"
        assert env["BACKENDAI_CLUSTER_MODE"] == "single-node"
        assert env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:2"
        assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(rank)
        # main1 does not resolve without containers: the local backend says 127.0.0.1.
        assert env["MASTER_ADDR"] == ("main1" if backend == "docker" else "127.0.0.1")
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == str(rank)
        assert "MASTER_PORT" in env
        if backend == "docker":
            assert await _sh(manager, sid, "hostname", kernel=host) == host
    assert session.kernels[0].id == sid  # the main kernel's id is the session's
    await _sh(manager, sid, "echo written-in-sub2 > data/note.txt", kernel="sub2")
    assert await _sh(manager, sid, "cat data/note.txt") == "written-in-sub2"


@pytest.mark.docker
async def test_roles_give_each_kernel_its_image_size_and_name(
    docker_manager: BaiSessionManager, docker_engine: Any, kernel_image: str
) -> None:
    """main1 and worker1, worker2 of another image and size; ssh between any two."""
    worker_image = "bai-jupyter/python:roles-test"
    docker_engine.images.get(kernel_image).tag(worker_image)  # a second image, same content
    sid = await _run(
        docker_manager,
        {
            "resources": {"cpu": "0.25", "mem": "256m"},
            "roles": [
                {"name": "main", "resources": {"cpu": "0.5"}},
                {"name": "worker", "replicas": 2, "image": worker_image, "env": {"W": "1"}},
            ],
        },
    )
    session = await docker_manager.get(sid)
    assert [k.hostname for k in session.kernels] == ["main1", "worker1", "worker2"]
    for kernel in session.kernels:
        container = docker_engine.containers.get(kernel.container_id)
        wanted = kernel_image if kernel.hostname == "main1" else worker_image
        assert container.attrs["Config"]["Image"] == wanted
        quota = container.attrs["HostConfig"]["NanoCpus"]
        assert quota == (500_000_000 if kernel.hostname == "main1" else 250_000_000)
    env = await _sh(docker_manager, sid, "env | sort", kernel="worker2")
    assert "BACKENDAI_CLUSTER_ROLE=worker" in env and "BACKENDAI_CLUSTER_IDX=2" in env
    assert "BACKENDAI_CLUSTER_REPLICAS=main:1,worker:2" in env and "W=1" in env
    assert await _sh(docker_manager, sid, "ssh worker2 hostname") == "worker2"
    assert await _sh(docker_manager, sid, "ssh main1 hostname", kernel="worker1") == "main1"


@pytest.mark.docker
async def test_roles_from_a_template_each_with_its_own_mounts(
    docker_manager: BaiSessionManager, tmp_path: Path
) -> None:
    """A template defines the roles; the workers mount a folder of their own beside the
    session's; the request adds to the template (env) without naming the roles again."""
    template = {
        "name": "trainer",
        "spec": {
            "resources": {"cpu": "0.25", "mem": "256m"},
            "mounts": ["shared"],
            "roles": [
                {"name": "main"},
                {"name": "worker", "replicas": 2, "mounts": ["scratch"], "env": {"W": "1"}},
            ],
        },
    }
    await docker_manager.templates.put(Template.from_json(template))
    made = await docker_manager.create({"env": {"ASKED": "1"}}, "alice", template="trainer")
    ready = await docker_manager.wait_for(made.id, RUNNING, timeout=90)
    assert ready.status is Status.RUNNING, (ready.status, ready.status_data)
    sid = ready.id
    assert [k.hostname for k in ready.kernels] == ["main1", "worker1", "worker2"]
    env = await _sh(docker_manager, sid, "env | sort", kernel="worker2")
    assert "BACKENDAI_CLUSTER_REPLICAS=main:1,worker:2" in env
    assert "W=1" in env and "ASKED=1" in env
    listing = "ls -d shared scratch 2>/dev/null; true"
    assert (await _sh(docker_manager, sid, listing)).split() == ["shared"]
    assert (await _sh(docker_manager, sid, listing, kernel="worker1")).split() == [
        "scratch",
        "shared",
    ]
    await _sh(docker_manager, sid, "hostname > scratch/by", kernel="worker2")
    assert (tmp_path / "folders" / "alice" / "scratch" / "by").read_text() == "worker2\n"
    assert await _sh(docker_manager, sid, "cat scratch/by", kernel="worker1") == "worker2"


async def test_batch_failure_cancels_dependant_and_keeps_logs(manager: BaiSessionManager) -> None:
    first = await manager.create(
        {"type": "batch", "startup_command": "echo about to fail; exit 3"}, "alice"
    )
    second = await manager.create(
        {"type": "batch", "startup_command": "echo never", "depends_on": [first.id]}, "alice"
    )
    done = await manager.wait_for(first.id, {Status.TERMINATED}, timeout=90)
    assert done.status is Status.TERMINATED
    assert done.result is SessionResult.FAILURE
    assert done.exit_code == 3
    assert done.status_info == "task-failed"
    assert "about to fail" in await manager.logs(first.id)
    dependant = await manager.wait_for(second.id, {Status.CANCELLED}, timeout=30)
    assert dependant.status is Status.CANCELLED
    assert dependant.status_info == "dependency-failed"


async def test_a_dependants_why_pending_names_its_dependency_and_its_status_now(
    manager: BaiSessionManager,
) -> None:
    """Not a 32-hex id and the status of the pass that wrote it: the name, as it is now."""
    first = await manager.create(
        {"type": "batch", "name": "holder", "startup_command": "sleep 60"}, "alice"
    )
    second = await manager.create(
        {"type": "batch", "startup_command": "true", "depends_on": [first.id]}, "alice"
    )
    await manager.wait_for(first.id, RUNNING, timeout=90)
    deadline = time.monotonic() + 30
    while (await manager.get(second.id)).pending_reason is None:
        assert time.monotonic() < deadline, "the scheduler never said why it waits"
        await asyncio.sleep(0.1)
    said = "waiting for session holder (RUNNING) to succeed"
    assert (await manager.get(second.id)).pending_reason == said
    (listed,) = [s for s in await manager.list_sessions("alice") if s.id == second.id]
    assert listed.pending_reason == said


async def test_batch_success_and_timeout(manager: BaiSessionManager) -> None:
    ok = await manager.create({"type": "batch", "startup_command": "echo fine"}, "alice")
    slow = await manager.create(
        {"type": "batch", "startup_command": "sleep 60", "batch_timeout": 1}, "alice"
    )
    ok_done = await manager.wait_for(ok.id, {Status.TERMINATED}, timeout=90)
    assert (ok_done.result, ok_done.exit_code, ok_done.status_info) == (
        SessionResult.SUCCESS,
        0,
        "task-finished",
    )
    slow_done = await manager.wait_for(slow.id, {Status.TERMINATED}, timeout=90)
    assert slow_done.result is SessionResult.FAILURE
    assert slow_done.status_info == "task-timeout"


async def test_queued_session_starts_when_capacity_frees(tmp_path: Path, backend: str) -> None:
    small = [{"id": "small", "backend": backend, "slots": {"cpu": "2", "mem": "2g"}}]
    async with _started(tmp_path, backend, agents=small) as mgr:
        big = await _run(mgr, {"resources": {"cpu": "2", "mem": "1g"}})
        waiting = await mgr.create({"resources": {"cpu": "1", "mem": "512m"}}, "bob")
        await asyncio.sleep(1.5)
        pending = await mgr.get(waiting.id)
        assert pending.status is Status.PENDING
        record = pending.status_data["scheduler"]
        assert record["retries"] >= 1
        assert "cpu" in record["msg"]
        await mgr.destroy(big)
        started = await mgr.wait_for(waiting.id, RUNNING, timeout=60)
        assert started.status is Status.RUNNING
        with pytest.raises(InvalidRequest, match="more than any agent"):
            await mgr.create({"resources": {"cpu": "3"}}, "bob")


async def test_restarted_manager_finds_running_session(tmp_path: Path, backend: str) -> None:
    first = make_manager(tmp_path, backend)
    await first.start()
    sid = await _run(first, {"cluster_size": 2, "resources": {"cpu": "0.5", "mem": "256m"}})
    await first.stop()
    second = make_manager(tmp_path, backend)
    await second.start()
    try:
        session = await second.get(sid)
        assert session.status is Status.RUNNING
        assert await _sh(second, sid, "echo $BACKENDAI_CLUSTER_HOST", kernel="sub1") == "sub1"
    finally:
        await second.destroy(sid)
        await second.stop()


async def test_a_gone_servers_kernel_sessions_end_and_others_stay(
    tmp_path: Path, backend: str
) -> None:
    """Sessions a remote-mode Jupyter server's kernels launched (meta jupyter_server) end
    once that server is silent for server_gone_timeout; those of a server that keeps its
    heartbeat, and those made through the API, keep running. A restarted manager counts
    from its start: a server that never comes back is gone after the grace period."""
    small = {"resources": {"cpu": "0.25", "mem": "128m"}}
    mgr = make_manager(tmp_path, backend, server_gone_timeout=2.0)
    await mgr.start()
    try:
        assert mgr.server_alive("alice", "live") == pytest.approx(2.0 / 3)

        async def beat() -> None:  # alice's live server, and bob's, beat all along
            while True:
                mgr.server_alive("alice", "live")
                mgr.server_alive("bob", "bobs")
                await asyncio.sleep(0.3)

        beating = asyncio.ensure_future(beat())
        gone = await mgr.create(small, "alice", meta={"jupyter_server": "dead"})
        live = await mgr.create(small, "alice", meta={"jupyter_server": "live"})
        # bob beating a server id of alice's keeps nothing of hers alive
        spoof = await mgr.create(small, "alice", meta={"jupyter_server": "bobs"})
        api = await _run(mgr, small)
        await asyncio.sleep(6)
        beating.cancel()
        for sid in (gone.id, spoof.id):
            ended = await mgr.get(sid)
            assert ended.status in (Status.TERMINATED, Status.CANCELLED), ended.status
            assert ended.status_info == "server-gone"
        assert (await mgr.get(live.id)).status is Status.RUNNING
        assert (await mgr.get(api)).status is Status.RUNNING
    finally:
        await mgr.stop()
    async with _started(tmp_path, backend, server_gone_timeout=2.0) as again:
        await asyncio.sleep(1.0)
        assert (await again.get(live.id)).status is Status.RUNNING  # within its grace
        ended = await again.wait_for(live.id, {Status.TERMINATED}, timeout=10)
        assert (ended.status, ended.status_info) == (Status.TERMINATED, "server-gone")
        assert (await again.get(api)).status is Status.RUNNING


async def test_killed_main_kernel_errors_quickly(
    manager: BaiSessionManager, backend: str, request: pytest.FixtureRequest
) -> None:
    sid = await _run(manager, {"cluster_size": 2, "resources": {"cpu": "0.5", "mem": "256m"}})
    session = await manager.get(sid)
    main = session.kernels[0]
    started = time.monotonic()
    if backend == "docker":
        request.getfixturevalue("docker_engine").containers.get(main.container_id).kill()
    else:
        os.killpg(int(str(main.container_id).removeprefix("pid:")), signal.SIGKILL)
    errored = await manager.wait_for(sid, {Status.ERROR}, timeout=10)
    assert errored.status is Status.ERROR
    assert errored.status_info == "kernel-died"
    assert time.monotonic() - started < 2.0


@pytest.mark.docker
async def test_ssh_isolation_limits_and_cleanup(
    docker_manager: BaiSessionManager, docker_engine: Any
) -> None:
    manager = docker_manager
    sid = await _run(manager, {"cluster_size": 3, "resources": {"cpu": "0.5", "mem": "256m"}})
    assert await _sh(manager, sid, "ssh -o BatchMode=yes sub1 hostname") == "sub1"
    assert await _sh(manager, sid, "ssh -o BatchMode=yes sub2 ssh sub1 hostname", "sub2") == "sub1"
    # Sub kernels reach nothing outside the session network: main1's address on the
    # egress bridge (a container of ours, so no packet leaves the machine) is cut off,
    # while the same port on main1's session address answers.
    main = (await manager.get(sid)).kernels[0]
    networks = docker_engine.containers.get(main.container_id).attrs["NetworkSettings"]
    addresses = {name: net["IPAddress"] for name, net in networks["Networks"].items()}
    outside = addresses.pop(EGRESS_NETWORK)
    (inside,) = addresses.values()
    shell = main.info["connection"]["shell_port"]  # main1's ipykernel, on its session's ports
    probe = (
        'python3 -c "import socket,sys\ntry:\n socket.create_connection((sys.argv[1], '
        f"{shell}), 2)"
        "\nexcept OSError: print('cut off')\nelse: print('reached')\" "
    )
    assert await _sh(manager, sid, probe + inside, "sub1") == "reached"
    assert await _sh(manager, sid, probe + outside, "sub1") == "cut off"
    assert await _sh(manager, sid, probe + outside, "main1") == "reached"
    # The CPU quota is in the kernel's cgroup: 0.5 cpu.
    quota = await _sh(
        manager,
        sid,
        "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cd /sys/fs/cgroup/cpu && "
        "echo $(cat cpu.cfs_quota_us) $(cat cpu.cfs_period_us)",
        "sub2",
    )
    q, period = quota.split()
    assert int(q) / int(period) == 0.5
    client = docker_engine
    labelled = {"label": f"ai.backend.bai-jupyter.session-id={sid}"}
    assert len(client.containers.list(filters=labelled)) == 3
    (agent,) = manager.core.agents.values()
    assert isinstance(agent, DockerAgent)
    keys = agent.bootstrap_root / sid  # the session's keys, on the host
    assert keys.is_dir()
    await manager.destroy(sid)
    assert client.containers.list(all=True, filters=labelled) == []
    assert client.networks.list(filters=labelled) == []
    assert not keys.exists()


@pytest.mark.docker
async def test_memory_limit_kills_the_process_and_the_session_notes_it(
    docker_manager: BaiSessionManager,
) -> None:
    manager = docker_manager
    sid = await _run(manager, {"resources": {"cpu": "1", "mem": "128m"}})
    notices: list[dict[str, Any]] = []

    async def watch() -> None:
        async for event in manager.events():
            if event["session_id"] == sid and "notice" in event:
                notices.append(event["notice"])
                return

    watching = asyncio.ensure_future(watch())
    await asyncio.sleep(0)  # subscribed
    result = await manager.exec(sid, ["python3", "-c", "b = bytearray(512 * 1024 * 1024)"])
    assert result.exit_code == 137  # that process was killed, not the kernel
    await asyncio.wait_for(watching, 30)
    assert notices[0]["kind"] == "oom"
    session = await manager.get(sid)
    assert session.status is Status.RUNNING
    assert session.status_data["oom"]["count"] >= 1  # the engine may report one OOM more than once


@pytest.mark.docker
async def test_stray_container_is_removed_on_start(
    tmp_path: Path, kernel_image: str, docker_engine: Any
) -> None:
    store = Store(f"sqlite:///{tmp_path}/store.sqlite")
    ours, theirs = store.id, "another-store"
    store.close()

    def stray(scope: str, session_id: str) -> Any:
        return docker_engine.containers.run(
            kernel_image,
            ["sleep", "300"],
            detach=True,
            labels={
                LABEL_ROOT: "1",
                LABEL_SCOPE: scope,
                LABEL_SESSION: session_id,
                LABEL_KERNEL: session_id,
            },
        )

    mine, foreign = stray(ours, "f" * 32), stray(theirs, "e" * 32)
    try:
        async with _started(tmp_path, "docker"):
            assert docker_engine.containers.list(all=True, filters={"id": mine.id}) == []
            # Another manager's (another store's) kernels are not ours to remove.
            assert docker_engine.containers.list(all=True, filters={"id": foreign.id})
    finally:
        foreign.remove(force=True)
