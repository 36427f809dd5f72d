"""A bai kernel sees its notebook's files, as a local kernel does.

A real ``jupyter server`` (its root dir a folder of notebooks) starts a bai kernel for
a notebook in a subfolder through Jupyter's own sessions API: the kernel's working
directory is the notebook's folder (under ``/home/work/notebooks`` in Docker, the folder
itself on the local backend), it opens the data file next to the notebook by a relative
path, and what it writes there the server's contents API sees. Turned off, none of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.server import MULTI_USER, Server, serving, stdout_of
from traitlets.config import Config

from bai_jupyter import kernelspecs
from bai_jupyter.agents.docker import DockerAgent
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Session, SessionSpec, Status
from bai_jupyter.runtime.protocol import NOTEBOOK_DIR, WORK_DIR

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SMALL = {"cpu": "0.5", "mem": "512m"}
PROBE = (
    "import os\n"
    "print(os.getcwd())\n"
    "print(os.path.exists('data.txt') and open('data.txt').read())\n"
    "print(os.path.exists('/home/work/notebooks'))\n"
)


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend(request: pytest.FixtureRequest) -> str:
    """Not conftest's ``backend``: module-scoped (one server and notebook folder per
    backend), Docker first."""
    if request.param == "docker":
        request.getfixturevalue("kernel_image")  # skips (fails under CI) without an engine
    return str(request.param)


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Path:
    """The server's root dir: a notebook folder ``sub`` with a data file next to it."""
    root = tmp_path_factory.mktemp(f"notebooks-{backend}")
    (root / "sub").mkdir()
    (root / "sub" / "data.txt").write_text("next to the notebook")
    return Path(os.path.realpath(root))


def _kernelspecs(home: Path) -> None:
    """``bai-nb`` (the default: mounted) and ``bai-nb-off`` in the server's data dir."""
    specs: dict[str, dict[str, Any]] = {
        "bai-nb": {"resources": SMALL},
        "bai-nb-off": {"resources": SMALL, "mount_notebook_dir": False},
        "bai-nb-2": {"resources": SMALL, "cluster_size": 2},
    }
    for name, conf in specs.items():
        spec = kernelspecs.kernelspec_json(name, conf)
        folder = home / "data" / "kernels" / name
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text(json.dumps(spec))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, backend: str, notebooks: Path
) -> Iterator[Server]:
    home = tmp_path_factory.mktemp(f"server-{backend}")
    _kernelspecs(home)
    config = (
        f"c.ServerApp.root_dir = {str(notebooks)!r}\nc.BaiSessionManager.backend = {backend!r}\n"
    )
    with serving(home, config) as running:
        yield running


@contextlib.asynccontextmanager
async def _notebook_kernel(server: Server, kernel: str) -> AsyncIterator[str]:
    """Open ``sub/analysis.ipynb`` with ``kernel`` as JupyterLab does; yield its bai session."""
    reply = await server.fetch(
        "POST",
        "api/sessions",
        {"path": "sub/analysis.ipynb", "type": "notebook", "kernel": {"name": kernel}},
    )
    assert reply.code == 201, reply.body
    jupyter = json.loads(reply.body)
    try:
        sessions = await server.client().list_sessions()
        ours = [s for s in sessions if s.meta.get("jupyter_kernel_id") == jupyter["kernel"]["id"]]
        assert len(ours) == 1 and ours[0].status is Status.RUNNING
        yield ours[0].id
    finally:
        await server.fetch("DELETE", f"api/sessions/{jupyter['id']}")


async def test_kernel_starts_in_the_notebooks_folder_and_shares_its_files(
    server: Server, backend: str, notebooks: Path
) -> None:
    async with _notebook_kernel(server, "bai-nb") as sid:
        cwd, data, mounted = await stdout_of(server, sid, PROBE)
        if backend == "docker":
            assert (cwd, mounted) == (f"{NOTEBOOK_DIR}/sub", "True"), server.tail()
        else:  # natively: the notebook's folder itself
            assert cwd == str(notebooks / "sub")
        assert data == "next to the notebook"
        await stdout_of(server, sid, "open('out.txt', 'w').write('from the kernel')")
        reply = await server.fetch("GET", "api/contents/sub/out.txt?content=1")
        assert reply.code == 200, reply.body
        assert json.loads(reply.body)["content"] == "from the kernel"


async def test_turned_off_the_kernel_sees_none_of_it(
    server: Server, backend: str, notebooks: Path
) -> None:
    async with _notebook_kernel(server, "bai-nb-off") as sid:
        cwd, data, mounted = await stdout_of(server, sid, PROBE)
        assert data == "False"
        assert not cwd.startswith(str(notebooks))
        if backend == "docker":
            assert (cwd, mounted) == (WORK_DIR, "False")


async def test_a_session_asking_for_a_notebook_folder_starts_its_kernels_there(
    server: Server, backend: str, notebooks: Path
) -> None:
    """The new-session dialog's request names the folder its notebook opens in
    (``meta.notebook_folder``, relative to the file browser's root): the session gets
    the folder Jupyter gives a kernel started there, as a kernelspec's notebook does."""
    bad = {"resources": SMALL, "meta": {"notebook_folder": "../elsewhere"}}
    reply = await server.fetch("POST", "bai/api/v1/sessions", bad)
    assert reply.code == 400 and json.loads(reply.body)["field"] == "meta.notebook_folder"
    asked = {"type": "interactive", "resources": SMALL, "meta": {"notebook_folder": "sub"}}
    reply = await server.fetch("POST", "bai/api/v1/sessions", asked)
    assert reply.code == 201, reply.body
    made = json.loads(reply.body)
    try:
        assert made["meta"] == {"notebook_dir": str(notebooks / "sub")}
        await server.client().wait_for(made["id"], {Status.RUNNING}, timeout=90)
        cwd, data, _ = await stdout_of(server, made["id"], PROBE)
        assert cwd == (f"{NOTEBOOK_DIR}/sub" if backend == "docker" else str(notebooks / "sub"))
        assert data == "next to the notebook", server.tail()
    finally:
        await server.fetch("DELETE", f"bai/api/v1/sessions/{made['id']}")


@pytest.mark.parametrize(
    "backend", [pytest.param("docker", marks=pytest.mark.docker)], indirect=True
)  # ssh sub1: Docker only
async def test_every_kernel_of_a_cluster_has_it(server: Server) -> None:
    """sub1 too: the same mount, and its processes start in the notebook's folder."""
    probe = (
        "import subprocess\n"
        "def sh(cmd): return subprocess.run(['ssh', 'sub1', cmd], capture_output=True,"
        " text=True).stdout.strip()\n"
        "print(sh('readlink /proc/1/cwd'))\n"
        "print(sh('cat /home/work/notebooks/sub/data.txt'))\n"
    )
    async with _notebook_kernel(server, "bai-nb-2") as sid:
        assert await stdout_of(server, sid, probe) == [
            f"{NOTEBOOK_DIR}/sub",
            "next to the notebook",
        ]


@pytest.mark.parametrize("choice", ["other", "off"])
async def test_the_server_chooses_what_is_mounted_or_nothing(tmp_path: Path, choice: str) -> None:
    """``BaiJupyterApp.notebook_dir``: another directory, or '' for none (local backend)."""
    notebooks = tmp_path / "notebooks"
    (notebooks / "sub").mkdir(parents=True)
    (notebooks / "sub" / "data.txt").write_text("next to the notebook")
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("in the chosen dir")
    chosen = str(other) if choice == "other" else ""
    _kernelspecs(tmp_path / "srv")
    config = (
        f"c.ServerApp.root_dir = {str(notebooks)!r}\nc.BaiSessionManager.backend = 'local'\n"
        f"c.BaiJupyterApp.notebook_dir = {chosen!r}\n"
    )
    with serving(tmp_path / "srv", config) as server:
        async with _notebook_kernel(server, "bai-nb") as sid:
            cwd, data, _ = await stdout_of(server, sid, PROBE)
    if choice == "other":  # the notebook is outside it: the kernel starts at its top
        assert (cwd, data) == (str(other.resolve()), "in the chosen dir")
    else:
        assert data == "False" and not cwd.startswith(str(notebooks))


async def test_users_of_a_shared_server_cannot_ask_for_its_root(tmp_path: Path) -> None:
    """On a multi-user server ``meta.notebook_dir`` (or ``notebook_folder``) from the API is
    dropped: a user must
    not mount the server's root dir (other users' notebooks) into a session."""
    (tmp_path / "notebooks").mkdir()
    config = (
        MULTI_USER + f"c.ServerApp.root_dir = {str(tmp_path / 'notebooks')!r}\n"
        "c.BaiSessionManager.backend = 'local'\n"
    )
    request = {
        "type": "batch",
        "startup_command": "pwd",
        "starts_at": time.time() + 3600,
        "meta": {
            "notebook_dir": str(tmp_path / "notebooks"),
            "notebook_folder": "",
            "from": "alice",
        },
    }
    with serving(tmp_path / "srv", config) as server:
        reply = await server.fetch("POST", "bai/api/v1/sessions", request, token="alice-token")
        assert reply.code == 201, reply.body
        created = json.loads(reply.body)
        await server.fetch("DELETE", f"bai/api/v1/sessions/{created['id']}", token="alice-token")
    assert created["meta"] == {"from": "alice"}


# --- where it is not mounted (no kernel needed) ---------------------------------------------


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[BaiSessionManager]:
    """A local-backend manager whose own files are all under ``tmp_path/srv``, away from
    the notebooks (not conftest's ``manager``: its own layout, the default pass interval)."""
    (tmp_path / "srv").mkdir()
    mgr = BaiSessionManager(
        store_url=f"sqlite:///{tmp_path}/srv/store.sqlite",
        backend="local",
        data_folders_root=str(tmp_path / "srv" / "folders"),
        config=Config({"LocalAgent": {"root": str(tmp_path / "srv" / "kernels")}}),
    )
    await mgr.start()
    try:
        yield mgr
    finally:
        await mgr.stop()


def _session(notebook_dir: str) -> Session:
    """A session record only (nothing started) whose meta names a notebook dir."""
    session = Session.create(SessionSpec(), "alice", time.time())
    session.meta = {"notebook_dir": notebook_dir}
    return session


async def test_a_forbidden_root_is_not_mounted_and_says_why(
    manager: BaiSessionManager,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = _session(str(tmp_path))
    agent = next(iter(manager.core.agents.values()))
    manager.log = logging.getLogger("test-notebook-dir")
    (tmp_path / "srv" / "kernels").mkdir(parents=True, exist_ok=True)
    (tmp_path / "home" / ".jupyter").mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "home" / ".jupyter"))
    forbidden = {
        "/": "contains every user's data folders",  # and the Docker socket, /proc …
        str(tmp_path / "srv"): "contains every user's data folders",  # and the store
        str(tmp_path / "srv" / "kernels"): "which is never mountable",  # the kernels' keys
        # A home holding the Jupyter config (code the server runs at start).
        str(tmp_path / "home"): "/.jupyter, which is never mountable",
    }
    for root, why in forbidden.items():
        manager.notebook_root = root
        caplog.clear()
        with caplog.at_level(logging.WARNING, "test-notebook-dir"):
            assert manager.mounts.notebook_mount(session, agent, []) == (None, None)
        assert f"notebook dir {root} not mounted (kernels start in {WORK_DIR})" in caplog.text
        assert why in caplog.text
    (tmp_path / "nb" / "sub").mkdir(parents=True)
    manager.notebook_root = str(tmp_path / "nb")
    inside = _session(str(tmp_path / "nb" / "sub"))
    mount, work_dir = manager.mounts.notebook_mount(inside, agent, [])
    assert mount is not None and (mount.target, mount.read_only) == (NOTEBOOK_DIR, False)
    assert work_dir == f"{NOTEBOOK_DIR}/sub"
    for target in (NOTEBOOK_DIR, f"{NOTEBOOK_DIR}/x", "/home/work"):  # a data folder there
        caplog.clear()
        with caplog.at_level(logging.WARNING, "test-notebook-dir"):
            assert manager.mounts.notebook_mount(inside, agent, [target]) == (None, None)
        assert f"a mount uses {target}" in caplog.text

    # Refused, the kernel still starts (in its own empty work dir).
    manager.notebook_root = "/"
    started = await manager.create(
        {"resources": SMALL}, "alice", meta={"notebook_dir": str(tmp_path / "nb" / "sub")}
    )
    try:
        running = await manager.wait_for(started.id, {Status.RUNNING}, timeout=60)
        assert running.status is Status.RUNNING, running.status_data
    finally:
        await manager.destroy(started.id)


async def test_an_engine_elsewhere_gets_no_mount_and_says_so(
    manager: BaiSessionManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "nb").mkdir()
    manager.notebook_root = str(tmp_path / "nb")
    session = _session(str(tmp_path / "nb"))
    remote = DockerAgent("remote", endpoint="tcp://192.0.2.1:2376")  # never contacted
    assert not remote.shares_host_files
    manager.log = logging.getLogger("test-notebook-dir")
    with caplog.at_level(logging.INFO, "test-notebook-dir"):
        assert manager.mounts.notebook_mount(session, remote, []) == (None, None)
    assert "agent remote does not share this host's file system" in caplog.text
