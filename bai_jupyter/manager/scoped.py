"""A manager in this process as one caller's :class:`~bai_jupyter.api.SessionsAPI`.

The caller reaches their own sessions (by id or name) and templates; an admin
also reaches anyone's sessions by id. ``is_admin`` is asked only when needed,
with the action (``read`` or ``write``), as Jupyter's authorizer decides it.
A manager that runs on another thread's loop (the provisioner's embedded one)
is called there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import Conflict, Forbidden, InvalidRequest, NotFound
from ..model import ACTIVE, ExecResult, Session, SessionType, Status, reason_problem
from ..request import SpecError, Template
from .owners import exempt

if TYPE_CHECKING:
    from ..loop_thread import LoopThread
    from .manager import BaiSessionManager

__all__ = ["AdminCheck", "ScopedManager"]

T = TypeVar("T")

#: May the caller act on everyone's sessions? Called with ``"read"`` or ``"write"``.
AdminCheck = Callable[[str], Awaitable[bool]]


async def _nobody(action: str) -> bool:
    return False


def _no_commands(session: Session, what: str) -> None:
    """A system session serves SFTP only: the API runs no command and no service in it
    (the manager's own probes go to its agent directly)."""
    if session.spec.type is SessionType.SYSTEM:
        raise Forbidden(
            f"{what}: session {session.id} is a system (SFTP-only) session, which runs no "
            "commands or services; reach its data folders over SFTP"
        )


class ScopedManager:
    """One caller's view of a :class:`BaiSessionManager` (see :class:`SessionsAPI`)."""

    def __init__(
        self,
        manager: BaiSessionManager,
        owner: str,
        is_admin: AdminCheck = _nobody,
        parent: str | None = None,
        thread: LoopThread | None = None,
        groups: Sequence[str] | None = None,
    ) -> None:
        """``parent``: the session whose kernel token the caller holds (what it creates
        is recorded as that session's, which it may then manage). ``thread``: the loop
        the manager runs on, when not the caller's. ``groups``: the caller's user groups
        as their authentication says (``None``: not known here)."""
        self.manager = manager
        self.owner = owner
        self.is_admin = is_admin
        self.parent = parent
        self.thread = thread
        self.groups = groups

    async def _run(self, call: Coroutine[Any, Any, T]) -> T:
        if self.thread is None:
            return await call
        return await self.thread.call(call)

    async def _resolve(self, key: str, action: str = "read") -> Session:
        """The caller's session by id or name; anyone's by id for an admin; NotFound else."""
        try:
            return await self.manager.get(key, self.owner)
        except NotFound:
            if not await self.is_admin(action):
                raise
        return await self.manager.get(key)

    # --- sessions -----------------------------------------------------------------------------

    async def create(
        self,
        request: Mapping[str, Any],
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Session:
        # An admin's request may mount host paths (where the operator allows admins to).
        admin = bool(request.get("mounts")) and await self.is_admin("write")

        async def call() -> Session:
            session = await self.manager.create(
                request, self.owner, template, meta, dry_run, self.groups, admin
            )
            if self.parent is not None and not dry_run:
                await self.manager.kernel_tokens.note_child(session.id, self.parent)
            return session

        return await self._run(call())

    async def get(self, key: str, connection: bool = False) -> Session:
        return await self._run(self._resolve(key, "write" if connection else "read"))

    async def list_sessions(
        self, statuses: Iterable[Status] | None = None, everyone: bool = False
    ) -> list[Session]:
        owner = None if everyone and await self.is_admin("read") else self.owner
        return await self._run(self.manager.list_sessions(owner, statuses))

    async def destroy(self, key: str, reason: str = "user-requested") -> Session:
        problem = reason_problem(reason)
        if problem is not None:  # it becomes status_info, shown everywhere
            raise InvalidRequest(f"reason: {problem}", field="reason")

        async def call() -> Session:
            session = await self._resolve(key, "write")
            return await self.manager.destroy(session.id, reason=reason, by=self.owner)

        return await self._run(call())

    async def purge(self, key: str) -> Session:
        async def call() -> Session:
            return await self.manager.purge((await self._resolve(key, "write")).id)

        return await self._run(call())

    async def wait_for(
        self, key: str, statuses: Iterable[Status], timeout: float | None = None
    ) -> Session:
        async def call() -> Session:
            session = await self._resolve(key)
            return await self.manager.wait_for(session.id, statuses, timeout)

        return await self._run(call())

    async def logs(self, key: str, kernel: str = "main1", tail: int | None = None) -> str:
        async def call() -> str:
            return await self.manager.logs((await self._resolve(key)).id, kernel, tail=tail)

        return await self._run(call())

    async def exec(
        self, key: str, command: list[str], kernel: str = "main1", timeout: float = 60
    ) -> ExecResult:
        async def call() -> ExecResult:
            session = await self._resolve(key, "write")
            _no_commands(session, "exec")
            return await self.manager.exec(session.id, command, kernel, timeout=timeout)

        return await self._run(call())

    async def signal(self, key: str, signum: int, kernel: str = "main1") -> None:
        async def call() -> None:
            await self.manager.signal((await self._resolve(key, "write")).id, signum, kernel)

        await self._run(call())

    async def add_service_port(self, key: str, service_port: str) -> Session:
        async def call() -> Session:
            session = await self._resolve(key, "write")
            _no_commands(session, "service_port")
            return await self.manager.add_service_port(session.id, service_port)

        return await self._run(call())

    async def touch(self, key: str, source: str = "api") -> None:
        async def call() -> None:
            session = await self._resolve(key, "write")
            await self.manager.touch(session.id, source)

        await self._run(call())

    async def server_alive(self, server: str) -> float:
        async def call() -> float:
            return self.manager.server_alive(self.owner, server)

        return await self._run(call())

    async def revoke_kernel_tokens(self, key: str) -> float:
        async def call() -> float:
            session = await self._resolve(key, "write")
            return await self.manager.kernel_tokens.revoke(session.id)

        return await self._run(call())

    async def usage(self, key: str) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            session = await self._resolve(key)
            if session.status not in ACTIVE:
                raise Conflict(f"session {session.id} is {session.status.value}: no usage to read")
            return await self.manager.usage.now(session)

        return await self._run(call())

    async def events(
        self, since: int | None = None, usage: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        admin = await self.is_admin("read")
        source = self.manager.usage.events(since) if usage else self.manager.events(since)
        if self.thread is not None:
            source = _across(source, self.thread)
        async for event in source:
            # The manager's own sessions (a warm pool's) are nobody's: everyone sees them.
            owner = event.get("owner")
            if (
                event["type"] not in {"session", "usage"}  # about the stream itself (a reset)
                or admin
                or owner == self.owner
                or (isinstance(owner, str) and exempt(owner))
            ):
                yield event

    # --- templates ----------------------------------------------------------------------------

    async def list_templates(self) -> list[Template]:
        return await self._run(self.manager.templates.list_templates(self.owner))

    async def get_template(self, name: str) -> Template:
        return await self._run(self.manager.templates.get(name, self.owner))

    async def _template(
        self, name: str, spec: Mapping[str, Any], description: str, shared: bool
    ) -> Template:
        """A template to write; ``shared`` (everyone's) needs the admin resource."""
        if shared and not await self.is_admin("write"):
            raise Forbidden("only an admin may write shared templates")
        try:
            return Template.from_json(
                {
                    "name": name,
                    "spec": spec,
                    "description": description,
                    "owner": None if shared else self.owner,
                }
            )
        except SpecError as exc:
            raise InvalidRequest(str(exc), field=exc.field) from exc

    async def create_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        template = await self._template(name, spec, description, shared)
        return await self._run(self.manager.templates.put(template, replace=False))

    async def put_template(
        self, name: str, spec: Mapping[str, Any], description: str = "", shared: bool = False
    ) -> Template:
        template = await self._template(name, spec, description, shared)
        return await self._run(self.manager.templates.put(template))

    async def delete_template(self, name: str, shared: bool = False) -> None:
        if shared and not await self.is_admin("write"):
            raise Forbidden("only an admin may delete shared templates")
        await self._run(self.manager.templates.delete(name, None if shared else self.owner))

    # --- endpoints ----------------------------------------------------------------------------

    async def create_endpoint(self, request: Mapping[str, Any]) -> dict[str, Any]:
        admin = bool(request.get("replica", {}).get("mounts")) and await self.is_admin("write")
        endpoints = self.manager.endpoints

        async def call() -> dict[str, Any]:
            made = await endpoints.create(request, self.owner, self.groups, admin)
            if self.parent is not None:  # a kernel token's: it may manage what it made
                await self.manager.kernel_tokens.note_endpoint(made["id"], self.parent)
            return made

        return await self._run(call())

    async def list_endpoints(self, everyone: bool = False) -> list[dict[str, Any]]:
        owner = None if everyone and await self.is_admin("read") else self.owner
        return await self._run(self.manager.endpoints.list_all(owner))

    async def get_endpoint(self, name: str) -> dict[str, Any]:
        admin = await self.is_admin("read")
        return await self._run(self.manager.endpoints.get(name, self.owner, admin))

    async def update_endpoint(self, name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        admin = await self.is_admin("write")
        endpoints = self.manager.endpoints
        return await self._run(endpoints.update(name, changes, self.owner, self.groups, admin))

    async def delete_endpoint(self, name: str) -> dict[str, Any]:
        admin = await self.is_admin("write")
        return await self._run(self.manager.endpoints.delete(name, self.owner, admin))

    # --- views --------------------------------------------------------------------------------

    async def agents(self) -> list[dict[str, Any]]:
        admin = await self.is_admin("read")
        return await self._run(self.manager.agents_view(self.owner, admin))

    async def queue(self) -> dict[str, Any]:
        admin = await self.is_admin("read")
        return await self._run(self.manager.queue_view(self.owner, admin))

    async def leader(self) -> dict[str, Any]:
        return await self._run(self.manager.leadership.view())

    async def pools(self) -> list[dict[str, Any]]:
        admin = await self.is_admin("read")
        return await self._run(self.manager.pools_view(admin))


async def _across(events: AsyncIterator[T], thread: LoopThread) -> AsyncIterator[T]:
    """``events`` (iterated on ``thread``'s loop) delivered on the caller's loop."""
    here = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[bool, T | None]] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in events:
                here.call_soon_threadsafe(inbox.put_nowait, (True, event))
        finally:
            here.call_soon_threadsafe(inbox.put_nowait, (False, None))

    future = thread.submit(pump())
    try:
        while True:
            more, event = await inbox.get()
            if not more:
                return
            yield event  # type: ignore[misc]
    finally:
        future.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(future)
