"""Inference endpoints over HTTP: the API (``/bai/api/v1/endpoints…``) and the routes
(``/bai/endpoints/<name>/…``).

The route is the session proxy with the target chosen per request: round-robin
over the endpoint's ready replicas. A replica that cannot be reached (refused,
unreachable, no connection in time: the request never left) is taken out of
rotation and the request goes to the next one, so a replica that dies between
health checks costs no request beyond those it was answering.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from ..endpoints import Replica, Route
from ..errors import Forbidden, NotFound, Unavailable
from ..registry import local_owner
from .base import ADMIN, SESSIONS, BaiHandler
from .proxy import ServiceUnreachable, SessionProxyHandler

__all__ = ["EndpointHandler", "EndpointProxyHandler", "EndpointsHandler"]


def endpoint_view(view: dict[str, Any], base_url: str) -> dict[str, Any]:
    """The API's view with its route as a path from this server's root (left as it is
    when it came absolute from a manager elsewhere, which serves it)."""
    url = str(view.get("url", ""))
    return {**view, "url": url if url.startswith("/") else url_path_join(base_url, url)}


class EndpointsHandler(BaiHandler):
    """The caller's endpoints (``?all=true``: everyone's, for an admin); create one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        everyone = self.get_argument("all", "false").lower() in ("1", "true", "yes")
        found = await self.api.list_endpoints(everyone)
        self.write_json({"endpoints": [endpoint_view(v, self.base_url) for v in found]})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        made = await self.api.create_endpoint(self.json_body())
        self.write_json(endpoint_view(made, self.base_url), status=201)


class EndpointHandler(BaiHandler):
    """One endpoint: read it, change its settings (PATCH), delete it."""

    path_key = "endpoint"

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        self.write_json(endpoint_view(await self.api.get_endpoint(name), self.base_url))

    @web.authenticated
    @authorized
    async def patch(self, name: str) -> None:
        changed = await self.api.update_endpoint(name, self.json_body())
        self.write_json(endpoint_view(changed, self.base_url))

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        self.write_json(endpoint_view(await self.api.delete_endpoint(name), self.base_url))


class EndpointProxyHandler(SessionProxyHandler):
    """Proxies to a ready replica of the endpoint, once the caller (its owner) is allowed.

    Routed as ``/bai/endpoints/(name)()(/.*|)``: the empty group stands where the
    session proxy has the service name (an endpoint has one), so the methods and
    their arguments are the session proxy's.
    """

    #: A replica that does not accept within this is passed over for the next one.
    connect_timeout = 3.0

    def initialize(self, app: Any) -> None:
        super().initialize(app)
        self.route: Route | None = None
        self.replica: Replica | None = None
        self.tried: set[str] = set()

    async def _resolve(self, name: str, service: str) -> None:
        if not await self._allowed(SESSIONS):
            raise Forbidden(f"not allowed to use {SESSIONS}")
        router = self.bai.endpoint_router()
        if router is None:
            raise NotFound(
                "this server does not run the session manager: an endpoint is served by "
                "the server (or manager service) that does, at <its URL>/bai/endpoints/"
                f"{name}/"
            )
        owner = str(self.current_user.username) if self.bai.multi_user else local_owner()
        route = router.route(name)
        if route is None or (route.owner != owner and not await self._allowed(ADMIN)):
            raise NotFound(f"no endpoint {name!r} of {owner}")
        self.route = route
        self._hold(self._next())
        self.proxy_base = url_path_join("bai/endpoints", name)

    def _next(self) -> Replica:
        assert self.route is not None
        replica = self.route.pick(self.tried)
        if replica is None:
            starting = len(self.route.replicas) - len(self.tried)
            raise Unavailable(
                f"endpoint {self.route.name!r} has no ready replica now "
                f"({starting} routed, none passing its health check); retry"
            )
        return replica

    def _hold(self, replica: Replica) -> None:
        assert self.route is not None
        self.route.begin(replica)
        self.replica = replica
        self.target = (replica.host, replica.port)
        self.host_allowlist = [replica.host]

    def _release(self) -> None:
        if self.route is not None and self.replica is not None:
            self.route.end(self.replica)
        self.replica = None

    def on_finish(self) -> None:
        self._release()
        super().on_finish()

    def on_close(self) -> None:
        """A relayed WebSocket closed."""
        self._release()
        super().on_close()

    async def _forward(self, host: str, port: int, proxied_path: str, body: bytes | None) -> None:
        """The session proxy's request; a replica not reached hands it to the next one."""
        while True:
            try:
                await super()._forward(host, port, proxied_path, body)
                return
            except ServiceUnreachable as exc:
                assert self.route is not None and self.replica is not None
                self.route.unreachable(self.replica, str(exc.log_message))
                self.tried.add(self.replica.session_id)
                self._release()
                try:
                    replica = self._next()
                except Unavailable:
                    raise exc from None
                self._hold(replica)
                host, port = replica.host, replica.port
