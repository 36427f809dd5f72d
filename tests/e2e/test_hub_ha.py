"""Two ``bai-jupyter manager`` replicas on one PostgreSQL behind a real HAProxy, under the
real Hub (the guide's "HA and scale" set-up, ``harness.haproxy``).

One Hub, HAProxy and pair of replicas serve every test here, in file order; the store
is a PostgreSQL cluster of this module's own (the last test restarts it). Kernels run
on the real Docker engine.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from harness.haproxy import PREFIX, REPLICA_HEADER, HaHub, RawEvents, running_ha_hub, wait_serving
from harness.pg import Postgres, running_postgres
from tornado.httpclient import AsyncHTTPClient

from bai_jupyter.kernel_plan import LABEL_SCOPE, LABEL_SESSION
from bai_jupyter.model import Session, Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

#: One agent with room for the 20 sessions of the takeover test and the users' kernels.
MANAGER = """
c.BaiSessionManager.agents = [
    {"id": "ha", "backend": "docker", "slots": {"cpu": "4", "mem": "6g"}}
]
c.BaiSessionManager.policies = {"default": {"max_concurrent_sessions": 20, "max_pending": 20}}
"""
SMALL = {"resources": {"cpu": "0.1", "mem": "160m"}}
USERS = ("alice", "bob")


@pytest.fixture(scope="session")
def ha_postgres() -> Iterator[Postgres]:
    with running_postgres() as pg:
        yield pg


@pytest.fixture(scope="session")
def ha(
    tmp_path_factory: pytest.TempPathFactory, ha_postgres: Postgres, kernel_image: str
) -> Iterator[HaHub]:
    store_url = ha_postgres.database("bai_ha")
    with running_ha_hub(tmp_path_factory.mktemp("ha"), store_url, MANAGER) as running:
        for user in USERS:
            running.hub.add_user(user)
        running.hub.add_user("carol", admin=True)
        yield running


def _statuses(history: list[str]) -> list[str]:
    """``history`` without repeats in a row: the transitions."""
    return [s for i, s in enumerate(history) if i == 0 or history[i - 1] != s]


class Follower:
    """One user's event stream through HAProxy, reopened with ``Last-Event-ID``
    whenever it is cut (its replica killed): every session event it got, by session."""

    def __init__(self, ha: HaHub, user: str) -> None:
        self.ha, self.user = ha, user
        self.seen: dict[str, list[tuple[int, str]]] = {}
        self.seqs: list[int] = []
        self.replicas: list[str] = []
        self.cuts = 0
        self._task: asyncio.Task[None] | None = None
        self._stream: RawEvents | None = None

    async def start(self) -> Follower:
        await self._open(None)
        self._task = asyncio.ensure_future(self._run())
        return self

    async def _open(self, last: int | None) -> None:
        # Straight to HAProxy, as users' servers reach the service (BAI_JUPYTER_MANAGER_URL):
        # the Hub's own proxy does not end a stream whose upstream was cut (it hangs).
        url = f"{self.ha.haproxy.url}{PREFIX}bai/api/v1/events"
        deadline = time.monotonic() + 30
        while True:
            try:
                self._stream = await RawEvents(url, self.ha.hub.tokens[self.user], last).open()
                self.replicas.append(self._stream.replica)
                return
            except (OSError, AssertionError):
                # HAProxy answers 503 until its health check has taken the dead one out
                assert time.monotonic() < deadline, f"{self.user}'s stream did not reopen"
                await asyncio.sleep(0.2)

    async def _run(self) -> None:
        while True:
            assert self._stream is not None
            event = await self._stream.events.get()
            if event is None:
                self.cuts += 1
                await self._open(self._stream.last_event_id)
                continue
            if event.get("type") == "reset":
                raise AssertionError(f"{self.user}'s stream lost events: {event}")
            if event.get("type") == "session":
                self.seqs.append(event["seq"])
                entry = (event["seq"], event["status"])
                self.seen.setdefault(event["session_id"], []).append(entry)

    def transitions(self, session_id: str) -> list[str]:
        """The statuses the stream told of ``session_id`` (its failure raised)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()
        return _statuses([status for _, status in self.seen.get(session_id, [])])

    def __repr__(self) -> str:
        return f"<{self.user}'s stream via {self.replicas}, {self.cuts} cuts: {self.seen}>"

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._stream is not None:
            self._stream.close()


async def _replayed(ha: HaHub, user: str, upto: int) -> dict[str, list[tuple[int, str]]]:
    """What an uncut stream of ``user`` tells from the start of the store's log (a resume
    from seq 0) up to ``upto``: each session's (seq, status) events."""
    stream = await RawEvents(
        f"{ha.haproxy.url}{PREFIX}bai/api/v1/events", ha.hub.tokens[user], 0
    ).open()
    told: dict[str, list[tuple[int, str]]] = {}
    try:
        while True:
            event = await asyncio.wait_for(stream.events.get(), 30)
            assert event is not None and event.get("type") != "reset", event
            if event.get("type") == "session":
                told.setdefault(event["session_id"], []).append((event["seq"], event["status"]))
            if event.get("seq", 0) >= upto:
                return told
    finally:
        stream.close()


async def _until(what: object, check: Callable[[], Any], ha: HaHub, timeout: float = 120) -> Any:
    """Poll ``check`` (a function, or a coroutine function) until it returns something true;
    ``what`` is formatted when it fails (so it may be an object that says its state)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        assert time.monotonic() < deadline, f"{what}:\n{ha.tail()}"
        await asyncio.sleep(0.2)


def _history(session: Session) -> list[str]:
    return [h.status.value for h in session.status_history]


async def _end_all(ha: HaHub) -> None:
    admin = ha.hub.service("carol")
    for session in await admin.list_sessions(everyone=True):
        if not session.status.is_terminal:
            await admin.destroy(session.id)


async def test_the_api_and_a_cut_event_stream_resume_through_haproxy_missing_nothing(
    ha: HaHub,
) -> None:
    """Requests reach both replicas through the Hub and HAProxy; a stream whose replica is
    killed comes back through HAProxy with Last-Event-ID and tells every transition."""
    answered = set()
    for _ in range(6):
        reply = await ha.hub.fetch("GET", "services/bai-jupyter/bai/api/v1/sessions", "alice")
        assert reply.code == 200, reply.body
        answered.add(reply.headers[REPLICA_HEADER])
    assert answered == {r.name for r in ha.replicas}
    follower = await Follower(ha, "alice").start()
    victim = ha.replica(follower.replicas[0])
    try:
        session = await ha.hub.service("alice").create(
            {**SMALL, "type": "batch", "startup_command": "sleep 3"}
        )
        await _until(
            "alice's stream tells her new session", lambda: session.id in follower.seen, ha
        )
        victim.kill()
        done = await ha.hub.service("alice").wait_for(session.id, {Status.TERMINATED}, timeout=120)
        await _until(
            ("the stream tells the end", follower),
            lambda: follower.transitions(session.id)[-1:] == ["TERMINATED"],
            ha,
        )
        assert follower.cuts == 1 and follower.replicas[1] != victim.name
        # Every event of the session the store logged, once and in order, none missed.
        replay = await _replayed(ha, "alice", follower.seqs[-1])
        assert follower.seen[session.id] == replay[session.id], (follower, replay)
        assert follower.transitions(session.id)[0] == "PENDING"
        assert _history(done)[-1] == "TERMINATED"
        assert follower.seqs == sorted(set(follower.seqs))  # none twice, in order
    finally:
        follower.close()
        if not victim.alive:
            victim.start()
            await asyncio.to_thread(wait_serving, victim)


async def test_a_restarting_replica_answers_nothing_before_it_can_serve(ha: HaHub) -> None:
    """A replica killed and started again opens its port only once its manager has started:
    a health check that finds it listening may send it requests (no 503 'not started')."""
    replica = ha.replicas[-1]
    headers = {"Authorization": f"token {ha.hub.tokens['bob']}"}
    client = AsyncHTTPClient()
    replica.kill()
    replica.start()
    codes: list[int] = []
    deadline = time.monotonic() + 90
    while not codes or codes[-1] != 200:
        assert time.monotonic() < deadline, f"{replica.name} never served:\n{replica.tail()}"
        assert replica.alive, replica.tail()
        try:
            reply = await client.fetch(
                f"{replica.url}bai/api/v1/sessions", headers=headers, raise_error=False
            )
            codes.append(reply.code)
        except OSError:
            pass  # not listening yet
        await asyncio.sleep(0.02)
    assert set(codes) == {200}, (codes, replica.tail())
    # ... and HAProxy's health check takes it back: both serve again.
    url = f"{ha.haproxy.url}{PREFIX}bai/api/v1/sessions"
    seen: set[str] = set()

    async def both() -> bool:
        reply = await client.fetch(url, headers=headers)
        seen.add(reply.headers[REPLICA_HEADER])
        return seen == {r.name for r in ha.replicas}

    await _until("HAProxy sends requests to both replicas", both, ha, timeout=30)


def _goto(page: Any, url: str) -> Any:
    """``page.goto``, again when Chromium aborted it because the host's network changed
    (ERR_NETWORK_CHANGED: Docker adds and removes interfaces for other tests' kernels)."""
    for attempt in range(3):
        try:
            return page.goto(url)
        except Exception as exc:
            if "ERR_NETWORK_CHANGED" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def test_a_browser_signed_in_on_a_killed_replica_stays_signed_in_on_the_other(
    ha: HaHub, browser: Any
) -> None:
    """OAuth through the Hub and HAProxy: the browser keeps to one replica (HAProxy's
    cookie); when that one is killed, the other takes its requests and knows the sign-in
    (one cookie secret): no new sign-in, no redirect."""
    page = browser.new_page()
    _goto(page, f"{ha.hub.url}hub/login")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "any")
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url("**/user/alice/**", timeout=60_000)
    api = f"{ha.hub.service_url()}bai/api/v1/sessions"
    _goto(page, f"{ha.hub.service_url()}login?next={urlsplit(api).path}")
    page.wait_for_url(api, timeout=60_000)
    answered = set()
    for _ in range(4):
        reply = _goto(page, api)
        assert reply is not None and reply.status == 200, page.content()[:500]
        answered.add(reply.headers[REPLICA_HEADER.lower()])
    (kept,) = answered  # one replica for the browser
    victim = ha.replica(kept)
    victim.kill()
    try:
        reply = _goto(page, api)
        assert reply is not None and reply.status == 200, page.content()[:500]
        assert reply.request.redirected_from is None  # no new sign-in on the other replica
        assert reply.headers[REPLICA_HEADER.lower()] != kept
        assert all(s["owner"] == "alice" for s in json.loads(page.inner_text("body"))["sessions"])
    finally:
        victim.start()
        wait_serving(victim)


def _store_id(store_url: str) -> str:
    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            return str(
                conn.exec_driver_sql("SELECT value FROM bai_meta WHERE key = 'store_id'").scalar()
            )
    finally:
        engine.dispose()


def _containers(store_id: str) -> dict[str, int]:
    """The store's containers on the engine: session id → how many."""
    listed = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label={LABEL_SCOPE}={store_id}",
            "--format",
            "{{json .Labels}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, int] = {}
    for line in listed.splitlines():
        labels = dict(item.split("=", 1) for item in json.loads(line).split(",") if "=" in item)
        found[labels[LABEL_SESSION]] = found.get(labels[LABEL_SESSION], 0) + 1
    return found


async def _kernel(ha: HaHub, user: str) -> str:
    """A running bai-py Jupyter kernel in ``user``'s server: its id (its session RUNNING)."""
    reply = await ha.hub.fetch("POST", f"user/{user}/api/kernels", user, {"name": "bai-py"})
    assert reply.code == 201, (reply.body, ha.tail())
    kernel_id: str = json.loads(reply.body)["id"]

    async def running() -> bool:
        sessions = await ha.hub.service(user).list_sessions()
        return any(
            s.meta.get("jupyter_kernel_id") == kernel_id and s.status is Status.RUNNING
            for s in sessions
        )

    await _until(f"{user}'s kernel runs", running, ha)
    return kernel_id


async def test_a_killed_leader_is_replaced_within_5_s_losing_no_session_event_or_cell(
    ha: HaHub,
) -> None:
    """kill -9 of the leader while 20 sessions start and alice and bob have cells in running
    kernels: the other replica leads within 5 s; every session runs once, on slots that are
    not over-allocated, no container is orphaned, streams resume, the kernels answer."""
    kernels = {user: await _kernel(ha, user) for user in USERS}
    for user, kernel_id in kernels.items():
        assert "ok" in await ha.hub.run_cell(user, kernel_id, "x = 21\nprint('ok')")
    leader = await asyncio.to_thread(ha.wait_leader)
    followers = {user: await Follower(ha, user).start() for user in USERS}
    for _ in range(8):  # bob's stream on the leader (round-robin: one of the next few)
        if followers["bob"].replicas[0] == leader.name:
            break
        followers["bob"].close()
        followers["bob"] = await Follower(ha, "bob").start()
    assert followers["bob"].replicas[0] == leader.name
    try:
        created = await asyncio.gather(
            *(ha.hub.service(USERS[i % 2]).create(dict(SMALL)) for i in range(20))
        )
        leader.kill()
        killed = time.monotonic()
        successor = await asyncio.to_thread(ha.wait_leader, 30)
        took = time.monotonic() - killed
        assert successor is not leader
        assert took < 5, f"the other replica led after {took:.1f} s:\n{ha.tail()}"
        # A cell in each running kernel goes on (its state kept) while the leader is gone.
        for user, kernel_id in kernels.items():
            assert "42" in await ha.hub.run_cell(user, kernel_id, "print(x * 2)")
        ended = {}
        for session in created:
            user = session.owner
            ended[session.id] = await ha.hub.service(user).wait_for(
                session.id, {Status.RUNNING}, timeout=240
            )
        for session_id, session in ended.items():
            history = _history(session)
            assert session.status is Status.RUNNING, (session_id, history, ha.tail())
            assert history.count("RUNNING") == 1, (session_id, history)
            assert len(session.kernels) == 1 and session.kernels[0].agent_id == "ha"
        # No slot held twice: the agent's occupied slots are what its live kernels hold.
        (agent,) = [a for a in (await ha.hub.service("carol").agents()) if a["id"] == "ha"]
        live = [k for k in agent["kernels"] if k["session_id"] in ended]
        assert sorted(k["session_id"] for k in live) == sorted(ended)
        # No container orphaned: every container of the store belongs to a live session,
        # once per kernel.
        everyone = await ha.hub.service("carol").list_sessions(everyone=True)
        live_kernels = {
            s.id: len(s.kernels) for s in everyone if not s.status.is_terminal and s.kernels
        }
        assert _containers(_store_id(ha.hub.store_url)) == live_kernels
        # Each user's stream told each of their sessions' transitions, none missed.
        for session_id, session in ended.items():
            follower = followers[session.owner]
            told = functools.partial(follower.transitions, session_id)
            await _until(f"{session.owner}'s stream tells {session_id}", told, ha)
            await _until(
                f"{session.owner}'s stream tells {session_id} RUNNING",
                lambda: told()[-1:] == ["RUNNING"],  # noqa: B023 (awaited in this iteration)
                ha,
            )
            assert told()[0] == "PENDING"
        # ... every event the store logged of them, once and in order: what an uncut replay
        # from the store's log tells.
        for user, follower in followers.items():
            replay = await _replayed(ha, user, follower.seqs[-1])
            for session_id, session in ended.items():
                if session.owner == user:
                    assert follower.seen[session_id] == replay[session_id], (follower, replay)
        assert followers["bob"].cuts == 1  # it was on the leader
    finally:
        for follower in followers.values():
            follower.close()
        for user, kernel_id in kernels.items():
            await ha.hub.fetch("DELETE", f"user/{user}/api/kernels/{kernel_id}", user)
        await _end_all(ha)
        if not leader.alive:
            leader.start()
            await asyncio.to_thread(wait_serving, leader)


async def test_the_replicas_survive_a_postgresql_restart_and_a_leader_starts_sessions(
    ha: HaHub, ha_postgres: Postgres
) -> None:
    """PostgreSQL stopped and started under both replicas: both live, one leads, and new
    sessions start (placed by that leader)."""
    await asyncio.to_thread(ha.wait_leader)
    await asyncio.to_thread(ha_postgres.stop, "fast")
    await asyncio.sleep(2)  # the replicas meet the store gone (their lease renewals fail)
    await asyncio.to_thread(ha_postgres.start)
    try:
        assert all(r.alive for r in ha.replicas), ha.tail()
        await asyncio.to_thread(ha.wait_leader, 60)
        session = await ha.hub.service("bob").create(dict(SMALL))
        running = await ha.hub.service("bob").wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert running.status is Status.RUNNING, (_history(running), ha.tail())
        assert all(r.alive for r in ha.replicas), ha.tail()
    finally:
        await _end_all(ha)
