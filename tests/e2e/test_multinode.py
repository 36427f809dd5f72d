"""Sessions spread over several Docker engines in one Swarm (``swarm_engines``: three real
engines, each a host of its own, see ``harness.engines``), with the real kernel image and
runtime. Nothing is mocked.

Every agent has ``cpu 2, mem 1g``; kernels of ``mem 600m`` do not fit two to an agent,
so a cluster of them is spread, one kernel per engine. The test that kills an engine
comes last: the others need all three.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from conftest import started_manager
from harness import engines as engines_harness
from harness.engines import TEST_REPO, Engines, Node, Registry, ssh_login
from harness.server import RESOLVE_NAMES, serving, stdout_of

from bai_jupyter import kernelspecs
from bai_jupyter.agents.base import AgentError
from bai_jupyter.agents.docker import DockerAgent
from bai_jupyter.errors import InvalidRequest
from bai_jupyter.kernel_plan import LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.manager.lifecycle.images import registry_of
from bai_jupyter.model import Session, Status
from bai_jupyter.model.pending import pending_reason

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]

SLOTS = {"cpu": "2", "mem": "1g"}
#: Two do not fit one agent: a cluster of these is spread, one kernel per engine.
BIG = {"cpu": "0.25", "mem": "600m"}
SMALL = {"cpu": "0.25", "mem": "300m"}
SPREAD = {"cluster_size": 3, "cluster_mode": "multi-node", "resources": BIG}
RUNNING = {Status.RUNNING}


@contextlib.asynccontextmanager
async def _manager(
    tmp_path: Path, engines: Engines, store: str = "store", **traits: Any
) -> AsyncIterator[BaiSessionManager]:
    """A manager whose agents are the engines; its sessions are all gone afterwards."""
    traits.setdefault("agents", engines.agents(SLOTS))
    traits.setdefault("data_folders_root", str(tmp_path / "folders"))
    mgr = BaiSessionManager(
        store_url=f"sqlite:///{tmp_path}/{store}.sqlite", pass_interval=0.5, **traits
    )
    async with started_manager(mgr):
        yield mgr


async def _running(
    mgr: BaiSessionManager, request: dict[str, Any], timeout: float = 120
) -> Session:
    session = await mgr.create(request, "alice")
    session = await mgr.wait_for(session.id, RUNNING, timeout=timeout)
    assert session.status is Status.RUNNING, (session.status_info, session.status_data)
    return session


async def _sh(mgr: BaiSessionManager, sid: str, script: str, kernel: str = "main1") -> str:
    result = await mgr.exec(sid, ["/bin/sh", "-c", script], kernel=kernel)
    assert result.exit_code == 0, result.output
    return result.output.strip()


async def _eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    """Wait until ``check()`` holds (the manager acts in the background)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.2)


def _node(engines: Engines, agent_id: str | None) -> Node:
    return next(node for node in engines.nodes if node.name == agent_id)


def _containers(node: Node, session_id: str) -> list[dict[str, Any]]:
    client = node.client()
    try:
        found: list[dict[str, Any]] = client.api.containers(
            all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}
        )
        return found
    finally:
        client.close()


def _overlay(engines: Engines, session_id: str) -> list[Any]:
    """The session's overlay network as the Swarm's manager node lists it."""
    client = engines.nodes[0].client()
    try:
        found: list[Any] = client.api.networks(names=[f"bai-{session_id[:12]}"])
        return found
    finally:
        client.close()


async def test_a_cluster_too_big_for_one_engine_runs_across_three(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    async with _manager(tmp_path, swarm_engines) as mgr:
        session = await _running(mgr, {**SPREAD, "mounts": ["shared"]})
        sid = session.id
        assert [k.agent_id for k in session.kernels] == ["node1", "node2", "node3"]
        for kernel in session.kernels:  # each kernel really is a container of its engine
            here = _containers(_node(swarm_engines, kernel.agent_id), sid)
            assert [c["Labels"]["ai.backend.bai-jupyter.cluster-host"] for c in here] == [
                kernel.hostname
            ]
        assert _overlay(swarm_engines, sid)[0]["Driver"] == "overlay"
        # main1's ports are published on its engine's address only (never on 0.0.0.0).
        first = _node(swarm_engines, session.kernels[0].agent_id)
        client = first.client()
        try:
            cid = _containers(first, sid)[0]["Id"]
            bindings = client.api.inspect_container(cid)["HostConfig"]["PortBindings"]
        finally:
            client.close()
        assert bindings and {b["HostIp"] for v in bindings.values() for b in v} == {first.address}

        for host in ("main1", "sub2"):  # names resolve across engines, both ways
            script = "for h in main1 sub1 sub2; do getent hosts $h >/dev/null && echo $h; done"
            assert (await _sh(mgr, sid, script, kernel=host)).split() == ["main1", "sub1", "sub2"]
        assert await _sh(mgr, sid, "ssh sub2 hostname") == "sub2"
        await _sh(mgr, sid, "hostname > /home/work/shared/written-by", kernel="sub1")
        assert await _sh(mgr, sid, "cat /home/work/shared/written-by") == "sub1"
        for host in ("main1", "sub1", "sub2"):
            env = await _sh(mgr, sid, "echo $BACKENDAI_CLUSTER_MODE $RANK", kernel=host)
            assert env == f"multi-node {['main1', 'sub1', 'sub2'].index(host)}"
        # The overlay is internal: a sub kernel reaches nothing outside the session.
        probe = f"import socket; socket.create_connection(('{swarm_engines.host_address}', 22), 3)"
        cut = await mgr.exec(sid, ["python3", "-c", probe], kernel="sub1")
        assert cut.exit_code != 0 and "unreachable" in cut.output, cut.output

        await mgr.destroy(sid)
        for node in swarm_engines.nodes:
            assert _containers(node, sid) == []

        async def overlay_gone() -> bool:  # once the Swarm has seen every kernel leave it
            return not _overlay(swarm_engines, sid)

        await _eventually(overlay_gone, "the overlay removed")


async def test_every_kernel_resolves_every_name_to_its_overlay_address_across_engines(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    """main1 is on its engine's egress bridge and the session's overlay: its hostname is in
    its /etc/hosts once per network, in no fixed order. Two rounds of two sessions at once
    (kernels of 400m: three fit no engine, so each session is spread), each kernel asked
    about its own name and the others' in every way a framework asks."""
    request = {**SPREAD, "resources": {"cpu": "0.25", "mem": "400m"}}
    async with _manager(tmp_path, swarm_engines) as mgr:
        for _ in range(2):
            sessions = await asyncio.gather(*(_running(mgr, request) for _ in range(2)))
            wrong = []
            for session in sessions:
                assert len({k.agent_id for k in session.kernels}) > 1  # spread: an overlay
                names = [k.hostname for k in session.kernels]
                net = f"bai-{session.id[:12]}"
                address = {
                    c["Labels"]["ai.backend.bai-jupyter.cluster-host"]: c["NetworkSettings"][
                        "Networks"
                    ][net]["IPAddress"]
                    for node in swarm_engines.nodes
                    for c in _containers(node, session.id)
                }
                for name in names:
                    command = ["python3", "-c", RESOLVE_NAMES, *names]
                    result = await mgr.exec(session.id, command, kernel=name)
                    assert result.exit_code == 0, result.output
                    expected = {
                        "own": name,
                        "gethostbyname": address[name],
                        "hostname -i": [address[name]],
                        "getent": {n: [address[n]] for n in names},
                    }
                    seen = json.loads(result.output)
                    if seen != expected:
                        wrong.append((session.id[:12], name, seen, expected))
            assert not wrong, wrong
            await asyncio.gather(*(mgr.destroy(s.id) for s in sessions))


async def test_roles_spread_over_the_engines_say_where_each_kernel_runs(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    """main (600m) and three workers (300m): 1.5g fits no engine, so the kernels are spread;
    each knows its role, its rank and its rank on its own engine."""
    roles = [
        {"name": "main", "resources": BIG},
        {"name": "worker", "replicas": 3, "resources": SMALL},
    ]
    async with _manager(tmp_path, swarm_engines) as mgr:
        session = await _running(mgr, {"cluster_mode": "multi-node", "roles": roles})
        hosts = [k.hostname for k in session.kernels]
        assert hosts == ["main1", "worker1", "worker2", "worker3"]
        on = {k.hostname: k.agent_id for k in session.kernels}
        assert len(set(on.values())) >= 2 and len(set(on.values())) < len(hosts)  # shared too
        script = "echo $BACKENDAI_CLUSTER_ROLE $RANK $BACKENDAI_CLUSTER_LOCAL_RANK"
        for rank, host in enumerate(hosts):
            local = [h for h in hosts if on[h] == on[host]].index(host)
            role = host.rstrip("0123456789")
            assert await _sh(mgr, session.id, script, kernel=host) == f"{role} {rank} {local}"
            here = _containers(_node(swarm_engines, on[host]), session.id)
            assert host in {c["Labels"]["ai.backend.bai-jupyter.cluster-host"] for c in here}
        far = next(h for h in hosts if on[h] != on["main1"])
        assert await _sh(mgr, session.id, f"ssh {far} hostname") == far


async def test_an_image_on_one_engine_is_copied_to_the_others_in_pulling(
    tmp_path: Path, swarm_engines: Engines, kernel_image: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    image = f"{TEST_REPO}:{tag}"
    first = swarm_engines.nodes[0].client()
    first.api.tag(kernel_image, TEST_REPO, tag)  # built here: no registry has it
    seen: list[dict[str, Any]] = []
    try:
        async with _manager(tmp_path, swarm_engines) as mgr:

            async def follow(session_id: str) -> None:
                async for event in mgr.events():
                    if event["session_id"] == session_id and event["status"] == "PULLING":
                        seen.append((await mgr.get(session_id)).status_data["pulling"])

            session = await mgr.create({**SPREAD, "image": image}, "alice")
            watcher = asyncio.ensure_future(follow(session.id))
            try:
                session = await mgr.wait_for(session.id, RUNNING, timeout=180)
            finally:
                watcher.cancel()
            assert session.status is Status.RUNNING, session.status_data
            history = [h.status for h in session.status_history]
            assert history.index(Status.PULLING) == history.index(Status.PREPARING) + 1
            pulling = session.status_data["pulling"]
            assert pulling["image"] == image
            assert {a: (e["from"], e["progress"]) for a, e in pulling["agents"].items()} == {
                "node2": ("node1", 1.0),
                "node3": ("node1", 1.0),
            }
            assert seen and seen[0]["agents"]["node2"]["from"] == "node1"  # shown while pulling
            assert {e["phase"] for e in pulling["agents"].values()} == {"done"}
            for record in seen:  # 1.0 only once the image is there
                for entry in record["agents"].values():
                    assert entry["phase"] == "done" or entry.get("progress", 0) < 1, record
            assert await _sh(mgr, session.id, "ssh sub2 hostname") == "sub2"
    finally:
        first.close()
        for node in swarm_engines.nodes:
            client = node.client()
            with contextlib.suppress(Exception):
                client.api.remove_image(image, noprune=True)
            client.close()


@contextlib.contextmanager
def _hidden_on(node: Node, path: Path) -> Iterator[None]:
    """An empty directory over ``path`` on one engine's machine only (its mount namespace):
    that engine no longer shares the directory with the others."""
    assert node.proc is not None
    target = ["nsenter", f"--mount=/proc/{node.proc.pid}/ns/mnt"]
    subprocess.run([*target, "mount", "-t", "tmpfs", "tmpfs", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run([*target, "umount", str(path)], check=True)


async def test_a_spread_request_is_refused_at_create_where_it_could_not_run(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    # An engine in no Swarm: a request that must be spread is refused.
    loner = swarm_engines.outside[0]
    agents = [*swarm_engines.agents(SLOTS)[:2], swarm_engines.agent(loner, SLOTS)]
    async with _manager(tmp_path, swarm_engines, "a", agents=agents) as mgr:
        with pytest.raises(InvalidRequest) as refused:
            await mgr.create(SPREAD, "alice")
        message = str(refused.value)
        assert message.startswith("cluster_mode: 3 kernels of ")
        assert f"{loner.name} is not in an active Swarm (inactive)" in message
        assert "`docker swarm init --advertise-addr ADDR`" in message
        assert "`docker swarm join --token TOKEN ADDR:2377`" in message
        # One agent can hold it: accepted (it runs there, on a local bridge).
        small = {**SPREAD, "resources": SMALL}
        assert (await mgr.create(small, "alice", dry_run=True)).status is Status.PENDING

    # In one Swarm, but one engine does not see the data folders: refused, naming it.
    folders = tmp_path / "hidden-on-node3"
    folders.mkdir()
    with _hidden_on(swarm_engines.nodes[2], folders):
        async with _manager(tmp_path, swarm_engines, "b", data_folders_root=str(folders)) as mgr:
            with pytest.raises(InvalidRequest) as refused:
                await mgr.create({**SPREAD, "mounts": ["data"]}, "alice")
            message = str(refused.value)
            assert message.startswith("mounts: ")
            assert "not the same directory on agent node3" in message
            assert "NFS" in message
            assert (await mgr.create(SPREAD, "alice", dry_run=True)).status is Status.PENDING


def _kernelspec(home: Path) -> None:
    spec = kernelspecs.kernelspec_json(
        "bai-spread", {"cluster_size": 2, "cluster_mode": "multi-node", "resources": BIG}
    )
    folder = home / "data" / "kernels" / "bai-spread"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


async def test_a_notebook_kernel_is_main1_on_one_engine_and_reaches_sub1_on_another(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    home, notebooks = tmp_path / "server", tmp_path / "notebooks"
    _kernelspec(home)
    notebooks.mkdir()
    config = (
        f"c.BaiSessionManager.agents = {swarm_engines.agents(SLOTS)!r}\n"
        f"c.ServerApp.root_dir = {str(notebooks)!r}\n"
    )
    with serving(home, config) as server:
        reply = await server.fetch(
            "POST",
            "api/sessions",
            {"path": "a.ipynb", "type": "notebook", "kernel": {"name": "bai-spread"}},
        )
        assert reply.code == 201, (reply.body, server.tail())
        jupyter = json.loads(reply.body)
        client = server.client()
        ours = [
            s
            for s in await client.list_sessions()
            if s.meta.get("jupyter_kernel_id") == jupyter["kernel"]["id"]
        ]
        assert len(ours) == 1 and ours[0].status is Status.RUNNING
        session = ours[0]
        assert [k.agent_id for k in session.kernels] == ["node1", "node2"]
        code = (
            "import os, socket, subprocess, urllib.request\n"
            "print(socket.gethostname(), os.environ['BACKENDAI_CLUSTER_MODE'], os.getcwd())\n"
            "print(subprocess.run(['ssh', 'sub1', 'hostname'], capture_output=True,"
            " text=True).stdout.strip())\n"
            # main1 calls the manager back at the host's address on the engines' network
            "url = os.environ['BAI_JUPYTER_URL'] + 'bai/api/v1/sessions/'"
            " + os.environ['BACKENDAI_SESSION_ID']\n"
            "req = urllib.request.Request(url, headers={'Authorization':"
            " 'token ' + os.environ['BAI_JUPYTER_TOKEN']})\n"
            "print(urllib.request.urlopen(req, timeout=10).status)\n"
        )
        reply_ = await client.execute(session.id, code)
        console = list(reply_["console"])
        while reply_["status"] == "continued":
            reply_ = await client.execute(session.id, mode="continue", run_id=reply_["run_id"])
            console += reply_["console"]
        out = "".join(item[1] for item in console if item[0] == "stdout").splitlines()
        assert out == ["main1 multi-node /home/work/notebooks", "sub1", "200"], console
        await server.fetch("DELETE", f"api/sessions/{jupyter['id']}")


async def test_a_lost_engine_ends_only_its_sessions_and_is_cleaned_when_back(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    async with _manager(
        tmp_path, swarm_engines, agent_lost_timeout=3.0, agent_check_interval=0.3
    ) as mgr:
        spread = await _running(mgr, SPREAD)
        elsewhere = await _running(mgr, {"resources": SMALL})  # lands on node1
        alone = await _running(mgr, {"resources": SMALL})  # node1 is full: node2
        doomed = _node(swarm_engines, alone.kernels[0].agent_id)
        assert elsewhere.kernels[0].agent_id != doomed.name

        crashed = time.monotonic()
        doomed.crash()
        for sid in (spread.id, alone.id):
            ended = await mgr.wait_for(sid, {Status.ERROR}, timeout=60)
            assert (ended.status, ended.status_info) == (Status.ERROR, "agent-lost")
            assert ended.status_data["agent"] == doomed.name
        # Within the configured time (plus a check's interval and its ping's timeout).
        assert time.monotonic() - crashed < mgr.agent_lost_timeout + 3
        assert (await mgr.get(elsewhere.id)).status is Status.RUNNING
        assert await _sh(mgr, elsewhere.id, "hostname") == "main1"
        others = [node for node in swarm_engines.nodes if node is not doomed]

        async def removed_elsewhere() -> bool:
            return not any(_containers(node, spread.id) for node in others)

        await _eventually(removed_elsewhere, "the spread session's other kernels removed")

        async def schedulable() -> bool:
            view = {a["id"]: a for a in await mgr.agents_view("alice", admin=True)}
            return bool(view[doomed.name]["schedulable"])

        assert not await schedulable()
        # A new session is placed on the engines that answer, never on the lost one (which,
        # free of its ended sessions, would be as good a fit as the third).
        kept = await _running(mgr, {**SPREAD, "cluster_size": 2})
        assert doomed.name not in {k.agent_id for k in kept.kernels}
        await mgr.destroy(kept.id)

        await asyncio.to_thread(doomed.start)
        await _eventually(schedulable, f"{doomed.name} reconciled once it answers again")
        assert _containers(doomed, spread.id) == []
        assert _containers(doomed, alone.id) == []

        async def overlay_gone() -> bool:
            return not _overlay(swarm_engines, spread.id)

        await _eventually(overlay_gone, "the lost session's overlay removed")
        # It takes sessions again.
        again = await _running(mgr, SPREAD)
        assert doomed.name in {k.agent_id for k in again.kernels}

        # Destroyed while an engine is down for a moment (not lost): the kernels elsewhere
        # go at once, those on the engine when it answers again.
        mgr.agent_lost_timeout = 600.0
        doomed.crash()
        assert (await mgr.destroy(again.id)).status is Status.TERMINATED
        assert not any(_containers(node, again.id) for node in others)
        await asyncio.to_thread(doomed.start)

        async def swept() -> bool:
            return not _containers(doomed, again.id) and not _overlay(swarm_engines, again.id)

        await _eventually(swept, f"{again.id} removed from {doomed.name} once it answers")


def _certificates(folder: Path, address: str) -> tuple[Path, Path]:
    """A CA, a server certificate for ``address`` and a client certificate (openssl)."""

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    server, client = folder / "server", folder / "client"
    server.mkdir()
    client.mkdir()
    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
    )
    (folder / "san.cnf").write_text(
        f"subjectAltName = IP:{address}\nextendedKeyUsage = serverAuth\n"
    )
    (folder / "client.cnf").write_text("extendedKeyUsage = clientAuth\n")
    for who, ext in ((server, "san.cnf"), (client, "client.cnf")):
        ssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={who.name}",
            "-keyout",
            str(who / "key.pem"),
            "-out",
            str(who / "req.csr"),
        )
        ssl(
            "x509",
            "-req",
            "-in",
            str(who / "req.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            ext,
            "-out",
            str(who / "cert.pem"),
        )
        (who / "ca.pem").write_bytes((folder / "ca.pem").read_bytes())
    return server, client


def _tls_options(folder: Path, node: Node) -> tuple[str, str]:
    """dockerd's options for a verified TLS endpoint on ``node``'s address, and the folder of
    the client's certificates."""
    server, client = _certificates(folder, node.address)
    tls = (
        f"-H tcp://{node.address}:2376 --tlsverify --tlscacert {server / 'ca.pem'} "
        f"--tlscert {server / 'cert.pem'} --tlskey {server / 'key.pem'}"
    )
    return tls, str(client)


async def test_an_agent_reached_over_tcp_with_tls(tmp_path: Path, swarm_engines: Engines) -> None:
    loner = swarm_engines.outside[0]
    tls, client = _tls_options(tmp_path, loner)
    await asyncio.to_thread(loner.stop)
    await asyncio.to_thread(loner.start, 60, tls)
    endpoint = f"tcp://{loner.address}:2376"
    entry = {"id": "tls", "endpoint": endpoint, "tls_cert_path": client, "slots": SLOTS}
    async with _manager(tmp_path, swarm_engines, "tls", agents=[entry]) as mgr:
        agent = mgr.core.agents["tls"]
        assert await agent.available()
        assert (await agent.swarm_node()).state == "inactive"  # type: ignore[attr-defined]
    plain = {"id": "plain", "endpoint": endpoint, "slots": SLOTS}
    async with _manager(tmp_path, swarm_engines, "plain", agents=[plain]) as mgr:
        assert not await mgr.core.agents["plain"].available()  # the engine wants a certificate


async def _over_tls(
    tmp_path: Path, engines: Engines, kernel_image: str
) -> tuple[Node, str, dict[str, Any]]:
    """The engine outside the Swarm restarted to serve TCP with TLS, with the kernel image:
    the node, its dockerd TLS options, and its agent entry ``far``."""
    loner = engines.outside[0]
    tls, client = _tls_options(tmp_path, loner)
    await asyncio.to_thread(loner.stop)
    await asyncio.to_thread(loner.start, 60, tls)
    await asyncio.to_thread(engines_harness.ensure_image, loner, kernel_image)
    endpoint = f"tcp://{loner.address}:2376"
    far = engines.agent(loner, SLOTS, id="far", endpoint=endpoint, tls_cert_path=client)
    return loner, tls, far


async def test_bai_works_in_main1_on_an_engine_reached_over_tcp(
    tmp_path: Path, swarm_engines: Engines, kernel_image: str
) -> None:
    """That machine sees none of this host's files: the package travels into main1 with
    the runtime, and %bai there reaches the server's kernel listener as its owner."""
    _, _, far = await _over_tls(tmp_path, swarm_engines, kernel_image)
    with serving(tmp_path / "server", f"c.BaiSessionManager.agents = {[far]!r}\n") as server:
        api = server.client()
        made = await api.create({"resources": SMALL})
        session = await api.wait_for(made.id, {Status.RUNNING}, timeout=120)
        assert session.status is Status.RUNNING, session.status_data
        assert [k.agent_id for k in session.kernels] == ["far"]
        code = (
            "get_ipython().run_line_magic('load_ext', 'bai_jupyter')\n"
            "get_ipython().run_line_magic('bai', 'status --text')\n"
        )
        out = await stdout_of(server, session.id, code)
        assert out[0].startswith(f"session {session.id} · interactive · RUNNING"), out


@contextlib.asynccontextmanager
async def _far_engine(
    tmp_path: Path, engines: Engines, kernel_image: str
) -> AsyncIterator[tuple[BaiSessionManager, Node, str]]:
    """The engine outside the Swarm as the one agent ``far``, reached over TCP with TLS (a
    machine of its own, its death unseen by the manager's sockets), lost after 3 s of
    silence, beside ``near`` in a group of its own; the manager, the node and the dockerd
    options that serve TLS."""
    loner, tls, far = await _over_tls(tmp_path, engines, kernel_image)
    # In a group of its own: the image is known (on it) while far does not answer.
    near = engines.agent(engines.nodes[0], SLOTS, id="near", resource_group="near")
    lost_fast = {"agent_lost_timeout": 3.0, "agent_check_interval": 0.3}
    try:
        async with _manager(tmp_path, engines, "far", agents=[far, near], **lost_fast) as mgr:
            yield mgr, loner, tls
    finally:
        if loner.proc is None:  # a test that failed while it was down: the next one needs it
            await asyncio.to_thread(loner.boot, tls)


def _kill_main1(node: Node, session_id: str) -> None:
    """SIGKILL to the session's main1 container, from outside the manager."""
    client = node.client()
    try:
        (found,) = _containers(node, session_id)
        client.api.kill(found["Id"])
    finally:
        client.close()


async def test_an_engine_whose_machine_died_hard_is_used_whole_once_back(
    tmp_path: Path, swarm_engines: Engines, kernel_image: str
) -> None:
    """Power lost (nothing closed its connections), then booted again: the manager's kept
    connections and its event stream lead nowhere; it must not trust them."""
    async with _far_engine(tmp_path, swarm_engines, kernel_image) as (mgr, node, tls):
        # Sessions started at once: the manager keeps several connections to the engine.
        before = await asyncio.gather(*(_running(mgr, {"resources": SMALL}) for _ in range(3)))
        await asyncio.gather(*(_sh(mgr, s.id, "hostname") for s in before))

        await asyncio.to_thread(node.die_hard)
        for session in before:
            ended = await mgr.wait_for(session.id, {Status.ERROR}, timeout=60)
            assert (ended.status_info, ended.status_data["agent"]) == ("agent-lost", "far")
        waiting = await mgr.create({"resources": SMALL}, "alice")

        async def told() -> bool:
            record = (await mgr.get(waiting.id)).status_data.get("scheduler")
            return "agent far does not answer" in (pending_reason(record) or "")

        await _eventually(told, "why-pending names the lost agent")

        await asyncio.to_thread(node.boot, tls)
        back = await mgr.wait_for(waiting.id, RUNNING | {Status.CANCELLED}, timeout=120)
        assert back.status is Status.RUNNING, (back.status_info, back.status_data)
        assert await _sh(mgr, back.id, "hostname") == "main1"

        await asyncio.to_thread(_kill_main1, node, back.id)
        died = await mgr.wait_for(back.id, {Status.ERROR}, timeout=30)
        assert (died.status, died.status_info) == (Status.ERROR, "kernel-died")


async def test_kernels_of_a_cleanly_stopped_engine_end_as_its_loss(
    tmp_path: Path, swarm_engines: Engines, kernel_image: str
) -> None:
    """dockerd stopped (SIGTERM) stops its containers first: their exits are the agent's
    end, not kernels that died (nor a user's shutdown: main1's runtime exits 0)."""
    async with _far_engine(tmp_path, swarm_engines, kernel_image) as (mgr, node, tls):
        session = await _running(mgr, {"resources": SMALL})
        await asyncio.to_thread(node.stop)
        try:
            ended = await mgr.wait_for(session.id, {Status.ERROR, Status.TERMINATED}, timeout=60)
            assert (ended.status, ended.status_info) == (Status.ERROR, "agent-lost")
            assert ended.status_data["agent"] == "far"
            assert ended.status_data["kernels"] == ["main1"]
        finally:
            await asyncio.to_thread(node.start, 60, tls)


async def test_an_agent_reached_over_ssh(
    tmp_path: Path, swarm_engines: Engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ssh://``: the engine is reached through the node's sshd, whose forced command runs
    ``docker system dial-stdio`` there; the engine does not see this host's files."""
    node = swarm_engines.nodes[2]
    (tmp_path / "ssh").mkdir()
    with ssh_login(node, tmp_path / "ssh") as login:
        entry = swarm_engines.agent(node, SLOTS, id="far", endpoint=login.endpoint)
        monkeypatch.setenv("HOME", str(tmp_path))  # no known_hosts: the host is refused
        async with _manager(tmp_path, swarm_engines, "unknown", agents=[entry]) as mgr:
            far = mgr.core.agents["far"]
            assert isinstance(far, DockerAgent)
            refused = r"add the host key of ssh://root@\S+ to ~/.ssh/known_hosts"
            with pytest.raises(AgentError, match=refused):
                await far.engine.api()

        monkeypatch.setenv("HOME", str(login.home))
        async with _manager(tmp_path, swarm_engines, "ssh", agents=[entry]) as mgr:
            far = mgr.core.agents["far"]
            assert isinstance(far, DockerAgent) and not far.local
            session = await _running(mgr, {"resources": SMALL})
            assert await _sh(mgr, session.id, "hostname") == "main1"
            login.drop_connections(relays_only=True)  # kept channels' far ends are gone
            assert await _sh(mgr, session.id, "hostname") == "main1"
            login.drop_connections()  # the machine rebooted: the next call connects anew
            assert await _sh(mgr, session.id, "hostname") == "main1"
            here = _containers(node, session.id)
            assert [c["Labels"]["ai.backend.bai-jupyter.cluster-host"] for c in here] == ["main1"]
            await mgr.destroy(session.id)
            assert _containers(node, session.id) == []


@contextlib.contextmanager
def _pulled_away(node: Node, image: str) -> Iterator[None]:
    """What a test pulled of ``image`` is removed from ``node`` afterwards (the next run
    pulls it again)."""
    try:
        yield
    finally:
        client = node.client()
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.api.remove_image(image, force=True)
        client.close()


async def test_an_image_from_a_registry_is_pulled_in_pulling_with_its_progress(
    tmp_path: Path, swarm_engines: Engines, registry: tuple[Registry, str]
) -> None:
    serving, image = registry
    node = serving.node
    agents = [swarm_engines.agent(node, SLOTS)]
    with _pulled_away(node, image):
        registries = [registry_of(image)]  # the operator lets agents pull from it
        async with _manager(tmp_path, swarm_engines, agents=agents, registries=registries) as mgr:
            session = await mgr.create({"image": image, "resources": SMALL}, "alice")
            shown: list[dict[str, Any]] = []  # the agent's record, as the API shows it
            while not (now := await mgr.get(session.id)).status.is_terminal:
                if now.status is Status.PULLING and now.status_data.get("pulling"):
                    shown.append(now.status_data["pulling"]["agents"][node.name])
                if now.status is Status.RUNNING:
                    break
                await asyncio.sleep(0.05)
            assert now.status is Status.RUNNING, (now.status_info, now.status_data)
            history = [h.status for h in now.status_history]
            assert history.index(Status.PULLING) == history.index(Status.PREPARING) + 1
            final = now.status_data["pulling"]["agents"][node.name]
            assert (final["from"], final["progress"]) == ("registry", 1.0)
            assert {entry["from"] for entry in shown} == {"registry"}
            moving = [e["progress"] for e in shown if 0 < e.get("progress", 0) < 1]
            assert len(set(moving)) >= 2, shown  # it moved while the session was PULLING
            assert await _sh(mgr, session.id, "hostname") == "main1"


async def test_a_pull_that_hangs_is_forced_out(
    tmp_path: Path, swarm_engines: Engines, registry: tuple[Registry, str]
) -> None:
    serving, image = registry
    node = serving.node
    agents = [swarm_engines.agent(node, SLOTS)]
    limits: dict[str, Any] = {"hang_timeout": {"PULLING": 1.5}, "watchdog_interval": 0.2}
    limits["registries"] = [registry_of(image)]
    with _pulled_away(node, image):
        async with _manager(tmp_path, swarm_engines, "hang", agents=agents, **limits) as mgr:
            session = await mgr.create({"image": image, "resources": SMALL}, "alice")
            serving.pause()  # the registry said it has the image, and now answers nothing
            try:
                ended = await mgr.wait_for(session.id, {Status.ERROR}, timeout=60)
                assert (ended.status, ended.status_info) == (Status.ERROR, "hang-timeout")
                assert ended.status_data["hang"]["state"] == "PULLING"
                assert Status.PULLING in [h.status for h in ended.status_history]
            finally:  # the engine's pull fails at once; the next test gets a registry
                serving.stop()
                serving.start()


async def test_a_system_session_on_a_remote_agent_serves_sftp_at_its_address(
    tmp_path: Path, swarm_engines: Engines
) -> None:
    """``sftp_address`` defaults to the agent's ``address``: published where this host
    reaches that machine, not on its loopback."""
    node = swarm_engines.nodes[0]
    async with _manager(tmp_path, swarm_engines, agents=[swarm_engines.agent(node, SLOTS)]) as mgr:
        request = {"type": "system", "mounts": ["data"], "resources": SMALL}
        sftp = (await _running(mgr, request)).kernels[0].info["sftp"]
        assert (sftp["host"], sftp["known_hosts"].split()[0]) == (
            node.address,
            f"[{node.address}]:{sftp['port']}",
        )
        key, known = tmp_path / "key", tmp_path / "known_hosts"
        key.write_text(sftp["private_key"])
        key.chmod(0o600)
        known.write_text(sftp["known_hosts"] + "\n")
        (tmp_path / "sent.txt").write_text("over the engines' network\n")
        argv = [
            *("sftp", "-b", "-", "-P", str(sftp["port"]), "-i", str(key)),
            *("-o", f"UserKnownHostsFile={known}", "-o", "BatchMode=yes"),
            f"{sftp['user']}@{sftp['host']}",
        ]
        put = f"put {tmp_path}/sent.txt data/sent.txt\n"
        done = await asyncio.to_thread(
            subprocess.run, argv, input=put, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        sent = tmp_path / "folders" / "alice" / "data" / "sent.txt"
        assert sent.read_text() == "over the engines' network\n"
