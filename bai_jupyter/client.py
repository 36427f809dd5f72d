"""The REST API over HTTP as a :class:`~bai_jupyter.api.SessionsAPI`.

Front ends that run outside the process which owns the manager (a kernel
provisioner under JupyterHub, ``%bai`` in a kernel, scripts) use
:class:`RemoteManager` exactly as they would the manager in their own process;
the server decides the owner from the token. Errors come back as the same
:mod:`bai_jupyter.errors` classes. Everything is non-blocking (tornado's
``AsyncHTTPClient``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import signal as signals
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from . import errors
from .event_stream import EventStream, api_error
from .model import ExecResult, Session, Status
from .request import Template
from .wire import session_from_json

__all__ = ["API_PREFIX", "RemoteManager", "find_manager"]

#: Where the REST API lives under a Jupyter server's base URL.
API_PREFIX = "bai/api/v1/"


class RemoteManager:
    """The session manager of a Jupyter server running the ``bai_jupyter`` extension."""

    #: What to do when it cannot be reached (the setting that named it).
    remedy = "start it, or set BAI_JUPYTER_URL (and BAI_JUPYTER_TOKEN) to one that runs"

    def __init__(self, url: str, token: str = "", request_timeout: float = 60) -> None:
        """``url``: the server's base URL (``http://host:8888/`` or ``…/user/alice/``)."""
        self.url = url if url.endswith("/") else url + "/"
        self.token = token
        self.request_timeout = request_timeout

    @classmethod
    def from_env(cls) -> RemoteManager:
        """From ``BAI_JUPYTER_URL`` and ``BAI_JUPYTER_TOKEN`` (or ``JUPYTERHUB_API_TOKEN``)."""
        url = os.environ.get("BAI_JUPYTER_URL", "")
        if not url:
            raise errors.Unavailable(
                "no bai-jupyter server: set BAI_JUPYTER_URL to the URL of a Jupyter server "
                "running the bai_jupyter extension (and BAI_JUPYTER_TOKEN to its token)"
            )
        token = os.environ.get("BAI_JUPYTER_TOKEN") or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        return cls(url, token)

    # --- transport ----------------------------------------------------------------------------

    def api_url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        """The full URL of an API ``path`` (``sessions/x``), with ``query``'s set values."""
        params = {k: v for k, v in (query or {}).items() if v is not None}
        return self.url + API_PREFIX + path + (f"?{urlencode(params)}" if params else "")

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        return headers

    def unreachable(self, exc: BaseException) -> errors.Unavailable:
        return errors.Unavailable(
            f"cannot reach the bai-jupyter server at {self.url} ({exc or type(exc).__name__}): "
            + self.remedy
        )

    async def _call(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> Any:
        """One request; the decoded JSON reply (``None`` for 204), or the API's error raised."""
        headers = self.headers()
        data = None
        if body is not None or method in ("POST", "PUT"):
            headers["Content-Type"] = "application/json"
            data = json.dumps({} if body is None else body)
        request = HTTPRequest(
            self.api_url(path, query),
            method=method,
            headers=headers,
            body=data,
            request_timeout=self.request_timeout,
            allow_nonstandard_methods=True,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if exc.response is None:  # our own timeout
                raise self.unreachable(exc) from exc
            raise api_error(exc.response.code, exc.response.reason, exc.response.body) from None
        except OSError as exc:
            raise self.unreachable(exc) from exc
        if response.code == 204 or not response.body:
            return None
        return json.loads(response.body)

    # --- sessions -----------------------------------------------------------------------------

    async def create(
        self,
        request: Mapping[str, Any],
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Session:
        """Enqueue a session (over ``template``); the PENDING session comes back.

        ``dry_run``: only validate; what would be created comes back, nothing is stored."""
        body: dict[str, Any] = dict(request)
        if template is not None:
            body["template"] = template
        if meta is not None:
            body["meta"] = dict(meta)
        query = {"dry_run": "true"} if dry_run else None
        return session_from_json(await self._call("POST", "sessions", body, query=query))

    async def get(self, key: str, connection: bool = False) -> Session:
        """A session by id or name (``connection``: with its kernels' keys; owner only)."""
        query = {"connection": "true"} if connection else None
        return session_from_json(await self._call("GET", _path("sessions", key), query=query))

    async def get_json(self, key: str, connection: bool = False) -> dict[str, Any]:
        """A session as the API gives it, with its services' proxy URLs (``connection``:
        with its kernels' keys and a system session's SFTP private key; owner only)."""
        query = {"connection": "true"} if connection else None
        data: dict[str, Any] = await self._call("GET", _path("sessions", key), query=query)
        return data

    async def add_service_port(self, key: str, service_port: str) -> Session:
        """Declare ``name:proto:port`` on a running session's main1."""
        body = {"service_port": service_port}
        reply = await self._call("POST", _path("sessions", key, "services"), body)
        return session_from_json(reply)

    async def list_sessions(
        self,
        statuses: Iterable[Status] | None = None,
        everyone: bool = False,
        type: str | None = None,
    ) -> list[Session]:
        """The caller's sessions (``everyone``: all users', for an admin), oldest first,
        optionally filtered by status and type."""
        query = {
            "status": None if statuses is None else ",".join(Status(s).value for s in statuses),
            "type": type,
            "all": "true" if everyone else None,
        }
        reply = await self._call("GET", "sessions", query=query)
        return [session_from_json(item) for item in reply["sessions"]]

    async def destroy(self, key: str, reason: str = "user-requested") -> Session:
        """Cancel a pending session, or terminate a running one."""
        reply = await self._call("DELETE", _path("sessions", key), query={"reason": reason})
        return session_from_json(reply)

    async def purge(self, key: str) -> Session:
        """Delete an ended session's record (Conflict while it has not ended)."""
        reply = await self._call("DELETE", _path("sessions", key), query={"purge": "true"})
        return session_from_json(reply)

    async def exec(
        self, key: str, command: list[str], kernel: str = "main1", timeout: float = 60
    ) -> ExecResult:
        """Run a command (argv) in one kernel of a running session."""
        body = {"command": list(command), "kernel": kernel, "timeout": timeout}
        reply = await self._call("POST", _path("sessions", key, "exec"), body)
        dropped = int(reply.get("dropped_bytes") or 0)  # a server before output caps: none
        return ExecResult(int(reply["exit_code"]), str(reply["output"]), dropped)

    async def touch(self, key: str, source: str = "api") -> None:
        """Note that the session is in use now (resets its idle_timeout)."""
        await self._call("POST", _path("sessions", key, "activity"), {"source": source})

    async def server_alive(self, server: str) -> float:
        """This Jupyter server is alive; the seconds until the next heartbeat is due."""
        return float((await self._call("POST", _path("servers", server, "heartbeat")))["every"])

    async def revoke_kernel_tokens(self, key: str) -> float:
        """Make the session's kernel tokens issued so far stop working; when (epoch s)."""
        reply = await self._call("DELETE", _path("sessions", key, "kernel-token"))
        return float(reply["revoked_at"])

    async def wait_for(
        self, key: str, statuses: Iterable[Status], timeout: float | None = None
    ) -> Session:
        """Wait until the session is in one of ``statuses`` or has ended; Timeout otherwise.

        Events only say when to look again: once the stream ends or fails (server
        stopping, a proxy's idle timeout, refused) the session is polled every second.
        """
        wanted = {Status(s) for s in statuses}
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = EventStream(self)
        polling = False
        try:
            while True:
                session = await self.get(key)
                if session.status in wanted or session.status.is_terminal:
                    return session
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise errors.Timeout(
                        f"session {session.id} is still {session.status.value} after {timeout:g} s"
                    )
                if polling:
                    await asyncio.sleep(min(left or 1.0, 1.0))
                    continue
                # Re-read on any event (cheap), and at least every 2 s.
                with contextlib.suppress(asyncio.TimeoutError):
                    try:
                        polling = (
                            await asyncio.wait_for(stream.next(), min(left or 2.0, 2.0)) is None
                        )
                    except errors.BaiError:
                        polling = True
        finally:
            await stream.close()

    async def logs(self, key: str, kernel: str = "main1", tail: int | None = None) -> str:
        """A kernel's last ``tail`` lines (default: the server's), kept after the session
        ends."""
        query = {"kernel": kernel, **({} if tail is None else {"tail": str(tail)})}
        reply = await self._call("GET", _path("sessions", key, "logs"), query=query)
        return str(reply["logs"])

    async def signal(self, key: str, signum: int, kernel: str = "main1") -> None:
        """SIGINT interrupts main1's ipykernel, SIGHUP restarts it in place."""
        actions = {signals.SIGINT: "interrupt", signals.SIGHUP: "restart"}
        action = actions.get(signals.Signals(signum))
        if action is None:
            raise errors.InvalidRequest(
                f"signal {signum}: only SIGINT (interrupt) and SIGHUP (restart) go over HTTP"
            )
        await self._call("POST", _path("sessions", key, action), query={"kernel": kernel})

    async def execute(
        self,
        key: str,
        code: str = "",
        mode: str = "query",
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """One step of the code execution API on main1 (see docs/api.md).

        Returns ``{run_id, status, exit_code, console}``; while ``status`` is
        ``continued`` call again with ``mode="continue"`` and the same ``run_id``,
        and with ``mode="input"`` (the text in ``code``) when it is ``waiting-input``.
        """
        body: dict[str, Any] = {"code": code, "mode": mode}
        if run_id is not None:
            body["run_id"] = run_id
        reply: dict[str, Any] = await self._call("POST", _path("sessions", key, "execute"), body)
        return reply

    async def events(self, since: int | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """Changes of the caller's sessions as they happen (Server-Sent Events); ``since``:
        first those after that ``seq`` (resume where a cut stream left off).

        A cut stream, or a frame that is not JSON, raises Unavailable.
        """
        stream = EventStream(self, since)
        try:
            while (event := await stream.next()) is not None:
                yield event
        finally:
            await stream.close()

    # --- templates, agents, scheduler ---------------------------------------------------------

    async def list_templates(self) -> builtins.list[Template]:
        """Shared templates and the caller's own."""
        reply = await self._call("GET", "templates")
        return [_template(item) for item in reply["templates"]]

    async def get_template(self, name: str) -> Template:
        """The caller's template of that name, else the shared one."""
        return _template(await self._call("GET", _path("templates", name)))

    async def create_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        """Add a template (``shared``: everyone's; admins only); Conflict if the name is taken."""
        body = {"name": name, "spec": dict(spec), "description": description, "shared": shared}
        return _template(await self._call("POST", "templates", body))

    async def put_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        """Create or replace one of the caller's templates (``shared``: everyone's; admins)."""
        body = {"spec": dict(spec), "description": description, "shared": shared}
        return _template(await self._call("PUT", _path("templates", name), body))

    async def delete_template(self, name: str, shared: bool = False) -> None:
        """Remove the caller's template of that name (or the shared one)."""
        query = {"shared": "true"} if shared else None
        await self._call("DELETE", _path("templates", name), query=query)

    # --- endpoints ----------------------------------------------------------------------------

    async def create_endpoint(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A new endpoint; its minimum of replicas starts (Conflict if the name is taken)."""
        return dict(await self._call("POST", "endpoints", dict(request)))

    async def list_endpoints(self, everyone: bool = False) -> builtins.list[dict[str, Any]]:
        """The caller's endpoints by name (``everyone``: all users', for an admin)."""
        query = {"all": "true"} if everyone else None
        reply = await self._call("GET", "endpoints", query=query)
        return list(reply["endpoints"])

    async def get_endpoint(self, name: str) -> dict[str, Any]:
        """An endpoint: its settings, replicas, load and scaling decisions."""
        return dict(await self._call("GET", _path("endpoints", name)))

    async def update_endpoint(self, name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Change settings; a new replica request rolls out replica by replica."""
        reply: dict[str, Any] = await self._call("PATCH", _path("endpoints", name), dict(changes))
        return reply

    async def delete_endpoint(self, name: str) -> dict[str, Any]:
        """Remove an endpoint; its replicas end."""
        return dict(await self._call("DELETE", _path("endpoints", name)))

    async def agents(self) -> builtins.list[dict[str, Any]]:
        """Each agent's capacity, occupied slots and kernels."""
        return list((await self._call("GET", "agents"))["agents"])

    async def queue(self) -> dict[str, Any]:
        """Per resource group: its settings and pending queue in order, with why each waits."""
        return dict((await self._call("GET", "scheduler"))["resource_groups"])

    async def leader(self) -> dict[str, Any]:
        """Which manager replica answered (``replica``) and which leads (``leader``)."""
        reply = await self._call("GET", "scheduler")
        return {key: reply[key] for key in ("replica", "leader") if key in reply}

    async def pools(self) -> builtins.list[dict[str, Any]]:
        """The warm pools: size, limits, warm and starting sessions, claim counts."""
        reply = await self._call("GET", "pools")
        return list(reply["pools"])


def _template(data: dict[str, Any]) -> Template:
    return Template.from_json({k: v for k, v in data.items() if k != "shared"})


def _path(*parts: str) -> str:
    return "/".join(quote(part, safe="") for part in parts)


def _running_server() -> dict[str, Any] | None:
    """The Jupyter server that started this kernel, else the newest one running here."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    servers: list[dict[str, Any]] = [
        s for s in list_running_servers() if s.get("url") and not s.get("sock")
    ]
    parent = os.environ.get("JPY_PARENT_PID", "")
    for server in servers:
        if str(server.get("pid")) == parent:
            return server
    runtime = Path(jupyter_runtime_dir())

    def started(server: dict[str, Any]) -> float:
        info = runtime / f"jpserver-{server.get('pid')}.json"
        return info.stat().st_mtime if info.exists() else 0.0

    return max(servers, key=started, default=None)


def find_manager() -> RemoteManager:
    """The manager at ``BAI_JUPYTER_URL``, else that of the running Jupyter server."""
    if os.environ.get("BAI_JUPYTER_URL"):
        return RemoteManager.from_env()
    server = _running_server()
    if server is not None:
        return RemoteManager(str(server["url"]), str(server.get("token") or ""))
    raise errors.Unavailable(
        "no bai-jupyter server found: set BAI_JUPYTER_URL to the URL of a Jupyter server "
        "running the bai_jupyter extension (and BAI_JUPYTER_TOKEN to its token), or start "
        "one on this machine (jupyter lab)"
    )
