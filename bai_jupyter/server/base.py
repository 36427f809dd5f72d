"""What every REST handler shares: JSON errors, the caller's owner name, ownership checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from http.client import responses
from typing import Any, ClassVar, Protocol, cast

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import ensure_async
from tornado.web import HTTPError

from ..api import SessionsAPI
from ..errors import BaiError, InvalidRequest, TooLarge
from ..model import Session
from ..registry import local_owner
from .activity import ActivityNotes
from .kernel_runs import KernelRuns
from .redact import RedactedLog, request_summary
from .running import RunningSessions

__all__ = [
    "ADMIN",
    "SESSIONS",
    "TEMPLATES",
    "BaiHandler",
    "Extension",
    "error_body",
    "json_depth",
]

#: Authorization resources (``bai_jupyter:…``) a Jupyter authorizer decides on.
SESSIONS = "bai_jupyter:sessions"
TEMPLATES = "bai_jupyter:templates"
ADMIN = "bai_jupyter:admin"

#: Error codes for HTTP errors raised by Jupyter or tornado rather than by us.
_HTTP_CODES = {
    400: "invalid-request",
    401: "forbidden",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "too-large",
    503: "unavailable",
}


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in ``value`` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in item)
    return deepest


def error_body(code: str, message: str, field: str | None = None) -> str:
    """The API's one error shape; ``field`` (the request field's dotted path) when known."""
    body = {"error": code, "message": message}
    if field:
        body["field"] = field
    return json.dumps(body)


class Extension(Protocol):
    """What handlers use of the server extension (``server.app.BaiJupyterApp``)."""

    multi_user: bool
    max_body_size: int
    max_json_depth: int
    max_meta_size: int
    keepalive_interval: float
    #: The execute API's kernel clients and runs.
    runs: KernelRuns
    #: RUNNING sessions cached for the proxy.
    running: RunningSessions
    #: Sessions' use seen here (execute, proxy), passed on to the manager's idle rules.
    activity: ActivityNotes
    #: Open event streams (ended when the server stops).
    streams: set[asyncio.Queue[Any]]

    def sessions_api(
        self,
        owner: str,
        is_admin: Callable[[str], Awaitable[bool]],
        parent: str | None,
        groups: Sequence[str] | None = None,
    ) -> SessionsAPI:
        """The caller's door to the manager."""
        ...


class BaiHandler(RedactedLog, ExtensionHandlerMixin, APIHandler):
    """Base of the REST handlers: errors as ``{"error", "message"}`` (and ``"field"``),
    never a traceback."""

    auth_resource = SESSIONS
    #: What the route's key (its first path argument) names: ``"session"`` (an id or a
    #: name, by :func:`~bai_jupyter.model.is_id_key`) or ``"endpoint"`` (an endpoint's
    #: name). A kernel token's scope checks the key as what it is, never by collision.
    path_key: ClassVar[str] = "session"

    @property
    def app(self) -> Extension:
        """The extension (``BaiJupyterApp``)."""
        return cast(Extension, self.extensionapp)

    @property
    def api(self) -> SessionsAPI:
        """The caller's sessions API: their own sessions; everyone's for an admin.

        A kernel token's session is the parent of what the caller creates."""
        user = self.current_user
        parent: Session | None = getattr(user, "bai_session", None)
        groups: list[str] | None = getattr(user, "bai_groups", None)
        return self.app.sessions_api(
            self.owner, self.is_admin, parent.id if parent else None, groups
        )

    # --- errors -------------------------------------------------------------------------------

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        field = None
        if isinstance(exc, BaiError):
            status_code, code, message, field = exc.status, exc.code, exc.message, exc.field
            self.set_status(status_code)
            if status_code == 503:
                self.set_header("Retry-After", "2")
        elif isinstance(exc, HTTPError):
            code = _HTTP_CODES.get(status_code, "error")
            message = exc.log_message or responses.get(status_code, "error")
            if exc.log_message and exc.args:
                message = exc.log_message % exc.args
        else:
            code, message = "internal-error", "internal error; the server log has the details"
        self.set_header("Content-Type", "application/json")
        self.finish(error_body(code, message, field))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, BaiError):
            self.log.info("bai-jupyter: %s: %s", request_summary(self), value)
        else:
            super().log_exception(typ, value, tb)

    # --- input --------------------------------------------------------------------------------

    async def prepare(self) -> None:  # type: ignore[override]
        """Refuse an oversized body before any handler looks at it (413)."""
        await super().prepare()
        limit = self.app.max_body_size
        declared = self.request.headers.get("Content-Length", "")
        size = int(declared) if declared.isdigit() else len(self.request.body or b"")
        if max(size, len(self.request.body or b"")) > limit:
            raise TooLarge(
                f"the request body is {size} bytes; this server takes at most {limit} "
                "(BaiJupyterApp.max_body_size)"
            )

    def json_body(self, known: Sequence[str] | None = None) -> dict[str, Any]:
        """The request body as a JSON object (an empty body is ``{}``); 400 otherwise, and
        where it has a field not in ``known`` (when given; the first such field is named)."""
        if not self.request.body:
            return {}
        depth = self.app.max_json_depth
        too_deep = f"the body is nested deeper than {depth} levels (BaiJupyterApp.max_json_depth)"
        try:
            data = json.loads(self.request.body)
        except RecursionError:
            raise InvalidRequest(too_deep) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"the body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidRequest(f"the body must be a JSON object, got {type(data).__name__}")
        if json_depth(data) > depth:
            raise InvalidRequest(too_deep)
        unknown = [] if known is None else [key for key in data if key not in known]
        if unknown:
            raise InvalidRequest(
                f"{unknown[0]}: unknown field; known fields: {', '.join(known or ())}",
                field=unknown[0],
            )
        return data

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    # --- who is calling -----------------------------------------------------------------------

    @property
    def owner(self) -> str:
        """The owner name of the caller's sessions.

        A single-user server files every session under :func:`local_owner` (the
        provisioner does too, so kernel sessions and API sessions are one list);
        with ``multi_user`` each authenticated user is their own owner.
        """
        if self.app.multi_user:
            return str(self.current_user.username)
        return local_owner()

    async def is_admin(self, action: str = "read") -> bool:
        """May the caller see and touch everyone's sessions (resource ``bai_jupyter:admin``)?"""
        allowed = await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, action, ADMIN)
        )
        return bool(allowed)
