"""One leader per store: of the managers on a store, one schedules and watches; another
takes over when it stops or dies, and starts again what it left half-started."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import docker_client, make_manager, started_manager, until

from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Status

SMALL = {"resources": {"cpu": "0.25", "mem": "128m"}}


def _two(tmp_path: Path, store_url: str, **traits: Any) -> tuple[BaiSessionManager, ...]:
    return tuple(
        make_manager(tmp_path, "local", store_url=store_url, replica_name=name, **traits)
        for name in ("first", "second")
    )


async def test_one_manager_of_a_store_leads_and_starts_what_another_enqueued(
    tmp_path: Path, store_url: str
) -> None:
    """The first manager on a store leads; a second serves the API without scheduling:
    a session created through it is placed and started by the leader, and both say who
    leads."""
    first, second = _two(tmp_path, store_url, pass_interval=60.0)
    async with started_manager(first), started_manager(second):
        assert (first.leadership.leading, second.leadership.leading) == (True, False)
        made = await second.create(SMALL, "alice")
        # Woken by the store's event, not by a periodic pass (a minute away).
        running = await second.wait_for(made.id, {Status.RUNNING}, timeout=30)
        assert running.status is Status.RUNNING
        assert first.scheduling.stats and not second.scheduling.stats  # no pass but its
        for mgr in (first, second):
            view = await mgr.leadership.view()
            assert view["leader"]["replica"] == "first"
            assert view["replica"] == mgr.replica_name
            assert view["leader"]["epoch"] >= 1


async def test_a_stopped_leader_hands_the_store_to_another_at_once(
    tmp_path: Path, store_url: str
) -> None:
    """A clean stop releases the lease: the other manager leads at its next try (a third
    of the lease time), not once the lease would have lapsed; it schedules, and a third
    that starts later follows."""
    first, second = _two(tmp_path, store_url, lease_ttl=6.0)
    await first.start()
    try:
        async with started_manager(second):
            assert not second.leadership.leading
            await first.stop()
            stopped = await second.leadership.view()
            await until("the second to lead", _leads(second), timeout=15)
            # Released at once: not first's any more (a lapse would show first for 6 s).
            assert stopped["leader"]["replica"] in (None, "second"), stopped
            made = await second.create(SMALL, "alice")
            assert (await second.wait_for(made.id, {Status.RUNNING}, timeout=30)).status
            third = make_manager(tmp_path, "local", store_url=store_url, replica_name="third")
            async with started_manager(third):
                assert not third.leadership.leading
                assert (await third.leadership.view())["leader"]["replica"] == "second"
    finally:
        await first.stop()


def _leads(mgr: BaiSessionManager) -> Any:
    async def check() -> bool:
        return mgr.leadership.leading

    return check


async def test_a_heartbeat_any_manager_receives_keeps_the_server_alive(
    tmp_path: Path, store_url: str
) -> None:
    """Remote Jupyter servers' heartbeats go to whichever replica the load balancer picks:
    the leader's server watch counts the ones the other received (through the store)."""
    first, second = _two(tmp_path, store_url, server_gone_timeout=2.0, note_interval=0.2)
    async with started_manager(first), started_manager(second):

        async def beat() -> None:
            while True:
                second.server_alive("alice", "live")
                await asyncio.sleep(0.3)

        beating = asyncio.ensure_future(beat())
        try:
            live = await second.create(SMALL, "alice", meta={"jupyter_server": "live"})
            gone = await second.create(SMALL, "alice", meta={"jupyter_server": "dead"})
            ended = await first.wait_for(gone.id, {Status.TERMINATED, Status.CANCELLED}, 30)
            assert ended.status_info == "server-gone"
            await asyncio.sleep(3)  # past the grace period, beating through the other
            assert (await first.get(live.id)).status in (Status.RUNNING, Status.PENDING)
        finally:
            beating.cancel()
        ended = await first.wait_for(live.id, {Status.TERMINATED, Status.CANCELLED}, 30)
        assert ended.status_info == "server-gone"


_LEADER = """
import asyncio, sys
from traitlets.config import Config
from bai_jupyter.manager import BaiSessionManager

async def main():
    mgr = BaiSessionManager(
        backend="docker", store_url=sys.argv[1], replica_name="doomed", lease_ttl=1.5,
        pass_interval=0.5, data_folders_root=sys.argv[2],
    )
    await mgr.start()
    print("leads" if mgr.leadership.leading else "follows", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.docker
async def test_a_killed_leaders_half_started_session_is_started_again_by_the_next(
    tmp_path: Path, kernel_image: str
) -> None:
    """kill -9 of the leader while a cluster session is CREATING: the other manager leads
    once the lease lapses, removes what was half made, starts the session again on the
    same agent (history: SCHEDULED 'handover') and it runs with one container per kernel."""
    store_url = f"sqlite:///{tmp_path}/store.sqlite"
    leader = await asyncio.create_subprocess_exec(
        *[sys.executable, "-c", textwrap.dedent(_LEADER), store_url, str(tmp_path / "f")],
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert leader.stdout is not None
        assert (await leader.stdout.readline()).strip() == b"leads"
        heir = make_manager(
            tmp_path, "docker", store_url=store_url, replica_name="heir", lease_ttl=1.5
        )
        async with started_manager(heir):
            assert not heir.leadership.leading
            made = await heir.create({**SMALL, "cluster_size": 2}, "alice")

            async def creating() -> bool:
                return (await heir.get(made.id)).status is Status.CREATING

            await until("the session to be CREATING", creating, timeout=60, interval=0.02)
            leader.send_signal(signal.SIGKILL)
            await leader.wait()
            await until("the heir to lead", _leads(heir), timeout=15)
            running = await heir.wait_for(made.id, {Status.RUNNING}, timeout=120)
            assert running.status is Status.RUNNING
            history = [(h.status, h.info) for h in running.status_history]
            assert (Status.SCHEDULED, "handover") in history
            found = docker_client().containers.list(
                filters={"label": f"ai.backend.bai-jupyter.session-id={made.id}"}
            )
            assert sorted(c.status for c in found) == ["running", "running"]
            result = await heir.exec(made.id, ["hostname"], kernel="sub1")
            assert result.exit_code == 0
    finally:
        if leader.returncode is None:
            leader.kill()
            await leader.wait()
