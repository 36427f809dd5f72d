"""A caller's create: admitted, then served by a warm pool when one matches, else queued.

This is the one way a caller's request becomes a session (the API's ``create``,
an endpoint's replicas and its dry runs). The warm pools make their own sessions
through :class:`~.admission.Admission` directly; no caller may create as their
owner (:func:`~..owners.exempt`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import Forbidden
from ...model import Session
from ..owners import exempt
from ..pools.claims import PoolClaims
from .admission import Admission

__all__ = ["Launcher"]


class Launcher:
    """Admits a caller's request, claims a warm session for it or enqueues it."""

    def __init__(self, admission: Admission, claims: PoolClaims) -> None:
        self.admission = admission
        self.claims = claims

    async def create(
        self,
        request: Mapping[str, Any],
        owner: str,
        template: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        groups: Sequence[str] | None = None,
        admin: bool = False,
    ) -> Session:
        """Validate a request (over a template), enqueue it, and return the PENDING session
        (or a RUNNING one, claimed from a warm pool).

        ``dry_run``: every check, defaults filled in, nothing stored or started.
        ``groups``: the owner's user groups as the caller's authentication says (kept
        for group policies and fair share); ``None``: as last known. ``admin``: the
        caller may act on everyone's sessions (see ``admin_host_paths``)."""
        if exempt(owner):
            raise Forbidden(f"the owner name {owner!r} is reserved for the warm pools")
        admitted = await self.admission.admit(request, owner, template, dry_run, groups, admin)
        if not dry_run:
            claimed = await self.claims.claim(
                admitted.spec, owner, dict(meta or {}), admitted.groups
            )
            if claimed is not None:
                return claimed
        return await self.admission.enqueue(admitted, meta, dry_run)
