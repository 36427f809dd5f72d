"""The local backend with real processes running the real runtime (no Docker needed)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import until

from bai_jupyter.agents.base import AgentError, KernelEvent, KernelEventKind
from bai_jupyter.agents.capped import DROPPED_MARK
from bai_jupyter.agents.local import LocalAgent, files, processes
from bai_jupyter.kernel_plan import KernelPlan, bootstrap, kernel_environ, labels
from bai_jupyter.model import Session, SessionSpec, SessionType
from bai_jupyter.mounts import Mount
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime.protocol import CHANNELS

T = TypeVar("T")

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")


def run(coro: Coroutine[Any, Any, T], timeout: float = 25) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def alive(pid: int) -> bool:
    """Running and not a zombie (PID 1 in some containers never reaps orphans)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            text = stat.read_text()
        except OSError:
            return False
        return text[text.rfind(")") + 2] not in "ZX"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """The agent's root; afterwards every process a test left behind is killed."""
    root = tmp_path / "kernels"
    yield root
    table = processes.read_process_table() or []
    pids = {
        int(json.loads(meta.read_text())["pid"]) for meta in root.glob(f"*/*/{files.META_FILE}")
    }
    ours = {
        pid for pid, proc in processes.CHILDREN.items() if str(root) in str(processes.argv_of(proc))
    }
    for pid in pids | ours:
        for group in {pid} | processes.descendant_groups(table, pid):
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        proc = processes.CHILDREN.pop(pid, None)
        if proc is not None:
            proc.wait(5)


def make_plans(
    session_type: SessionType,
    size: int = 1,
    mounts: list[Mount] | None = None,
    startup_command: str | None = None,
    batch_timeout: float | None = None,
    service_ports: list[str] | None = None,
) -> tuple[Session, list[KernelPlan]]:
    spec = SessionSpec(
        type=session_type,
        cluster_size=size,
        resources=ResourceSlot({"cpu": 1, "mem": "256m"}),
        startup_command=startup_command,
        batch_timeout=batch_timeout,
        service_ports=service_ports or [],
        name="t",
    )
    session = Session.create(spec, "alice", time.time())
    connection = {"key": "secret-key", "transport": "tcp", "signature_scheme": "hmac-sha256"}
    plans = [
        KernelPlan(
            session_id=session.id,
            kernel_id=kernel.id,
            hostname=kernel.hostname,
            role=kernel.role,
            image="ignored",
            slots=kernel.slots.to_json(),
            env=kernel_environ(session, kernel),
            mounts=mounts or [],
            labels=labels(session, kernel, "test-scope"),
            bootstrap=bootstrap(
                session, kernel, None, connection if kernel.hostname == "main1" else None
            ),
        )
        for kernel in session.kernels
    ]
    return session, plans


def collect(agent: LocalAgent) -> tuple[list[KernelEvent], asyncio.Task[None]]:
    events: list[KernelEvent] = []

    async def pump() -> None:
        async for event in agent.events():
            events.append(event)

    return events, asyncio.ensure_future(pump())


def test_cluster_kernels_environment_dirs_and_shared_data_folder(
    root: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data" / "shared"  # the manager creates data folders, agents none
    data.mkdir(parents=True)
    session, plans = make_plans(SessionType.INFERENCE, 3, [Mount(str(data), "/home/work/shared")])
    ids = {plan.hostname: plan.kernel_id for plan in plans}

    async def body() -> None:
        agent = LocalAgent(root=root)
        started = await agent.start_kernels(session.id, plans)
        assert [s.container_id.startswith("pid:") for s in started] == [True] * 3
        pids = [int(s.container_id[4:]) for s in started]
        work_dirs = set()
        for host, kid in ids.items():
            result = await agent.exec(kid, ["sh", "-c", "pwd; env"])
            assert result.exit_code == 0, result.output
            cwd, *lines = result.output.splitlines()
            env = dict(line.split("=", 1) for line in lines if "=" in line)
            assert cwd == str(root / session.id / host / "work")
            work_dirs.add(cwd)
            assert env["BACKENDAI_CLUSTER_HOST"] == host
            assert env["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1,sub2"
            assert env["BACKENDAI_SESSION_ID"] == session.id
            assert env["BACKENDAI_KERNEL_ID"] == kid
            assert env["MASTER_ADDR"] == "127.0.0.1"  # cluster hostnames do not resolve here
            environ = root / session.id / host / "config" / "environ.txt"
            await until(
                "the environment file",
                functools.partial(asyncio.to_thread, environ.exists),
                10,
                0.05,
            )
            assert f"BACKENDAI_CLUSTER_HOST={host}\n" in environ.read_text()
        assert ids["main1"] == session.id and len(work_dirs) == 3

        wrote = await agent.exec(ids["sub2"], ["sh", "-c", "echo from-sub2 > shared/note.txt"])
        assert wrote.exit_code == 0, wrote.output
        read = await agent.exec(ids["main1"], ["cat", "shared/note.txt"])
        assert (read.exit_code, read.output) == (0, "from-sub2\n")

        live = await agent.live_kernels()
        assert sorted(k.kernel_id for k in live if k.running) == sorted(ids.values())
        assert "bai-runtime: ready" in await agent.logs(ids["sub1"])

        await agent.destroy_session(session.id)
        assert not any(alive(pid) for pid in pids)
        assert not (root / session.id).exists()
        assert (data / "note.txt").read_text() == "from-sub2\n"  # the data folder stays
        assert await agent.live_kernels() == []
        await agent.destroy_session(session.id)  # idempotent
        await agent.destroy_session("no-such-session")
        with pytest.raises(AgentError, match="no local kernel"):
            await agent.logs(ids["main1"])
        await agent.close()

    run(body())


def test_interactive_kernel_executes_interrupts_and_is_destroyed(root: Path) -> None:
    from jupyter_client.asynchronous.client import AsyncKernelClient

    session, plans = make_plans(SessionType.INTERACTIVE, service_ports=["web:http:8123"])

    async def body() -> None:
        agent = LocalAgent(root=root)
        (started,) = await agent.start_kernels(session.id, plans)
        assert started.host == "127.0.0.1"
        # Natively a service listens on its own port: no mapping, same key as Docker's.
        assert started.ports.pop("service:web") == 8123
        assert sorted(started.ports) == sorted(CHANNELS)
        info: dict[str, Any] = {f"{name}_port": port for name, port in started.ports.items()}
        info.update(ip=started.host, transport="tcp", key="secret-key")
        info.update(signature_scheme="hmac-sha256")
        client = AsyncKernelClient()
        client.load_connection_info(info)  # type: ignore[arg-type]
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=20)
            reply = await client.execute_interactive(
                "import os; print(os.getpid(), flush=True)",
                timeout=10,
                output_hook=lambda msg: outputs.append(msg["content"].get("text", "")),
            )
            assert reply["content"]["status"] == "ok"
            kernel_pid = int("".join(outputs).split()[0])
            assert kernel_pid != int(started.container_id[4:])

            msg_id = client.execute("import time; print('go', flush=True); time.sleep(30)")
            while True:
                msg = await client.get_iopub_msg(timeout=10)
                if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                    break
            await agent.signal(started.kernel_id, signal.SIGINT)
            reply = await client.get_shell_msg(timeout=10)
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "KeyboardInterrupt"
        finally:
            client.stop_channels()
        await agent.destroy_session(session.id)
        assert not alive(kernel_pid)
        assert not alive(int(started.container_id[4:]))
        await agent.close()

    outputs: list[str] = []
    run(body())


def test_batch_exit_code_timeout_event_and_logs(root: Path) -> None:
    failing, failing_plans = make_plans(
        SessionType.BATCH, startup_command="echo to-out; echo to-err >&2; exit 3"
    )
    slow, slow_plans = make_plans(SessionType.BATCH, startup_command="sleep 30", batch_timeout=0.3)

    async def body() -> None:
        agent = LocalAgent(root=root)
        events, pump = collect(agent)
        await agent.start_kernels(failing.id, failing_plans)
        await agent.start_kernels(slow.id, slow_plans)

        async def both_ended() -> bool:
            return len(events) >= 2

        await until("both kernels ended", both_ended, 10, 0.05)
        by_session = {event.session_id: event for event in events}
        assert by_session[failing.id].kind is KernelEventKind.EXITED
        assert (by_session[failing.id].exit_code, by_session[failing.id].detail) == (3, {})
        assert by_session[slow.id].exit_code == 124
        assert by_session[slow.id].detail == {"task_timeout": True}

        output = await agent.logs(failing.id)
        assert "to-out" in output and "to-err" in output
        live = {k.kernel_id: k for k in await agent.live_kernels()}
        assert (live[failing.id].running, live[failing.id].exit_code) == (False, 3)
        with pytest.raises(AgentError, match="not running"):
            await agent.exec(failing.id, ["true"])

        await agent.destroy_session(failing.id)
        await agent.destroy_session(slow.id)
        assert len(events) == 2  # destroying reports nothing
        await agent.close()
        await pump  # close() ends the event stream

    run(body())


def test_destroy_does_not_report_and_a_later_agent_adopts_kernels(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, plans = make_plans(SessionType.INFERENCE, 2)

    async def body() -> None:
        first = LocalAgent("local-a", root=root)
        started = await first.start_kernels(session.id, plans)
        await first.close()  # kernels keep running
        assert all(alive(int(s.container_id[4:])) for s in started)

        assert await LocalAgent("someone-else", root=root).live_kernels() == []
        # A manager in another process: it has none of these processes as children.
        monkeypatch.setattr(processes, "CHILDREN", {})
        second = LocalAgent("local-a", root=root, poll_interval=0.05)
        live = await second.live_kernels()
        assert sorted((k.kernel_id, k.running) for k in live) == sorted(
            (s.kernel_id, True) for s in started
        )
        result = await second.exec(plans[1].kernel_id, ["sh", "-c", "echo $BACKENDAI_CLUSTER_HOST"])
        assert result.output == "sub1\n"
        events, pump = collect(second)
        sub_pid = int(started[1].container_id[4:])
        os.kill(sub_pid, signal.SIGKILL)

        async def reported() -> bool:
            return bool(events)

        await until("the kernel reported gone", reported, 10, 0.05)
        assert (events[0].kind, events[0].kernel_id) == (KernelEventKind.GONE, plans[1].kernel_id)

        await second.destroy_session(session.id)
        assert not alive(int(started[0].container_id[4:]))
        assert not (root / session.id).exists()
        await second.close()
        await pump

    run(body())


def test_failed_start_leaves_nothing(root: Path, tmp_path: Path) -> None:
    session, plans = make_plans(SessionType.INFERENCE, 2)
    plans[1].mounts = [Mount(str(tmp_path / "d"), "/")]  # no name to link it under

    async def body() -> None:
        agent = LocalAgent(root=root)
        with pytest.raises(AgentError, match="no usable name"):
            await agent.start_kernels(session.id, plans)
        assert await agent.live_kernels() == []
        assert not (root / session.id).exists()
        await agent.close()

    run(body())


def test_exec_errors_and_capacity(root: Path) -> None:
    session, plans = make_plans(SessionType.INFERENCE)

    async def body() -> None:
        agent = LocalAgent(root=root)
        mem = await processes.total_memory()
        cap = await agent.capacity()
        assert cap.get_amount("cpu") == (os.cpu_count() or 1)
        assert cap.get_amount("mem") == mem - 512 * 1024**2
        fixed = LocalAgent(root=root, slots={"cpu": "1.5", "mem": "1g"})
        assert await fixed.capacity() == ResourceSlot({"cpu": "1.5", "mem": "1g"})
        huge = LocalAgent(root=root, reserve={"cpu": 10_000, "mem": "1e"})
        assert await huge.capacity() == ResourceSlot()

        await agent.start_kernels(session.id, plans)
        missing = await agent.exec(session.id, ["no-such-command-here"])
        assert missing.exit_code == 127
        slow = await agent.exec(session.id, ["sh", "-c", "echo partial; sleep 30"], timeout=0.3)
        assert (slow.exit_code, slow.output) == (124, "partial\n")
        with pytest.raises(AgentError, match="already running"):
            await agent.start_kernels(session.id, plans)
        await agent.destroy_session(session.id)
        with pytest.raises(AgentError):
            await agent.signal(session.id, signal.SIGINT)
        await agent.close()

    run(body())


def test_exec_and_logs_keep_only_the_last_bytes_and_lines(root: Path) -> None:
    # The marks wait for the test's go: the runtime's own "batch command started" line
    # is in the log first, and the log's last lines are the marks (not a race of the two).
    session, plans = make_plans(
        SessionType.BATCH,
        startup_command="until [ -e go ]; do sleep 0.05; done; seq -f 'mark-%g' 1 3000; sleep 30",
    )
    long_output = "seq -w 1 20000 | sed 's/^/line /'; echo the-end >&2"
    long_bytes = 20_000 * len("line 00001\n") + len("the-end\n")

    async def body() -> None:
        agent = LocalAgent(root=root)
        (started,) = await agent.start_kernels(session.id, plans)
        kid = started.kernel_id
        result = await agent.exec(kid, ["sh", "-c", long_output], limit=1000)
        assert result.exit_code == 0
        assert len(result.output) == 1000 and result.output.endswith("line 20000\nthe-end\n")
        assert result.truncated and result.dropped == long_bytes - 1000

        async def launched() -> bool:
            return "batch command started" in await agent.logs(kid)

        async def printed() -> bool:
            return "mark-3000" in await agent.logs(kid)

        await until("the runtime started the batch command", launched, 30, 0.05)
        assert (await agent.exec(kid, ["touch", "go"])).exit_code == 0
        await until("the batch command printed", printed, 30, 0.05)
        assert await agent.logs(kid, tail=2) == "mark-2999\nmark-3000\n"
        cut = await agent.logs(kid, limit=100)
        assert cut.startswith(DROPPED_MARK) and cut.endswith("mark-3000\n")
        assert len(cut) - len(DROPPED_MARK) == 100
        await agent.destroy_session(session.id)
        await agent.close()

    run(body())


def test_destroy_kills_what_an_unresponsive_runtime_started(root: Path) -> None:
    session, plans = make_plans(SessionType.BATCH, startup_command="sleep 30")

    async def body() -> None:
        agent = LocalAgent(root=root, kill_grace=0.3)
        (started,) = await agent.start_kernels(session.id, plans)
        runtime_pid = int(started.container_id[4:])

        async def command_started() -> bool:
            table = await processes.process_table()
            return bool(processes.descendant_groups(table, runtime_pid))

        await until("the command started", command_started, 10, 0.05)
        # The runtime runs its command in a session of its own; frozen, it cannot stop it.
        groups = processes.descendant_groups(await processes.process_table(), runtime_pid)
        assert runtime_pid not in groups
        os.kill(runtime_pid, signal.SIGSTOP)
        await agent.destroy_session(session.id)
        assert not alive(runtime_pid)
        assert not processes.any_alive(await processes.process_table(), groups)
        await agent.close()

    run(body())


def test_two_tear_downs_removing_one_session_dir_at_once_both_succeed(tmp_path: Path) -> None:
    """A server-gone end and a kernel's exit may tear one session down at once: what the
    other removed first is gone, not an error that leaves the session TERMINATING."""
    for round_ in range(5):
        root = tmp_path / f"session-{round_}"
        for d in range(40):
            (root / f"k{d}").mkdir(parents=True)
            for f in range(50):
                (root / f"k{d}" / f"f{f}").write_bytes(b"x")
        errors: list[BaseException] = []

        def remove(path: Path = root, errors: list[BaseException] = errors) -> None:
            try:
                files.remove_tree(path)
            except BaseException as exc:
                errors.append(exc)

        both = [threading.Thread(target=remove) for _ in range(2)]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join()
        assert errors == [] and not root.exists(), errors
