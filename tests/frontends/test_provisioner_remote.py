"""The provisioner with the real bai server extension: in the server, and over its REST API.

A ``jupyter server`` process with the extension (``harness.server``) owns the
store. A kernel the server starts uses that server's own manager; ``jupyter
execute`` in another process, given ``BAI_JUPYTER_URL``, uses the same manager
through the REST API and embeds none of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.notebooks import run_notebook
from harness.server import Server, start_server

from bai_jupyter import kernelspecs
from bai_jupyter.model import Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(180)]


def _install(data_dir: Path, name: str) -> None:
    folder = data_dir / "kernels" / name
    folder.mkdir(parents=True)
    spec = kernelspecs.kernelspec_json(name, {"resources": {"cpu": "0.5", "mem": "512m"}})
    (folder / "kernel.json").write_text(json.dumps(spec))


@pytest.fixture
def server(tmp_path: Path, kernel_image: str) -> Iterator[Server]:
    _install(tmp_path / "server" / "data", "bai-py")  # the server's own data dir
    running = start_server(tmp_path / "server")
    try:
        yield running
    finally:
        running.stop()


async def test_a_kernel_the_server_starts_uses_the_servers_manager(server: Server) -> None:
    reply = await server.fetch("POST", "api/kernels", {"name": "bai-py"})
    assert reply.code == 201, reply.body
    kernel_id = json.loads(reply.body)["id"]
    sessions = await server.client().list_sessions()
    assert [(s.status, s.meta) for s in sessions] == [
        (Status.RUNNING, {"jupyter_kernel_id": kernel_id})
    ]
    assert "sessions come from the server's own manager" in server.log.read_text()

    assert (await server.fetch("DELETE", f"api/kernels/{kernel_id}")).code == 204
    assert (await server.client().get(sessions[0].id)).status is Status.TERMINATED


async def test_jupyter_execute_uses_the_server_at_bai_jupyter_url(
    server: Server, tmp_path: Path
) -> None:
    data = tmp_path / "client-data"
    _install(data, "bai-py")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))},
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "client-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "client-runtime"),
        "BAI_JUPYTER_URL": server.url,
        "BAI_JUPYTER_TOKEN": server.token,
    }
    source = "import os; print(os.environ['BACKENDAI_CLUSTER_HOST'])"
    done, printed = await asyncio.to_thread(run_notebook, tmp_path, source, env)
    assert printed == "main1\n"
    assert "sessions come from the bai-jupyter server at" in done.stderr
    sessions = await server.client().list_sessions()
    assert [s.status for s in sessions] == [Status.TERMINATED]
    assert not (data / "bai_jupyter").exists()  # no embedded manager, no store of its own


async def test_a_kernel_whose_session_ended_restarts_and_shuts_down_quietly(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over BAI_JUPYTER_URL the server answers 409 to signals for an ended session: Jupyter's
    restart and shutdown of such a kernel must not fail on it (nor 500 its REST call)."""
    from jupyter_client.kernelspec import KernelSpec

    from bai_jupyter.provisioner import BaiProvisioner

    monkeypatch.setenv("BAI_JUPYTER_URL", server.url)
    monkeypatch.setenv("BAI_JUPYTER_TOKEN", server.token)
    remote = server.client()
    session = await remote.create({"resources": {"cpu": "0.5", "mem": "512m"}})
    await remote.destroy(session.id)  # ended before Jupyter restarts its kernel
    spec = KernelSpec(**kernelspecs.kernelspec_json("bai-py", {}))
    provisioner = BaiProvisioner(kernel_id="k-ended", kernel_spec=spec)
    info = {"kernel_id": "k-ended", "connection_info": {}, "bai_session_id": session.id}
    await provisioner.load_provisioner_info(info)  # as a restarted server reconnects
    await provisioner.send_signal(1)  # SIGHUP: refused with 409 Conflict, logged
    await provisioner.cleanup(restart=True)
    await provisioner.cleanup(restart=False)
    assert (await remote.get(session.id)).status.is_terminal
