"""``GET {base_url}health``: a load balancer's check of a manager replica, no credentials.

HAProxy (see docs/jupyterhub.md, "HA and scale") asks every replica twice a second.
An API route would answer it 403 and log a warning each time; this one answers
``200 {"status": "serving", "leads": …}`` once the manager has started, ``503
{"status": "starting"}`` before, and says nothing else about the deployment.
"""

from __future__ import annotations

from tornado import web

from ..server.host import ApiHost

__all__ = ["HealthHandler"]


class HealthHandler(web.RequestHandler):
    """Whether this replica serves; whether it leads the store (for an operator's eye)."""

    def initialize(self, host: ApiHost) -> None:
        self.host = host

    def get(self) -> None:
        manager = self.host.manager
        if manager is None or not manager.started:
            self.set_status(503)
            self.finish({"status": "starting"})
            return
        self.finish({"status": "serving", "leads": bool(manager.leadership.leading)})
