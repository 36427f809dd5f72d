"""``/bai/api/v1/sessions…``: create, list, get, delete, logs, exec, signals, services, tokens,
activity; and ``/bai/api/v1/servers/{id}/heartbeat``."""

from __future__ import annotations

import json
import re
import signal
import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from ..agents.capped import MAX_LOG_TAIL
from ..errors import Forbidden, InvalidRequest
from ..idleness import idle_view
from ..kernel_end import ended_notice
from ..model import ACTIVE, KernelRole, Session, SessionType, Status, ended_on_purpose
from ..wire import session_to_json
from .base import BaiHandler
from .checks import require_running

__all__ = [
    "ActivityHandler",
    "ExecHandler",
    "ServerHeartbeatHandler",
    "ServicesHandler",
    "SessionHandler",
    "SessionsHandler",
    "proxy_url",
    "service_list",
    "session_view",
]

_STATUS_NAMES = ", ".join(s.value for s in Status)
_TYPE_NAMES = ", ".join(t.value for t in SessionType)
#: The longest a command run through ``exec`` may take (seconds).
_MAX_EXEC_TIMEOUT = 3600
#: What an activity call may name as its source.
_SOURCE_RE = re.compile(r"[A-Za-z0-9_.-]{1,32}")
#: What a Jupyter server's id may be.
_SERVER_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: Signals also reach a session whose kernel is restarting.
_RESTARTING = frozenset({Status.RESTARTING})


def proxy_url(base_url: str, session_id: str, service: str) -> str:
    """Where a service port of main1 is reached through this server."""
    return url_path_join(base_url, "bai/sessions", session_id, "proxy", service) + "/"


def service_list(session: Session, base_url: str) -> list[dict[str, Any]]:
    """The session's service ports; ``url`` is null for raw ``tcp`` ones (not proxied)."""
    return [
        {
            "name": service.name,
            "protocol": service.protocol,
            "port": service.port,
            "url": proxy_url(base_url, session.id, service.name) if service.proxied else None,
        }
        for service in session.spec.services
    ]


def session_view(session: Session, base_url: str, connection: bool = False) -> dict[str, Any]:
    """The API's session: :func:`~bai_jupyter.wire.session_to_json` plus ``services``,
    ``idle`` (each idle rule's time left), ``sftp`` (a system session's login) and
    ``end_notice`` (what its notebook kernel says once someone ended it on purpose: the
    provisioner's own words, so a front end need not know which reasons are deaths).

    A kernel's HMAC connection key signs every message to it (whoever has it can run
    code there), and a system session's SFTP private key opens its data folders: both
    are left out unless ``connection`` (the owner's own GET asks).
    """
    view = {
        **session_to_json(session),
        "services": service_list(session, base_url),
        "idle": idle_view(session.status_data, time.time(), session.status in ACTIVE),
        "sftp": None,
        "end_notice": (
            ended_notice(session) if ended_on_purpose(session.status, session.status_info) else None
        ),
    }
    for kernel in view["kernels"]:
        info = kernel.get("info") or {}
        secrets = {"connection": "key", "sftp": "private_key"}
        if not connection:
            for part, secret in secrets.items():
                if isinstance(info.get(part), dict) and secret in info[part]:
                    info = {**info, part: {k: v for k, v in info[part].items() if k != secret}}
            kernel["info"] = info
        if kernel["role"] == KernelRole.MAIN.value and info.get("sftp"):
            view["sftp"] = info["sftp"]
    return view


def _flag(handler: BaiHandler, name: str) -> bool:
    return handler.get_argument(name, "false").lower() in ("1", "true", "yes")


def _parse_statuses(raw: list[str]) -> list[Status] | None:
    names = [part.strip() for item in raw for part in item.split(",") if part.strip()]
    if not names:
        return None
    wanted = []
    for name in names:
        try:
            wanted.append(Status(name.upper()))
        except ValueError:
            problem = f"status: no status {name!r} (statuses: {_STATUS_NAMES})"
            raise InvalidRequest(problem, field="status") from None
    return wanted


class SessionsHandler(BaiHandler):
    """The caller's sessions (everyone's for an admin with ``?all=true``); create one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        statuses = _parse_statuses(self.get_arguments("status"))
        kind = self.get_argument("type", "") or None
        if kind is not None and kind not in {t.value for t in SessionType}:
            raise InvalidRequest(
                f"type: no session type {kind!r} (types: {_TYPE_NAMES})", field="type"
            )
        sessions = await self.api.list_sessions(statuses, everyone=_flag(self, "all"))
        views = [
            session_view(s, self.base_url)
            for s in sessions
            if kind is None or s.spec.type.value == kind
        ]
        self.write_json({"sessions": views})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body()
        template = body.pop("template", None)
        meta = body.pop("meta", None)
        if template is not None and not isinstance(template, str):
            raise InvalidRequest(
                f"template: must be a template name, got {template!r}", field="template"
            )
        if meta is not None and not isinstance(meta, dict):
            raise InvalidRequest(f"meta: must be a JSON object, got {meta!r}", field="meta")
        if meta and len(json.dumps(meta)) > self.app.max_meta_size:
            raise InvalidRequest(
                f"meta: must be at most {self.app.max_meta_size} bytes as JSON "
                "(BaiJupyterApp.max_meta_size)",
                field="meta",
            )
        if meta and self.app.multi_user:
            # Users of a shared server must not mount its root dir through the API: only
            # its own kernel provisioner (in-process) may ask for the notebook dir.
            meta.pop("notebook_dir", None)
        meta = self._notebook_folder(meta)
        if _flag(self, "dry_run"):  # validate only: what would be created, with defaults
            checked = await self.api.create(body, template, meta, dry_run=True)
            self.write_json(session_view(checked, self.base_url))
            return
        session = await self.api.create(body, template, meta)
        self.set_header("Location", url_path_join(self.request.path, session.id))
        self.write_json(session_view(session, self.base_url), status=201)

    def _notebook_folder(self, meta: dict[str, Any] | None) -> dict[str, Any] | None:
        """``meta.notebook_folder`` (a folder of the file browser, "" its root: where the
        new-session dialog opens its notebook) becomes ``meta.notebook_dir``, the folder
        Jupyter gives a kernel started there (``cwd_for_path``), as the kernel provisioner
        records a notebook's: the manager mounts the notebooks and starts the kernels in
        it. Only when asked; a multi-user server drops it, as it drops notebook_dir, and so
        does the standalone manager (it has no notebooks)."""
        if not meta or "notebook_folder" not in meta:
            return meta
        meta = dict(meta)
        folder = meta.pop("notebook_folder")
        if (
            not isinstance(folder, str)
            or folder.startswith("/")
            or "\\" in folder
            or ".." in folder.split("/")
        ):
            raise InvalidRequest(
                "meta.notebook_folder: must be a folder of the file browser relative to its "
                f"root (\"\" for the root, no '..'), got {folder!r}",
                field="meta.notebook_folder",
            )
        kernels = self.settings.get("kernel_manager")
        if kernels is not None and not self.app.multi_user:
            meta["notebook_dir"] = kernels.cwd_for_path(folder)
        return meta


class SessionHandler(BaiHandler):
    """One session: read it, end it (cancel while pending, terminate otherwise), or purge it."""

    @web.authenticated
    @authorized
    async def get(self, key: str) -> None:
        connection = _flag(self, "connection")
        session = await self.api.get(key, connection=connection)
        if connection and session.owner != self.owner:
            raise Forbidden("connection=true: only the session's owner gets its kernels' keys")
        self.write_json(session_view(session, self.base_url, connection))

    @web.authenticated
    @authorized
    async def delete(self, key: str) -> None:
        if _flag(self, "purge"):  # delete an ended session's record (409 while not ended)
            purged = await self.api.purge(key)
            self.app.runs.forget(purged.id)
            self.write_json(session_view(purged, self.base_url))
            return
        reason = self.get_argument("reason", "user-requested")
        ended = await self.api.destroy(key, reason=reason)
        self.app.runs.forget(ended.id)
        self.write_json(session_view(ended, self.base_url))


class ServicesHandler(BaiHandler):
    """Add a service port to a RUNNING session's main1 (``{"service_port": "name:http:8080"}``).

    Only where the server reaches main1 at its own address; 409 where its ports are
    published (a running container cannot gain one)."""

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        body = self.json_body()
        spec = body.get("service_port")
        if not isinstance(spec, str) or set(body) != {"service_port"}:
            raise InvalidRequest(
                f'body: must be {{"service_port": "name:proto:port"}}, got keys {sorted(body)}'
            )
        require_running(await self.api.get(key))
        updated = await self.api.add_service_port(key, spec)
        self.app.running.forget(updated.id)
        self.write_json(session_view(updated, self.base_url))


class LogsHandler(BaiHandler):
    """A kernel's output (``?kernel=sub1``; default main1), kept after the session ends: its
    last ``?tail=N`` lines (default: the manager's ``log_tail``) within ``log_limit`` bytes."""

    @web.authenticated
    @authorized
    async def get(self, key: str) -> None:
        tail = self.get_argument("tail", None)
        lines = None
        if tail is not None:
            if not tail.isascii() or not tail.isdigit() or not 1 <= int(tail) <= MAX_LOG_TAIL:
                raise InvalidRequest(
                    f"tail: must be a number of lines, 1 to {MAX_LOG_TAIL}", field="tail"
                )
            lines = int(tail)
        session = await self.api.get(key)
        kernel = self.get_argument("kernel", "main1")
        logs = await self.api.logs(session.id, kernel=kernel, tail=lines)
        self.write_json({"session_id": session.id, "kernel": kernel, "logs": logs})


class _SignalHandler(BaiHandler):
    """A signal to a kernel's runtime (``?kernel=``, default main1) of a running session."""

    signum: signal.Signals

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        session = await self.api.get(key)
        require_running(session, _RESTARTING)
        kernel = self.get_argument("kernel", "main1")
        await self.api.signal(session.id, self.signum, kernel=kernel)
        if self.signum is signal.SIGHUP:
            self.app.runs.forget(session.id, "the kernel was restarted")
        self.set_status(204)
        self.finish()


class InterruptHandler(_SignalHandler):
    """SIGINT: interrupts main1's ipykernel (what is running stops)."""

    signum = signal.SIGINT


class RestartHandler(_SignalHandler):
    """SIGHUP: restarts main1's ipykernel in place (same ports, new state)."""

    signum = signal.SIGHUP


class KernelTokenHandler(BaiHandler):
    """Revoke a session's kernel tokens (``BAI_JUPYTER_TOKEN``): those issued so far stop working.

    The revocation time is kept in the store, so it holds across server restarts.
    """

    @web.authenticated
    @authorized
    async def delete(self, key: str) -> None:
        session = await self.api.get(key)
        at = await self.api.revoke_kernel_tokens(session.id)
        self.write_json({"session_id": session.id, "revoked_at": at})


class ExecHandler(BaiHandler):
    """Run a command in one kernel: ``{"command": [argv…], "kernel": "sub1", "timeout": 60}``
    → ``{"exit_code", "output", "truncated", "dropped_bytes"}`` (stdout and stderr together;
    the last ``exec_output_limit`` bytes, ``dropped_bytes`` before them)."""

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        body = self.json_body()
        unknown = sorted(set(body) - {"command", "kernel", "timeout"})
        if unknown:
            raise InvalidRequest(
                f"{unknown[0]}: unknown field; known: command, kernel, timeout", field=unknown[0]
            )
        command = body.get("command")
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(part, str) for part in command)
        ):
            raise InvalidRequest(
                "command: must be a non-empty list of strings (an argv)", field="command"
            )
        kernel = body.get("kernel", "main1")
        if not isinstance(kernel, str):
            raise InvalidRequest(
                f"kernel: must be a hostname such as 'sub1', got {kernel!r}", field="kernel"
            )
        timeout = body.get("timeout", 60)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise InvalidRequest(f"timeout: must be seconds, got {timeout!r}", field="timeout")
        if not 0 < timeout <= _MAX_EXEC_TIMEOUT:
            raise InvalidRequest(
                f"timeout: must be more than 0 and at most {_MAX_EXEC_TIMEOUT} s", field="timeout"
            )
        require_running(await self.api.get(key))
        result = await self.api.exec(key, command, kernel=kernel, timeout=float(timeout))
        self.write_json(
            {
                "exit_code": result.exit_code,
                "output": result.output,
                "truncated": result.truncated,
                "dropped_bytes": result.dropped,
            }
        )


class ActivityHandler(BaiHandler):
    """Note that a running session is in use (resets its idle_timeout):
    ``{"source": "api"}`` (optional) → 204."""

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        body = self.json_body()
        unknown = sorted(set(body) - {"source"})
        if unknown:
            raise InvalidRequest(f"{unknown[0]}: unknown field; known: source", field=unknown[0])
        source = body.get("source", "api")
        if not isinstance(source, str) or _SOURCE_RE.fullmatch(source) is None:
            raise InvalidRequest(
                f"source: must be 1 to 32 of [A-Za-z0-9_.-] (e.g. 'api'), got {source!r}",
                field="source",
            )
        session = await self.api.get(key)
        require_running(session, _RESTARTING)
        await self.api.touch(session.id, source)
        self.set_status(204)
        self.finish()


class ServerHeartbeatHandler(BaiHandler):
    """A Jupyter server in remote mode is alive: the sessions its kernels launched keep
    running (the manager ends them once it is silent, ``server_gone_timeout``) → 200
    ``{"every": seconds}``: when the next one is due."""

    @web.authenticated
    @authorized
    async def post(self, server: str) -> None:
        if _SERVER_RE.fullmatch(server) is None:
            raise InvalidRequest(
                f"server: must be 1 to 64 of [A-Za-z0-9_.-], got {server!r}", field="server"
            )
        self.write_json({"every": await self.api.server_alive(server)})
