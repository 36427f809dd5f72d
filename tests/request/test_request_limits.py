"""Request limits: no request can stop the scheduler, run uncapped, or get a 5xx for its size.

Bounds at the edge (the request schema), a scheduling pass that survives a session it
cannot handle (also one stored before the bounds existed, and after a restart), real
limits on every container (read back from the engine), and the API's size limits on a
real server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager, until
from harness.server import MULTI_USER, Server, start_server
from hypothesis import given, settings
from hypothesis import strategies as st

from bai_jupyter.agents.capped import DROPPED_MARK
from bai_jupyter.agents.docker.limits import kernel_limits
from bai_jupyter.errors import InvalidRequest
from bai_jupyter.kernel_plan import KernelPlan
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Agent, KernelRole, Session, SessionSpec, Status
from bai_jupyter.request import RESERVED_PORTS, SpecError, parse_spec, spec_to_json
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime.protocol import KERNEL_PORT_BASES, SSH_PORT, kernel_ports
from bai_jupyter.scheduler import SchedulerConfig, Snapshot, load_plugins, schedule
from bai_jupyter.scheduler.config import DEFAULT_RESOURCES, MIN_RESOURCES, SchedulerConfigError
from bai_jupyter.scheduler.queue import enqueue
from bai_jupyter.scheduler.sequencers import FIFOSequencer

pytestmark = pytest.mark.timeout(180)

FUTURE = time.time() + 86400 * 365


# --- the schema's bounds -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"starts_at": 1e18}, "starts_at"),
        ({"starts_at": -1}, "starts_at"),
        ({"starts_at": 10**400}, "starts_at"),  # no float holds it: was an OverflowError
        ({"type": "batch", "startup_command": "x", "batch_timeout": 1e308}, "batch_timeout"),
        ({"resources": {"cpu": "0"}}, "resources.cpu"),
        ({"resources": {"mem": 0}}, "resources.mem"),
        ({"resources": {"cpu": "0.0000000001"}}, "resources.cpu"),
        ({"resources": {"cpu": 1e308}}, "resources.cpu"),
        ({"resources": {"mem": "2e"}}, "resources.mem"),
        ({"image": "python\x00:3"}, "image"),
        ({"image": "Python:3"}, "image"),
        ({"service_ports": ["ssh:tcp:2200"]}, "service_ports[0]"),
        ({"service_ports": ["web:http:8080", "j:tcp:24303"]}, "service_ports[1]"),
        ({"depends_on": ["a"] * 10_000}, "depends_on"),
        ({"env": {f"V{i}": "x" for i in range(300)}}, "env"),
        ({"env": {"BIG": "x" * 70_000}}, "env"),
        ({"startup_command": "x" * 70_000}, "startup_command"),
        ({"mounts": ["d"] * 65}, "mounts"),
        ({"resource_group": "g" * 5000}, "resource_group"),
    ],
)
def test_out_of_bounds_fields_are_refused_with_their_name(request_: Any, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(request_)
    assert caught.value.field == field


def test_records_stored_before_the_bounds_still_load() -> None:
    old = {"starts_at": 1e18, "depends_on": ["a"] * 100, "image": "Weird Image"}
    spec = parse_spec(old, bounded=False)
    assert spec.starts_at == 1e18
    assert parse_spec(spec_to_json(spec), bounded=False) == spec


def test_repeated_dependencies_are_kept_once_in_order() -> None:
    assert parse_spec({"depends_on": ["b", "a", "b", "a"]}).depends_on == ["b", "a"]


def test_the_runtime_ports_are_reserved() -> None:
    for base in (KERNEL_PORT_BASES[0], KERNEL_PORT_BASES[-1]):
        assert {SSH_PORT, *kernel_ports(base).values()} <= RESERVED_PORTS
    assert 2300 not in RESERVED_PORTS and 8080 not in RESERVED_PORTS


def test_defaults_fill_what_a_request_leaves_out_and_minimums_hold() -> None:
    config = SchedulerConfig()
    assert config.kernel_resources(ResourceSlot()) == DEFAULT_RESOURCES
    assert config.kernel_resources(ResourceSlot({"cpu": "2"})) == ResourceSlot(
        {"cpu": "2", "mem": DEFAULT_RESOURCES["mem"]}
    )
    with pytest.raises(ValueError, match="below the minimum"):
        config.kernel_resources(ResourceSlot({"cpu": "0.005"}))
    custom = SchedulerConfig.from_options(
        "fifo", "concentrated", {"default_resources": "cpu=2,mem=2g", "min_resources": "cpu=1"}
    )
    assert custom.kernel_resources(ResourceSlot()) == ResourceSlot({"cpu": "2", "mem": "2g"})
    assert SchedulerConfig.from_options(
        "fifo", "concentrated", {"default_resources": "cpu=1"}
    ).default_resources == ResourceSlot({"cpu": "1", "mem": DEFAULT_RESOURCES["mem"]})
    for bad in ({"min_resources": "mem=1m"}, {"default_resources": "cpu=0.001,mem=1g"}):
        with pytest.raises(SchedulerConfigError):
            SchedulerConfig.from_options("fifo", "concentrated", bad)


def _plan(slots: ResourceSlot) -> KernelPlan:
    return KernelPlan(
        session_id="s",
        kernel_id="k",
        hostname="main1",
        role=KernelRole.MAIN,
        image="x",
        slots=slots.to_json(),
        env={},
        mounts=[],
        labels={},
        bootstrap={},
    )


_cpu = st.decimals(min_value=0, max_value=2**21, places=4, allow_nan=False).map(str)
_mem = st.one_of(
    st.integers(min_value=0, max_value=2**62),
    st.tuples(st.integers(0, 4096), st.sampled_from(["k", "m", "g", "t"])).map(
        lambda t: f"{t[0]}{t[1]}"
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    cpu=st.one_of(st.none(), _cpu, st.floats(allow_nan=True, allow_infinity=True)),
    mem=st.one_of(st.none(), _mem),
)
def test_any_accepted_request_holds_real_slots_that_docker_enforces(cpu: Any, mem: Any) -> None:
    config = SchedulerConfig()
    try:
        spec = parse_spec({"resources": {"cpu": cpu, "mem": mem}})
        slots = config.kernel_resources(spec.resources)
    except (SpecError, ValueError):
        return
    assert MIN_RESOURCES.fits_in(slots)
    limits = kernel_limits(_plan(slots), pids_limit=4096)
    assert limits["nano_cpus"] == slots["cpu"] * 10**9 > 0  # exact: no truncation to zero
    assert limits["mem_limit"] == limits["memswap_limit"] == slots["mem"] > 0


def test_docker_refuses_a_kernel_without_limits() -> None:
    with pytest.raises(Exception, match="without a limit"):
        kernel_limits(_plan(ResourceSlot({"mem": "1g"})), pids_limit=4096)


# --- a pass survives a session it cannot handle ------------------------------------------------


class _Picky(FIFOSequencer):
    """Raises whenever the band holds the session named ``bad``."""

    def order(self, band: list[Session], ctx: Any) -> Iterator[Session]:
        if any(s.id == "bad" for s in band):
            raise RuntimeError("cannot order bad")
        return super().order(band, ctx)


def _session(sid: str, created: float, **spec: Any) -> Session:
    resources = ResourceSlot({"cpu": "1", "mem": "1g"})
    return Session.create(SessionSpec(resources=resources, **spec), "alice", created, sid)


@pytest.mark.parametrize("culprit", ["sequencer", "predicate"])
def test_one_bad_session_is_cancelled_and_the_pass_goes_on(culprit: str) -> None:
    config = SchedulerConfig()
    sequencer, selector = load_plugins(config)
    if culprit == "sequencer":
        sequencer = _Picky()
        bad = _session("bad", 1.0)
    else:  # a dependency state the predicate cannot read (as a corrupt record would give)
        bad = _session("bad", 1.0, depends_on=["dep"])
    pending = [_session("a", 0.0), bad, _session("b", 2.0)]
    snapshot = Snapshot(
        agents=[Agent("n1", ResourceSlot({"cpu": "8", "mem": "8g"}))],
        pending=pending,
        dependency_states={"dep": ("bogus", "bogus")},  # type: ignore[dict-item]
    )
    result = schedule(snapshot, config, sequencer, selector, 10.0)
    assert [p.session_id for p in result.placements] == ["a", "b"]
    (cancel,) = result.cancellations
    assert (cancel.session_id, cancel.status_info) == ("bad", "scheduler-error")
    assert "scheduler failed" in cancel.msg


@asynccontextmanager
async def _started(tmp_path: Path, backend: str = "local") -> AsyncIterator[BaiSessionManager]:
    mgr = make_manager(tmp_path, backend)
    await mgr.start()
    try:
        yield mgr
    finally:
        for session in await mgr.list_sessions():
            if not session.status.is_terminal and session.id != "old":
                await mgr.destroy(session.id)
        await mgr.stop()


async def _batch_succeeds(mgr: BaiSessionManager) -> None:
    session = await mgr.create({"type": "batch", "startup_command": "true"}, "bob")
    done = await mgr.wait_for(session.id, {Status.TERMINATED}, timeout=60)
    assert (done.status, done.status_info) == (Status.TERMINATED, "task-finished")


async def test_a_stored_session_beyond_the_bounds_stops_no_one_even_after_a_restart(
    tmp_path: Path,
) -> None:
    async with _started(tmp_path) as mgr:
        assert mgr.store is not None
        # Stored as an old server (before the bounds) stored it: every pass then raised.
        old = Session.create(
            SessionSpec(starts_at=1e18, resources=ResourceSlot({"cpu": "0.5", "mem": "64m"})),
            "mallory",
            time.time(),
            "old",
        )
        await asyncio.to_thread(enqueue, mgr.store, old)
        with pytest.raises(InvalidRequest, match="starts_at"):
            await mgr.create({"starts_at": 1e18}, "mallory")
        await _batch_succeeds(mgr)
    async with _started(tmp_path) as again:
        await _batch_succeeds(again)
        kept = await again.get("old")
        assert kept.status is Status.PENDING  # waits (it can be cancelled), blocks nobody
        assert kept.scheduler_data["failed_predicates"][0]["name"] == "starts_at"
        await again.destroy("old")


async def test_why_pending_is_gone_once_running(tmp_path: Path) -> None:
    async with _started(tmp_path) as mgr:
        session = await mgr.create({"starts_at": time.time() + 3}, "alice")
        for _ in range(100):
            if (await mgr.get(session.id)).scheduler_data.get("failed_predicates"):
                break
            await asyncio.sleep(0.05)
        assert (await mgr.get(session.id)).scheduler_data, "the pass recorded no why-pending"
        running = await mgr.wait_for(session.id, {Status.RUNNING}, timeout=60)
        assert running.status is Status.RUNNING
        assert "scheduler" not in running.status_data


@pytest.mark.docker
async def test_containers_enforce_exactly_what_was_booked(
    tmp_path: Path, kernel_image: str
) -> None:
    from conftest import docker_client

    async with _started(tmp_path, "docker") as mgr:
        plain = await mgr.create({}, "alice")
        quarter = await mgr.create({"resources": {"cpu": "0.25", "mem": "256m"}}, "alice")
        half = await mgr.create({"resources": {"cpu": 0.5}}, "alice")
        expected = {
            plain.id: DEFAULT_RESOURCES,
            quarter.id: ResourceSlot({"cpu": "0.25", "mem": "256m"}),
            half.id: ResourceSlot({"cpu": "0.5", "mem": DEFAULT_RESOURCES["mem"]}),
        }
        booked = ResourceSlot()
        for sid, slots in expected.items():
            session = await mgr.wait_for(sid, {Status.RUNNING}, timeout=90)
            assert session.status is Status.RUNNING, session.status_data
            (kernel,) = session.kernels
            assert kernel.slots == slots
            booked += slots
            host = docker_client().containers.get(kernel.container_id).attrs["HostConfig"]
            assert host["NanoCpus"] == slots["cpu"] * 10**9
            assert host["Memory"] == host["MemorySwap"] == slots["mem"]
        (agent,) = await mgr.core.query(lambda tx: tx.list_agents())
        assert agent.occupied == booked


# --- the API: sizes and 4xx, never 5xx ---------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("bounds"), MULTI_USER + 'c.BaiSessionManager.backend = "local"\n'
    )
    yield srv
    srv.stop()


def _deep(levels: int) -> bytes:
    return b'{"meta": ' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize(
    ("payload", "status", "needle"),
    [
        ({"starts_at": 1e18}, 400, "starts_at"),
        ({"type": "batch", "startup_command": "x", "batch_timeout": 1e308}, 400, "batch_timeout"),
        ({"resources": {"cpu": "0"}}, 400, "resources.cpu"),
        ({"resources": {"cpu": "0.0000000001"}}, 400, "resources.cpu"),
        ({"resources": {"cpu": "0.005"}}, 400, "below the minimum"),
        ({"resources": {"mem": "1m"}}, 400, "below the minimum"),
        ({"image": "python\x00:3.12"}, 400, "image"),
        ({"service_ports": ["ssh:tcp:2200"]}, 400, "reserved"),
        ({"service_ports": ["jupyter:http:20003"]}, 400, "reserved"),
        ({"depends_on": ["x"] * 10_000}, 400, "at most 64"),
        ({"meta": {"blob": "x" * 20_000}}, 400, "meta"),
        (b'{"env": {"A": "' + b"x" * (2 << 20) + b'"}}', 413, "max_body_size"),
        (_deep(10_000), 400, "nested deeper"),
        (_deep(40), 400, "nested deeper"),
    ],
)
async def test_bad_requests_get_a_clear_4xx(
    server: Server, payload: Any, status: int, needle: str
) -> None:
    raw = payload if isinstance(payload, bytes) else None
    data = None if raw is not None else payload
    reply = await server.fetch("POST", "bai/api/v1/sessions", data, "alice-token", raw_body=raw)
    error = json.loads(reply.body)
    assert reply.code == status, error
    assert set(error) <= {"error", "message", "field"}
    assert error["message"].startswith(error.get("field", ""))  # the field, when it names one
    assert error["error"] == ("too-large" if status == 413 else "invalid-request")
    assert needle in error["message"]


async def test_a_request_without_resources_books_the_defaults(server: Server) -> None:
    reply = await server.fetch(
        "POST", "bai/api/v1/sessions", {"starts_at": FUTURE, "meta": {"a": [[1]]}}, "alice-token"
    )
    assert reply.code == 201, reply.body
    session = json.loads(reply.body)
    try:
        assert ResourceSlot(session["spec"]["resources"]) == DEFAULT_RESOURCES
        assert ResourceSlot(session["kernels"][0]["slots"]) == DEFAULT_RESOURCES
        assert Decimal(session["spec"]["resources"]["cpu"]) == Decimal("0.5")
    finally:
        await server.fetch("DELETE", f"bai/api/v1/sessions/{session['id']}", token="alice-token")


# --- a kernel's output: the server's memory stays bounded --------------------------------------

#: 60 MB of output in 60,000 lines of 1,000 bytes, then a last line.
SIXTY_MB = "head -c 59940000 /dev/zero | tr '\\0' x | fold -w 999; echo; echo the-end"
#: What the server may grow by while 60 MB pass (the caps are 1 MiB; generous, not timed).
GROWTH_BOUND = 40 << 20


@pytest.fixture(scope="module")
def docker_server(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("bounds-docker"),
        MULTI_USER + 'c.BaiSessionManager.backend = "docker"\n',
    )
    yield srv
    srv.stop()


def _memory(pid: int) -> dict[str, int]:
    """The process's resident and peak resident memory (bytes), from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


@contextmanager
def _peak_growth(pid: int, what: str) -> Iterator[None]:
    """Fail unless the process's peak resident memory grew by under ``GROWTH_BOUND``
    (the peak is reset first: ``clear_refs`` 5, Linux's way to restart VmHWM)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    before = _memory(pid)["VmRSS"]
    yield
    grew = _memory(pid)["VmHWM"] - before
    assert grew < GROWTH_BOUND, f"{what}: the server grew by {grew / 2**20:.0f} MiB"


async def test_sixty_mb_of_kernel_output_leave_the_servers_memory_bounded(
    docker_server: Server,
) -> None:
    """Through exec, the logs API and the log kept at teardown: each answer says it was cut."""
    client = docker_server.client("alice-token")
    session = await client.create({"resources": {"cpu": "1", "mem": "256m"}})
    pid = docker_server.proc.pid
    try:
        running = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert running.status is Status.RUNNING, running.status_data
        with _peak_growth(pid, "exec"):
            result = await client.exec(session.id, ["sh", "-c", SIXTY_MB], timeout=300)
        assert (result.exit_code, len(result.output)) == (0, 1 << 20), result.output[-200:]
        assert result.truncated and result.dropped > 58_000_000
        assert result.output.endswith("x\nthe-end\n")

        # The same into main1's log (its init's stdout): rotated on the engine's disk.
        to_log = ["sh", "-c", f"({SIXTY_MB}) > /proc/1/fd/1"]
        assert (await client.exec(session.id, to_log, timeout=300)).exit_code == 0

        async def logged() -> bool:
            return await client.logs(session.id, tail=1) == "the-end\n"

        await until("the log's last line", logged, 60)
        with _peak_growth(pid, "logs"):
            logs = await client.logs(session.id)
        assert logs.startswith(DROPPED_MARK) and logs.endswith("x\nthe-end\n")
        assert len(logs) <= len(DROPPED_MARK) + (1 << 20)

        with _peak_growth(pid, "the log kept at teardown"):
            await client.destroy(session.id)
            ended = await client.wait_for(session.id, {Status.TERMINATED}, timeout=120)
        assert ended.status is Status.TERMINATED
        kept = await client.logs(session.id)
        assert kept.startswith(DROPPED_MARK) and kept.endswith("x\nthe-end\n")
    finally:
        await client.destroy(session.id)
