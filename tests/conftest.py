"""Shared fixtures: the real Docker engine, the kernel image, a real browser, and the
one session-manager factory (``make_manager``) with its ``backend`` and ``manager``
fixtures.

Outside CI a test that needs Docker skips when no engine answers; with
``CI=true`` it fails instead, so CI can never pass by skipping them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from jupyter_client.asynchronous.client import AsyncKernelClient

    from bai_jupyter.manager import BaiSessionManager

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parent.parent


@functools.cache
def docker_client() -> Any:
    """A client of the local engine (raises when none answers)."""
    from docker.client import DockerClient

    factory: Any = DockerClient.from_env
    return factory(timeout=30)


def skip_or_fail(message: str) -> NoReturn:
    """Skip a test whose tool is missing; fail instead under CI, which must run them all."""
    if IN_CI:
        pytest.fail(f"{message} (CI=true: these tests must run)")
    pytest.skip(message)


def copy_checkout(dest: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """The repository's files as a fresh clone would have them (tracked and new, not
    ignored ones), copied to ``dest``, less the paths under ``leave_out``; ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file() and not name.startswith(leave_out):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _need(what: str, error: Exception | None) -> None:
    skip_or_fail(f"{what}: {error}" if error else what)


@pytest.fixture(scope="session")
def docker_engine() -> Any:
    """The local Docker engine; skip (fail under CI) when it does not answer."""
    from bai_jupyter.agents.docker import DockerAgent

    # Probe first: a client made while no engine answers leaks a socket (a warning).
    if not asyncio.run(DockerAgent.engine_answers(None)):
        _need("no Docker engine answers", None)
    return docker_client()


@pytest.fixture(scope="session")
def kernel_image(docker_engine: Any) -> str:
    """The default kernel image, built by ./scripts/test (bai-jupyter image ensure)."""
    from bai_jupyter.image import image_status
    from bai_jupyter.runtime.protocol import DEFAULT_IMAGE

    status = image_status(DEFAULT_IMAGE)
    if not status.present:
        _need(f"kernel image {DEFAULT_IMAGE} missing: run `bai-jupyter image build`", None)
    return DEFAULT_IMAGE


CHROMIUM = os.environ.get("BAI_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless system Chromium with a fresh profile, driven by PyPI ``playwright``
    (never ``playwright install``: the browser is Debian's, which ``scripts/_env.sh``
    installs)."""
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("no playwright (pip install -e '.[dev]')")
    if not shutil.which(CHROMIUM):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            yield context
        finally:
            context.close()


# --- the store on SQLite and on PostgreSQL --------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """An SQLAlchemy URL of a PostgreSQL server the tests may create databases in
    (``scripts/test`` starts a private one and sets ``BAI_TEST_POSTGRES_URL``)."""
    url = os.environ.get("BAI_TEST_POSTGRES_URL", "")
    if not url:
        skip_or_fail("no PostgreSQL: BAI_TEST_POSTGRES_URL is not set (./scripts/test sets it)")
    return url


@contextlib.contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    """A new, empty database on ``server_url`` for one test; dropped afterwards."""
    import sqlalchemy as sa

    name = f"bai_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store's URL: an SQLite file, and a new PostgreSQL database (both run)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.sqlite'}"
        return
    with postgres_database(request.getfixturevalue("postgres_server")) as url:
        yield url


# --- a manager whose sessions are all gone afterwards ---------------------------------------


async def until(what: str, check: Any, timeout: float = 60, interval: float = 0.2) -> Any:
    """Poll ``check()`` (a coroutine function) until it returns something true: that."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {found!r}")
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def started_manager(mgr: Any) -> AsyncIterator[Any]:
    """``mgr`` (a ``BaiSessionManager``) started; afterwards every session it still runs is
    ended, whatever happened, and it stops."""
    await mgr.start()
    try:
        yield mgr
    finally:
        live = [s for s in await mgr.list_sessions() if not s.status.is_terminal]
        await asyncio.gather(*(mgr.destroy(s.id) for s in live))
        await mgr.stop()


def make_manager(tmp_path: Path, backend: str, **traits: Any) -> BaiSessionManager:
    """A session manager (not started) on ``backend`` whose store, data folders and local
    kernels are all under ``tmp_path``, scheduling every half second; ``traits`` add to
    or override those settings."""
    from traitlets.config import Config

    from bai_jupyter.manager import BaiSessionManager

    settings: dict[str, Any] = {
        "store_url": f"sqlite:///{tmp_path}/store.sqlite",
        "data_folders_root": str(tmp_path / "folders"),
        "config": Config({"LocalAgent": {"root": str(tmp_path / "kernels")}}),
        "pass_interval": 0.5,
    }
    return BaiSessionManager(backend=backend, **{**settings, **traits})


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs on local processes, then on the Docker engine with the
    kernel image (which skips, or fails under CI, without an engine)."""
    if request.param == "docker":
        request.getfixturevalue("kernel_image")
    return str(request.param)


@pytest.fixture
async def manager(tmp_path: Path, backend: str) -> AsyncIterator[BaiSessionManager]:
    """``make_manager`` on ``backend``, started; its sessions all ended afterwards."""
    async with started_manager(make_manager(tmp_path, backend)) as mgr:
        yield mgr


# --- a Jupyter kernel client, never left with open sockets ---------------------------------


@contextlib.asynccontextmanager
async def kernel_client(
    client: AsyncKernelClient, timeout: float, hb: bool = True
) -> AsyncIterator[AsyncKernelClient]:
    """``client`` once its kernel answers; its channels stopped on
    the way out whatever happened, a failed wait included. A client dropped with open
    channels is collected later, in whatever test then runs, and its unclosed sockets fail
    that one (``PytestUnraisableExceptionWarning``)."""
    client.start_channels(hb=hb)
    try:
        await client.wait_for_ready(timeout=timeout)
        yield client
    finally:
        client.stop_channels()


# --- several Docker engines as several hosts, in one Swarm ----------------------------------


@pytest.fixture(scope="session")
def swarm_engines(kernel_image: str) -> Iterator[Any]:
    """Three more Docker engines, each in a network namespace of its own, in one Swarm,
    each holding the kernel image, and a fourth in no Swarm (see ``harness.engines``);
    stopped after the session."""
    from harness import engines as engines_harness

    if os.geteuid() != 0:
        skip_or_fail("several Docker engines need root (network namespaces, dockerd)")
    missing = engines_harness.missing_tools()
    if missing:
        skip_or_fail(f"several Docker engines need {', '.join(missing)} (iproute2, util-linux)")
    with engines_harness.running(kernel_image, outside=1) as engines:
        yield engines


@pytest.fixture(scope="session")
def registry(swarm_engines: Any, kernel_image: str) -> Iterator[tuple[Any, str]]:
    """A registry that the engine outside the Swarm pulls from over a slow link, holding
    the kernel image plus a layer under a name of its own (pushed once, kept between
    runs; that engine holds no copy), and that name (see ``harness.engines.Registry``)."""
    from harness import engines as engines_harness

    if shutil.which("docker-registry") is None:
        skip_or_fail("no docker-registry (apt-get install docker-registry)")
    registry = engines_harness.running_registry(swarm_engines)
    try:
        image = registry.publish(kernel_image, docker_client())
        registry.throttle()
        yield registry, image
    finally:
        registry.stop()
