"""Endpoint records: created, read, updated (a new generation rolls out), deleted; and views.

Names are unique in the store (an endpoint's name is its URL). The owner, and an
admin, may read and change an endpoint; anyone else is told it does not exist.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...endpoints import Endpoint, Load, parse_endpoint, parse_update
from ...errors import Conflict, InvalidRequest, NotFound
from ...model import NOT_ENDED, Session, Status, new_id
from ...request import SpecError
from ...store import NameConflict
from ..core import Core
from ..requests.launch import Launcher
from .meta import endpoint_of, replica_generation
from .replicas import ReplicaKeeper

__all__ = ["Endpoints"]


def _parsed(parse: Callable[[], Any]) -> Any:
    try:
        return parse()
    except SpecError as exc:
        raise InvalidRequest(str(exc), field=exc.field) from None


class Endpoints:
    """What the API does with endpoints; :class:`ReplicaKeeper` does the rest."""

    def __init__(self, core: Core, keeper: ReplicaKeeper, launcher: Launcher) -> None:
        self.core = core
        self.keeper = keeper
        #: Checks a replica request for its owner (a dry run), as its replicas will be made.
        self.launcher = launcher

    async def _check(
        self, request: Mapping[str, Any], owner: str, groups: Sequence[str] | None, admin: bool
    ) -> None:
        """Raise what a create of this replica request would (nothing is stored)."""
        await self.launcher.create(request, owner, dry_run=True, groups=groups, admin=admin)

    async def create(
        self,
        body: Mapping[str, Any],
        owner: str,
        groups: Sequence[str] | None = None,
        admin: bool = False,
    ) -> dict[str, Any]:
        """A new endpoint with ``min_replicas`` replicas on their way."""
        name, spec = _parsed(lambda: parse_endpoint(body))
        await self._check(spec.replica, owner, groups, admin)
        endpoint = Endpoint(new_id(), name, owner, spec, time.time(), desired=0)
        minimum = spec.scaling.min_replicas
        endpoint.decide(endpoint.created_at, minimum, f"created: min_replicas {minimum}")
        try:
            async with self.keeper.lock:
                await self.core.db(lambda tx: tx.add_endpoint(endpoint))
        except NameConflict as exc:
            raise Conflict(f"{exc}; pick another name", field="name") from None
        self.keeper.wake()
        return self.view(endpoint, [])

    async def get(self, name: str, owner: str, admin: bool = False) -> dict[str, Any]:
        endpoint = await self._find(name, owner, admin)
        return self.view(endpoint, await self._replicas(endpoint.id))

    async def list_all(self, owner: str | None) -> list[dict[str, Any]]:
        """The owner's endpoints (everyone's for ``None``), by name."""
        found = await self.core.query(lambda tx: tx.list_endpoints(owner))
        sessions = await self.core.list_sessions(owner, NOT_ENDED)
        return [self.view(e, [s for s in sessions if endpoint_of(s) == e.id]) for e in found]

    async def update(
        self,
        name: str,
        body: Mapping[str, Any],
        owner: str,
        groups: Sequence[str] | None = None,
        admin: bool = False,
    ) -> dict[str, Any]:
        """New settings; a new replica request is a new generation, rolled out one by one."""
        endpoint = await self._find(name, owner, admin)
        spec = _parsed(lambda: parse_update(body, endpoint.spec))
        if spec.replica != endpoint.spec.replica:
            await self._check(spec.replica, endpoint.owner, groups, admin)

        def change(record: Endpoint) -> None:
            if spec.replica != record.spec.replica:
                record.begin_rollout(time.time())
                record.decide(
                    time.time(),
                    record.desired,
                    f"updated: generation {record.generation} replaces the replicas one by one",
                )
            record.spec = spec

        updated = await self.keeper.edit(endpoint.id, change)
        if updated is None:
            raise NotFound(f"endpoint {name!r} was deleted meanwhile")
        self.keeper.wake()
        return self.view(updated, await self._replicas(updated.id))

    async def delete(self, name: str, owner: str, admin: bool = False) -> dict[str, Any]:
        """Remove the endpoint; its replicas end (``endpoint-deleted``) in the background."""
        endpoint = await self._find(name, owner, admin)
        async with self.keeper.lock:
            await self.core.db(lambda tx: tx.delete_endpoint(endpoint.id))
        self.keeper.wake()  # the next round ends its replicas
        return self.view(endpoint, await self._replicas(endpoint.id))

    # --- helpers ------------------------------------------------------------------------------

    async def _find(self, name: str, owner: str, admin: bool) -> Endpoint:
        found: Endpoint | None = await self.core.query(lambda tx: tx.get_endpoint(name))
        if found is None or (found.owner != owner and not admin):
            raise NotFound(f"no endpoint {name!r} of {owner}")
        return found

    async def _replicas(self, endpoint_id: str) -> list[Session]:
        sessions = await self.core.list_sessions(None, NOT_ENDED)
        return [s for s in sessions if endpoint_of(s) == endpoint_id]

    def view(self, endpoint: Endpoint, sessions: list[Session]) -> dict[str, Any]:
        """The endpoint as the API shows it: its record, replicas, load and any trouble."""
        route = self.keeper.router.routes.get(endpoint.name)
        routed = route.replicas if route is not None and route.endpoint_id == endpoint.id else {}
        replicas = []
        for session in sessions:
            replica = routed.get(session.id)
            replicas.append(
                {
                    "session_id": session.id,
                    "status": session.status.value,
                    "generation": replica_generation(session),
                    **(replica.to_json() if replica else {"healthy": False, "draining": False}),
                }
            )
        ready = sum(1 for r in routed.values() if r.ready)
        if ready:
            state = "ready"
        elif any(s.status is Status.PENDING for s in sessions):
            state = "queued"
        else:
            state = "starting"
        load = route.load if route is not None else Load()
        record = endpoint.to_json()
        if record["rollout"] is not None:
            record["rollout"].pop("previous", None)  # the spec it would go back to: kept only
        return {
            **record,
            "url": f"bai/endpoints/{endpoint.name}/",
            "state": state,
            "ready_replicas": ready,
            "replicas": replicas,
            "load": load.to_json(),
            "error": self.keeper.errors.get(endpoint.id),
        }
