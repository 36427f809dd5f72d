"""``%bai``: the commands through an IPython shell, against a real server and Docker.

The server is ``jupyter server`` with the ``bai_jupyter`` extension, spawned
with its own config, data and runtime directories and its own store. The
magics run in this process's ``InteractiveShell``, in a real local ipykernel
(interrupt, widgets) and in ``main1`` of a real cluster (``%%bai exec``).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.server import Server, serving
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import CapturedIO, capture_output

from bai_jupyter.loop_thread import LoopThread
from bai_jupyter.magics import (
    NoManager,
    RunResult,
    find_manager,
    format_table,
    progress_line,
    split_command,
    user_output,
)
from bai_jupyter.model import Status
from bai_jupyter.sessions_model import SessionRow, resources_text

#: Small enough that three kernels fit on a two-core machine beside other tests.
SMALL = ["--cpu", "0.25", "--mem", "128m"]
SMALL_SLOTS = {"cpu": "0.25", "mem": "128m"}


# --- a real server (the API tests' harness) ------------------------------------------------------


@pytest.fixture(scope="module")
def server(kernel_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``jupyter server`` with the extension and its own store, config and runtime dirs."""
    with serving(tmp_path_factory.mktemp("bai-magics")) as running:
        yield running


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    """An IPython shell with the extension loaded (what ``%load_ext bai_jupyter`` does)."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "bai_jupyter")
    return ip


@pytest.fixture
def connected(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The shell's magics reach ``server`` through BAI_JUPYTER_URL/TOKEN."""
    monkeypatch.setenv("BAI_JUPYTER_URL", server.url)
    monkeypatch.setenv("BAI_JUPYTER_TOKEN", server.token)
    monkeypatch.delenv("BACKENDAI_SESSION_ID", raising=False)
    return server


def bai(shell: InteractiveShell, line: str, cell: str | None = None) -> tuple[Any, CapturedIO]:
    with capture_output() as cap:
        if cell is None:
            result = shell.run_line_magic("bai", line)
        else:
            result = shell.run_cell_magic("bai", line, cell)  # type: ignore[no-untyped-call]
    return result, cap


def shown(cap: CapturedIO) -> str:
    """Everything displayed (the progress line's versions), as text."""
    return "\n".join(out.data.get("text/plain", "") for out in cap.outputs)


# --- without a server ---------------------------------------------------------------------------


def test_split_command_keeps_the_command_verbatim() -> None:
    assert split_command("--cpu 2 -- echo a && exit 3") == ("--cpu 2", "echo a && exit 3")
    assert split_command("-- python -c 'print(1)' -- x") == ("", "python -c 'print(1)' -- x")
    assert split_command("--cpu 2") == ("--cpu 2", "")
    assert split_command("--name a--b -- true") == ("--name a--b", "true")


def test_help_lists_every_command(shell: InteractiveShell) -> None:
    _, cap = bai(shell, "-h")
    doc = shell.find_line_magic("bai").__doc__ or ""  # type: ignore[no-untyped-call]
    for command in ("status", "sessions", "run", "exec", "ports", "logs", "cancel", "templates"):
        assert f"%bai {command}" in cap.stdout
        assert f"%bai {command}" in doc  # %bai?
    _, cap = bai(shell, "run -h")
    assert "--cluster-size N" in cap.stdout and "--detach" in cap.stdout
    assert "%bai sessions" not in cap.stdout
    _, cap = bai(shell, "logs --help")
    assert "--kernel KERNEL" in cap.stdout


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("bogus", "unknown command 'bogus'"),
        ("run --cpu 1", "give the command after --"),
        ("run --cluster-size two -- true", "invalid int value: 'two'"),
        ("run --env FOO -- true", "write KEY=VALUE"),
        ("exec --all", "exec runs a cell"),
        ("cancel", "the following arguments are required: session"),
        ("logs", "give a session id or name"),
        ("sessions --bogus", "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_are_usage_errors(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, line: str, message: str
) -> None:
    monkeypatch.delenv("BACKENDAI_SESSION_ID", raising=False)
    with pytest.raises(UsageError, match=message):
        shell.run_line_magic("bai", line)


def test_invalid_fields_are_one_line_before_any_server(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BAI_JUPYTER_URL", raising=False)
    result, cap = bai(shell, "run --cpu -1 -- true")
    assert result is None
    assert cap.stderr == "bai: resources.cpu: amount must not be negative, got '-1'\n"
    _, cap = bai(shell, "run --cluster-size 0 -- true")
    assert cap.stderr == "bai: cluster_size: must be an integer from 1 to 64, got 0\n"


def test_no_manager_stops_the_cell_with_one_line_that_says_what_to_set(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Not an AttributeError on the magic's result further down the cell (binder's demo)."""
    monkeypatch.delenv("BAI_JUPYTER_URL", raising=False)
    monkeypatch.delenv("BACKENDAI_SESSION_ID", raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(NoManager, match=r"^no bai-jupyter server found: set BAI_JUPYTER_URL"):
        shell.run_line_magic("bai", "sessions")
    with capture_output() as cap:
        ran = shell.run_cell("r = %bai run -- true\nr.result")  # type: ignore[no-untyped-call]
    assert isinstance(ran.error_in_exec, NoManager), ran.error_in_exec
    assert cap.stdout.startswith("bai: no bai-jupyter server found: set BAI_JUPYTER_URL")
    assert cap.stdout.count("\n") == 1 and "Traceback" not in cap.stdout + cap.stderr


def test_the_server_that_started_the_kernel_is_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From the runtime files: the server whose pid is JPY_PARENT_PID wins over newer ones."""
    monkeypatch.delenv("BAI_JUPYTER_URL", raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid, port in ((parent.pid, 1111), (os.getpid(), 2222)):
            info = {"url": f"http://127.0.0.1:{port}/", "token": f"t{port}", "pid": pid}
            (tmp_path / f"jpserver-{pid}.json").write_text(json.dumps(info))
        monkeypatch.setenv("JPY_PARENT_PID", str(parent.pid))
        remote = find_manager()
        assert (remote.url, remote.token) == ("http://127.0.0.1:1111/", "t1111")
        monkeypatch.delenv("JPY_PARENT_PID")
        os.utime(tmp_path / f"jpserver-{parent.pid}.json", (0, 0))
        assert find_manager().url == "http://127.0.0.1:2222/"  # the newest
    finally:
        parent.kill()
        parent.wait()


def test_exec_outside_a_session_says_it_needs_one(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BACKENDAI_SESSION_ID", raising=False)
    _, cap = bai(shell, "exec --all", "hostname")
    assert cap.stderr.startswith("bai: %%bai exec needs a cluster session")


@pytest.fixture
def in_one_kernel_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment of main1 in a session of one kernel (no SSH: the cell runs here)."""
    monkeypatch.setenv("BACKENDAI_SESSION_ID", "s1")
    monkeypatch.setenv("BACKENDAI_CLUSTER_HOST", "main1")
    monkeypatch.setenv("BACKENDAI_CLUSTER_HOSTS", "main1")


@pytest.mark.usefixtures("in_one_kernel_session")
def test_exec_runs_the_own_part_here_labelled(shell: InteractiveShell) -> None:
    """A session of one kernel: no SSH, the cell runs here, failures are shown per host."""
    _, cap = bai(shell, "exec", "echo out; echo err >&2; exit 4")
    assert cap.stdout == "[main1] out\n"
    assert cap.stderr == "[main1] err\n[main1] exit code 4\n"
    _, cap = bai(shell, "exec --python", "import os\nprint(os.environ['BACKENDAI_CLUSTER_HOST'])")
    assert (cap.stdout, cap.stderr) == ("[main1] main1\n", "")
    _, cap = bai(shell, "exec --hosts sub3", "true")
    assert cap.stderr == "bai: no kernel sub3 in this session (kernels: main1)\n"


@pytest.mark.usefixtures("in_one_kernel_session")
def test_exec_shows_a_line_longer_than_the_readers_limit(shell: InteractiveShell) -> None:
    """A 100 KiB line with no newline (over asyncio's 64 KiB line limit) ends and shows."""
    _, cap = bai(shell, "exec --python", "import sys\nsys.stdout.write('x' * 102400)")
    assert (cap.stdout, cap.stderr) == ("[main1] " + "x" * 102400 + "\n", "")


def test_loop_thread_runs_inside_a_running_event_loop() -> None:
    """What an ipykernel does: the magic is called while the main thread's loop runs."""
    loop = LoopThread("bai-jupyter-magics")

    async def inner() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    async def kernel_cell() -> str:
        return loop.run(inner())  # would fail with asyncio.run or run_until_complete

    assert asyncio.run(kernel_cell()) == "bai-jupyter-magics"


def test_loop_thread_iterate_cleans_up_and_raises() -> None:
    loop = LoopThread()
    cleaned: list[str] = []

    async def numbers() -> AsyncIterator[int]:
        try:
            for i in range(1000):
                yield i
                await asyncio.sleep(0)
        finally:
            cleaned.append("done")

    for i in loop.iterate(numbers()):
        if i == 2:
            break
    assert cleaned == ["done"]  # the producer's clean-up ran before the loop was left

    async def failing() -> AsyncIterator[int]:
        yield 1
        raise ValueError("boom")

    got: list[int] = []
    with pytest.raises(ValueError, match="boom"):
        got.extend(loop.iterate(failing()))
    assert got == [1]


def test_text_helpers() -> None:
    assert format_table(("A", "BB"), [("xyz", "1"), ("", "22")]) == "A    BB\nxyz  1\n     22"
    assert user_output("bai-runtime: ready\nhello\nbai-runtime: exit\nworld\n") == "hello\nworld\n"
    assert resources_text({"cpu": "0.5", "mem": "1g"}) == "cpu=0.5 mem=1g"
    assert resources_text(None) == resources_text({}) == "no limits"  # not "nothing"
    data = {
        "id": "0123456789abcdef",
        "name": None,
        "status": "PENDING",
        "spec": {"type": "batch", "resources": {"cpu": "1"}},
        "kernels": [{"hostname": "main1", "status": "PENDING"}],
        "status_data": {"scheduler": {"msg": "needs cpu=8", "failed_predicates": []}},
        "pending_reason": "needs cpu=8",  # the server's sentence, which the views show
        "created_at": 1.0,
    }
    row = SessionRow.from_json(data)
    row.queue_position = 2
    assert progress_line(row) == (
        "session 01234567: ▶ queued (#2: needs cpu=8) → · starting → · running → · result"
    )
    row = SessionRow.from_json(
        {**data, "status": "TERMINATED", "result": "SUCCESS", "exit_code": 0}
    )
    assert progress_line(row).endswith("✓ running → ✓ result: SUCCESS (exit code 0)")
    # The phase says what happens in it, never "running (TERMINATING)".
    running = SessionRow.from_json({**data, "status": "RUNNING"})
    assert progress_line(running).endswith("✓ starting → ▶ running → · result")
    ending = SessionRow.from_json({**data, "status": "TERMINATING"})
    assert progress_line(ending).endswith("✓ starting → ▶ ending (TERMINATING) → · result")
    starting = SessionRow.from_json({**data, "status": "PREPARING"})
    assert "✓ queued → ▶ starting (PREPARING) → · running" in progress_line(starting)


def test_the_progress_line_shows_each_agents_image_copy_then_its_load() -> None:
    agents = {
        "node2": {"from": "node1", "phase": "copying", "done": 43, "total": 100, "progress": 0.43},
        "node3": {"from": "node1", "phase": "loading", "done": 99, "total": 100, "progress": 0.999},
    }
    row = SessionRow.from_json(
        {
            "id": "0123456789abcdef",
            "status": "PULLING",
            "spec": {"type": "batch"},
            "status_data": {"pulling": {"image": "team/train:3", "agents": agents}},
        }
    )
    assert progress_line(row) == (
        "session 01234567: ✓ queued → ▶ starting (PULLING: image team/train:3: node2: copying"
        " from node1 43%, node3: loading into the engine) → · running → · result"
    )


# --- against the server -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.docker
def test_run_streams_the_log_and_returns_the_exit_code(
    shell: InteractiveShell, connected: Server
) -> None:
    command = "echo first; sleep 1; echo second; exit 3"
    result, cap = bai(shell, f"run {' '.join(SMALL)} --name magic-run -- {command}")
    assert isinstance(result, RunResult), cap.stderr
    assert (result.status, result.result, result.exit_code) == ("TERMINATED", "FAILURE", 3)
    assert cap.stdout == "first\nsecond\n"  # the runtime's own lines are left out
    progress = shown(cap)
    # Each shown line is the state when an event came: a start quicker than one redraw
    # shows no "starting" line of its own, so only the phases that last are required.
    for phase in ("▶ queued", "▶ running", "✓ queued → ✓ starting → ✓ running → ✗ result"):
        assert phase in progress, progress
    _, cap = bai(shell, "logs magic-run")
    assert "first\n" in cap.stdout and "second\n" in cap.stdout
    _, cap = bai(shell, f"logs {result.session_id[:8]}")  # the id as every view shows it
    assert "first\n" in cap.stdout and "second\n" in cap.stdout, cap.stderr
    _, cap = bai(shell, "logs magic-run --kernel sub1")
    assert cap.stderr == f"bai: session {result.session_id} has no kernel 'sub1' (kernels: main1)\n"
    _, cap = bai(shell, "cancel magic-run")
    assert cap.stdout == f"session {result.session_id} TERMINATED (task-failed)\n"


@pytest.mark.slow
@pytest.mark.docker
def test_sessions_queue_templates_ports_status_and_cancel(
    shell: InteractiveShell, connected: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = connected.client()
    loop = LoopThread()
    spec = {"resources": SMALL_SLOTS, "service_ports": ["web:http:8080"]}
    loop.run(remote.put_template("tiny", spec, "a small one"))
    _, cap = bai(shell, "templates")
    assert cap.stdout.splitlines()[0].split() == ["TEMPLATE", "OWNER", "FIELDS", "DESCRIPTION"]
    assert "tiny" in cap.stdout and '"service_ports":["web:http:8080"]' in cap.stdout

    first, cap = bai(shell, "run --template tiny --name holder --detach -- sleep 120")
    assert cap.stdout == f"session {first.session_id} queued\n"
    second, _ = bai(
        shell, f"run {' '.join(SMALL)} --name waiter --depends-on holder --detach -- true"
    )
    loop.run(remote.wait_for(first.session_id, {Status.RUNNING}, timeout=120))
    _, cap = bai(shell, "sessions --text")
    lines = {line.split()[0]: line for line in cap.stdout.splitlines()[1:]}
    assert "RUNNING" in lines[first.session_id[:8]]
    waiting = lines[second.session_id[:8]]
    assert waiting.split()[3:5] == ["PENDING", "1"]  # queue position 1
    assert "waiting for session holder (RUNNING) to succeed" in waiting  # by name, now

    _, cap = bai(shell, "status --text")
    assert cap.stdout.startswith("2 live session(s), 1 pending\n")

    _, cap = bai(shell, "ports holder")
    web = cap.stdout.splitlines()[1].split()
    assert web[:3] == ["web", "http", "8080"]
    assert web[3] == f"{connected.url}bai/sessions/{first.session_id}/proxy/web/"

    monkeypatch.setenv("BACKENDAI_SESSION_ID", first.session_id)  # as in holder's main1
    _, cap = bai(shell, "status --text")
    assert cap.stdout.startswith(f"session {first.session_id} (holder) · batch · RUNNING")
    assert "main1  main  RUNNING  cpu=0.25 mem=128m" in cap.stdout
    assert "web      http      8080" in cap.stdout
    # Its usage per kernel, read now: CPU of its slots, memory of its limit, network.
    usage = cap.stdout[cap.stdout.index("\nusage at ") + 1 :].splitlines()
    assert usage[1].split() == ["HOST", "CPU", "MEMORY", "NETWORK"]
    main1 = usage[2]
    assert main1.startswith("  main1") and "% of 0.25 cpu" in main1, usage
    assert " of 128 MiB" in main1 and "↓" in main1, usage
    monkeypatch.delenv("BACKENDAI_SESSION_ID")

    _, cap = bai(shell, "cancel holder")
    assert cap.stdout == f"session {first.session_id} TERMINATED (user-requested)\n"
    ended = loop.run(remote.wait_for(second.session_id, set(), timeout=60))
    assert (ended.status, ended.status_info) == (Status.CANCELLED, "dependency-failed")
    _, cap = bai(shell, "sessions --text")
    assert cap.stdout == "no sessions\n"
    _, cap = bai(shell, "sessions --all-states --text")
    assert "CANCELLED (dependency-failed)" in cap.stdout
    _, cap = bai(shell, "cancel no-such-session")
    assert cap.stderr == "bai: no session 'no-such-session'\n"
    _, cap = bai(shell, "run --cpu 1000 -- true")
    assert cap.stderr.startswith("bai: resource group 'default': needs cpu=1000")


# --- in real kernels ----------------------------------------------------------------------------


class Kernel:
    """A blocking client of a running ipykernel, collecting what one execution shows."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, code: str, until: Callable[[dict[str, Any]], bool] | None = None) -> list[Any]:
        """Execute ``code``; all its iopub messages (or those up to ``until``'s match)."""
        msg_id = self.client.execute(code)
        messages: list[dict[str, Any]] = []
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=120)
            except queue.Empty:
                pytest.fail(f"no output from {code!r}; so far: {messages}")
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(msg)
            if until is not None and until(msg):
                return messages
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return messages


def streams(messages: list[dict[str, Any]], name: str) -> str:
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )


@pytest.fixture
def local_kernel(connected: Server) -> Iterator[tuple[Any, Kernel]]:
    """An ipykernel on this machine whose magics reach the server (BAI_JUPYTER_URL)."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", env=dict(os.environ))
    try:
        yield manager, Kernel(client)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


@pytest.mark.slow
@pytest.mark.docker
def test_interrupt_cancels_a_run_and_widgets_render_in_a_kernel(
    local_kernel: tuple[Any, Kernel], connected: Server
) -> None:
    manager, kernel = local_kernel
    kernel.run("%load_ext bai_jupyter")

    def running(msg: dict[str, Any]) -> bool:
        text = msg["content"].get("data", {}).get("text/plain", "")
        return "▶ running" in text

    kernel.run(f"r = %bai run {' '.join(SMALL)} --name interrupted -- sleep 300", until=running)
    manager.interrupt_kernel()
    after = kernel.run("print(r)")  # waits for the interrupted cell to finish first
    ended = asyncio.run(connected.client().get("interrupted"))
    assert ended.status is Status.TERMINATED and ended.status_info == "user-requested"
    assert f"session_id='{ended.id}', status='TERMINATED'" in streams(after, "stdout")

    def widgets(messages: list[dict[str, Any]]) -> int:
        assert "Traceback" not in streams(messages, "stderr")
        return sum(
            m["msg_type"] == "display_data"
            and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
            for m in messages
        )

    assert widgets(kernel.run("%bai sessions --all-states")) == 1  # the live view
    assert widgets(kernel.run("%bai status")) == 2  # the launcher and the live view
    text = kernel.run("%bai sessions --all-states --text")
    assert "interrupted" in streams(text, "stdout") and widgets(text) == 0


def connect(connection: Any) -> Any:
    """A client of main1's ipykernel, once it answers (its heartbeat misses while it boots)."""
    from jupyter_client.blocking.client import BlockingKernelClient

    attempts = 0
    while True:
        client = BlockingKernelClient()
        client.load_connection_info(connection)
        client.start_channels()
        try:
            client.wait_for_ready(timeout=10)
            return client
        except RuntimeError:
            client.stop_channels()
            attempts += 1
            if attempts == 10:
                raise


@pytest.mark.slow
@pytest.mark.docker
def test_exec_all_on_a_cluster_of_three(connected: Server) -> None:
    """``%%bai exec`` and ``%bai status`` in main1's ipykernel, as a notebook user runs them:
    the agent mounts this package read-only on the kernel's PYTHONPATH (the image has
    none of ours) and the server gives the kernel an address and a session token."""
    remote = connected.client()
    request = {"name": "exec3", "cluster_size": 3, "resources": SMALL_SLOTS}

    async def start() -> Any:
        session = await remote.create(request)
        await remote.wait_for(session.id, {Status.RUNNING}, timeout=120)
        return await remote.get(session.id, connection=True)  # the key: asked for, by the owner

    session = asyncio.run(start())
    assert session.status is Status.RUNNING, session.status_data
    client = connect(session.kernels[0].info["connection"])
    try:
        kernel = Kernel(client)
        kernel.run("%load_ext bai_jupyter")
        out = kernel.run("%%bai exec --all\nhostname; echo $RANK >&2")
        assert sorted(streams(out, "stdout").splitlines()) == [
            "[main1] main1",
            "[sub1] sub1",
            "[sub2] sub2",
        ]
        assert sorted(streams(out, "stderr").splitlines()) == ["[main1] 0", "[sub1] 1", "[sub2] 2"]
        code = (
            "import socket, sys\nhost = socket.gethostname()\nprint(host)\nsys.exit(host == 'sub2')"
        )
        out = kernel.run(f"%%bai exec --python --hosts sub1,sub2\n{code}")
        assert sorted(streams(out, "stdout").splitlines()) == ["[sub1] sub1", "[sub2] sub2"]
        assert streams(out, "stderr") == "[sub2] exit code 1\n"
        out = kernel.run("%bai status --text")  # through the server, from the container
        text = streams(out, "stdout")
        assert text.startswith(f"session {session.id} (exec3) · interactive · RUNNING"), [
            m["content"] for m in out
        ]
        assert [line.split()[:3] for line in text.splitlines() if line.startswith("sub")] == [
            ["sub1", "sub", "RUNNING"],
            ["sub2", "sub", "RUNNING"],
        ]
        usage = text[text.index("\nusage at ") + 1 :].splitlines()[2:5]  # each kernel's
        assert [line.split()[0] for line in usage] == ["main1", "sub1", "sub2"], text
        # The kernel's token is its owner's, for the bai API only: not the server's token.
        # POSTs need no XSRF cookie there; shared templates (admin) stay out of reach.
        out = kernel.run(
            "import json, os, urllib.request as u\n"
            "url, token = os.environ['BAI_JUPYTER_URL'], os.environ['BAI_JUPYTER_TOKEN']\n"
            "def call(path, body=None, token=token):\n"
            "    data = None if body is None else json.dumps(body).encode()\n"
            "    auth = dict(Authorization='token ' + token)\n"
            "    try:\n"
            "        return u.urlopen(u.Request(url + path, data, auth), timeout=10).status\n"
            "    except u.HTTPError as e:\n"
            "        return e.code\n"
            "mine = dict(name='from-main1', spec=dict(cluster_size=2))\n"
            f"print(token != {connected.token!r}, call('bai/api/v1/sessions'),"
            " call('api/kernels'), call('bai/api/v1/sessions', token=token + 'x'),"
            " call('bai/api/v1/templates', mine),"
            " call('bai/api/v1/templates', dict(mine, name='shared', shared=True)))"
        )
        assert streams(out, "stdout").split() == ["True", "200", "404", "403", "201", "403"], out
        names = [t.name for t in asyncio.run(remote.list_templates())]
        assert "from-main1" in names and "shared" not in names
        asyncio.run(remote.delete_template("from-main1"))
    finally:
        client.stop_channels()
        asyncio.run(remote.destroy(session.id))


def test_help_has_no_rest_markers_and_names_the_cell_magic() -> None:
    """``%bai -h`` and ``%bai exec -h``: no stray ``::`` lines; exec is ``%%bai exec``."""
    from bai_jupyter.magics import command_help, overview

    text = overview()
    assert not [line for line in text.splitlines() if line.strip() == "::"]
    # No reST of the docstrings either: ``add`` reads add, :func:`x` reads x.
    assert not re.search(r"``|:(func|class|meth|data|attr):`", text), text
    assert "the URLs they are proxied at; add declares" in text
    assert "%%bai exec [--hosts HOSTS]" in text
    assert not re.search(r"(?<!%)%bai exec", text)
    assert command_help("exec").startswith("%%bai exec [--hosts HOSTS]")
    assert command_help("status").startswith("%bai status [--text]")
