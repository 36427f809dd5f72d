"""The service-port proxy against real HTTP and WebSocket services in a Docker main1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from harness.server import Server, start_server
from tornado import web
from tornado.httpclient import HTTPRequest
from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPInputError
from tornado.iostream import IOStream
from tornado.simple_httpclient import HTTPStreamClosedError
from tornado.tcpclient import TCPClient
from tornado.tcpserver import TCPServer
from tornado.testing import bind_unused_port
from tornado.websocket import websocket_connect

from bai_jupyter.model import Session, Status
from bai_jupyter.registry import local_owner
from bai_jupyter.server import relay, upstream

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

#: Two tornado apps (the image's Debian tornado 6.2): HTTP on 8080, WebSocket echo on 8081.
SERVICE = r"""
import asyncio, json
from tornado import web, websocket

released = asyncio.Event()
PROBE = '''<script>
const seen = {href: location.href};
try { seen.cookie = document.cookie } catch (e) { seen.cookie = e.name }
const api = new URL("/api/contents", location.href).href;
fetch(api, {credentials: "include"}).then(r => "read " + r.status, e => e.name)
  .then(got => { seen.contents = got; document.title = JSON.stringify(seen) });
</script>'''
streams = 0
big = {"sent": 0, "open": False}
sockets = 0

class Echo(web.RequestHandler):
    def get(self):
        self.set_cookie("service", "yes")
        self.write({"path": self.request.path, "query": self.request.query,
                    "headers": dict(self.request.headers),
                    "peer": list(self.request.connection.stream.socket.getpeername())})
    def post(self):
        self.write({"body": self.request.body.decode(), "method": "POST",
                    "query": self.request.query,
                    "peer": list(self.request.connection.stream.socket.getpeername())})

class Closing(web.RequestHandler):
    def get(self):
        self.set_header("Connection", "close")
        self.write("bye")

class Bytes(web.RequestHandler):
    def get(self, n):
        self.write(b"x" * int(n))
    def head(self, n):
        self.set_header("Content-Length", n)

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

class Big(web.RequestHandler):
    async def get(self, mib):
        piece = b"x" * (1 << 20)
        big.update(sent=0, open=True)
        self.set_header("Content-Length", str(int(mib) << 20))
        try:
            for _ in range(int(mib)):
                self.write(piece)
                await self.flush()
                big["sent"] += len(piece)
        except Exception:
            pass  # the proxy closed the connection
        finally:
            big["open"] = False

class BigSent(web.RequestHandler):
    def get(self):
        self.write(big)

class Cut(web.RequestHandler):
    async def get(self):
        self.set_header("Content-Length", "1000")
        self.write("short")
        await self.flush()
        self.request.connection.stream.close()

class Cookies(web.RequestHandler):
    def get(self):
        for value in self.get_arguments("c"):
            self.add_header("Set-Cookie", value)
        self.write("cookies")

class Page(web.RequestHandler):
    def get(self):
        policy = "sandbox allow-same-origin allow-scripts; img-src 'self'"
        self.set_header("Content-Security-Policy", policy)
        self.set_header("Referrer-Policy", "unsafe-url")
        self.set_header("Content-Type", "text/html")
        self.write("<script>document.title = location.search + document.cookie</script>")

class Probe(web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "text/html")
        self.write(PROBE)

class Away(web.RequestHandler):
    def get(self):
        self.redirect("/echo")

class WS(websocket.WebSocketHandler):
    def select_subprotocol(self, subprotocols):
        return subprotocols[0] if subprotocols else None
    def open(self):
        global sockets
        sockets += 1
    def on_message(self, message):
        if message == "bye":
            self.close(4001, "asked to")
        else:
            self.write_message(message, binary=isinstance(message, bytes))
    def on_close(self):
        global sockets
        sockets -= 1

class Sockets(web.RequestHandler):
    def get(self):
        self.write(str(sockets))

async def main():
    web.Application([(r"/echo", Echo), (r"/bytes/(\d+)", Bytes), (r"/stream", Stream),
                     (r"/release", Release), (r"/away", Away), (r"/forever", Forever),
                     (r"/streams", Streams), (r"/closing", Closing), (r"/big/(\d+)", Big),
                     (r"/big", BigSent), (r"/cut", Cut), (r"/sockets", Sockets),
                     (r"/cookies", Cookies), (r"/page", Page),
                     (r"/probe", Probe)]).listen(8080)
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
            "service_ports": ["web:http:8080", "ws:http:8081", "raw:tcp:9000", "dead:http:8082"],
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
        f"{base}/echo?x=1",
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
    by_query = await server.fetch("POST", f"{base}/echo?x=1&token={server.token}&_xsrf=a", token="")
    assert by_query.code == 200 and json.loads(by_query.body)["query"] == "x=1"
    # A browser that came with the token keeps Jupyter's login cookie for the service's
    # next pages (see the redirect test); a caller that sends its token in a header gets
    # only the service's.
    from_link = [c.split("=")[0] for c in by_query.headers.get_list("Set-Cookie")]
    assert len(from_link) == 1 and "service" not in from_link, from_link
    assert reply.headers.get_list("Set-Cookie") == [f"service=yes; Path=/{base}"]


async def test_service_cookies_stay_under_the_proxy_prefix_and_never_shadow_jupyters(
    server: Server, service: Session
) -> None:
    base = f"/bai/sessions/{service.id}/proxy/web"
    sent = [
        "x=1; Path=/",
        "y=2; Domain=127.0.0.1; Path=/static/; HttpOnly",
        "z=3",
        f"w=4; Path={base}/sub; SameSite=Strict",
        "_xsrf=evil; Path=/",
        "username-127-0-0-1=evil",
        "jupyterhub-session-id=evil",
    ]
    query = "&".join(f"c={quote(cookie)}" for cookie in sent)
    reply = await server.fetch("GET", f"{base}/cookies?{query}")
    assert reply.code == 200, reply.body
    assert reply.headers.get_list("Set-Cookie") == [
        f"x=1; Path={base}",
        f"y=2; Path={base}/static; HttpOnly",
        f"z=3; Path={base}",
        f"w=4; Path={base}/sub; SameSite=Strict",
    ]


async def test_proxied_pages_run_in_a_sandbox_and_send_no_referer(
    server: Server, service: Session
) -> None:
    """Ours is the last policy (a browser takes the sandbox of the last one); the
    service's own keeps everything but its sandbox, which would let the page be same-origin."""
    reply = await server.fetch("GET", f"bai/sessions/{service.id}/proxy/web/page")
    assert reply.code == 200, reply.body
    policies = reply.headers.get_list("Content-Security-Policy")
    assert policies[0] == "img-src 'self'", policies
    assert policies[-1].startswith("sandbox allow-scripts ")
    assert "allow-same-origin" not in " ".join(policies)
    assert reply.headers.get_list("Referrer-Policy") == ["no-referrer"]


async def test_a_page_asked_for_with_the_token_in_its_url_is_sent_there_without_it(
    server: Server, service: Session
) -> None:
    base = f"/bai/sessions/{service.id}/proxy/web"
    reply = await server.fetch("GET", f"{base}/echo?x=1&token={server.token}&y=2", token="")
    assert reply.code == 302, reply.body
    assert reply.headers["Location"] == f"{base}/echo?x=1&y=2"
    assert reply.headers["Referrer-Policy"] == "no-referrer"
    login = [c.split(";")[0] for c in reply.headers.get_list("Set-Cookie")]
    assert len(login) == 1 and login[0].startswith("username-"), login
    # The browser comes back with Jupyter's login cookie and reaches the page.
    page = await server.fetch("GET", f"{base}/echo?x=1&y=2", token="", headers={"Cookie": login[0]})
    assert page.code == 200 and json.loads(page.body)["query"] == "x=1&y=2"


async def test_no_token_of_a_url_reaches_the_log(server: Server, service: Session) -> None:
    """A request's line in an error (an API error, a service that does not answer) names
    its URI with the token's value hidden."""
    before = len(server.log.read_bytes())
    missing = await server.fetch(
        "GET", f"bai/api/v1/sessions/0123456789abcdef?token={server.token}", token=""
    )
    assert missing.code == 404, missing.body
    dead = await server.fetch(
        "POST", f"bai/sessions/{service.id}/proxy/dead/x?token={server.token}", token=""
    )
    assert dead.code == 502, dead.body
    await asyncio.sleep(0.5)  # the server's log written
    log = server.log.read_text()[before:]
    assert "0123456789abcdef?token=[secret]" in log and "dead/x?token=[secret]" in log, log
    assert server.token not in log, log


@pytest.mark.slow
def test_a_proxied_pages_script_cannot_read_jupyters_cookies_nor_call_its_api(
    server: Server, service: Session, browser: Any
) -> None:
    """In a real browser, opened with the token in its URL as a shared link would be: the
    page lands without the token, its script runs in an origin of its own (no cookies of
    Jupyter's, no reply of Jupyter's API)."""
    page = browser.new_page()
    base = f"{server.url}bai/sessions/{service.id}/proxy/web"
    page.goto(f"{base}/probe?x=1&token={server.token}")
    page.wait_for_function("document.title.startsWith('{')", timeout=30_000)
    seen = json.loads(page.title())
    assert seen["href"] == f"{base}/probe?x=1", seen
    assert seen["cookie"] == "SecurityError", seen
    assert seen["contents"] == "TypeError", seen  # refused: no reply to read
    # The browser does hold Jupyter's login cookie: the page is kept from it, not lacking it.
    assert any(c["name"].startswith("username-") for c in browser.cookies())


async def test_requests_share_a_kept_connection_unless_the_method_or_the_service_says_no(
    server: Server, service: Session
) -> None:
    base = f"bai/sessions/{service.id}/proxy/web"

    async def peer(method: str = "GET", path: str = "echo") -> list[Any]:
        reply = await server.fetch(
            method, f"{base}/{path}", raw_body=b"x" if method == "POST" else None
        )
        assert reply.code == 200, reply.body
        found: list[Any] = json.loads(reply.body)["peer"]
        return found

    kept = await peer()
    assert await peer() == kept
    assert await peer("POST") != kept  # never on a kept connection (it cannot be sent again)
    assert await peer() == kept
    assert (await server.fetch("GET", f"{base}/closing")).body == b"bye"  # on the kept one
    assert await peer() != kept  # the service closed it


async def test_http_bodies_both_ways_and_redirects(server: Server, service: Session) -> None:
    base = f"bai/sessions/{service.id}/proxy/web"
    posted = await server.fetch("POST", f"{base}/echo", raw_body=b"hello")
    assert json.loads(posted.body)["body"] == "hello"
    big = await server.fetch("GET", f"{base}/bytes/{1 << 20}")
    assert big.code == 200 and big.body == b"x" * (1 << 20)
    head = await server.fetch("HEAD", f"{base}/bytes/10")
    assert (head.code, head.body, head.headers["Content-Length"]) == (200, b"", "10")
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


async def test_a_large_body_is_never_held_whole(server: Server, service: Session) -> None:
    """A caller that stops reading stops the reads from the service; leaving ends it."""
    base = f"bai/sessions/{service.id}/proxy/web"
    url = urlsplit(server.url)
    stream = await TCPClient().connect(url.hostname or "127.0.0.1", url.port or 80)
    head = f"GET {url.path}{base}/big/256 HTTP/1.1\r\nHost: {url.netloc}\r\n"
    await stream.write(f"{head}Authorization: token {server.token}\r\n\r\n".encode())
    assert b"Content-Length: 268435456" in await stream.read_until(b"\r\n\r\n")

    async def progress() -> dict[str, Any]:
        found: dict[str, Any] = json.loads((await server.fetch("GET", f"{base}/big")).body)
        return found

    sent = -1
    for _ in range(100):  # until the service cannot send more: every buffer on the way is full
        await asyncio.sleep(0.3)
        now = (await progress())["sent"]
        if now == sent or now >= 128 << 20:
            break
        sent = now
    assert 0 < sent < 128 << 20, sent  # held in socket buffers and one piece, not 256 MiB
    stream.close()
    for _ in range(100):
        if not (await progress())["open"]:
            break
        await asyncio.sleep(0.1)
    assert not (await progress())["open"]


async def test_a_reply_cut_short_is_cut_for_the_caller(server: Server, service: Session) -> None:
    before = len(server.log.read_bytes())
    with pytest.raises(HTTPStreamClosedError):  # never a reply that looks complete
        await server.fetch("GET", f"bai/sessions/{service.id}/proxy/web/cut")
    assert b"Traceback" not in server.log.read_bytes()[before:]


async def test_websocket_echo(server: Server, service: Session) -> None:
    url = f"{server.url.replace('http', 'ws', 1)}bai/sessions/{service.id}/proxy/ws/ws"
    request = HTTPRequest(url, headers={"Authorization": f"token {server.token}"})
    conn = await websocket_connect(request)
    try:
        await conn.write_message("ping")
        assert await conn.read_message() == "ping"
        await conn.write_message(b"\x00\x01", binary=True)
        assert await conn.read_message() == b"\x00\x01"
        large = bytes(range(256)) * 4096  # 1 MiB: many reads on the way
        await conn.write_message(large, binary=True)
        assert await conn.read_message() == large
    finally:
        conn.close()
    refused = HTTPRequest(url, headers={"Authorization": "token wrong"})
    with pytest.raises(Exception, match="403"):
        await websocket_connect(refused)


async def test_websocket_subprotocol_close_and_leaving(server: Server, service: Session) -> None:
    """The handshake is the service's (subprotocol), so is the close; a caller who leaves
    closes the service's side."""
    url = f"{server.url.replace('http', 'ws', 1)}bai/sessions/{service.id}/proxy/ws/ws"
    request = HTTPRequest(url, headers={"Authorization": f"token {server.token}"})
    sockets = f"bai/sessions/{service.id}/proxy/web/sockets"
    conn = await websocket_connect(request, subprotocols=["chat", "other"])
    assert conn.selected_subprotocol == "chat"
    await conn.write_message("bye")
    assert await conn.read_message() is None
    assert (conn.close_code, conn.close_reason) == (4001, "asked to")
    conn.close()
    left = await websocket_connect(request)
    assert (await server.fetch("GET", sockets)).body == b"1"
    assert left.protocol is not None and left.protocol.stream is not None
    left.protocol.stream.close()  # gone without a close handshake
    left.close()
    for _ in range(100):
        if (await server.fetch("GET", sockets)).body == b"0":
            break
        await asyncio.sleep(0.1)
    assert (await server.fetch("GET", sockets)).body == b"0"
    # An upgrade the service does not take: its plain reply comes back.
    http = f"{server.url.replace('http', 'ws', 1)}bai/sessions/{service.id}/proxy/web/echo"
    with pytest.raises(Exception, match="Non-websocket response"):
        await websocket_connect(HTTPRequest(http, headers=request.headers))


async def test_unknown_service_tcp_service_and_unknown_session(
    server: Server, service: Session
) -> None:
    cases: list[tuple[str, int, str]] = [
        (f"bai/sessions/{service.id}/proxy/nope/", 404, "services: web, ws, raw, dead"),
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
    """Refused with the field that asked for it: ``image``, or a role's ``roles[N].image``."""
    request = {"image": "bai-jupyter/no-such-image:0"}
    reply = await server.fetch("POST", "bai/api/v1/sessions", request)
    assert reply.code == 400, reply.body
    refused = json.loads(reply.body)
    assert "bai-jupyter/no-such-image:0 is on no agent" in refused["message"]
    assert refused["field"] == "image"
    # A role's own image is named where the request asked for it.
    roles = {"roles": [{"name": "main"}, {"name": "worker", "image": request["image"]}]}
    reply = await server.fetch("POST", "bai/api/v1/sessions", roles)
    assert reply.code == 400, reply.body
    refused = json.loads(reply.body)
    assert refused["field"] == "roles[1].image", refused
    assert refused["message"].startswith("roles[1].image: bai-jupyter/no-such-image:0 is on no")


# --- the upstream pool and the wire format against local services (no Docker) -----------------


class _Reply(web.RequestHandler):
    def get(self) -> None:
        self.write("got")


class _Service(HTTPServer):
    """A local HTTP service that records the connections it accepts."""

    streams: list[IOStream]

    def handle_stream(self, stream: IOStream, address: tuple[str, int]) -> None:
        self.__dict__.setdefault("streams", []).append(stream)
        super().handle_stream(stream, address)


def _stop(service: _Service) -> None:
    service.stop()
    for accepted in service.streams:
        accepted.close()


def _local_service() -> tuple[_Service, int]:
    sock, port = bind_unused_port()
    service = _Service(web.Application([(r"/", _Reply)]))
    service.add_sockets([sock])
    return service, port


_GET = b"GET / HTTP/1.1\r\nHost: service\r\n\r\n"


def _untracked(stream: IOStream) -> None:
    pass


async def _get(pool: upstream.KeepAliveClient, port: int, reuse: bool = True) -> IOStream:
    stream, start, headers = await pool.send("127.0.0.1", port, _GET, reuse, 5.0, _untracked)
    assert start.code == 200
    assert await stream.read_bytes(int(headers["Content-Length"])) == b"got"
    return stream


async def test_upstream_hands_out_a_kept_connection_only_where_asked() -> None:
    service, port = _local_service()
    pool = upstream.KeepAliveClient()
    try:
        first = await _get(pool, port)
        pool.keep("127.0.0.1", port, first)
        assert await _get(pool, port) is first
        pool.keep("127.0.0.1", port, first)
        fresh = await _get(pool, port, reuse=False)
        assert fresh is not first and len(service.streams) == 2
        fresh.close()
        closed, free = bind_unused_port()
        closed.close()  # nothing listens there
        with pytest.raises(upstream.Unreachable):
            await pool.send("127.0.0.1", free, _GET, True, 5.0, _untracked)
    finally:
        pool.close()
        _stop(service)


async def test_upstream_sends_again_when_a_kept_connection_was_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, port = _local_service()
    pool = upstream.KeepAliveClient()
    try:
        first = await _get(pool, port)
        pool.keep("127.0.0.1", port, first)
        # The service drops the idle connection just after the pool found it open.
        service.streams[0].close()
        monkeypatch.setattr(upstream, "_alive", lambda stream: True)
        again = await _get(pool, port)
        again.close()
        assert again is not first and len(service.streams) == 2
    finally:
        pool.close()
        _stop(service)


class _Canned(TCPServer):
    """Answers a request with one canned reply; closes the connection after it if told."""

    def __init__(self, reply: bytes, close: bool) -> None:
        super().__init__()
        self.reply, self.close = reply, close
        self.streams: list[IOStream] = []

    async def handle_stream(self, stream: IOStream, address: tuple[str, int]) -> None:
        self.streams.append(stream)
        await stream.read_until(b"\r\n\r\n")
        await stream.write(self.reply)
        if self.close:
            stream.close()


@pytest.mark.parametrize(
    ("reply", "body", "framed"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", True),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: t\r\n\r\n",
            b"hello",
            True,
        ),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"ok",
            True,
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", b"until the end", False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", None, False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", None, False),
    ],
)
async def test_reply_bodies_in_every_framing(
    reply: bytes, body: bytes | None, framed: bool
) -> None:
    """The body as sent, and whether the connection can carry another request (a body
    that ends with the connection cannot); a malformed one is refused."""
    sock, port = bind_unused_port()
    canned = _Canned(reply, close=not framed)
    canned.add_sockets([sock])
    pool = upstream.KeepAliveClient()
    try:
        stream, start, headers = await pool.send("127.0.0.1", port, _GET, False, 5.0, _untracked)
        pieces: list[bytes] = []

        def sink(piece: memoryview) -> None:
            pieces.append(bytes(piece))

        if body is None:
            with pytest.raises(HTTPInputError):
                await relay.relay_body(stream, "GET", start, headers, sink)
        else:
            assert await relay.relay_body(stream, "GET", start, headers, sink) is framed
            assert b"".join(pieces) == body
        stream.close()
    finally:
        pool.close()
        canned.stop()
        for accepted in canned.streams:
            accepted.close()
