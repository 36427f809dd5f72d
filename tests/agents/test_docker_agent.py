"""DockerAgent against the real engine and the real kernel image (no mocks).

Most checks use a stand-in runtime (a few lines of Python mounted where the real
one goes) so they test the agent alone: networks, names, limits, bootstrap files,
ports, exec, logs, events, clean-up. The last tests use the real runtime
(``bai_jupyter/runtime``) for what needs it: SSH between kernels, a Jupyter kernel
behind the published ports, a batch time-out.

Without an engine or the image these tests skip, except under ``CI=true`` where
they fail: CI must run them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness.server import RESOLVE_NAMES
from traitlets import TraitError

from bai_jupyter import kernel_plan, model
from bai_jupyter.agents.base import AgentError, KernelEvent, KernelEventKind, KernelStarted
from bai_jupyter.agents.capped import DROPPED_MARK
from bai_jupyter.agents.docker import (
    EGRESS_NETWORK,
    DockerAgent,
)
from bai_jupyter.agents.docker.kernel_ports import LABEL_PORT_BASE
from bai_jupyter.mounts import Mount
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime import protocol
from bai_jupyter.runtime.protocol import CHANNELS, KERNEL_PORT_BASES, RUNTIME_MOUNT

pytestmark = pytest.mark.docker

T = TypeVar("T")
IMAGE = "bai-jupyter/python:3.11"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: Extra label on every test container, so a sweep finds leftovers of this run only.
TEST_LABEL = "ai.backend.bai-jupyter.test-run"
RUN_ID = uuid.uuid4().hex
REAL_RUNTIME = Path(kernel_plan.__file__).resolve().parent / "runtime"
MEM = 128 * 1024 * 1024

FAKE_RUNTIME = """\
import json, os, signal, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

boot = json.load(open("/home/config/bootstrap.json"))
print("fake-runtime up", boot["hostname"], flush=True)
print("fake-runtime stderr", boot["hostname"], file=sys.stderr, flush=True)
if os.environ.get("FAKE_EXIT"):
    print(os.environ.get("FAKE_SAY", ""), file=sys.stderr, flush=True)
    sys.exit(int(os.environ["FAKE_EXIT"]))


class Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        body = boot["hostname"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


for spec in boot.get("service_ports") or []:
    server = ThreadingHTTPServer(("0.0.0.0", int(spec.split(":")[2])), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
while True:
    time.sleep(3600)
"""


def _unavailable(message: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


class Harness:
    """One event loop for the module, agents on it, the events they report, and
    every session started, so teardown removes them even when a test fails."""

    def __init__(self, engine: Any, fake_runtime: Path) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self.agent = DockerAgent("test-docker", runtime_dir=fake_runtime)
        self.real = DockerAgent("test-docker-real")
        self.sessions: list[str] = []
        self.events: list[KernelEvent] = []
        self._collector = self.loop.create_task(self._collect())

    async def _collect(self) -> None:
        async for event in self.agent.events():
            self.events.append(event)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def session(
        self,
        size: int,
        *,
        image: str = IMAGE,
        type: model.SessionType = model.SessionType.INTERACTIVE,
        env: dict[str, str] | None = None,
        service_ports: list[str] | None = None,
        mounts: list[Mount] | None = None,
        startup_command: str | None = None,
        batch_timeout: float | None = None,
    ) -> tuple[model.Session, list[kernel_plan.KernelPlan]]:
        """A session record and its plans, built the way the manager builds them."""
        spec = model.SessionSpec(
            image=image,
            type=type,
            cluster_size=size,
            resources=ResourceSlot({"cpu": "0.5", "mem": MEM}),
            env=env or {},
            service_ports=service_ports or [],
            startup_command=startup_command,
            batch_timeout=batch_timeout,
        )
        session = model.Session.create(spec, "tester", time.time())
        keys = kernel_plan.generate_ssh_keys()
        connection = {
            "key": uuid.uuid4().hex,
            "transport": "tcp",
            "signature_scheme": "hmac-sha256",
            "kernel_name": "python3",
        }
        plans = [
            kernel_plan.KernelPlan(
                session_id=session.id,
                kernel_id=k.id,
                hostname=k.hostname,
                role=k.role,
                image=image,
                slots=k.slots.to_json(),
                env=kernel_plan.kernel_environ(session, k),
                mounts=list(mounts or []),
                labels={**kernel_plan.labels(session, k, "test-scope"), TEST_LABEL: RUN_ID},
                bootstrap=kernel_plan.bootstrap(session, k, keys, connection),
            )
            for k in session.kernels
        ]
        self.sessions.append(session.id)
        return session, plans

    def start(
        self, plans: list[kernel_plan.KernelPlan], agent: DockerAgent | None = None
    ) -> list[KernelStarted]:
        return self.run((agent or self.agent).start_kernels(plans[0].session_id, plans))

    def container(self, session_id: str, hostname: str) -> Any:
        return self.engine.containers.get(f"bai-{session_id[:12]}-{hostname}")

    def leftovers(self, session_id: str) -> tuple[list[Any], list[Any]]:
        """Containers and networks that still carry the session's label."""
        label = {"label": f"{kernel_plan.LABEL_SESSION}={session_id}"}
        return (
            self.engine.containers.list(all=True, filters=label),
            self.engine.networks.list(filters=label),
        )

    def wait_event(self, match: Callable[[KernelEvent], bool], deadline: float) -> KernelEvent:
        """The first reported event that matches, waiting until ``deadline`` (monotonic)."""

        async def poll() -> KernelEvent:
            while True:
                for event in self.events:
                    if match(event):
                        return event
                if time.monotonic() > deadline:
                    raise AssertionError(f"no matching event in time; got {self.events}")
                await asyncio.sleep(0.01)

        return self.run(poll())

    def close(self) -> None:
        for session_id in self.sessions:
            with contextlib.suppress(Exception):  # the sweep below still removes what it can
                self.run(self.agent.destroy_session(session_id))
        for leftover in self.engine.containers.list(
            all=True, filters={"label": f"{TEST_LABEL}={RUN_ID}"}
        ):
            leftover.remove(force=True)
        for session_id in self.sessions:
            for net in self.engine.networks.list(
                filters={"label": f"{kernel_plan.LABEL_SESSION}={session_id}"}
            ):
                net.remove()
        self.run(self.agent.close())
        self.run(self.real.close())
        self._collector.cancel()
        self.loop.run_until_complete(asyncio.gather(self._collector, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest) -> Any:
    """The shared SDK client of tests/conftest.py, which skips (fails under CI)
    without the kernel image. Probed through the agent first: the SDK leaks a
    socket (a ResourceWarning, an error here) when no engine answers."""
    if not asyncio.run(DockerAgent.engine_answers()):
        _unavailable("no Docker engine answers (start dockerd or set DOCKER_HOST)")
    assert request.getfixturevalue("kernel_image") == IMAGE
    return request.getfixturevalue("docker_engine")


@pytest.fixture(scope="module")
def h(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    runtime = tmp_path_factory.mktemp("fake-runtime")
    (runtime / "__main__.py").write_text(FAKE_RUNTIME)
    harness = Harness(engine, runtime)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder (the manager creates data folders; the agent creates none)."""
    path = tmp_path_factory.mktemp("data") / "folder"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def trio(h: Harness, data_dir: Path) -> tuple[model.Session, list[KernelStarted]]:
    """One 3-kernel interactive session shared by the read-only checks."""
    session, plans = h.session(
        3,
        service_ports=["web:http:8080"],
        mounts=[Mount(str(data_dir), "/home/work/data")],
    )
    return session, h.start(plans)


def _logs_with(h: Harness, agent: DockerAgent, kernel_id: str, text: str) -> str:
    """The kernel's logs once they contain ``text`` (the runtime may still be starting)."""
    deadline = time.monotonic() + 10
    while text not in (logs := h.run(agent.logs(kernel_id))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return logs


def _exec_ok(h: Harness, kernel_id: str, *command: str) -> str:
    result = h.run(h.agent.exec(kernel_id, list(command)))
    assert result.exit_code == 0, result.output
    return result.output


def test_engine_answers_and_capacity(h: Harness) -> None:
    assert h.run(DockerAgent.engine_answers())
    assert h.run(DockerAgent.engine_answers("unix:///nonexistent/docker.sock", timeout=1)) is False
    info = h.engine.info()
    assert h.run(h.agent.capacity()) == ResourceSlot(
        {"cpu": info["NCPU"], "mem": info["MemTotal"] - 512 * 1024 * 1024}
    )


def test_session_layout(h: Harness, trio: tuple[model.Session, list[KernelStarted]]) -> None:
    session, started = trio
    assert [s.kernel_id for s in started] == [k.id for k in session.kernels]
    net_name = f"bai-{session.id[:12]}"
    net = h.engine.networks.get(net_name)
    assert net.attrs["Internal"] is True
    assert net.attrs["Labels"][kernel_plan.LABEL_SESSION] == session.id
    egress = h.engine.networks.get(EGRESS_NETWORK)
    assert egress.attrs["Internal"] is False
    assert egress.attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    for kernel, info in zip(session.kernels, started):
        c = h.container(session.id, kernel.hostname)
        assert c.id == info.container_id
        assert c.status == "running"
        assert c.attrs["Config"]["Hostname"] == kernel.hostname
        assert c.labels[kernel_plan.LABEL_KERNEL] == kernel.id
        assert c.attrs["Config"]["Env"].count(f"BACKENDAI_CLUSTER_HOST={kernel.hostname}") == 1
        networks = c.attrs["NetworkSettings"]["Networks"]
        assert kernel.hostname in networks[net_name]["Aliases"]
        # Sub kernels live only on the internal network; main1 also on the egress bridge.
        expected = {net_name, EGRESS_NETWORK} if kernel.hostname == "main1" else {net_name}
        assert set(networks) == expected
    # Every hostname resolves from every kernel, through the session network.
    main_id, sub2_id = session.kernels[0].id, session.kernels[2].id
    assert "sub1" in _exec_ok(h, main_id, "getent", "hosts", "sub1")
    assert "sub2" in _exec_ok(h, main_id, "getent", "hosts", "sub2")
    assert "main1" in _exec_ok(h, sub2_id, "getent", "hosts", "main1")


def test_limits(h: Harness, trio: tuple[model.Session, list[KernelStarted]]) -> None:
    session, _ = trio
    for kernel in session.kernels:
        hc = h.container(session.id, kernel.hostname).attrs["HostConfig"]
        assert hc["NanoCpus"] == 500_000_000
        assert hc["Memory"] == MEM
        assert hc["MemorySwap"] == MEM  # no swap on top
        assert hc["PidsLimit"] == 4096
        assert hc["Init"] is True
    sub1 = session.kernels[1].id
    script = (
        "cd /sys/fs/cgroup; if [ -f cpu.max ]; then cat cpu.max memory.max;"
        " else cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us"
        " /sys/fs/cgroup/memory/memory.limit_in_bytes; fi"
    )
    quota, period, mem = _exec_ok(h, sub1, "sh", "-c", script).split()  # same order in v1/v2
    assert int(quota) / int(period) == 0.5
    assert int(mem) == MEM


def test_bootstrap_and_mounts(
    h: Harness, trio: tuple[model.Session, list[KernelStarted]], data_dir: Path
) -> None:
    session, _ = trio
    main_id, sub1_id = session.kernels[0].id, session.kernels[1].id
    boot = json.loads(_exec_ok(h, main_id, "cat", "/home/config/bootstrap.json"))
    conn = boot["connection"]
    assert conn["ip"] == "0.0.0.0"
    base = conn["shell_port"]  # five consecutive ports from a base picked for the session
    assert base in KERNEL_PORT_BASES
    assert [conn[f"{name}_port"] for name in CHANNELS] == list(range(base, base + 5))
    assert conn["transport"] == "tcp" and conn["signature_scheme"] == "hmac-sha256"
    assert len(conn["key"]) == 32
    listing = _exec_ok(h, sub1_id, "stat", "-c", "%a %U", "/home/config/bootstrap.json")
    assert listing.split() == ["600", "root"]
    assert json.loads(_exec_ok(h, sub1_id, "cat", "/home/config/bootstrap.json"))["mode"] == "wait"
    # /home/config is writable (ipykernel rewrites its connection file), the runtime is not.
    _exec_ok(h, main_id, "touch", "/home/config/kernel.json")
    denied = h.run(h.agent.exec(main_id, ["touch", f"{RUNTIME_MOUNT}/x"]))
    assert denied.exit_code != 0 and "Read-only" in denied.output
    assert _exec_ok(h, main_id, "pwd").strip() == protocol.WORK_DIR
    # The data folder is shared by every kernel.
    _exec_ok(h, sub1_id, "sh", "-c", "echo hello > /home/work/data/from-sub1")
    assert _exec_ok(h, main_id, "cat", "/home/work/data/from-sub1") == "hello\n"


def test_ports_published_on_loopback(
    h: Harness, trio: tuple[model.Session, list[KernelStarted]]
) -> None:
    session, started = trio
    main = started[0]
    assert set(main.ports) == {*CHANNELS, "service:web"}
    assert all(not s.ports for s in started[1:])
    settings = h.container(session.id, "main1").attrs["NetworkSettings"]
    if h.agent.publish:
        assert main.host == "127.0.0.1"
        base = int(h.container(session.id, "main1").labels[LABEL_PORT_BASE])
        for port in [*range(base, base + 5), 8080]:
            assert [b["HostIp"] for b in settings["Ports"][f"{port}/tcp"]] == ["127.0.0.1"]
    else:  # reached at its address on the egress bridge, nothing published
        assert main.host == settings["Networks"][EGRESS_NETWORK]["IPAddress"]
        assert main.ports["shell"] in KERNEL_PORT_BASES
        inside = range(main.ports["shell"], main.ports["shell"] + 5)
        assert not any(settings["Ports"].get(f"{p}/tcp") for p in inside)
    url = f"http://{main.host}:{main.ports['service:web']}/"
    deadline = time.monotonic() + 10
    while True:  # the stand-in's web server may still be starting
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                assert reply.read() == b"main1"
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_logs_and_exec(h: Harness, trio: tuple[model.Session, list[KernelStarted]]) -> None:
    session, _ = trio
    sub1 = session.kernels[1].id
    logs = _logs_with(h, h.agent, sub1, "fake-runtime stderr sub1")
    assert "fake-runtime up sub1" in logs and "fake-runtime stderr sub1" in logs
    result = h.run(h.agent.exec(sub1, ["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert result.exit_code == 3
    assert "out" in result.output and "err" in result.output
    began = time.monotonic()
    slow = h.run(h.agent.exec(sub1, ["sleep", "30"], timeout=1))
    assert slow.exit_code == 124 and time.monotonic() - began < 5
    with pytest.raises(AgentError, match="no kernel"):
        h.run(h.agent.logs("no-such-kernel"))


#: 20,000 numbered lines on stdout (220,000 bytes), then a last line on stderr.
LONG_OUTPUT = "seq -w 1 20000 | sed 's/^/line /'; echo the-end >&2"
LONG_OUTPUT_BYTES = 20_000 * len("line 00001\n") + len("the-end\n")


def test_exec_keeps_the_end_of_a_long_output_and_counts_what_came_before(
    h: Harness, trio: tuple[model.Session, list[KernelStarted]]
) -> None:
    sub1 = trio[0].kernels[1].id
    result = h.run(h.agent.exec(sub1, ["sh", "-c", LONG_OUTPUT], limit=1000))
    assert result.exit_code == 0
    assert len(result.output) == 1000 and result.output.endswith("line 20000\nthe-end\n")
    assert result.truncated and result.dropped == LONG_OUTPUT_BYTES - 1000
    whole = h.run(h.agent.exec(sub1, ["sh", "-c", LONG_OUTPUT]))  # within the 1 MiB default
    assert len(whole.output) == LONG_OUTPUT_BYTES and not whole.truncated


def test_logs_give_the_last_lines_asked_within_the_byte_limit(
    h: Harness, trio: tuple[model.Session, list[KernelStarted]]
) -> None:
    sub1 = trio[0].kernels[1].id
    # Written to the kernel's own stdout (its init's), i.e. into the container's log.
    _exec_ok(h, sub1, "sh", "-c", "seq -f 'mark-%g' 1 3000 > /proc/1/fd/1")
    _logs_with(h, h.agent, sub1, "mark-3000")
    assert h.run(h.agent.logs(sub1, tail=2)) == "mark-2999\nmark-3000\n"
    cut = h.run(h.agent.logs(sub1, limit=100))
    assert cut.startswith(DROPPED_MARK) and cut.endswith("mark-3000\n")
    assert len(cut) - len(DROPPED_MARK) == 100


def test_kernel_containers_keep_a_rotated_bounded_log(
    h: Harness, trio: tuple[model.Session, list[KernelStarted]]
) -> None:
    session, _ = trio
    for kernel in session.kernels:
        log_config = h.container(session.id, kernel.hostname).attrs["HostConfig"]["LogConfig"]
        assert log_config == {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "3"}}
    local = DockerAgent("other", log_driver="local", log_max_size="512K", log_max_files=2)
    assert local.log_config == {"type": "local", "config": {"max-size": "512k", "max-file": "2"}}
    with pytest.raises(TraitError, match="log_max_size"):
        DockerAgent("bad", log_max_size="ten megs")


def test_oom_event(h: Harness, trio: tuple[model.Session, list[KernelStarted]]) -> None:
    session, _ = trio
    sub2 = session.kernels[2].id
    began = time.monotonic()
    result = h.run(h.agent.exec(sub2, ["python3", "-c", "b = b'x' * (512 * 1024 * 1024)"]))
    assert result.exit_code == 137  # the allocation was killed, not the kernel
    event = h.wait_event(
        lambda e: e.kind is KernelEventKind.OOM_KILLED and e.kernel_id == sub2, began + 10
    )
    assert event.session_id == session.id


def test_kill_and_signal_events(h: Harness) -> None:
    session, plans = h.session(2)
    h.start(plans)
    main, sub1 = session.kernels
    began = time.monotonic()
    h.container(session.id, "main1").kill()  # from outside, like `docker kill`
    event = h.wait_event(
        lambda e: e.kind is KernelEventKind.EXITED and e.kernel_id == main.id, began + 2
    )
    assert event.session_id == session.id and event.exit_code == 137
    assert event.detail == {}
    # Through the agent: the stand-in ends cleanly on SIGTERM.
    began = time.monotonic()
    h.run(h.agent.signal(sub1.id, signal.SIGTERM))
    event = h.wait_event(
        lambda e: e.kind is KernelEventKind.EXITED and e.kernel_id == sub1.id, began + 2
    )
    assert event.exit_code == 0
    live = {k.kernel_id: k for k in h.run(h.agent.live_kernels())}
    assert live[main.id].labels[kernel_plan.LABEL_SCOPE] == "test-scope"
    assert (live[main.id].running, live[main.id].exit_code) == (False, 137)
    assert (live[sub1.id].running, live[sub1.id].exit_code) == (False, 0)
    assert live[main.id].session_id == session.id
    with pytest.raises(AgentError, match="not running"):
        h.run(h.agent.exec(main.id, ["true"]))


def test_task_timeout_detail(h: Harness) -> None:
    session, plans = h.session(
        1, env={"FAKE_EXIT": "124", "FAKE_SAY": "bai-runtime: task-timeout after 1 s"}
    )
    began = time.monotonic()
    h.start(plans)
    event = h.wait_event(
        lambda e: e.kind is KernelEventKind.EXITED and e.session_id == session.id, began + 10
    )
    assert (event.exit_code, event.detail) == (124, {"task_timeout": True})


def test_destroy_leaves_nothing(h: Harness) -> None:
    session, plans = h.session(2)
    h.start(plans)
    assert len(h.leftovers(session.id)[0]) == 2
    began = time.monotonic()
    h.run(h.agent.destroy_session(session.id))
    assert h.leftovers(session.id) == ([], [])
    kernel_ids = {k.id for k in session.kernels}
    gone: set[str] = set()

    def all_gone(event: KernelEvent) -> bool:
        if event.kind is KernelEventKind.GONE and event.kernel_id in kernel_ids:
            assert event.detail == {"requested": True}  # we removed it, nobody from outside
            gone.add(event.kernel_id)
        return gone == kernel_ids

    h.wait_event(all_gone, began + 5)
    h.run(h.agent.destroy_session(session.id))  # idempotent
    assert all(k.session_id != session.id for k in h.run(h.agent.live_kernels()))
    assert h.engine.networks.get(EGRESS_NETWORK)  # shared: stays


def test_bad_image_leaves_nothing(h: Harness) -> None:
    session, plans = h.session(2, image="bai-jupyter/no-such-image:0")
    with pytest.raises(AgentError, match=r"image bai-jupyter/no-such-image:0 not found.*build"):
        h.start(plans)
    assert h.leftovers(session.id) == ([], [])


def test_failure_of_one_kernel_removes_the_others(h: Harness, tmp_path: Path) -> None:
    session, plans = h.session(3)
    plans[2].mounts = [Mount(str(tmp_path), "relative/path")]  # the engine refuses it
    with pytest.raises(AgentError, match="sub2"):
        h.start(plans)
    assert h.leftovers(session.id) == ([], [])


def test_cancelled_start_leaves_nothing(h: Harness) -> None:
    session, plans = h.session(3)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(h.agent.start_kernels(session.id, plans))
        await asyncio.sleep(0.15)  # networks made, containers being created or started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    h.run(cancel_midway())
    assert h.leftovers(session.id) == ([], [])


def test_remote_engine_gets_runtime_by_archive(h: Harness, tmp_path: Path) -> None:
    """An engine on another host cannot bind our runtime dir: it travels in the archive."""
    remote = DockerAgent("test-remote", runtime_dir=h.agent.runtime_dir)
    remote.local = False
    try:
        session, plans = h.session(1)
        h.start(plans, agent=remote)
        main = session.kernels[0].id
        listing = _exec_ok(h, main, "stat", "-c", "%a %n", f"{RUNTIME_MOUNT}/__main__.py")
        assert listing.split() == ["444", f"{RUNTIME_MOUNT}/__main__.py"]
        assert "fake-runtime up main1" in _logs_with(h, remote, main, "fake-runtime up main1")
        mounts = h.container(session.id, "main1").attrs["Mounts"]
        assert all(m["Destination"] != RUNTIME_MOUNT for m in mounts)
    finally:
        h.run(remote.close())


def test_close_ends_events(engine: Any) -> None:
    async def scenario() -> None:
        agent = DockerAgent("test-close")
        events = agent.events()
        await asyncio.sleep(0.1)
        await agent.close()
        # Ends (other users of the engine may have produced a few events meanwhile).
        assert all(isinstance(e, KernelEvent) for e in [e async for e in events])
        assert agent._watcher is not None and not agent._watcher.is_alive()
        with pytest.raises(AgentError, match="closed"):
            await agent.live_kernels()

    asyncio.run(asyncio.wait_for(scenario(), 20))


@pytest.mark.skipif(os.geteuid() != 0, reason="the host firewall needs root")
def test_a_firewalled_local_engine_never_publishes_ports_on_loopback(engine: Any) -> None:
    """A port published on 127.0.0.1 is open to every local user (the engine's proxy runs
    as root), which the firewall's OUTPUT rules cannot tell apart: main1 stays on its bridge."""

    async def scenario() -> tuple[bool, bool]:
        agents = [
            DockerAgent("fw-pub", publish_ports=True),
            DockerAgent("fw-off-pub", publish_ports=True, host_firewall=False),
        ]
        try:
            return agents[0].publish, agents[1].publish
        finally:
            for agent in agents:
                await agent.close()

    assert asyncio.run(scenario()) == (False, True)


# -- with the real runtime -------------------------------------------------------------


@pytest.fixture(scope="module")
def real_runtime() -> Path:
    if not (REAL_RUNTIME / "__main__.py").is_file():
        _unavailable("the runtime (bai_jupyter/runtime/__main__.py) is not there")
    return REAL_RUNTIME


def test_real_runtime_ssh_and_jupyter(h: Harness, real_runtime: Path) -> None:
    session, plans = h.session(2)
    started = h.start(plans, agent=h.real)
    main, sub1 = session.kernels
    deadline = time.monotonic() + 20
    while True:  # sshd and the kernel take a moment
        result = h.run(
            h.real.exec(main.id, ["ssh", "-o", "BatchMode=yes", "sub1", "hostname"], timeout=10)
        )
        if result.exit_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (result.exit_code, result.output.strip()) == (0, "sub1"), h.run(h.real.logs(sub1.id))
    jupyter_client = pytest.importorskip("jupyter_client")
    connection = {
        "ip": started[0].host,
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "key": plans[0].bootstrap["connection"]["key"],
        **{f"{name}_port": started[0].ports[name] for name in CHANNELS},
    }
    deadline = time.monotonic() + 30
    output: list[str] = []
    while True:
        output.clear()
        client = jupyter_client.BlockingKernelClient()
        client.load_connection_info(connection)
        client.start_channels()
        try:
            # Raises "Kernel died …" when the heartbeat misses while ipykernel still boots.
            client.wait_for_ready(timeout=10)
            reply = client.execute_interactive(
                "import socket; print(socket.gethostname())",
                timeout=20,
                output_hook=lambda msg: output.append(msg["content"].get("text", "")),
            )
            assert reply["content"]["status"] == "ok"
            assert "".join(output).strip() == "main1"
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            client.stop_channels()


def test_every_kernel_resolves_every_name_to_its_session_network_address(
    h: Harness, real_runtime: Path
) -> None:
    """main1 is on the egress bridge and the session network: Docker lists its hostname
    once per network in /etc/hosts, in no fixed order. Ten sessions, started at once (the
    order changes from start to start), each kernel asked about its own name and the
    others' in every way a framework asks."""
    sessions = [h.session(2) for _ in range(10)]

    async def start_all() -> None:
        await asyncio.gather(*(h.real.start_kernels(s.id, plans) for s, plans in sessions))
        ready = await asyncio.gather(
            *(
                h.real.wait_for_output(k.id, protocol.READY_LINE, 100)
                for s, _ in sessions
                for k in s.kernels
            )
        )
        assert all(ready), ready

    try:
        h.run(start_all(), timeout=150)
        wrong = []
        for session, _ in sessions:
            names = [k.hostname for k in session.kernels]
            net = f"bai-{session.id[:12]}"
            address = {
                n: h.container(session.id, n).attrs["NetworkSettings"]["Networks"][net]["IPAddress"]
                for n in names
            }
            for kernel in session.kernels:
                result = h.run(h.real.exec(kernel.id, ["python3", "-c", RESOLVE_NAMES, *names]))
                assert result.exit_code == 0, result.output
                seen = json.loads(result.output)
                expected = {
                    "own": kernel.hostname,
                    "gethostbyname": address[kernel.hostname],
                    "hostname -i": [address[kernel.hostname]],
                    "getent": {n: [address[n]] for n in names},
                }
                if seen != expected:
                    wrong.append((session.id[:12], kernel.hostname, seen, expected))
        assert not wrong, wrong
    finally:
        for session, _ in sessions:
            h.run(h.real.destroy_session(session.id))


def test_real_runtime_batch_timeout(h: Harness, real_runtime: Path) -> None:
    session, plans = h.session(
        1, type=model.SessionType.BATCH, startup_command="sleep 30", batch_timeout=1
    )
    began = time.monotonic()
    h.start(plans, agent=h.real)
    event = h.wait_event(
        lambda e: e.kind is KernelEventKind.EXITED and e.session_id == session.id, began + 15
    )
    assert (event.exit_code, event.detail) == (124, {"task_timeout": True})


def test_the_runtime_runs_no_code_from_the_session_env(
    h: Harness, real_runtime: Path, tmp_path: Path
) -> None:
    """A data folder on PYTHONPATH with a sitecustomize.py, and a PYTHONSTARTUP: they run
    in the user's own processes (the task here), never in our runtime (root, sshd, keys)."""
    folder = tmp_path / "inject"
    folder.mkdir()
    note = (
        "import os, sys\nwith open('/home/work/inject/{0}.txt', 'a') as f:\n"
        "    f.write(repr(sys.argv) + chr(10))\n"
    )
    (folder / "sitecustomize.py").write_text(note.format("site"))
    (folder / "startup.py").write_text(note.format("startup"))
    env = {"PYTHONPATH": "/home/work/inject", "PYTHONSTARTUP": "/home/work/inject/startup.py"}
    session, plans = h.session(
        1,
        type=model.SessionType.BATCH,
        startup_command="python3 -c 'print(1)'",
        env=env,
        mounts=[Mount(str(folder), "/home/work/inject")],
    )
    began = time.monotonic()
    h.start(plans, agent=h.real)
    event = h.wait_event(
        lambda e: e.kind is KernelEventKind.EXITED and e.session_id == session.id, began + 30
    )
    assert event.exit_code == 0, h.run(h.real.logs(session.kernels[0].id))
    ran = (folder / "site.txt").read_text().splitlines()
    assert ran == ["['-c']"], ran  # the task's python3 only: the env is still the user's
    assert not (folder / "startup.txt").exists()
