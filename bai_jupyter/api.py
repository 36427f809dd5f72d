"""The one door to the manager: what a front end may ask of it, on behalf of one caller.

Every front end (the REST handlers, the kernel provisioner, ``%bai`` and its
widgets) goes through :class:`SessionsAPI` and nothing else, so each works the
same against the manager in this process (:class:`bai_jupyter.manager.ScopedManager`,
scoped to the caller) and against a manager elsewhere over HTTP
(:class:`bai_jupyter.client.RemoteManager`, scoped by its token on the server).

The caller sees their own sessions and templates (names resolve among theirs);
an admin also reaches everyone's sessions by id. Errors are
:mod:`bai_jupyter.errors` exceptions in both implementations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Protocol

from .model import ExecResult, Session, Status
from .request import Template

__all__ = ["ExecResult", "SessionsAPI"]


class SessionsAPI(Protocol):
    """One caller's sessions and templates, and what they may see of the agents and queue."""

    # --- sessions -----------------------------------------------------------------------------

    async def create(
        self,
        request: Mapping[str, Any],
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Session:
        """Validate a request (over a template) and enqueue it: the PENDING session.

        ``dry_run``: only validate (and fill defaults); nothing is stored or started."""
        ...

    async def get(self, key: str, connection: bool = False) -> Session:
        """A session by id or name; ``connection``: with its kernels' connection keys."""
        ...

    async def list_sessions(
        self, statuses: Iterable[Status] | None = None, everyone: bool = False
    ) -> list[Session]:
        """The caller's sessions, oldest first (``everyone``: all users', for an admin)."""
        ...

    async def destroy(self, key: str, reason: str = "user-requested") -> Session:
        """Cancel a pending session, or terminate a starting or running one."""
        ...

    async def purge(self, key: str) -> Session:
        """Delete an ended session's record (Conflict while it has not ended)."""
        ...

    async def wait_for(
        self, key: str, statuses: Iterable[Status], timeout: float | None = None
    ) -> Session:
        """Wait until the session is in one of ``statuses`` or has ended; Timeout otherwise."""
        ...

    async def logs(self, key: str, kernel: str = "main1", tail: int | None = None) -> str:
        """A kernel's last ``tail`` lines (default: the manager's ``log_tail``) within its
        ``log_limit`` bytes: live while it runs, kept after it ends."""
        ...

    async def exec(
        self, key: str, command: list[str], kernel: str = "main1", timeout: float = 60
    ) -> ExecResult:
        """Run a command (argv) in one kernel of a running session; the output's last
        ``exec_output_limit`` bytes (``ExecResult.dropped``: how many came before)."""
        ...

    async def signal(self, key: str, signum: int, kernel: str = "main1") -> None:
        """SIGINT interrupts main1's ipykernel, SIGHUP restarts it in place."""
        ...

    async def add_service_port(self, key: str, service_port: str) -> Session:
        """Declare ``name:proto:port`` on a running session's main1 (for the proxy)."""
        ...

    async def touch(self, key: str, source: str = "api") -> None:
        """Note that the session is in use now (resets its idle_timeout); ``source`` says
        what used it (``execute``, ``proxy``, ``api`` …). Conflict unless it is running."""
        ...

    async def revoke_kernel_tokens(self, key: str) -> float:
        """Make the session's kernel tokens issued so far stop working; when (epoch s)."""
        ...

    async def server_alive(self, server: str) -> float:
        """The caller's Jupyter server ``server`` is alive (its heartbeat): the sessions
        its kernels launched (meta ``jupyter_server``) keep running; the seconds until the
        next heartbeat is due."""
        ...

    def events(self, since: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Changes of the sessions the caller may see, as they happen, each with its
        ``seq``; ``since``: first those after that ``seq`` (or a ``reset`` event where they
        are no longer kept)."""
        ...

    # --- templates ----------------------------------------------------------------------------

    async def list_templates(self) -> list[Template]:
        """Shared templates and the caller's own."""
        ...

    async def get_template(self, name: str) -> Template:
        """The caller's template of that name, else the shared one."""
        ...

    async def create_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        """Add a template (``shared``: everyone's; admins only); Conflict if the name is taken."""
        ...

    async def put_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        """Create or replace a template (``shared``: everyone's; admins only)."""
        ...

    async def delete_template(self, name: str, shared: bool = False) -> None:
        """Remove the caller's template of that name (or the shared one, for an admin)."""
        ...

    # --- inference endpoints ------------------------------------------------------------------

    async def create_endpoint(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A new endpoint (name, replica request, service, health, scaling; see
        docs/endpoints.md); its minimum of replicas starts. Conflict if the name is taken."""
        ...

    async def list_endpoints(self, everyone: bool = False) -> list[dict[str, Any]]:
        """The caller's endpoints by name (``everyone``: all users', for an admin)."""
        ...

    async def get_endpoint(self, name: str) -> dict[str, Any]:
        """An endpoint: its settings, replicas, load and scaling decisions."""
        ...

    async def update_endpoint(self, name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Change settings; a new replica request rolls out replica by replica."""
        ...

    async def delete_endpoint(self, name: str) -> dict[str, Any]:
        """Remove an endpoint; its replicas end."""
        ...

    # --- what the caller may see of the agents and the queue ----------------------------------

    async def agents(self) -> list[dict[str, Any]]:
        """Each agent's capacity, occupied and free slots, and the kernels on it."""
        ...

    async def queue(self) -> dict[str, Any]:
        """Per resource group: its scheduler settings and pending queue in the next pass's order."""
        ...

    async def leader(self) -> dict[str, Any]:
        """``replica``: the manager process that answers; ``leader``: the store's lease
        (``{"replica", "epoch", "expires_in"}``), whose holder schedules."""
        ...

    async def pools(self) -> list[dict[str, Any]]:
        """The warm pools: size, limits, warm and starting sessions, claim/hit/miss counts."""
        ...
