"""Hang tolerance on a real Docker engine: sessions stuck starting or ending are forced out.

Three real hangs: a kernel whose runtime never reports ready (its image's entry
point swallows the runtime), an engine that stops answering (a relay in front of
the real engine socket that holds every byte while paused, as a stopped dockerd
does), and a manager killed while a session hangs (the next one catches it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager, started_manager, until

from bai_jupyter.kernel_plan import LABEL_SESSION
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Session, Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(180)]

HANG_IMAGE = "bai-jupyter/test-never-ready:1"
SMALL = {"cpu": "0.25", "mem": "128m"}


@pytest.fixture(scope="module")
def never_ready(kernel_image: str, docker_engine: Any) -> Iterator[str]:
    """The kernel image with an entry point that swallows the runtime: never ready."""
    made = docker_engine.containers.create(kernel_image, command=["true"])
    try:
        made.commit(
            repository=HANG_IMAGE.split(":")[0],
            tag=HANG_IMAGE.split(":")[1],
            changes=['ENTRYPOINT ["sh", "-c", "sleep infinity", "--"]'],
        )
    finally:
        made.remove(force=True)
    yield HANG_IMAGE
    with contextlib.suppress(Exception):
        docker_engine.images.remove(HANG_IMAGE, force=True)


def _manager(tmp_path: Path, **traits: Any) -> BaiSessionManager:
    """Conftest's ``make_manager`` on Docker, its watchdog checking five times a second."""
    return make_manager(tmp_path, "docker", watchdog_interval=0.2, **traits)


async def _gone(docker_engine: Any, session_id: str) -> None:
    """Wait until no container and no network of the session is left on the engine."""
    label = f"{LABEL_SESSION}={session_id}"
    for _ in range(300):
        containers = docker_engine.containers.list(all=True, filters={"label": label})
        networks = docker_engine.networks.list(names=[f"bai-{session_id[:12]}"])
        if not containers and not networks:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {session_id} left {containers} and {networks}")


def _hung(session: Session, state: Status) -> None:
    assert session.status is Status.ERROR, (session.status, session.status_data)
    assert session.status_info == "hang-timeout"
    assert session.status_data["hang"]["state"] == state.value


async def test_a_kernel_never_ready_is_forced_out_and_removed(
    tmp_path: Path, never_ready: str, docker_engine: Any
) -> None:
    mgr = _manager(tmp_path, hang_timeout={"CREATING": 2}, start_timeout=60)
    async with started_manager(mgr):
        made = await mgr.create({"image": never_ready, "cluster_size": 2, "resources": SMALL}, "al")
        creating = await mgr.wait_for(made.id, {Status.CREATING}, timeout=60)
        assert creating.status is Status.CREATING
        label = f"{LABEL_SESSION}={made.id}"
        for _ in range(100):  # its containers run, its runtime never says it is ready
            if len(docker_engine.containers.list(filters={"label": label})) == 2:
                break
            await asyncio.sleep(0.1)
        assert docker_engine.networks.list(names=[f"bai-{made.id[:12]}"])
        _hung(await mgr.wait_for(made.id, {Status.ERROR}, timeout=30), Status.CREATING)
        await _gone(docker_engine, made.id)
        assert (await mgr.get(made.id)).status_info == "hang-timeout"  # and it stays so


class PausableEngine:
    """A unix socket in front of the real engine's; paused, it holds every byte both ways
    (requests are accepted and never answered, as by a stopped dockerd)."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> PausableEngine:
        self.server = await asyncio.start_unix_server(self._serve, str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.flowing.set()
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.target)
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


def _engine_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip("the pausable relay stands in front of a local engine's unix socket")
    return host.removeprefix("unix://")


async def test_a_paused_engine_fails_starting_and_ending_sessions(
    tmp_path: Path, kernel_image: str, docker_engine: Any
) -> None:
    relay = PausableEngine(tmp_path / "engine.sock", _engine_socket())
    agent = {"id": "paused", "endpoint": f"unix://{relay.path}", "slots": {"cpu": 2, "mem": "2g"}}
    mgr = _manager(tmp_path, agents=[agent], start_timeout=60)
    async with relay, started_manager(mgr):
        running = await mgr.create({"resources": SMALL}, "al")
        ready = await mgr.wait_for(running.id, {Status.RUNNING}, timeout=60)
        assert ready.status is Status.RUNNING
        # Short limits from now on (read at every check): a normal start may take longer.
        mgr.hang_timeout = {"PREPARING": 1.5, "CREATING": 1.5, "TERMINATING": 1.5}
        # Queued for a moment from now: it starts while the engine does not answer.
        later = await mgr.create({"resources": SMALL, "starts_at": time.time() + 1}, "al")
        relay.flowing.clear()
        ending = asyncio.ensure_future(mgr.destroy(running.id))
        # It hangs where it first asks the engine: whether the agent has its image.
        _hung(await mgr.wait_for(later.id, {Status.ERROR}, timeout=30), Status.PREPARING)
        _hung(await mgr.wait_for(running.id, {Status.ERROR}, timeout=30), Status.TERMINATING)
        assert not ending.done()  # the destroy still waits for the engine
        relay.flowing.set()  # the engine answers again: what was made is removed
        await asyncio.wait_for(ending, 60)
        await _gone(docker_engine, later.id)
        await _gone(docker_engine, running.id)
        for session in (later, running):  # forced out is how they ended
            assert (await mgr.get(session.id)).status_info == "hang-timeout"


_CRASHING_MANAGER = """
import asyncio, sys
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Status

async def main():
    mgr = BaiSessionManager(store_url=sys.argv[1], backend="docker", pass_interval=0.5,
                            data_folders_root=sys.argv[2], start_timeout=600)
    await mgr.start()
    made = await mgr.create({"image": sys.argv[3], "resources": {"cpu": "0.25", "mem": "128m"}},
                            "al")
    await mgr.wait_for(made.id, {Status.CREATING}, timeout=60)
    print(made.id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_a_hang_from_before_a_restart_is_caught_once_the_next_manager_leads(
    tmp_path: Path, never_ready: str, docker_engine: Any
) -> None:
    store = f"sqlite:///{tmp_path}/store.sqlite"
    crashing = await asyncio.create_subprocess_exec(
        *[sys.executable, "-c", _CRASHING_MANAGER, store, str(tmp_path / "folders"), never_ready],
        stdout=subprocess.PIPE,
    )
    try:
        assert crashing.stdout is not None
        session_id = (await asyncio.wait_for(crashing.stdout.readline(), 90)).decode().strip()
        assert session_id, "the first manager did not get the session to CREATING"
        label = f"{LABEL_SESSION}={session_id}"
        for _ in range(300):  # its kernel runs (and never gets ready)
            if docker_engine.containers.list(filters={"label": label}):
                break
            await asyncio.sleep(0.1)
    finally:
        crashing.send_signal(signal.SIGKILL)  # no clean-up of any kind
        await crashing.wait()
    assert docker_engine.containers.list(filters={"label": label})
    await asyncio.sleep(1.2)  # the hang outlasts the limit while no manager runs
    async with started_manager(_manager(tmp_path, hang_timeout={"CREATING": 1})) as mgr:

        async def reconciled() -> bool:  # once the dead one's lease lapsed (lease_ttl)
            return mgr.leadership.leading and mgr.leadership.starting is None

        await until("the new manager to lead", reconciled, timeout=15)
        _hung(await mgr.get(session_id), Status.CREATING)  # decided as it took the lead
        await _gone(docker_engine, session_id)
