"""A real ``jupyter server`` process with the bai_jupyter extension, for the API tests.

A subprocess rather than pytest-jupyter's in-process app: the tests can SIGKILL
it and start it again on the same store, and its event loop is its own (the
suite's async tests run on pytest-asyncio's). Only this extension is enabled,
unauthenticated access is off, and everything it writes stays under ``root``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse
from tornado.websocket import websocket_connect

from bai_jupyter.client import RemoteManager
from bai_jupyter.model import Status

TOKEN = "test-token"
_OTHERS_OFF = {
    name: False
    for name in (
        "jupyterlab",
        "jupyter_lsp",
        "jupyter_server_terminals",
        "notebook_shim",
        "jupyter_server_proxy",
    )
}

#: Config of a server shared by several users: tokens name users, only "admin" is admin.
MULTI_USER = """
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User


class TokenUsers(IdentityProvider):
    def get_user(self, handler):
        auth = handler.request.headers.get("Authorization", "")
        token = auth.split(" ", 1)[-1].strip() or handler.get_argument("token", "")
        users = {"alice-token": "alice", "bob-token": "bob", "admin-token": "admin"}
        name = {**users, "test-token": "admin"}.get(token)
        handler._token_authenticated = bool(name)  # a token, not a cookie: no XSRF check
        return User(name) if name else None


class AdminOnly(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return resource != "bai_jupyter:admin" or user.username == "admin"


c.ServerApp.identity_provider_class = TokenUsers
c.ServerApp.authorizer_class = AdminOnly
c.BaiJupyterApp.multi_user = True
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """A running server: its URL, token, process and log."""

    url: str
    token: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, token: str | None = None) -> RemoteManager:
        return RemoteManager(self.url, self.token if token is None else token)

    async def fetch(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        raw_body: bytes | None = None,
    ) -> HTTPResponse:
        """A request under the server's base URL; errors come back as responses."""
        sent = dict(headers or {})
        token = self.token if token is None else token
        if token:
            sent.setdefault("Authorization", f"token {token}")
        data = raw_body
        if body is not None:
            data = json.dumps(body).encode()
        if data is None and method in ("POST", "PUT", "PATCH"):
            data = b""
        request = HTTPRequest(
            self.url + path.lstrip("/"),
            method=method,
            body=data,
            headers=sent,
            request_timeout=60,
            allow_nonstandard_methods=True,
            follow_redirects=False,
        )
        return await AsyncHTTPClient().fetch(request, raise_error=False)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), as an operator stops the server."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind."""
        self.proc.kill()
        self.proc.wait()


def start_server(
    root: Path,
    config: str = "",
    args: list[str] | None = None,
    port: int | None = None,
    ready: bool = True,
) -> Server:
    """Start ``jupyter server`` on a free port; return once the manager has started
    (``ready=False``: once the API answers at all, started or not).

    ``root`` holds the store, the config, the data and runtime dirs and the log,
    so a second call with the same ``root`` is the same server restarted.
    """
    root.mkdir(parents=True, exist_ok=True)
    conf_dir = root / "config"
    conf_dir.mkdir(exist_ok=True)
    base = f"""
c.ServerApp.jpserver_extensions = {{**{_OTHERS_OFF!r}, "bai_jupyter": True}}
c.ServerApp.allow_unauthenticated_access = False
c.ServerApp.allow_root = True
c.ServerApp.open_browser = False
c.ServerApp.root_dir = {str(root)!r}
c.IdentityProvider.token = {TOKEN!r}
c.BaiSessionManager.store_url = {f"sqlite:///{root}/store.sqlite"!r}
c.BaiSessionManager.data_folders_root = {str(root / "folders")!r}
c.LocalAgent.root = {str(root / "local-kernels")!r}
c.BaiSessionManager.pass_interval = 1.0
"""
    (conf_dir / "jupyter_server_config.py").write_text(base + config)
    port = port or free_port()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(conf_dir),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    log = root / f"server-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                f"--port={port}",
                "--ip=127.0.0.1",
                *(args or []),
            ],
            stdin=subprocess.DEVNULL,  # no terminal, as JupyterHub starts servers
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,
        )
    server = Server(f"http://127.0.0.1:{port}/", TOKEN, proc, log)
    _wait_ready(server, ready=ready)
    return server


def _wait_ready(server: Server, timeout: float = 60, ready: bool = True) -> None:
    """Poll (blocking: the tests' loop is not running yet) until the manager has agents
    (``ready=False``: until the API answers, a 503 too)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    request = urllib.request.Request(
        server.url + "bai/api/v1/agents", headers={"Authorization": f"token {TOKEN}"}
    )
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"the server exited:\n{server.tail()}")
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                if json.load(reply)["agents"]:  # the manager has registered its agents
                    return
        except urllib.error.HTTPError as exc:
            if not ready and exc.code == 503:
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"the server did not get ready in {timeout:g} s:\n{server.tail()}")


#: Run in a kernel: how it resolves its own name, and each name given (``getent``).
RESOLVE_NAMES = """\
import json, socket, subprocess, sys
own = socket.gethostname()
def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout
print(json.dumps({
    "own": own,
    "gethostbyname": socket.gethostbyname(own),
    "hostname -i": run("hostname", "-i").split(),
    "getent": {n: [line.split()[0] for line in run("getent", "hosts", n).splitlines()]
               for n in sys.argv[1:]},
}))
"""


async def stdout_of(server: Server, sid: str, code: str) -> list[str]:
    """``code`` run in main1's ipykernel through the execute API: its stdout lines (an
    error in the cell fails the test)."""
    client = server.client()
    reply = await client.execute(sid, code)
    console = list(reply["console"])
    while reply["status"] == "continued":
        reply = await client.execute(sid, mode="continue", run_id=reply["run_id"])
        console += reply["console"]
    assert reply["exit_code"] == 0, console
    return "".join(item[1] for item in console if item[0] == "stdout").splitlines()


async def kernel_cell(
    base: str, token: str, kernel_id: str, code: str, timeout: float = 120
) -> str:
    """Run ``code`` in a Jupyter kernel of the server at ``base`` over its kernel WebSocket,
    as JupyterLab does (no bai API in the path): what it printed."""
    url = f"{base}api/kernels/{kernel_id}/channels".replace("http", "ws", 1)
    # A header, not ?token=: JupyterHub refuses tokens in a WebSocket's URL.
    conn = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    try:
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                  "session": uuid.uuid4().hex, "date": "", "version": "5.3"}  # fmt: skip
        content = {"code": code, "silent": False, "store_history": False}
        request = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
        await conn.write_message(json.dumps({**request, "channel": "shell"}))
        printed: list[str] = []
        while True:
            raw = await asyncio.wait_for(conn.read_message(), timeout)
            assert isinstance(raw, str), f"the kernel's WebSocket closed; printed {printed}"
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = reply["header"]["msg_type"]
            if kind == "stream":
                printed.append(reply["content"]["text"])
            elif kind == "status" and reply["content"]["execution_state"] == "idle":
                return "".join(printed)
    finally:
        conn.close()


def end_all(server: Server, token: str | None = None) -> None:
    """End every live session of the token's user (the server's by default)."""
    import urllib.request

    def call(method: str, path: str) -> Any:
        request = urllib.request.Request(
            f"{server.url}bai/api/v1/{path}",
            method=method,
            headers={"Authorization": f"token {token or server.token}"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")

    for session in call("GET", "sessions")["sessions"]:
        if not Status(session["status"]).is_terminal:
            call("DELETE", f"sessions/{session['id']}")


@contextlib.contextmanager
def serving(root: Path, config: str = "") -> Iterator[Server]:
    """A server for a block: what its tests left running is ended, then it stops cleanly."""
    running = start_server(root, config)
    try:
        yield running
    finally:
        try:
            if running.proc.poll() is None:
                end_all(running)
        finally:
            running.stop()
