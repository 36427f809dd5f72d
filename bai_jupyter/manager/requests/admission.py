"""Admission: a request validated (over a template), given its defaults, and enqueued.

Two steps, so that a caller may serve the request another way in between (a user's
launch may be served by a warm pool, :mod:`.launch`): :meth:`Admission.admit` checks
it completely and returns what was admitted; :meth:`Admission.enqueue` stores it
PENDING and wakes the scheduler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import Conflict, Forbidden, InvalidRequest, NotFound, Unavailable
from ...model import Session, SessionSpec, Status
from ...request import SpecError, apply_template
from ...resources import ResourceError
from ...scheduler.queue import NeverFits, UnknownDependency, enqueue
from ...store import AmbiguousKey, NameConflict
from ..core import Core
from ..lifecycle.images import image_known, registry_of
from ..lifecycle.multinode import MultiNode
from ..lifecycle.sftp import check_agents
from .mount_check import ADMIN_MOUNTS, MountCheck
from .policies import Policies

#: Seconds a found image is taken to stay on its agent (see ``Admission._images``).
_IMAGE_MEMORY = 10.0


class AdmissionSettings(Protocol):
    @property
    def default_image(self) -> str: ...

    @property
    def admin_host_paths(self) -> bool: ...

    @property
    def registries(self) -> list[str]: ...


@dataclass
class Admitted:
    """A request that passed every check: its spec (defaults filled in, dependencies as
    ids), for whom, and whether an admin's host paths stay allowed when it starts."""

    spec: SessionSpec
    owner: str
    #: The owner's user groups (as given, else as last known).
    groups: list[str]
    admin_mounts: bool = False


class Admission:
    """Checks a request completely before it is stored, so nothing doomed ever queues."""

    def __init__(
        self,
        core: Core,
        settings: AdmissionSettings,
        mounts: MountCheck,
        multinode: MultiNode,
        policies: Policies,
    ) -> None:
        self.core = core
        self.settings = settings
        self.mounts = mounts
        self.multinode = multinode
        self.policies = policies
        #: (image, group) → until when (monotonic) an agent is taken to have it: a burst of
        #: creates asks the engines once. One removed meanwhile is fetched in PULLING.
        self._images: dict[tuple[str, str], float] = {}

    async def admit(
        self,
        request: Mapping[str, Any],
        owner: str,
        template: str | None = None,
        dry_run: bool = False,
        groups: Sequence[str] | None = None,
        admin: bool = False,
    ) -> Admitted:
        """Validate a request (over a template) and fill in its defaults; raise what is
        wrong with it (nothing is stored but the owner's groups, when given).

        ``dry_run``: the owner's groups are not kept either. ``groups``: the owner's
        user groups as the caller's authentication says (kept for group policies and
        fair share); ``None``: as last known. ``admin``: the caller may act on
        everyone's sessions (see ``admin_host_paths``)."""
        core = self.core
        core.require_store()
        # One read for what the store knows of the owner: their groups, their pending count.
        known, pending = await core.query(
            lambda tx: (
                tx.owner_groups([owner]).get(owner),
                tx.count_sessions(owner, [Status.PENDING]),
            )
        )
        groups = await self._owner_groups(owner, known, groups, dry_run)
        tmpl = None
        if template is not None:
            tmpl = await core.query(lambda tx: tx.get_template(template, owner))
            if tmpl is None:
                raise NotFound(f"no template named {template!r}", field="template")
        try:
            spec = apply_template(tmpl, request)
        except (SpecError, ResourceError) as exc:
            raise InvalidRequest(str(exc), field=exc.field) from exc
        if spec.image is None:
            spec.image = self.settings.default_image
        group = core.groups.get(spec.resource_group)
        if group is None:
            raise InvalidRequest(
                f"resource_group: no group {spec.resource_group!r} "
                f"(groups: {', '.join(sorted(core.groups))})",
                field="resource_group",
            )
        try:
            # Every kernel holds real slots: the group's defaults fill what is left out.
            spec.resources = group.config.kernel_resources(spec.resources)
        except ResourceError as exc:
            raise InvalidRequest(str(exc), field=exc.field) from exc
        for i, role in enumerate(spec.roles):  # and no role asks for less than the minimum
            try:
                group.config.kernel_resources(spec.resources.updated(role.resources))
            except ResourceError as exc:
                field = f"roles[{i}].{exc.field or 'resources'}"
                raise InvalidRequest(f"roles[{i}].{exc}", field=field) from exc
        limits = self.policies.for_owner(owner, groups)
        for image in spec.images:  # every role's image: allowed, and on an agent
            refusal = limits.refuse(image, spec.resource_group, pending)
            if refusal is not None:
                raise Forbidden(refusal)
        check_agents(spec, core.agents.values())
        for image in spec.images:
            await self._check_image(image, spec.resource_group, _image_field(spec, image))
        any_path = admin and self.settings.admin_host_paths
        for role in spec.cluster_roles():
            try:
                await asyncio.to_thread(self.mounts.resolve, role.mounts, owner, False, any_path)
            except ValueError as exc:
                raise InvalidRequest(f"mounts: {exc}", field="mounts") from exc
        await self.multinode.admit(spec, owner)
        resolved = [await self._resolve_id(dep, owner) for dep in spec.depends_on]
        spec.depends_on = list(dict.fromkeys(resolved))  # a name and its id: once
        return Admitted(spec, owner, groups, admin_mounts=any_path and bool(spec.mounts))

    async def enqueue(
        self, admitted: Admitted, meta: Mapping[str, Any] | None = None, dry_run: bool = False
    ) -> Session:
        """Store an admitted request PENDING (refused if it could never fit the group's
        agents), tell, and wake the scheduler; ``dry_run``: the session it would be."""
        core = self.core
        store = core.require_store()
        session = Session.create(admitted.spec, admitted.owner, time.time())
        session.meta = dict(meta or {})
        if admitted.admin_mounts:  # an admin's host paths stay allowed when it starts
            session.status_data = {**session.status_data, ADMIN_MOUNTS: True}
        try:
            await asyncio.to_thread(enqueue, store, session, dry_run)
        except NeverFits as exc:  # "resource group 'x': needs …": the resources ask too much
            raise InvalidRequest(str(exc), field="resources") from exc
        except UnknownDependency as exc:
            raise InvalidRequest(str(exc), field="depends_on") from exc
        except NameConflict as exc:
            raise Conflict(str(exc), field="name") from exc
        if not dry_run:
            core.hub.poke()  # its event was logged with it
            core.wake()
        return session

    async def _owner_groups(
        self, owner: str, known: list[str] | None, groups: Sequence[str] | None, dry_run: bool
    ) -> list[str]:
        """The owner's groups: as given (then kept), else as the store last heard them
        (``known``)."""
        if groups is None:
            return known or []
        said = sorted(set(groups))
        if not dry_run and said != known:  # a write (serialized) only when they changed
            now = time.time()
            await self.core.db(lambda tx: tx.set_owner_groups(owner, said, now))
        return said

    async def _check_image(self, image: str, group: str, field: str = "image") -> None:
        """Refuse at once an image no agent has and no registry serves (an agent that lacks
        it gets it when the session starts, in PULLING); the refusal names ``field``, where
        the request asked for it (``image``, ``roles[1].image``)."""
        if self._images.get((image, group), 0.0) > time.monotonic():
            return
        known, failures = await image_known(self.core, image, group, self.settings.registries)
        if known:
            self._images[(image, group)] = time.monotonic() + _IMAGE_MEMORY
            return
        registry = registry_of(image)
        if not failures and registry not in self.settings.registries:
            raise InvalidRequest(
                f"{field}: {image} is on no agent, and its registry {registry} is not one the "
                f"agents may pull from (BaiSessionManager.registries: "
                f"{', '.join(self.settings.registries) or 'none'}); use an image an agent has "
                "or one of those registries",
                field=field,
            )
        if failures:
            raise Unavailable("; ".join(failures))
        if self.core.agents:
            hint = (
                "build it: bai-jupyter image build"
                if image == self.settings.default_image
                else "pull or build it on an agent first"
            )
            raise InvalidRequest(
                f"{field}: {image} is on no agent of resource group {group!r}, nor on another "
                f"agent, nor in a registry the agents reach; {hint}",
                field=field,
            )

    async def _resolve_id(self, key: str, owner: str) -> str:
        try:
            session = await self.core.query(lambda tx: tx.get_session(key, owner))
        except AmbiguousKey as exc:
            raise InvalidRequest(f"depends_on: {exc}", field="depends_on") from None
        if session is None:
            raise InvalidRequest(f"depends_on: {owner} has no session {key!r}", field="depends_on")
        return session.id


def _image_field(spec: SessionSpec, image: str) -> str:
    """Where ``spec`` asks for ``image``: ``image`` (the session's, which a role that names
    none runs), else the first role that names it, ``roles[N].image``."""
    if image == spec.image:
        return "image"
    for i, role in enumerate(spec.roles):
        if role.image == image:
            return f"roles[{i}].image"
    return "image"
