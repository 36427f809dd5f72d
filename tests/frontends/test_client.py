"""RemoteManager: the manager's API over HTTP, against a real server (local backend)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from harness.server import Server, free_port, start_server

from bai_jupyter import errors
from bai_jupyter.client import RemoteManager
from bai_jupyter.model import Status
from bai_jupyter.registry import local_owner

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("client"), 'c.BaiSessionManager.backend = "local"\n')
    yield srv
    srv.stop()


async def test_a_session_from_create_to_destroy(server: Server) -> None:
    client = server.client()
    session = await client.create(
        {"name": "remote", "resources": {"cpu": "0.5", "mem": "128m"}}, meta={"k": "v"}
    )
    assert (session.status, session.owner, session.meta) == (
        Status.PENDING,
        local_owner(),
        {"k": "v"},
    )
    running = await client.wait_for("remote", {Status.RUNNING}, timeout=90)
    assert running.status is Status.RUNNING and running.kernels[0].info["connection"]
    assert [s.id for s in await client.list_sessions(statuses=[Status.RUNNING])] == [session.id]
    assert await client.list_sessions(type="batch") == []
    assert "bai-runtime" in await client.logs(session.id)
    await client.signal(session.id, signal.SIGINT)
    with pytest.raises(errors.InvalidRequest, match="only SIGINT"):
        await client.signal(session.id, signal.SIGTERM)
    ended = await client.destroy(session.id)
    assert ended.status is Status.TERMINATED and ended.status_info == "user-requested"
    with pytest.raises(errors.Conflict, match="has ended"):
        await client.signal(session.id, signal.SIGHUP)


async def test_errors_come_back_as_the_same_classes(server: Server) -> None:
    client = server.client()
    with pytest.raises(errors.NotFound, match="no session 'ghost'"):
        await client.get("ghost")
    with pytest.raises(errors.InvalidRequest, match="cluster_size") as bad:
        await client.create({"cluster_size": 0})
    assert bad.value.field == "cluster_size"  # the body's field, kept
    pending = await client.create({"name": "dup", "starts_at": 4e9})
    with pytest.raises(errors.Conflict, match="dup") as taken:
        await client.create({"name": "dup"})
    assert taken.value.field == "name"
    with pytest.raises(errors.Timeout, match="still PENDING"):
        await client.wait_for(pending.id, {Status.RUNNING}, timeout=0.5)
    await client.destroy(pending.id)
    with pytest.raises(errors.Forbidden, match="BAI_JUPYTER_TOKEN"):
        await server.client("wrong").list_sessions()


async def test_templates_agents_and_scheduler(server: Server) -> None:
    client = server.client()
    made = await client.put_template("tiny", {"resources": {"cpu": "0.25"}}, description="d")
    assert (made.name, made.owner, made.description) == ("tiny", local_owner(), "d")
    assert [t.name for t in await client.list_templates()] == ["tiny"]
    assert (await client.get_template("tiny")).spec == {"resources": {"cpu": "0.25"}}
    session = await client.create({"starts_at": 4e9}, template="tiny")
    # The template's cpu; the resource group's default memory fills in the rest.
    assert session.spec.resources.to_json() == {"cpu": "0.25", "mem": str(1 << 30)}
    queue = (await client.queue())["default"]["queue"]
    assert [entry["session_id"] for entry in queue] == [session.id]
    await client.destroy(session.id)
    await client.delete_template("tiny")
    with pytest.raises(errors.NotFound):
        await client.get_template("tiny")
    (agent,) = await client.agents()
    assert agent["backend"] == "local"


class _NoEvents(RemoteManager):
    """A client whose event stream is refused (404), as by a proxy or a stopping server."""

    def api_url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        return super().api_url("no-events" if path == "events" else path, query)


async def test_wait_for_polls_when_the_event_stream_is_refused(server: Server) -> None:
    client = _NoEvents(server.url, server.token)
    session = await client.create({"name": "polled", "resources": {"cpu": "0.5", "mem": "128m"}})
    events = client.events()
    with pytest.raises(errors.NotFound):
        await anext(events)
    await events.aclose()
    running = await client.wait_for(session.id, {Status.RUNNING}, timeout=90)
    assert running.status is Status.RUNNING
    await client.destroy(session.id)


async def test_a_frame_that_is_not_json_ends_the_events_with_unavailable() -> None:
    held: list[asyncio.StreamWriter] = []  # kept open: only the bad frame may end it

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\n\r\ndata: {not json\n\n")
        await writer.drain()

    listener = await asyncio.start_server(reply, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    events = RemoteManager(f"http://127.0.0.1:{port}/", "t").events()
    try:
        with pytest.raises(errors.Unavailable, match="bad frame"):
            await anext(events)
    finally:
        await events.aclose()
        for writer in held:
            writer.close()
        listener.close()
        await listener.wait_closed()


async def test_an_unreachable_server_says_what_to_set() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(errors.Unavailable) as caught:
        await RemoteManager(url, "t").list_sessions()
    assert url in str(caught.value) and "BAI_JUPYTER_URL" in str(caught.value)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BAI_JUPYTER_URL", raising=False)
    with pytest.raises(errors.Unavailable, match="set BAI_JUPYTER_URL"):
        RemoteManager.from_env()
    monkeypatch.setenv("BAI_JUPYTER_URL", "http://h:1/user/a")
    monkeypatch.setenv("BAI_JUPYTER_TOKEN", "tok")
    remote = RemoteManager.from_env()
    assert (remote.url, remote.token) == ("http://h:1/user/a/", "tok")
