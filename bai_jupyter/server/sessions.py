"""``/bai/api/v1/sessions…``: create, list, get, delete, logs, interrupt, restart."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from ..errors import Forbidden, InvalidRequest
from ..model import Session, SessionType, Status
from ..wire import session_to_json
from .base import BaiHandler, require_running
from .kernel_access import child_key, revoked_key

__all__ = [
    "ServicesHandler",
    "SessionHandler",
    "SessionsHandler",
    "proxy_url",
    "service_list",
    "session_view",
]

_STATUS_NAMES = ", ".join(s.value for s in Status)
_TYPE_NAMES = ", ".join(t.value for t in SessionType)
#: Signals also reach a session whose kernel is restarting.
_RESTARTING = frozenset({Status.RESTARTING})


def proxy_url(base_url: str, session_id: str, service: str) -> str:
    """Where a service port of main1 is reached through this server."""
    return url_path_join(base_url, "bai/sessions", session_id, "proxy", service) + "/"


def service_list(session: Session, base_url: str) -> list[dict[str, Any]]:
    """The session's service ports; ``url`` is null for raw ``tcp`` ones (not proxied)."""
    services = []
    for spec in session.spec.service_ports:
        name, proto, port = spec.split(":")
        url = None if proto == "tcp" else proxy_url(base_url, session.id, name)
        services.append({"name": name, "protocol": proto, "port": int(port), "url": url})
    return services


def session_view(session: Session, base_url: str, connection: bool = False) -> dict[str, Any]:
    """The API's session: :func:`~bai_jupyter.wire.session_to_json` plus ``services``.

    A kernel's HMAC connection key signs every message to it (whoever has it can run
    code there): it is left out unless ``connection`` (the owner's own GET asks).
    """
    view = {**session_to_json(session), "services": service_list(session, base_url)}
    if not connection:
        for kernel in view["kernels"]:
            info = kernel.get("info") or {}
            conn = info.get("connection")
            if isinstance(conn, dict) and "key" in conn:
                kept = {k: v for k, v in conn.items() if k != "key"}
                kernel["info"] = {**info, "connection": kept}
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
            raise InvalidRequest(problem) from None
    return wanted


class SessionsHandler(BaiHandler):
    """The caller's sessions (everyone's for an admin with ``?all=true``); create one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        statuses = _parse_statuses(self.get_arguments("status"))
        kind = self.get_argument("type", "") or None
        if kind is not None and kind not in {t.value for t in SessionType}:
            raise InvalidRequest(f"type: no session type {kind!r} (types: {_TYPE_NAMES})")
        everyone = self.get_argument("all", "false").lower() in ("1", "true", "yes")
        owner = None if everyone and await self.is_admin() else self.owner
        sessions = await self.manager.list(owner=owner, statuses=statuses)
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
            raise InvalidRequest(f"template: must be a template name, got {template!r}")
        if meta is not None and not isinstance(meta, dict):
            raise InvalidRequest(f"meta: must be a JSON object, got {meta!r}")
        if meta and len(json.dumps(meta)) > self.app.max_meta_size:
            raise InvalidRequest(
                f"meta: must be at most {self.app.max_meta_size} bytes as JSON "
                "(BaiJupyterApp.max_meta_size)"
            )
        if meta and self.app.multi_user:
            # Users of a shared server must not mount its root dir through the API: only
            # its own kernel provisioner (in-process) may ask for the notebook dir.
            meta.pop("notebook_dir", None)
        if _flag(self, "dry_run"):  # validate only (a form checking as the user types)
            checked = await self.manager.create(body, self.owner, template, meta, dry_run=True)
            self.write_json(session_view(checked, self.base_url))
            return
        session = await self.manager.create(body, self.owner, template=template, meta=meta)
        parent: Session | None = getattr(self.current_user, "bai_session", None)
        if parent is not None:  # a kernel token: it may manage what it created
            key, value = child_key(session.id), parent.id
            await self.db(lambda tx: tx.set_meta(key, value), write=True)
        self.set_header("Location", url_path_join(self.request.path, session.id))
        self.write_json(session_view(session, self.base_url), status=201)


class SessionHandler(BaiHandler):
    """One session: read it, end it (cancel while pending, terminate otherwise), or purge it."""

    @web.authenticated
    @authorized
    async def get(self, key: str) -> None:
        session = await self.session(key)
        connection = _flag(self, "connection")
        if connection and session.owner != self.owner:
            raise Forbidden("connection=true: only the session's owner gets its kernels' keys")
        self.write_json(session_view(session, self.base_url, connection))

    @web.authenticated
    @authorized
    async def delete(self, key: str) -> None:
        session = await self.session(key, "write")
        if _flag(self, "purge"):  # delete an ended session's record (409 while not ended)
            purged = await self.manager.purge(session.id)
            self.app.runs.forget(session.id)
            self.write_json(session_view(purged, self.base_url))
            return
        reason = self.get_argument("reason", "user-requested")
        ended = await self.manager.destroy(session.id, reason=reason)
        self.app.runs.forget(session.id)
        self.write_json(session_view(ended, self.base_url))


class ServicesHandler(BaiHandler):
    """Add a service port to a RUNNING session's main1 (``{"service_port": "name:http:8080"}``).

    Only where the server reaches main1 at its own address; 409 where its ports are
    published (a running container cannot gain one)."""

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        session = await self.session(key, "write")
        require_running(session)
        body = self.json_body()
        spec = body.get("service_port")
        if not isinstance(spec, str) or set(body) != {"service_port"}:
            raise InvalidRequest(
                f'body: must be {{"service_port": "name:proto:port"}}, got keys {sorted(body)}'
            )
        updated = await self.manager.add_service_port(session.id, spec)
        self.app.running.forget(updated.id)
        self.write_json(session_view(updated, self.base_url))


class LogsHandler(BaiHandler):
    """A kernel's output (``?kernel=sub1``; default main1), kept after the session ends."""

    @web.authenticated
    @authorized
    async def get(self, key: str) -> None:
        session = await self.session(key)
        kernel = self.get_argument("kernel", "main1")
        logs = await self.manager.logs(session.id, kernel=kernel)
        self.write_json({"session_id": session.id, "kernel": kernel, "logs": logs})


class _SignalHandler(BaiHandler):
    """A signal to a kernel's runtime (``?kernel=``, default main1) of a running session."""

    signum: signal.Signals

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        session = await self.session(key, "write")
        require_running(session, _RESTARTING)
        kernel = self.get_argument("kernel", "main1")
        await self.manager.signal(session.id, self.signum, kernel=kernel)
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
        session = await self.session(key, "write")
        at = int(time.time() * 1000)
        await self.db(lambda tx: tx.set_meta(revoked_key(session.id), str(at)), write=True)
        self.write_json({"session_id": session.id, "revoked_at": at / 1000})
