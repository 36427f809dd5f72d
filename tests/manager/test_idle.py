"""Idle rules on real sessions (Docker containers and local processes), with short timeouts.

One manager, four owners, each under another rule: the resource group's
``idle_timeout``, a user's policy that lifts it and sets a utilization rule
instead, and a Hub group's policy with a lifetime. Code runs in the sessions'
own Jupyter kernels through a real kernel client.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager, skip_or_fail, started_manager
from jupyter_client.asynchronous.client import AsyncKernelClient

from bai_jupyter.idleness import idle_view
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.manager.watchdogs.utilization import CpuWindows
from bai_jupyter.model import ACTIVE, OCCUPYING, Session, SessionResult, Status

pytestmark = pytest.mark.timeout(180)

SMALL = {"cpu": "0.25", "mem": "192m"}
IDLE_TIMEOUT = 3.0
LIFETIME = 4.0
#: alice: no idle timeout, but CPU below 30 % of her slots over 4 s ends a session.
POLICIES = {
    "users": {"alice": {"idle_timeout": 0, "utilization": {"cpu_percent": 30, "window": 4}}},
    "groups": {"batchers": {"session_lifetime": LIFETIME}},
}


@pytest.fixture
async def manager(tmp_path: Path, backend: str) -> AsyncIterator[BaiSessionManager]:
    """Conftest's ``manager`` plus this module's idle rules, checked five times a second."""
    mgr = make_manager(
        tmp_path,
        backend,
        watchdog_interval=0.2,
        resource_groups={"default": {"idle": {"idle_timeout": IDLE_TIMEOUT}}},
        policies=POLICIES,
    )
    async with started_manager(mgr):
        yield mgr


async def _running(mgr: BaiSessionManager, session: Session) -> Session:
    ready = await mgr.wait_for(session.id, {Status.RUNNING}, timeout=90)
    assert ready.status is Status.RUNNING, (ready.status, ready.status_data)
    return ready


async def _kernel(mgr: BaiSessionManager, session_id: str) -> AsyncKernelClient:
    """A Jupyter kernel client of main1's ipykernel (as a notebook's would be)."""
    client = AsyncKernelClient()
    client.load_connection_info((await mgr.get(session_id)).kernels[0].info["connection"])
    client.start_channels(hb=False)  # the heartbeat misses while ipykernel still boots
    try:
        await client.wait_for_ready(timeout=60)
    except RuntimeError as exc:  # it waits as long for a kernel that is gone: say which
        client.stop_channels()
        ended = await mgr.get(session_id)
        raise AssertionError(f"{exc}; the session is {ended.status} {ended.status_info}") from exc
    return client


async def _rules(mgr: BaiSessionManager, session_id: str) -> dict[str, Any]:
    """The idle rules the API shows, once the manager has looked at the session."""
    for _ in range(100):
        shown = idle_view((await mgr.get(session_id)).status_data, 0)
        if shown:
            return shown
        await asyncio.sleep(0.1)
    raise AssertionError(f"no idle rules recorded for {session_id}")


def _state(msg: dict[str, Any]) -> tuple[str | None, str | None]:
    """An iopub message's parent request and, for a status message, the kernel's state."""
    return msg["parent_header"].get("msg_id"), msg["content"].get("execution_state")


async def _ended(mgr: BaiSessionManager, session_id: str) -> Session:
    return await mgr.wait_for(session_id, {Status.TERMINATED}, timeout=60)


#: alice's busy cell: a quarter of a core for good, in CPU time (a loaded host stretches it
#: but never brings it near her bar of 30 % of a 0.25-cpu slot). Never a whole core: on a
#: small host a spinning local kernel starves the other sessions' start-up.
SPIN = (
    "import time\n"
    "while True:\n"
    "    t = time.process_time()\n"
    "    while time.process_time() - t < 0.05: pass\n"
    "    time.sleep(0.15)\n"
)


@pytest.mark.slow
async def test_idle_rules_end_sessions_with_their_reason(manager: BaiSessionManager) -> None:
    req: dict[str, Any] = {"resources": SMALL}
    clients: list[AsyncKernelClient] = []

    async def used_at_once(session: Session, code: str) -> tuple[AsyncKernelClient, str]:
        """Run ``code`` in main1's kernel as soon as the session runs: its idle clock starts
        at RUNNING, and the other sessions may start seconds later on a loaded host."""
        await _running(manager, session)
        client = await _kernel(manager, session.id)
        clients.append(client)
        return client, str(client.execute(code))

    # alice's first kernel computes for good, from as soon as it can: a busy kernel is in
    # use, and its CPU is far above her bar. bob's cell runs longer than his idle timeout.
    spinning, idle, busy_then_idle, job = await asyncio.gather(
        manager.create(req, "alice"),
        manager.create(req, "alice"),
        manager.create(req, "bob"),
        manager.create(
            {**req, "type": "batch", "startup_command": "sleep 60"}, "carol", groups=["batchers"]
        ),
    )
    try:
        _, (bob, cell), *_ = await asyncio.gather(
            used_at_once(spinning, SPIN),
            used_at_once(busy_then_idle, f"import time; time.sleep({IDLE_TIMEOUT + 1.5})"),
            _running(manager, idle),
            _running(manager, job),
        )

        # What applies to whom, and where it came from.
        rules = await _rules(manager, busy_then_idle.id)
        assert rules["idle_timeout"]["source"] == "resource_groups.default.idle"
        assert rules["idle_timeout"]["timeout"] == IDLE_TIMEOUT
        rules = await _rules(manager, job.id)  # a batch job is never idle, but does not last
        assert set(rules) - {"last_activity", "activity"} == {"session_lifetime"}
        assert rules["session_lifetime"]["source"] == "policies.groups.batchers"
        rules = await _rules(manager, spinning.id)
        assert set(rules) - {"last_activity", "activity"} == {"utilization"}
        assert rules["utilization"]["source"] == "policies.users.alice"

        # Each session is looked at as its own clock says (not one after the other).
        try:
            while (await bob.get_shell_msg(timeout=30))["parent_header"]["msg_id"] != cell:
                pass  # replies to the readiness checks
        except queue.Empty:  # say what became of his session
            now = await manager.get(busy_then_idle.id)
            raise AssertionError(
                f"no reply to bob's cell; {now.status} {now.status_info}"
            ) from None
        assert (await manager.get(busy_then_idle.id)).status is Status.RUNNING
        ended = await _ended(manager, busy_then_idle.id)
        assert ended.status_info == "idle-timeout"

        ended = await _ended(manager, idle.id)
        assert ended.status_info == "utilization-idle"
        assert (await manager.get(spinning.id)).status is Status.RUNNING
        assert (await _rules(manager, spinning.id))["utilization"]["cpu_used"] > 30

        done = await _ended(manager, job.id)
        assert done.status_info == "session-lifetime"
        assert done.result is SessionResult.UNDEFINED
        assert idle_view(done.status_data, 0, running=False) == {}
    finally:
        if (await manager.get(spinning.id)).status is Status.RUNNING:
            await manager.signal(spinning.id, signal.SIGINT)  # ends the loop: a quick teardown
        for client in clients:
            client.stop_channels()


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_check_that_read_the_list_before_a_session_ran_keeps_its_kernel_followed(
    manager: BaiSessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle check reads the running sessions, then looks at them. A session that turns
    RUNNING in between has its kernel followed already; the check must not drop that, or
    the cell its user runs at once goes unseen and the session ends as idle under it.

    Here every check's read is made slow, and the first one read before the session ran
    returns once it runs, so the two always cross (on a loaded host they cross by chance).
    """
    listed = manager.core.list_sessions
    #: The session, until a check has read the list before it ran.
    before: list[str] = []

    async def late(owner: str | None = None, statuses: Any = None) -> list[Session]:
        found = await listed(owner, statuses)
        check = statuses is OCCUPYING  # the idle check's read
        running = [s for s in found if s.status in ACTIVE]
        if check and before and not running:
            # Read before the session runs: it turns RUNNING before this check goes on.
            await manager.wait_for(before.pop(), {Status.RUNNING}, timeout=90)
        elif check and running:
            await asyncio.sleep(IDLE_TIMEOUT + 0.5)  # a slow check: the next after the timeout
        return found

    monkeypatch.setattr(manager.core, "list_sessions", late)
    session = await manager.create({"resources": SMALL}, "bob")
    before.append(session.id)
    await _running(manager, session)
    client = await _kernel(manager, session.id)
    try:
        cell = client.execute(f"import time; time.sleep({IDLE_TIMEOUT + 1.5})")
        while (await client.get_shell_msg(timeout=30))["parent_header"]["msg_id"] != cell:
            pass  # replies to the readiness checks
        ran = await manager.get(session.id)
        assert ran.status is Status.RUNNING, (ran.status, ran.status_info)
    finally:
        client.stop_channels()


@pytest.mark.parametrize("backend", ["local"], indirect=True)
async def test_a_check_between_following_a_kernel_and_running_keeps_it_followed(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifecycle follows main1's kernel, then writes RUNNING. A check that reads the
    sessions in between sees it still starting: it must keep that follower, or the cell
    its user runs at once (busy, silent) goes unseen and the session ends as idle under it.

    The watch's own looks are an hour apart; the test makes one at exactly that moment,
    then one a cell later (a follower started then joins after the kernel went busy), then
    looks until the cell is done."""
    mgr = make_manager(
        tmp_path,
        backend,
        watchdog_interval=3600,  # every look below is the test's own
        resource_groups={"default": {"idle": {"idle_timeout": IDLE_TIMEOUT}}},
    )
    follow = mgr.idle_follow.before_running
    crossed: list[str] = []

    async def then_a_check(session: Session) -> None:
        await follow(session)
        await mgr.idle.check()  # between the follower's start and RUNNING
        crossed.append(session.id)

    monkeypatch.setattr(mgr.idle_follow, "before_running", then_a_check)
    async with started_manager(mgr):
        session = await _running(mgr, await mgr.create({"resources": SMALL}, "bob"))
        assert crossed == [session.id]
        client = await _kernel(mgr, session.id)
        try:
            cell = client.execute(f"import time; time.sleep({IDLE_TIMEOUT + 1.5})")
            while _state(await client.get_iopub_msg(timeout=30)) != (cell, "busy"):
                pass  # until the kernel is busy with it: a follower started later misses that
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, "no reply to the cell within 30 s"
                await mgr.idle.check()
                now = await mgr.get(session.id)
                assert now.status is Status.RUNNING, (now.status, now.status_info)
                with contextlib.suppress(queue.Empty):
                    reply = await client.get_shell_msg(timeout=0.2)
                    if reply["parent_header"]["msg_id"] == cell:
                        break
            assert reply["content"]["status"] == "ok"
        finally:
            client.stop_channels()


@pytest.mark.docker
@pytest.mark.slow
async def test_an_sftp_connection_opened_just_before_the_idle_deadline_is_counted(
    tmp_path: Path, kernel_image: str
) -> None:
    """A system session's open SFTP connections are counted every quarter of its idle
    timeout (10 s at most): one opened after the last count and before the deadline is
    seen by one last count before the session would end, and keeps it.

    The watch's own looks are an hour apart here; the test makes them itself: one count
    (nothing open), the connection, the deadline passing, then the look that decides."""
    if shutil.which("sftp") is None:
        skip_or_fail("no sftp client (apt-get install openssh-client)")
    mgr = make_manager(
        tmp_path,
        "docker",
        watchdog_interval=3600,  # every look below is the test's own
        # Long enough to count, connect and look again before it (on a loaded host).
        resource_groups={"default": {"idle": {"idle_timeout": 10}}},
    )
    async with started_manager(mgr):
        files = await _running(
            mgr, await mgr.create({"type": "system", "resources": SMALL}, "dave")
        )
        await mgr.idle.check()  # counts the connections: none
        rules = (await mgr.get(files.id)).status_data["idle"]["rules"]
        deadline = rules["idle_timeout"]["deadline"]

        sftp = files.main.info["sftp"]
        (tmp_path / "key").write_text(sftp["private_key"])
        (tmp_path / "key").chmod(0o600)
        (tmp_path / "known_hosts").write_text(sftp["known_hosts"] + "\n")
        held = await asyncio.create_subprocess_exec(
            "sftp", "-P", str(sftp["port"]), "-i", str(tmp_path / "key"),
            "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            f"{sftp['user']}@{sftp['host']}",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            assert held.stdin is not None and held.stdout is not None
            held.stdin.write(b"pwd\n")  # answered once the connection is up
            line = await asyncio.wait_for(held.stdout.readline(), 30)
            while b"Remote working directory" not in line:
                assert line, "the sftp client ended"
                line = await asyncio.wait_for(held.stdout.readline(), 30)
            assert time.time() < deadline, "the connection came too late for this test"
            await asyncio.sleep(deadline - time.time() + 0.2)

            await mgr.idle.check()  # past the deadline, with a connection open
            await asyncio.sleep(1)  # an end it spawned would have begun
            kept = await mgr.get(files.id)
            assert kept.status is Status.RUNNING, (kept.status, kept.status_info)
            # Noted as use (the store's record is rewritten only when a deadline moves
            # by more than the interval: here, never).
            used_at, used = mgr.activity.last(files.id) or (0.0, "")
            assert used == "sftp" and used_at > deadline, mgr.activity.last(files.id)
        finally:
            held.kill()
            await held.wait()

        # Closed, the next look past the (moved) deadline ends it as idle.
        await asyncio.sleep(max(0.0, used_at + 10 - time.time()) + 0.2)
        await mgr.idle.check()
        ended = await _ended(mgr, files.id)
        assert ended.status_info == "idle-timeout"


def test_utilization_says_when_a_quiet_session_would_end() -> None:
    """The deadline shown is the moment the rule fires if the session uses nothing more."""
    windows = CpuWindows()
    for second in range(5):  # an idle session: no CPU at all
        windows.add("s", 100.0 + second, 7.0, keep=10)
    assert windows.verdict("s", cores=1, percent=5, window=3).deadline == pytest.approx(104.0)
    busy = CpuWindows()
    for second in range(5):  # one full core
        busy.add("s", 100.0 + second, float(second), keep=10)
    # Quiet from now on, it falls below 50 % of the window 1.5 s after the last sample.
    assert busy.verdict("s", cores=1, percent=50, window=3).deadline == pytest.approx(105.5)
