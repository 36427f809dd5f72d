"""The URL table of the extension: REST API, event stream, OpenAPI description, proxy."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from .agents import AgentsHandler
from .attach import AttachKernelspecHandler
from .base import BaiHandler
from .endpoints import EndpointHandler, EndpointProxyHandler, EndpointsHandler
from .events import EventsHandler, UsageHandler
from .execute import ExecuteHandler
from .launches import SessionsLaunchHandler
from .openapi import openapi
from .pools import PoolsHandler
from .proxy import SessionProxyHandler
from .queue import QueueHandler
from .sessions import (
    ActivityHandler,
    ExecHandler,
    InterruptHandler,
    KernelTokenHandler,
    LogsHandler,
    RestartHandler,
    ServerHeartbeatHandler,
    ServicesHandler,
    SessionHandler,
    SessionsHandler,
)
from .templates import TemplateHandler, TemplatesHandler

__all__ = ["API", "OpenAPIHandler", "api_routes", "routes"]

API = "/bai/api/v1"
_KEY = "([^/]+)"


class OpenAPIHandler(BaiHandler):
    """The OpenAPI 3 description of this API (kept true by tests/test_api.py)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json(openapi(self.base_url))


def api_routes() -> list[tuple[str, type[BaiHandler]]]:
    """The REST routes, as (pattern under the base URL, handler)."""
    return [
        (f"{API}/sessions", SessionsHandler),
        (f"{API}/sessions/{_KEY}", SessionHandler),
        (f"{API}/sessions/{_KEY}/logs", LogsHandler),
        (f"{API}/sessions/{_KEY}/usage", UsageHandler),
        (f"{API}/sessions/{_KEY}/interrupt", InterruptHandler),
        (f"{API}/sessions/{_KEY}/restart", RestartHandler),
        (f"{API}/sessions/{_KEY}/execute", ExecuteHandler),
        (f"{API}/sessions/{_KEY}/exec", ExecHandler),
        (f"{API}/sessions/{_KEY}/kernel-token", KernelTokenHandler),
        (f"{API}/sessions/{_KEY}/services", ServicesHandler),
        (f"{API}/sessions/{_KEY}/activity", ActivityHandler),
        (f"{API}/sessions/{_KEY}/kernelspec", AttachKernelspecHandler),
        (f"{API}/servers/{_KEY}/heartbeat", ServerHeartbeatHandler),
        (f"{API}/endpoints", EndpointsHandler),
        (f"{API}/endpoints/{_KEY}", EndpointHandler),
        (f"{API}/templates", TemplatesHandler),
        (f"{API}/templates/{_KEY}", TemplateHandler),
        (f"{API}/agents", AgentsHandler),
        (f"{API}/pools", PoolsHandler),
        (f"{API}/scheduler", QueueHandler),
        (f"{API}/events", EventsHandler),
        (f"{API}/openapi.json", OpenAPIHandler),
    ]


def routes(app: Any) -> list[tuple[Any, ...]]:
    """Every route of the extension, the proxy's included."""
    table: list[tuple[Any, ...]] = list(api_routes())
    table.append((f"/bai/sessions/{_KEY}/proxy/{_KEY}(/.*|)", SessionProxyHandler, {"app": app}))
    table.append((f"/bai/endpoints/{_KEY}()(/.*|)", EndpointProxyHandler, {"app": app}))
    # Extension routes come before the server's own: this one replaces /api/sessions.
    table.append((r"/api/sessions", SessionsLaunchHandler))
    return table
