"""A session's life through a real server: a launch that fails says why and the server
still stops; kernel keys go to their owner only; ended records are purged on request or
past retention; ``jupyter console`` ends its session on exit."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from harness.server import end_all, start_server

from bai_jupyter.model import Status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize("case", ["never-fits", "queue-timeout"])
async def test_a_failed_launch_is_explained_and_the_server_still_stops(
    tmp_path: Path, case: str
) -> None:
    """A failed launch, then SIGTERM still exits cleanly (rc 0, no traceback).

    ``never-fits``: a kernelspec no agent can ever run is a clean 4xx. ``queue-timeout``:
    a kernelspec whose session waits in the queue (its template starts it far in the
    future) past ``launch_timeout`` is cancelled, and the launch fails with why it waited.
    """
    from bai_jupyter.kernelspecs import kernelspec_json

    root = tmp_path / "server"
    spec_dir = root / "data" / "kernels" / "bai-huge"
    spec_dir.mkdir(parents=True)
    config: dict[str, Any] = {"launch_timeout": 3.0}
    if case == "never-fits":
        config["resources"] = {"cpu": "512"}
    else:
        config["template"] = "later"
    (spec_dir / "kernel.json").write_text(json.dumps(kernelspec_json("bai huge", config)))
    server = start_server(root)
    try:
        if case == "queue-timeout":
            made = await server.fetch(
                "POST", "bai/api/v1/templates", {"name": "later", "spec": {"starts_at": 4e9}}
            )
            assert made.code == 201, made.body
        reply = await server.fetch("POST", "api/kernels", {"name": "bai-huge"})
        session_reply = await server.fetch(
            "POST",
            "api/sessions",
            {"path": "a.ipynb", "type": "notebook", "kernel": {"name": "bai-huge"}},
        )
        if case == "never-fits":
            assert 400 <= reply.code < 500, (reply.code, reply.body, server.tail())
            assert 400 <= session_reply.code < 500, (session_reply.code, session_reply.body)
        else:
            for answer in (reply, session_reply):
                assert answer.code == 504, (answer.code, answer.body, server.tail())
                message = json.loads(answer.body)["message"]
                assert "launch_timeout=3" in message and "starts at 2096" in message, message
            sessions = await server.client().list_sessions()
            assert len(sessions) == 2, sessions
            assert all(s.status is Status.CANCELLED for s in sessions), sessions
    finally:
        server.stop()
    log = server.log.read_text(errors="replace")
    assert server.proc.returncode == 0, log[-4000:]
    assert "Traceback" not in log, log[-4000:]


async def test_kernel_keys_only_to_the_owner_who_asks(tmp_path: Path) -> None:
    """Lists and plain reads hide kernels' HMAC keys; ``?connection=true`` gives the owner's."""
    from harness.server import MULTI_USER

    server = start_server(tmp_path / "server", MULTI_USER)
    try:
        alice = server.client("alice-token")
        made = await alice.create({"type": "interactive"})
        await alice.wait_for(made.id, [Status.RUNNING], timeout=120)

        def keys(view: dict[str, Any]) -> list[Any]:
            return [k["info"].get("connection", {}).get("key") for k in view["kernels"]]

        path = f"bai/api/v1/sessions/{made.id}"
        listing = await server.fetch("GET", "bai/api/v1/sessions", token="alice-token")
        (listed,) = json.loads(listing.body)["sessions"]
        assert keys(listed) == [None]
        plain = json.loads((await server.fetch("GET", path, token="alice-token")).body)
        assert keys(plain) == [None]
        assert plain["kernels"][0]["info"]["connection"]["shell_port"]
        asked = await server.fetch("GET", path + "?connection=true", token="alice-token")
        (key,) = keys(json.loads(asked.body))
        assert isinstance(key, str) and key
        admin = await server.fetch("GET", path + "?connection=true", token="admin-token")
        assert admin.code == 403, admin.body
        assert json.loads(admin.body)["error"] == "forbidden"
        everyone = await server.fetch("GET", "bai/api/v1/sessions?all=true", token="admin-token")
        assert all(keys(v) == [None] for v in json.loads(everyone.body)["sessions"])
    finally:
        end_all(server, "alice-token")  # API sessions outlive the server
        server.stop()


@pytest.mark.docker
async def test_a_stale_kernel_client_never_reaches_the_next_sessions_kernel(
    tmp_path: Path, kernel_image: str
) -> None:
    """A kernel client of an ended session (a notebook's channels, a
    ``jupyter console --existing``) reconnects to its old address and ports; the next
    session's main1 often gets that address, and its ports must differ so nothing from the
    old client arrives there (before: the same ports, and B's ipykernel logged
    "Invalid Signature" for every message of A's client)."""
    from jupyter_client.asynchronous.client import AsyncKernelClient

    server = start_server(tmp_path / "server", 'c.BaiSessionManager.backend = "docker"\n')
    api = server.client()
    stale = AsyncKernelClient()
    small = {"type": "interactive", "resources": {"cpu": "0.5", "mem": "256m"}}

    try:
        a = await api.create(small)
        await api.wait_for(a.id, [Status.RUNNING], timeout=120)
        old = (await api.get(a.id, connection=True)).main.info["connection"]
        stale.load_connection_info(old)
        stale.start_channels()
        await stale.wait_for_ready(timeout=60)
        await api.destroy(a.id)
        await api.wait_for(a.id, [Status.TERMINATED], timeout=60)
        for _ in range(5):  # the engine hands the freed address on unless another took it
            b = await api.create(small)
            await api.wait_for(b.id, [Status.RUNNING], timeout=120)
            new = (await api.get(b.id, connection=True)).main.info["connection"]
            if new["ip"] == old["ip"]:
                break
            await api.destroy(b.id)
        print("B at A's address:", new["ip"] == old["ip"], old["ip"], new["ip"])
        # The stale client speaks; had its messages reached B's ipykernel, it would log them.
        stale.execute("print('from the ended session')")
        stale.kernel_info()
        await asyncio.sleep(5)
        log = await api.logs(b.id)
        assert "Invalid Signature" not in log and "Invalid Message" not in log, log[-3000:]
        # Nothing can: B listens on other ports (also where it got another address).
        ports = [f"{channel}_port" for channel in ("shell", "iopub", "stdin", "control", "hb")]
        assert not {old[p] for p in ports} & {new[p] for p in ports}, (old, new)
    finally:
        stale.stop_channels()
        end_all(server)
        server.stop()


async def test_an_ended_sessions_record_can_be_purged(tmp_path: Path) -> None:
    """``DELETE …?purge=true``: 409 while the session lives, then its record is gone."""
    server = start_server(tmp_path / "server")
    try:
        made = await server.client().create({"starts_at": 4e9})  # stays pending
        path = f"bai/api/v1/sessions/{made.id}"
        live = await server.fetch("DELETE", path + "?purge=true")
        assert live.code == 409, live.body
        assert json.loads(live.body)["error"] == "conflict"
        assert (await server.fetch("DELETE", path)).code == 200  # cancelled
        purged = await server.fetch("DELETE", path + "?purge=true")
        assert purged.code == 200, purged.body
        assert json.loads(purged.body)["status"] == "CANCELLED"
        gone = await server.fetch("GET", path)
        assert gone.code == 404, gone.body
    finally:
        server.stop()


async def test_ended_sessions_past_retention_are_deleted(tmp_path: Path) -> None:
    """``ended_retention``: the periodic purge deletes ended records, leaves live ones."""
    config = (
        "c.BaiSessionManager.ended_retention = 0.5\nc.BaiSessionManager.retention_interval = 1\n"
    )
    server = start_server(tmp_path / "server", config)
    try:
        client = server.client()
        ended = await client.create({"starts_at": 4e9})
        await client.destroy(ended.id)
        live = await client.create({"starts_at": 4e9})
        for _ in range(600):  # the loop runs every second; a generous bound
            if (await server.fetch("GET", f"bai/api/v1/sessions/{ended.id}")).code == 404:
                break
            await asyncio.sleep(0.1)
        assert (await server.fetch("GET", f"bai/api/v1/sessions/{ended.id}")).code == 404
        assert (await client.get(live.id)).status is Status.PENDING
    finally:
        server.stop()


@pytest.mark.docker
@pytest.mark.parametrize("where", ["server", "no-server"])
async def test_jupyter_console_in_a_terminal_then_exit_ends_the_session_cleanly(
    tmp_path: Path, kernel_image: str, docker_engine: Any, where: str
) -> None:
    """``jupyter console --kernel <bai spec>`` runs code and ``%bai`` in main1; ``exit`` →
    TERMINATED ``user-requested``, nothing left. ``server``: a session of one kernel through a
    running server (BAI_JUPYTER_URL). ``no-server``: a cluster of two on the console's
    embedded manager, which must end it before the process is gone."""
    import pexpect  # type: ignore[import-untyped]

    from bai_jupyter.kernel_plan import LABEL_SESSION
    from bai_jupyter.kernelspecs import kernelspec_json
    from bai_jupyter.store import Store

    data = tmp_path / "client-data"
    spec_dir = data / "kernels" / "bai-console"
    spec_dir.mkdir(parents=True)
    config: dict[str, Any] = {"resources": {"cpu": "0.5", "mem": "512m"}}
    if where == "no-server":
        config["cluster_size"] = 2
    (spec_dir / "kernel.json").write_text(json.dumps(kernelspec_json("bai console", config)))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))},
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "client-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "client-runtime"),
        "TERM": "xterm",
    }
    server = None
    if where == "server":
        server = start_server(tmp_path / "server", 'c.BaiSessionManager.backend = "docker"\n')
        env.update(BAI_JUPYTER_URL=server.url, BAI_JUPYTER_TOKEN=server.token)
        store_url = f"sqlite:///{tmp_path}/server/store.sqlite"
    else:
        (tmp_path / "client-config").mkdir()
        store_url = f"sqlite:///{tmp_path}/client-store.sqlite"
        (tmp_path / "client-config" / "jupyter_config.py").write_text(
            'c.BaiSessionManager.backend = "docker"\n'
            f"c.BaiSessionManager.store_url = {store_url!r}\n"
            f"c.BaiSessionManager.data_folders_root = {str(tmp_path / 'folders')!r}\n"
        )
    console = str(Path(sys.executable).with_name("jupyter-console"))
    try:
        child = pexpect.spawn(
            console,
            ["--kernel", "bai-console", "--simple-prompt"],
            env=env,
            encoding="utf-8",
            timeout=180,
            dimensions=(40, 200),
        )
        child.logfile_read = seen = io.StringIO()  # what the terminal showed, for failures
        try:
            child.expect(r"In \[1\]: ")
            child.sendline("import os; print('host=' + os.environ['BACKENDAI_CLUSTER_HOST'])")
            child.expect("host=main1")
            child.expect(r"In \[2\]: ")
            child.sendline("%load_ext bai_jupyter")
            child.expect(r"In \[3\]: ")
            child.sendline("%bai status --text")  # its API: the server's, or the embedded one's
            child.expect(r"session [0-9a-f]{32} · interactive · RUNNING")
            child.expect(r"In \[4\]: ")
            child.sendline("exit")
            child.expect(pexpect.EOF)
        except pexpect.TIMEOUT:
            where_log = server.tail() if server is not None else ""
            pytest.fail(f"terminal:\n{seen.getvalue()}\nserver:\n{where_log}")
        child.close()
        assert "Traceback" not in seen.getvalue(), seen.getvalue()
        if server is not None:
            (session,) = await server.client().list_sessions()
            await server.client().wait_for(session.id, [Status.TERMINATED], timeout=120)
    finally:
        if server is not None:
            server.stop()
    store = Store(store_url)
    try:
        with store.read() as tx:
            (ended,) = tx.list_sessions()
    finally:
        store.close()
    assert (ended.status, ended.status_info) == (Status.TERMINATED, "user-requested"), (
        ended.status,
        ended.status_info,
        ended.status_data,
    )
    assert len(ended.kernels) == (2 if where == "no-server" else 1)
    left = docker_engine.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={ended.id}"})
    assert left == [], [(c.name, c.status) for c in left]


@pytest.mark.docker
async def test_sigterm_after_a_failed_attach_launch_stops_at_once_and_removes_everything(
    tmp_path: Path, kernel_image: str, docker_engine: Any
) -> None:
    """A notebook's session ended through the API (the sidebar), its stale attach
    kernelspec launched (503), then SIGTERM while Jupyter's restarter is bringing the
    notebook's kernel back: the server exits within seconds, rc 0, no traceback in its
    log, and no container of either session is left."""
    import signal
    import time

    from bai_jupyter.kernel_plan import LABEL_SESSION
    from bai_jupyter.kernelspecs import kernelspec_json
    from bai_jupyter.store import Store

    root = tmp_path / "server"
    spec_dir = root / "data" / "kernels" / "bai-test"
    spec_dir.mkdir(parents=True)
    spec = kernelspec_json("bai test", {"resources": {"cpu": "0.5", "mem": "256m"}})
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    server = start_server(root, 'c.BaiSessionManager.backend = "docker"\n')
    try:
        client = server.client()
        notebook = {"type": "notebook", "path": "a.ipynb", "kernel": {"name": "bai-test"}}
        reply = await server.fetch("POST", "api/sessions", notebook)
        assert reply.code == 201, (reply.body, server.tail())
        (session,) = await client.list_sessions(statuses=[Status.RUNNING])
        reply = await server.fetch("POST", f"bai/api/v1/sessions/{session.id}/kernelspec")
        assert reply.code == 201, reply.body
        attach = {"type": "notebook", "path": "b.ipynb", "kernel": {"name": ""}}
        attach["kernel"] = {"name": json.loads(reply.body)["name"]}
        await client.destroy(session.id)  # the sidebar's "end session"
        ended = await client.wait_for(session.id, [Status.TERMINATED], timeout=60)
        assert ended.status_info == "user-requested", ended.status_data
        reply = await server.fetch("POST", "api/sessions", attach)  # the stale launcher card
        assert reply.code == 503, (reply.code, reply.body, server.tail())
        for _ in range(100):  # Jupyter's restarter brings the notebook's kernel back
            if any(s.id != session.id for s in await client.list_sessions()):
                break
            await asyncio.sleep(0.1)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=30)
        except Exception:
            pytest.fail(f"the server still runs 30 s after SIGTERM:\n{server.tail()}")
        took = time.monotonic() - started
    finally:
        server.stop()
    log = server.log.read_text(errors="replace")
    assert server.proc.returncode == 0, log[-4000:]
    assert "Traceback" not in log, log[-6000:]
    assert took < 10, (took, log[-4000:])
    store = Store(f"sqlite:///{root}/store.sqlite")
    try:
        with store.read() as tx:
            sessions = tx.list_sessions()
    finally:
        store.close()
    assert all(s.status.is_terminal for s in sessions), [(s.id, s.status) for s in sessions]
    for each in sessions:
        left = docker_engine.containers.list(
            all=True, filters={"label": f"{LABEL_SESSION}={each.id}"}
        )
        assert left == [], (each.id, each.status, [(c.name, c.status) for c in left])
