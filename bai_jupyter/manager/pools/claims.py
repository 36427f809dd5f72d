"""Claiming a warm session: a create served by a pool instead of the queue.

Three steps, so that two managers on one store never hand one session to two
users: (1) in one write transaction, check that nobody waits in the group's
queue and that the caller's limits allow one more such session, then reserve
the oldest warm session of the pool; (2) hand its kernel over (:mod:`.handover`:
the notebook's folder); (3) in a second transaction, make it the caller's. A
warm session that dies meanwhile or will not take the hand-over sends the
launch to the queue like any other (a miss).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from ...model import Session, SessionSpec, Status
from ...scheduler.context import PassContext
from ...scheduler.placement import AgentPool
from ...scheduler.predicates import concurrency, owner_resources
from ...scheduler.queue import load_snapshot
from ...store import Transaction
from ..core import Core
from ..owners import POOL_OWNER, exempt
from ..requests.mount_check import MountCheck
from ..requests.policies import Policies
from ..watchdogs.idle_rules import IdleFollow
from .config import MARK, PoolConfig, count, pool_key, reserved, warm_mark
from .handover import HandoverError, hand_over
from .warm_pool import PoolKeeper

__all__ = ["PoolClaims"]


class _Gone(Exception):
    """The reserved warm session ended before it was handed over."""


class PoolClaims:
    """Serves creates from the pools a :class:`~.warm_pool.PoolKeeper` keeps."""

    def __init__(
        self,
        core: Core,
        keeper: PoolKeeper,
        mounts: MountCheck,
        policies: Policies,
        follow: IdleFollow,
    ) -> None:
        self.core = core
        self.keeper = keeper
        self.mounts = mounts
        self.policies = policies
        #: Told a session just claimed, before its caller has it (the idle rules follow
        #: its kernel from then on, as they do a cold one's before RUNNING).
        self.follow = follow

    def _pool_of(self, spec: SessionSpec) -> tuple[PoolConfig, str] | None:
        key = pool_key(spec)
        for pool in self.keeper.configs:
            resolved = self.keeper.resolved.get(pool.name)
            if isinstance(resolved, tuple) and resolved[0] == key:
                return pool, key
        return None

    async def claim(
        self, spec: SessionSpec, owner: str, meta: Mapping[str, Any], groups: Sequence[str]
    ) -> Session | None:
        """The caller's session made of a warm one, or ``None``: start it cold."""
        found = self._pool_of(spec) if not exempt(owner) and not spec.name else None
        if found is None:
            return None
        pool, key = found
        notebook = bool(meta.get("notebook_dir")) and bool(self.keeper.settings.notebook_root)
        if notebook != self.keeper.has_notebook(pool):
            return None  # it would mount what the launch does not, or the reverse
        warm = await self.core.db(lambda tx: self._reserve(tx, pool, key, spec, owner, groups))
        if warm is None:
            return None
        try:
            await self._hand_over(warm, meta)
        except HandoverError as exc:
            self.core.log.warning("bai-jupyter: warm session %s not handed over: %s", warm.id, exc)
            await self.keeper.end(warm, "pool-broken")
            await self.core.db(lambda tx: count(tx, pool.name, "misses"))
            return None
        try:
            claimed = await self.core.edit(warm.id, lambda s: _transfer(s, pool, spec, owner, meta))
        except _Gone:
            return None
        await self.follow.before_running(claimed)
        self.keeper.wake()  # refill
        return claimed

    def _reserve(
        self,
        tx: Transaction,
        pool: PoolConfig,
        key: str,
        spec: SessionSpec,
        owner: str,
        groups: Sequence[str],
    ) -> Session | None:
        """In one transaction: may ``owner`` have one now, and which warm session (marked
        reserved); counts the claim, as a hit or a miss."""
        count(tx, pool.name, "claims")
        now = time.time()
        snapshot = load_snapshot(tx, spec.resource_group)
        group = self.core.groups.get(spec.resource_group)
        allowed = False
        if group is not None and all(exempt(s.owner) for s in snapshot.pending):
            config = group.config
            policy = self.policies.scheduler_policy(owner, groups, config.policy(owner))
            config = dataclasses.replace(
                config, owner_policies={**config.owner_policies, owner: policy}
            )
            ctx = PassContext(now, config, snapshot, AgentPool(snapshot.agents).capacity)
            candidate = Session.create(spec, owner, now)
            allowed = not any(check(candidate, ctx) for check in (concurrency, owner_resources))
        warm = [
            s
            for s in tx.list_sessions(
                owner=POOL_OWNER, statuses=[Status.RUNNING], resource_group=spec.resource_group
            )
            if warm_mark(s).get("pool") == pool.name
            and warm_mark(s).get("key") == key
            and not reserved(s, now)
        ]
        if not allowed or not warm:
            count(tx, pool.name, "misses")
            return None
        chosen = warm[0]
        before = copy.deepcopy(chosen)
        chosen.meta = {**chosen.meta, MARK: {**warm_mark(chosen), "reserved": now}}
        tx.save_session(chosen, before)
        count(tx, pool.name, "hits")
        return chosen

    async def _hand_over(self, warm: Session, meta: Mapping[str, Any]) -> None:
        """Move main1's ipykernel to the folder a cold start would give it."""
        main = warm.main
        agent = self.core.agents.get(main.agent_id or "")
        connection = main.info.get("connection")
        if agent is None or not isinstance(connection, dict) or not connection.get("key"):
            raise HandoverError("main1 runs no kernel to hand over")
        have = self.mounts.notebook_mount(warm, agent, [])[1]
        view = copy.copy(warm)
        view.meta = dict(meta)
        want = self.mounts.notebook_mount(view, agent, [])[1]
        if have is not None and want is not None and want != have:
            await hand_over(connection, str(PurePosixPath(want).relative_to(have)))


def _transfer(
    session: Session, pool: PoolConfig, spec: SessionSpec, owner: str, meta: Mapping[str, Any]
) -> None:
    """The warm session becomes the caller's, as their cold one would have been."""
    if session.owner != POOL_OWNER or session.status is not Status.RUNNING:
        raise _Gone(session.id)
    now = time.time()
    session.owner = owner
    session.spec.priority = spec.priority
    session.meta = dict(meta)
    session.created_at = now
    session.status_data = {**session.status_data, MARK: {"pool": pool.name, "claimed_at": now}}
