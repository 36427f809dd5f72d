"""The scheduler against the store: enqueue a session, run a pass, atomically.

Both run inside one write transaction of the store, so a pass's snapshot,
decisions and reservations cannot interleave with another writer's, even
another process's on the same store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence

from ..model import Session, Status
from ..store import Store, Transaction
from .config import OwnerPolicy, SchedulerConfig
from .context import Snapshot
from .dispatcher import PassResult, schedule
from .placement import never_fits
from .selectors import AgentSelector
from .sequencers import Sequencer

#: Per-owner limits from outside the resource group: (owner, their groups, the group's own).
OwnerPolicyOf = Callable[[str, Sequence[str], OwnerPolicy], OwnerPolicy]


class NeverFits(ValueError):
    """A request that could not run even on the group's empty agents."""


class UnknownDependency(ValueError):
    """``depends_on`` names a session that does not exist."""


def enqueue(store: Store, session: Session, dry_run: bool = False) -> None:
    """Store a new PENDING session, refusing what could never be scheduled.

    ``dry_run``: every check (the name's included), then nothing is stored."""
    with store.write() as tx:
        # A lost agent (not schedulable for now) may come back: what it would hold waits.
        agents = [
            dataclasses.replace(a, schedulable=True)
            for a in tx.list_agents(session.spec.resource_group)
        ]
        why = never_fits(session.spec, agents)
        if why is not None:
            raise NeverFits(f"resource group {session.spec.resource_group!r}: {why}")
        missing = set(session.spec.depends_on) - set(tx.dependency_states(session.spec.depends_on))
        if missing:
            raise UnknownDependency(f"depends_on: no session {', '.join(sorted(missing))}")
        if dry_run:  # the name check too, then undone
            with tx.conn.begin_nested() as added:
                tx.add_session(session)
                added.rollback()
            return
        tx.add_session(session)


def load_snapshot(tx: Transaction, resource_group: str, lean: bool = False) -> Snapshot:
    """Everything a pass over ``resource_group`` reads: the group's pending sessions (no
    history; ``lean``: no kernels nor meta either, as a pass needs them), its agents, and
    per owner what is held (aggregated by the database)."""
    if lean:
        pending = tx.pending_for_pass(resource_group)
    else:
        pending = tx.list_sessions(
            statuses=[Status.PENDING], resource_group=resource_group, history=False
        )
    owner_sessions, owner_occupied, owner_group_occupied = tx.occupancy(resource_group)
    owners = {s.owner for s in pending} | set(owner_group_occupied)
    return Snapshot(
        agents=tx.list_agents(resource_group),
        pending=pending,
        dependency_states=tx.dependency_states(d for s in pending for d in s.spec.depends_on),
        owner_sessions=owner_sessions,
        owner_occupied=owner_occupied,
        owner_group_occupied=owner_group_occupied,
        owner_groups=tx.owner_groups(owners),
    )


def apply_result(tx: Transaction, snapshot: Snapshot, result: PassResult, now: float) -> None:
    """Write a pass's decisions (the snapshot loaded ``lean``): reservations, why-pending
    records, cancellations; a few statements for the whole pass, not a few per session."""
    by_id = {s.id: s for s in snapshot.pending}
    decided: list[Session] = []
    for placement in result.placements:
        session = by_id[placement.session_id]
        # Not pending any more: the why-pending record would only mislead.
        data = session.status_data.copy()
        data.pop("scheduler", None)
        session.set_status(Status.SCHEDULED, now, None, data)
        decided.append(session)
    for cancel in result.cancellations:
        session = by_id[cancel.session_id]
        record = {**session.scheduler_data, "msg": cancel.msg, "last_try": now}
        session.set_status(
            Status.CANCELLED, now, cancel.status_info, {**session.status_data, "scheduler": record}
        )
        decided.append(session)
    tx.write_decisions(decided, {p.session_id: p.agent_ids for p in result.placements})
    records = dict(result.failures)
    if result.blocked_by is not None:
        msg = f"waiting behind {result.blocked_by} (head of the queue)"
        for sid in result.untried:
            if by_id[sid].scheduler_data.get("msg") != msg:
                records[sid] = {**by_id[sid].scheduler_data, "msg": msg}
    tx.set_status_data(
        {sid: {**by_id[sid].status_data, "scheduler": rec} for sid, rec in records.items()}
    )


def _config_key(config: SchedulerConfig, policy_key: str) -> str:
    """Tells a group's settings (and the owner policies') from others, across processes."""
    return hashlib.sha256(f"{config!r}|{policy_key}".encode()).hexdigest()[:16]


def _skip(tx: Transaction, resource_group: str, key: str, now: float) -> PassResult | None:
    """A pass that would decide as the group's last idle one did: it only counts the
    tries again, and returns what that pass would (the same records, the same head)."""
    mark = tx.idle_mark(resource_group)
    if mark is None or mark.get("key") != key or mark.get("changes") != tx.change_count():
        return None
    until = mark.get("until")
    if until is not None and now >= until:
        return None
    result = PassResult(blocked_by=mark.get("blocked_by"), steady_until=until, skipped=True)
    tried = mark.get("tried")
    if tried is not None:
        result.failures, pending = tx.count_tries(resource_group, tried, now)
        if result.blocked_by is not None:
            result.untried = [sid for sid in pending if sid not in result.failures]
        if result.failures:
            tx.set_idle_mark(resource_group, {**mark, "tried": now})
    return result


def run_pass(
    store: Store,
    resource_group: str,
    config: SchedulerConfig,
    sequencer: Sequencer,
    selector: AgentSelector,
    now: float | None,
    owner_policy: OwnerPolicyOf | None = None,
    policy_key: str = "",
) -> PassResult:
    """One scheduling pass over a resource group, serialized through the store.

    ``now``: the pass's time; ``None``: once the store's write lock is held, so that no
    placement is dated before a change it saw (a session that ended while the pass
    waited for the lock).

    ``owner_policy(owner, groups, the group's own)``: per-owner limits from elsewhere
    (the manager's policies), for the owners with pending sessions; ``policy_key``: what
    they are (a digest), so an idle pass is skipped only under the same policies.

    A pass that places and cancels nothing leaves an idle mark in the store: the next
    passes of the group only count their tries (no snapshot, no decisions) until the
    store's change counter moves, the settings differ, or a time-bound verdict is due."""
    key = _config_key(config, policy_key)
    with store.write() as tx:
        now = time.time() if now is None else now
        skipped = _skip(tx, resource_group, key, now)
        if skipped is not None:
            return skipped
        snapshot = load_snapshot(tx, resource_group, lean=True)
        if not snapshot.pending:
            result = PassResult()
        else:
            if owner_policy is not None:
                owners = {s.owner for s in snapshot.pending}
                config = dataclasses.replace(
                    config,
                    owner_policies={
                        **config.owner_policies,
                        **{
                            o: owner_policy(o, snapshot.owner_groups.get(o, []), config.policy(o))
                            for o in owners
                        },
                    },
                )
            result = schedule(snapshot, config, sequencer, selector, now)
            apply_result(tx, snapshot, result, now)
        idle = not result.placements and not result.cancellations
        steady = result.steady_until is None or result.steady_until > now
        mark = None
        if idle and steady and not tx.changed:
            tried = now if result.failures else None
            mark = {
                "changes": tx.change_count(),
                "key": key,
                "until": result.steady_until,
                "tried": tried,
                "blocked_by": result.blocked_by,
            }
        tx.set_idle_mark(resource_group, mark)
        return result
