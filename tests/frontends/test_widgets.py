"""The session views: the model from recorded and from real events, the widgets on top."""

from __future__ import annotations

import asyncio
import html
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from harness.server import Server, serving, stdout_of
from test_magics import SMALL_SLOTS

from bai_jupyter.client import RemoteManager
from bai_jupyter.errors import BaiError
from bai_jupyter.loop_thread import LoopThread
from bai_jupyter.model import Status, pending_reason
from bai_jupyter.request import Template
from bai_jupyter.sessions_model import (
    LiveSessions,
    SessionRow,
    SessionsModel,
    build_request,
    check_request,
    kernels_summary,
    queue_positions,
    why_pending,
)
from bai_jupyter.text import cluster_text
from bai_jupyter.usage_widget import UsageWidget
from bai_jupyter.widgets import MAX_LIVE_VIEWS, Launcher, SessionCard, SessionsView, live_view


def session_json(sid: str, status: str = "PENDING", **extra: Any) -> dict[str, Any]:
    """A session as ``GET sessions/{id}`` gives it (the fields the views read)."""
    scheduler = (extra.get("status_data") or {}).get("scheduler")
    return {
        "id": sid,
        "name": None,
        "status": status,
        "status_info": None,
        "status_data": {},
        "pending_reason": pending_reason(scheduler),
        "spec": {"type": "interactive", "resources": {"cpu": "1", "mem": "1073741824"}},
        "kernels": [
            {"hostname": "main1", "status": status},
            {"hostname": "sub1", "status": status},
        ],
        "result": "UNDEFINED",
        "exit_code": None,
        "created_at": float(len(sid)),
        "services": [],
        **extra,
    }


QUEUE = {
    "default": {"queue": [{"position": 1, "session_id": "bb"}, {"position": 2, "mine": False}]},
    "gpu": {"queue": [{"position": 1, "session_id": "ccc"}]},
}
WHY = {"scheduler": {"msg": "needs cpu=8 but the largest agent has 4 free", "retries": 3}}


# --- the model, from recorded replies and events ------------------------------------------------


def test_model_follows_recorded_events() -> None:
    model = SessionsModel()
    changes: list[int] = []
    model.on_change(lambda: changes.append(1))
    model.load(
        [
            session_json("a", "RUNNING"),
            session_json("bb", status_data=WHY),
            session_json("ccc"),
        ],
        QUEUE,
    )
    rows = model.rows
    assert (rows["bb"].queue_position, rows["ccc"].queue_position) == (1, 1)
    assert rows["bb"].why_pending == "needs cpu=8 but the largest agent has 4 free"
    assert rows["a"].queue_position is None and rows["a"].resources == "cpu=1 mem=1g"

    kernels = {"main1": "PREPARING", "sub1": "SCHEDULED"}
    event = {"type": "session", "session_id": "bb", "status": "SCHEDULED", "kernels": kernels}
    assert model.apply_event(event)
    assert (rows["bb"].status, rows["bb"].phase, rows["bb"].queue_position) == (
        "SCHEDULED",
        "starting",
        None,
    )
    assert rows["bb"].why_pending is None
    assert kernels_summary(rows["bb"].kernels) == "main1:PREPARING sub1:SCHEDULED"
    assert not model.apply_event({**event, "session_id": "unknown"})

    model.update(session_json("a", "TERMINATED", status_info="user-requested"))
    assert rows["a"].ended and rows["a"].outcome == "TERMINATED (user-requested)"
    assert [r.id for r in model.visible()] == ["bb", "ccc"]
    assert [r.id for r in model.visible(all_states=True)] == ["a", "bb", "ccc"]
    model.update(session_json("dddd", "TERMINATED", result="SUCCESS", exit_code=0))
    assert model.rows["dddd"].outcome == "SUCCESS (exit code 0)"
    model.set_queue({})
    assert model.rows["ccc"].queue_position is None
    assert len(changes) == 5  # load, event, two updates, queue


def test_why_pending_and_queue_positions() -> None:
    record = {
        "scheduler": {
            "failed_predicates": [{"name": "dependencies", "msg": "waiting for x to succeed"}],
            "msg": "waiting for x to succeed",
        }
    }
    assert why_pending(session_json("a", status_data=record)) == "waiting for x to succeed"
    assert why_pending(session_json("a")) is None
    assert why_pending(session_json("a", "RUNNING", status_data=record)) is None
    # The views show the server's sentence; they do not read the record themselves.
    assert why_pending(session_json("a", pending_reason="as the server says")) == (
        "as the server says"
    )
    assert queue_positions(QUEUE) == {"bb": 1, "ccc": 1}
    assert kernels_summary({"main1": "RUNNING", "sub1": "RUNNING"}) == "main1,sub1 RUNNING"


def test_requests_are_checked_by_the_servers_rules() -> None:
    request = build_request(cluster_size=2, cpu=" 2 ", mem="", image="", name="job")
    assert request == {
        "type": "interactive",
        "cluster_size": 2,
        "cluster_mode": "single-node",
        "name": "job",
        "resources": {"cpu": "2"},
    }
    assert check_request(request) is None
    assert check_request({**request, "cluster_size": 0}) == (
        "cluster_size: must be an integer from 1 to 64, got 0"
    )
    batch = build_request(type="batch")
    assert check_request(batch) == (
        "startup_command: required when type is batch: give the command to run in main1"
    )
    template = Template("train", {"startup_command": "python train.py"})
    assert check_request(batch, template) is None
    assert check_request(build_request(mem="2x"), None) is not None


def test_launcher_validates_as_you_type() -> None:
    templates = [Template("big", {"type": "batch", "cluster_size": 4, "resources": {"cpu": "8"}})]
    launcher = Launcher(RemoteManager("http://127.0.0.1:9/"), LoopThread(), templates)
    assert not launcher.create.disabled and launcher.message.value == ""
    launcher.cluster_size.value = 0
    assert launcher.create.disabled
    assert "cluster_size: must be an integer from 1 to 64, got 0" in launcher.message.value
    launcher.cluster_size.value = 3
    launcher.mem.value = "-1g"
    assert "resources.mem: amount must not be negative" in launcher.message.value
    launcher.mem.value = "1g"
    assert not launcher.create.disabled
    launcher.template.value = "big"  # fills the form from the template
    assert (launcher.type.value, launcher.cluster_size.value, launcher.cpu.value) == (
        "batch",
        4,
        "8",
    )
    assert "startup_command: required" in launcher.message.value
    launcher.startup_command.value = "python train.py"
    assert not launcher.create.disabled


def test_launcher_offers_the_session_types_the_labextension_dialog_offers() -> None:
    dialog = (Path(__file__).parents[2] / "labextension" / "src" / "dialog.ts").read_text()
    offered = re.findall(r"\['(\w+)', '\1 \(", dialog)
    launcher = Launcher(RemoteManager("http://127.0.0.1:9/"), LoopThread(), [])
    assert list(launcher.type.options) == offered == ["interactive", "batch", "system"]


def full_session(sid: str, image: str = "bai-kernel:test") -> dict[str, Any]:
    """A running session as ``GET sessions/{id}`` gives it, with what ``--text`` prints."""
    data = session_json(sid, "RUNNING", name="train")
    data["spec"].update(image=image, cluster_mode="single-node", resource_group="default")
    data["kernels"] = [
        {"hostname": "main1", "role": "main", "status": "RUNNING", "slots": {"cpu": "1"}}
    ]
    return data


def test_status_widget_shows_what_its_text_form_prints() -> None:
    """``%bai status SESSION``'s card holds ``--text``'s lines; a local session's image is
    no part of it (its kernels are processes); the view of all says the counts line."""
    remote, runner = RemoteManager("http://127.0.0.1:9/"), LoopThread()
    row = SessionRow.from_json(full_session("a" * 32))
    docker = [{"id": "docker", "backend": "docker", "resource_group": "default"}]
    card = SessionCard(row, remote, runner, agents=docker)
    text = cluster_text(remote, row.data)
    assert html.unescape(card.detail.value) == f"<pre>{text}</pre>"
    assert "· single-node · image bai-kernel:test" in text and "main1  main" in text
    local = [{"id": "local", "backend": "local", "resource_group": "default"}]
    assert "image" not in SessionCard(row, remote, runner, agents=local).detail.value

    view = SessionsView(remote, runner)  # nothing answers there: only the recorded rows
    try:
        view.model.load([full_session("a" * 32), session_json("b" * 32)], QUEUE)
        assert view.counts.value == "2 live session(s), 1 pending"
    finally:
        view.close()


class _Ends:
    """What a card asks of its manager: only ``destroy``, recorded."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    async def destroy(self, key: str) -> Any:
        self.ended.append(key)
        raise BaiError("recorded")


def test_terminate_asks_first_and_says_when_it_is_this_notebooks_own_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The big red button under %bai status ended the notebook's own session at once."""
    runner = LoopThread()
    remote = _Ends()
    own = SessionRow.from_json(session_json("a" * 32, "RUNNING"))
    monkeypatch.setenv("BACKENDAI_SESSION_ID", own.id)
    card = SessionCard(own, remote, runner)  # type: ignore[arg-type]
    card.terminate.click()
    assert remote.ended == [] and card.question.layout.display != "none"
    assert "own kernel: its state is lost" in card.message.value
    assert card.confirm.description == "Yes, terminate" and card.terminate.disabled
    card.keep.click()  # changed their mind: nothing happens
    assert remote.ended == [] and card.question.layout.display == "none"
    assert not card.terminate.disabled and card.message.value == ""
    card.terminate.click()
    card.confirm.click()
    deadline = time.monotonic() + 10
    while not remote.ended and time.monotonic() < deadline:
        time.sleep(0.05)
    assert remote.ended == [own.id]
    other = SessionCard(SessionRow.from_json(session_json("b" * 32)), remote, runner)  # type: ignore[arg-type]
    other.terminate.click()
    assert other.confirm.description == "Yes, cancel"  # a pending one is cancelled
    assert "own kernel" not in other.message.value


# --- live, against a real server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def server(kernel_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("bai-widgets")) as running:
        yield running


def wait_until(model: SessionsModel, holds: Callable[[], bool], what: str) -> None:
    """Block until the model's state satisfies ``holds`` (checked on every change)."""
    reached = threading.Event()

    def check() -> None:
        if holds():
            reached.set()

    model.on_change(check)
    check()
    assert reached.wait(120), f"never saw: {what}"


@pytest.mark.slow
@pytest.mark.docker
def test_live_view_follows_a_session_from_creation_to_termination(server: Server) -> None:
    remote = server.client()
    runner = LoopThread()
    spec = {"resources": SMALL_SLOTS, "service_ports": ["web:http:8080"]}
    runner.run(remote.put_template("web", spec))
    view = SessionsView(remote, runner)
    try:
        loaded = threading.Event()
        view.model.on_change(loaded.set)
        assert loaded.wait(60), "the first listing never came"
        launcher = Launcher(remote, runner, runner.run(remote.list_templates()))
        launcher.template.value = "web"
        launcher.name.value = "widget-live"
        created = launcher.submit()
        assert created is not None
        session = created.result(60)
        assert f"session {session.id} created" in launcher.message.value

        def row_status(status: str) -> Callable[[], bool]:
            def holds() -> bool:
                row = view.model.rows.get(session.id)
                return row is not None and row.status == status

            return holds

        wait_until(view.model, row_status("RUNNING"), "RUNNING")
        row = view.model.rows[session.id]
        assert row.kernels == {"main1": "RUNNING"} and row.name == "widget-live"
        card = view.cards[session.id]
        link = f'<a href="/bai/sessions/{session.id}/proxy/web/"'
        assert link in card.info.value and "RUNNING" in card.info.value
        assert "widget-live" in view.table.value

        ended = card.end().result(60)
        assert ended.status is Status.TERMINATED
        wait_until(view.model, row_status("TERMINATED"), "TERMINATED")
        assert view.model.rows[session.id].outcome == "TERMINATED (user-requested)"
        wait_until(view.model, lambda: session.id not in view.cards, "the card removed")
        assert "no sessions" in view.table.value
    finally:
        view.close()


def test_older_live_views_stop_updating(server: Server) -> None:
    """Each view holds an event stream; a cleared output does not close it, so the
    oldest beyond MAX_LIVE_VIEWS stop and say so."""
    runner = LoopThread()
    views = [live_view(SessionsView(server.client(), runner)) for _ in range(MAX_LIVE_VIEWS + 1)]
    try:
        assert not views[0].updating
        assert "a newer view took over" in views[0].status.value
        assert all(view.updating for view in views[1:])
    finally:
        for view in views:
            view.close()
    assert not any(view.updating for view in views)


@pytest.mark.slow
@pytest.mark.docker
def test_live_model_shows_the_queue_position_and_why(server: Server) -> None:
    """Driven on the test's own event loop: a dependant waits, then is cancelled."""

    async def scenario() -> None:
        remote = server.client()
        model = SessionsModel()
        feed = asyncio.ensure_future(LiveSessions(remote, model).run())
        changed = asyncio.Event()
        model.on_change(changed.set)
        try:
            await changed.wait()  # the first listing
            first = await remote.create({"resources": SMALL_SLOTS})
            second = await remote.create({"resources": SMALL_SLOTS, "depends_on": [first.id]})

            async def until(holds: Callable[[], bool]) -> None:
                while not holds():
                    changed.clear()
                    await asyncio.wait_for(changed.wait(), 120)

            await until(lambda: first.id in model.rows and model.rows[first.id].status == "RUNNING")
            await until(lambda: model.rows.get(second.id) is not None)
            waiting = model.rows[second.id]
            await until(lambda: waiting.queue_position == 1 and waiting.why_pending is not None)
            assert f"waiting for session {first.id[:8]} (" in (waiting.why_pending or "")
            await remote.destroy(first.id)
            await until(lambda: model.rows[second.id].status == "CANCELLED")
            assert model.rows[second.id].outcome == "CANCELLED (dependency-failed)"
        finally:
            feed.cancel()
            await asyncio.gather(feed, return_exceptions=True)

    asyncio.run(scenario())


class _Link:
    """A TCP forwarder to ``port`` that the test can cut: open connections are closed and
    new ones refused until it is mended (a manager replica that goes, then comes back)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.server: asyncio.Server | None = None
        self.listen_port = 0
        self.pipes: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.listen_port)
        self.listen_port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pipes.add(writer)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.pipes.add(up_writer)
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        except OSError:  # one side went: the other goes with it
            pass
        finally:
            writer.close()

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()
        pipes, self.pipes = self.pipes, set()
        for pipe in pipes:
            pipe.close()
        await asyncio.gather(*(p.wait_closed() for p in pipes), return_exceptions=True)


class _Recording(SessionsModel):
    """A model that remembers the status of every event it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def apply_event(self, event: Mapping[str, Any]) -> bool:
        self.seen.append(str(event.get("status")))
        return super().apply_event(event)


@pytest.mark.docker
def test_a_live_view_whose_stream_is_cut_resumes_and_misses_nothing(server: Server) -> None:
    """Its server (a replica behind a load balancer) goes away for a moment while a
    session starts and ends: the view reconnects after its last event and shows the end,
    and every state the session passed through reached the model."""

    async def scenario() -> None:
        link = _Link(int(server.url.rsplit(":", 1)[1].strip("/")))
        await link.open()
        remote = RemoteManager(f"http://127.0.0.1:{link.listen_port}/", server.token)
        model = _Recording()
        changed = asyncio.Event()
        model.on_change(changed.set)
        feed = asyncio.ensure_future(LiveSessions(remote, model).run())
        direct = server.client()
        try:
            await asyncio.wait_for(changed.wait(), 60)  # the first listing
            made = await direct.create({"resources": SMALL_SLOTS})
            while made.id not in model.rows:
                changed.clear()
                await asyncio.wait_for(changed.wait(), 60)
            await link.cut()
            await direct.wait_for(made.id, {Status.RUNNING}, timeout=120)
            await direct.destroy(made.id)
            await asyncio.sleep(1.0)  # the view has tried and failed to reconnect
            assert not feed.done()
            await link.open()
            while "TERMINATED" not in model.seen:  # replayed, not only read again
                changed.clear()
                await asyncio.wait_for(changed.wait(), 30)
            assert {"RUNNING", "TERMINATING"} <= set(model.seen), model.seen
            assert model.rows[made.id].status == "TERMINATED"
            assert not feed.done()
        finally:
            feed.cancel()
            await asyncio.gather(feed, return_exceptions=True)
            await link.cut()

    asyncio.run(scenario())


#: Run in main1, as ``%bai sessions`` does there: a live model fed with the kernel's token.
_FOLLOW = """
import time
from bai_jupyter.loop_thread import LoopThread
from bai_jupyter.client import find_manager
from bai_jupyter.sessions_model import LiveSessions, SessionsModel
model = SessionsModel()
feed = LoopThread().submit(LiveSessions(find_manager(), model).run())
"""
#: Then: until the session made elsewhere is in the view with ``status`` (or 60 s).
_SEEN = """
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not feed.done():
    row = model.rows.get({sid!r})
    if row is not None and row.status == {status!r}:
        break
    time.sleep(0.2)
print(feed.exception() if feed.done() else model.rows[{sid!r}].status)
"""


@pytest.mark.slow
@pytest.mark.docker
def test_a_kernels_live_view_follows_sessions_its_token_may_only_list(server: Server) -> None:
    """%bai sessions in main1 runs with the kernel's token, which lists the owner's sessions
    but reads only its own one by one: a session made elsewhere (the sidebar) comes into
    its view, and the view goes on (before: "live updates stopped: a kernel token grants
    only its own session")."""

    async def scenario() -> None:
        remote = server.client()
        holder = await remote.create({"resources": SMALL_SLOTS})
        try:
            ready = await remote.wait_for(holder.id, {Status.RUNNING}, timeout=120)
            assert ready.status is Status.RUNNING, ready.status_data
            await stdout_of(server, holder.id, _FOLLOW)
            other = await remote.create({"starts_at": time.time() + 86400})  # not the token's
            seen = await stdout_of(server, holder.id, _SEEN.format(sid=other.id, status="PENDING"))
            assert seen == ["PENDING"], seen
            await remote.destroy(other.id)
            ended = await stdout_of(
                server, holder.id, _SEEN.format(sid=other.id, status="CANCELLED")
            )
            assert ended == ["CANCELLED"], ended
        finally:
            await remote.destroy(holder.id)

    asyncio.run(scenario())


@pytest.mark.slow
@pytest.mark.docker
def test_the_usage_widget_shows_a_running_sessions_usage_live(server: Server) -> None:
    """``%bai status``'s usage table: read at once, then kept current from usage events."""
    remote = server.client()
    runner = LoopThread()
    session = runner.run(remote.create({"resources": SMALL_SLOTS}))
    runner.run(remote.wait_for(session.id, {Status.RUNNING}, timeout=120))
    widget = UsageWidget(remote, runner, session.id)
    try:
        deadline = time.monotonic() + 60
        while "% of 0.25 cpu" not in widget.value and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "<td>main1</td>" in widget.value and "% of 0.25 cpu" in widget.value
        assert "of 128 MiB" in widget.value and "live, every 2 s" in widget.value
        first = widget.value
        while widget.value == first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert widget.value != first  # the next usage event redrew it (its time)
        assert widget.updating
    finally:
        widget.close()
        runner.run(remote.destroy(session.id))
    assert not widget.updating
