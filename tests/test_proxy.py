"""The service-port proxy against real HTTP and WebSocket services in a Docker main1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_server_harness import Server, start_server
from tornado import web
from tornado.httpclient import HTTPRequest
from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream
from tornado.tcpclient import TCPClient
from tornado.testing import bind_unused_port
from tornado.websocket import websocket_connect

from bai_jupyter.model import Session, Status
from bai_jupyter.registry import local_owner
from bai_jupyter.server import upstream

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

#: Two tornado apps (the image's Debian tornado 6.2): HTTP on 8080, WebSocket echo on 8081.
SERVICE = r"""
import asyncio, json
from tornado import web, websocket

released = asyncio.Event()
streams = 0

class Echo(web.RequestHandler):
    def get(self):
        self.set_cookie("service", "yes")
        self.write({"path": self.request.path, "query": self.request.query,
                    "headers": dict(self.request.headers),
                    "peer": list(self.request.connection.stream.socket.getpeername())})
    def post(self):
        self.write({"body": self.request.body.decode(), "method": "POST"})

class Bytes(web.RequestHandler):
    def get(self, n):
        self.write(b"x" * int(n))

class Stream(web.RequestHandler):
    async def get(self):
        released.clear()
        self.write("first;")
        await self.flush()
        await released.wait()
        self.write("second")

class Release(web.RequestHandler):
    def get(self):
        released.set()

class Forever(web.RequestHandler):
    async def get(self):
        global streams
        streams += 1
        try:
            while True:
                self.write("tick;")
                await self.flush()
                await asyncio.sleep(0.1)
        except Exception:
            pass  # the proxy closed the connection
        finally:
            streams -= 1

class Streams(web.RequestHandler):
    def get(self):
        self.write(str(streams))

class Away(web.RequestHandler):
    def get(self):
        self.redirect("/echo")

class WS(websocket.WebSocketHandler):
    def on_message(self, message):
        self.write_message(message, binary=isinstance(message, bytes))

async def main():
    web.Application([(r"/echo", Echo), (r"/bytes/(\d+)", Bytes), (r"/stream", Stream),
                     (r"/release", Release), (r"/away", Away), (r"/forever", Forever),
                     (r"/streams", Streams)]).listen(8080)
    web.Application([(r"/ws", WS)]).listen(8081)
    await asyncio.Event().wait()

asyncio.run(main())
"""

START = f"""
import subprocess, sys
open("/tmp/svc.py", "w").write({SERVICE!r})
subprocess.Popen([sys.executable, "/tmp/svc.py"], start_new_session=True,
                 stdout=open("/tmp/svc.log", "w"), stderr=subprocess.STDOUT)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("proxy"), 'c.BaiSessionManager.backend = "docker"\n')
    yield srv
    srv.stop()


async def start_service(server: Server) -> Session:
    client = server.client()
    session = await client.create(
        {
            "resources": {"cpu": "0.5", "mem": "256m"},
            "service_ports": ["web:http:8080", "ws:http:8081", "raw:tcp:9000"],
        }
    )
    session = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
    assert session.status is Status.RUNNING, session.status_data
    reply = await client.execute(session.id, START)
    assert reply["status"] == "finished" and reply["exit_code"] == 0, reply
    for _ in range(200):  # until the service listens (502 from the proxy before)
        if (await server.fetch("GET", f"bai/sessions/{session.id}/proxy/web/echo")).code == 200:
            return session
        await asyncio.sleep(0.1)
    raise AssertionError(await client.logs(session.id))


@pytest.fixture(scope="module")
def service(server: Server) -> Iterator[Session]:
    session = asyncio.run(start_service(server))
    yield session
    asyncio.run(server.client().destroy(session.id))


async def test_single_user_server_files_sessions_under_the_local_owner(
    service: Session,
) -> None:
    assert service.owner == local_owner()


async def test_http_reaches_the_service_without_jupyters_credentials(
    server: Server, service: Session
) -> None:
    base = f"bai/sessions/{service.id}/proxy/web"
    reply = await server.fetch(
        "GET",
        f"{base}/echo?x=1&token={server.token}&_xsrf=abc",
        headers={
            "Cookie": "_xsrf=abc; mine=1; jupyterhub-session-id=s",
            "X-XSRFToken": "abc",
        },
    )
    assert reply.code == 200, reply.body
    seen = json.loads(reply.body)
    assert seen["path"] == "/echo" and seen["query"] == "x=1"
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert "authorization" not in headers and "x-xsrftoken" not in headers
    assert headers["cookie"] == "mine=1"
    assert headers["x-forwarded-context"].endswith(f"/bai/sessions/{service.id}/proxy/web")
    assert "service=yes" in reply.headers["Set-Cookie"]
    # The token in the query authenticates too, and is not passed on either.
    by_query = await server.fetch("GET", f"{base}/echo?token={server.token}", token="")
    assert by_query.code == 200 and json.loads(by_query.body)["query"] == ""


async def test_requests_share_a_kept_connection_to_the_service(
    server: Server, service: Session
) -> None:
    base = f"bai/sessions/{service.id}/proxy/web"
    peers = [json.loads((await server.fetch("GET", f"{base}/echo")).body)["peer"] for _ in "ab"]
    assert peers[0] == peers[1]


async def test_http_bodies_both_ways_and_redirects(server: Server, service: Session) -> None:
    base = f"bai/sessions/{service.id}/proxy/web"
    posted = await server.fetch("POST", f"{base}/echo", raw_body=b"hello")
    assert json.loads(posted.body) == {"body": "hello", "method": "POST"}
    big = await server.fetch("GET", f"{base}/bytes/{1 << 20}")
    assert big.code == 200 and big.body == b"x" * (1 << 20)
    away = await server.fetch("GET", f"{base}/away")
    assert away.code == 302
    assert away.headers["Location"] == f"/bai/sessions/{service.id}/proxy/web/echo"


async def test_http_bodies_stream(server: Server, service: Session) -> None:
    """The first chunk arrives while the service still holds the rest back."""
    first = asyncio.get_running_loop().create_future()
    chunks: list[bytes] = []

    def on_chunk(chunk: bytes) -> None:
        chunks.append(chunk)
        if not first.done():
            first.set_result(chunk)

    from tornado.httpclient import AsyncHTTPClient

    request = HTTPRequest(
        f"{server.url}bai/sessions/{service.id}/proxy/web/stream",
        headers={"Authorization": f"token {server.token}"},
        streaming_callback=on_chunk,
        request_timeout=60,
    )
    whole = asyncio.ensure_future(AsyncHTTPClient().fetch(request))
    assert await asyncio.wait_for(first, 30) == b"first;"
    assert not whole.done()
    released = await server.fetch("GET", f"bai/sessions/{service.id}/proxy/web/release")
    assert released.code == 200
    await whole
    assert b"".join(chunks) == b"first;second"


async def test_a_stream_to_the_service_ends_when_the_caller_leaves(
    server: Server, service: Session
) -> None:
    """The service's endless stream is closed once our client has gone away."""
    base = f"bai/sessions/{service.id}/proxy/web"
    url = urlsplit(server.url)
    stream = await TCPClient().connect(url.hostname or "127.0.0.1", url.port or 80)
    head = f"GET {url.path}{base}/forever HTTP/1.1\r\nHost: {url.netloc}\r\n"
    await stream.write(f"{head}Authorization: token {server.token}\r\n\r\n".encode())
    assert b"tick;" in await stream.read_until(b"tick;")
    assert (await server.fetch("GET", f"{base}/streams")).body == b"1"
    stream.close()
    for _ in range(300):  # until the proxy's next chunk from the service finds us gone
        if (await server.fetch("GET", f"{base}/streams")).body == b"0":
            break
        await asyncio.sleep(0.1)
    assert (await server.fetch("GET", f"{base}/streams")).body == b"0"
    log = server.log.read_text()
    assert "_ClientGone" not in log and "Cannot send error response" not in log


async def test_websocket_echo(server: Server, service: Session) -> None:
    url = f"{server.url.replace('http', 'ws', 1)}bai/sessions/{service.id}/proxy/ws/ws"
    request = HTTPRequest(url, headers={"Authorization": f"token {server.token}"})
    conn = await websocket_connect(request)
    try:
        await conn.write_message("ping")
        assert await conn.read_message() == "ping"
        await conn.write_message(b"\x00\x01", binary=True)
        assert await conn.read_message() == b"\x00\x01"
    finally:
        conn.close()
    refused = HTTPRequest(url, headers={"Authorization": "token wrong"})
    with pytest.raises(Exception, match="403"):
        await websocket_connect(refused)


async def test_unknown_service_tcp_service_and_unknown_session(
    server: Server, service: Session
) -> None:
    cases: list[tuple[str, int, str]] = [
        (f"bai/sessions/{service.id}/proxy/nope/", 404, "services: web, ws, raw"),
        (f"bai/sessions/{service.id}/proxy/raw/", 400, "tcp"),
        ("bai/sessions/0123456789abcdef/proxy/web/", 404, "0123456789abcdef"),
    ]
    for path, status, needle in cases:
        reply = await server.fetch("GET", path)
        assert reply.code == status, reply.body
        error: dict[str, Any] = json.loads(reply.body)
        assert needle in error["message"]


async def test_503_with_a_retry_hint_until_running_409_after_the_end(server: Server) -> None:
    client = server.client()
    pending = await client.create({"starts_at": 4e9, "service_ports": ["web:http:8080"]})
    try:
        reply = await server.fetch("GET", f"bai/sessions/{pending.id}/proxy/web/")
        assert reply.code == 503 and reply.headers["Retry-After"] == "2"
        assert json.loads(reply.body)["error"] == "unavailable"
    finally:
        await client.destroy(pending.id)
    ended = await server.fetch("GET", f"bai/sessions/{pending.id}/proxy/web/")
    assert (ended.code, json.loads(ended.body)["error"]) == (409, "conflict")


async def test_an_image_no_agent_has_is_refused_at_once(server: Server) -> None:
    request = {"image": "bai-jupyter/no-such-image:0"}
    reply = await server.fetch("POST", "bai/api/v1/sessions", request)
    assert reply.code == 400, reply.body
    assert "bai-jupyter/no-such-image:0 is on no agent" in json.loads(reply.body)["message"]


# --- the upstream client against a local service (no Docker) ------------------------------------


class _Reply(web.RequestHandler):
    def get(self) -> None:
        self.write("got")

    def post(self) -> None:
        self.write("posted")


class _Closing(web.RequestHandler):
    def get(self) -> None:
        self.set_header("Connection", "close")
        self.write("bye")


class _Service(HTTPServer):
    """A local HTTP service that records the connections it accepts."""

    streams: list[IOStream]

    def handle_stream(self, stream: IOStream, address: tuple[str, int]) -> None:
        self.__dict__.setdefault("streams", []).append(stream)
        super().handle_stream(stream, address)


def _local_service() -> tuple[_Service, str]:
    sock, port = bind_unused_port()
    service = _Service(web.Application([(r"/", _Reply), (r"/close", _Closing)]))
    service.add_sockets([sock])
    return service, f"http://127.0.0.1:{port}/"


async def test_upstream_keeps_a_connection_unless_the_method_or_the_service_says_no() -> None:
    service, url = _local_service()
    client = upstream.upstream_client()
    try:
        for _ in range(3):
            assert (await client.fetch(url)).body == b"got"
        assert len(service.streams) == 1
        posted = await client.fetch(url, method="POST", body=b"x")
        assert posted.body == b"posted" and len(service.streams) == 2  # never on a kept one
        # Two kept now; each says "close" and is dropped, so the third GET needs a new one.
        for path in ("close", "close", ""):
            await client.fetch(url + path)
        assert len(service.streams) == 3
    finally:
        client.close()
        service.stop()


async def test_upstream_sends_again_when_a_kept_connection_was_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, url = _local_service()
    client = upstream.upstream_client()
    try:
        await client.fetch(url)
        # The service drops the idle connection just after the client found it open.
        service.streams[0].close()
        monkeypatch.setattr(upstream, "_alive", lambda stream: True)
        assert (await client.fetch(url)).body == b"got"
        assert len(service.streams) == 2
    finally:
        client.close()
        service.stop()
