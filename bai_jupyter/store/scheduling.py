"""What a scheduling pass reads and writes beyond sessions: occupancy, the change counter.

The change counter (``bai_meta`` key ``changes``) is bumped by every committed write
transaction that may make room or add work (see ``Transaction.changed``); a pass that
placed nothing leaves an idle mark with the counter it saw, so the next pass of that
group skips the work while the counter is the same. Both live in the store, so every
manager process on it sees the other's changes.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..model import Session, SessionResult, SessionSpec, Status, session_event
from ..request import parse_spec
from ..resources import ResourceSlot
from .bulk import insert_many, update_many
from .events import log_events
from .rows import OCCUPYING_VALUES, chunks
from .sessions import adjust_occupied
from .tables import history_table, kernels_table, meta_table, sessions_table

_CHANGES = "changes"

#: Per owner: sessions holding slots, slots held anywhere, slots held in one group.
Occupancy = tuple[dict[str, int], dict[str, ResourceSlot], dict[str, ResourceSlot]]


def _idle_key(resource_group: str) -> str:
    # bai_meta keys are at most 64 characters; a group's name may be as long.
    return "idle-pass:" + hashlib.sha256(resource_group.encode()).hexdigest()[:32]


class SchedulingRecords:
    """The counters and aggregates a scheduling pass needs, in one transaction."""

    conn: Connection
    changed: bool

    def occupancy(self, resource_group: str) -> Occupancy:
        """Per owner: how many sessions hold slots, what they hold, what in ``resource_group``.

        Aggregated by the database per distinct kernel shape, so the rows read grow with
        the owners and shapes, not with the running sessions."""
        k, s = kernels_table.c, sessions_table.c
        holding = k.status.in_(OCCUPYING_VALUES)
        sessions = {
            row.owner: int(row.n)
            for row in self.conn.execute(
                sa.select(s.owner, sa.func.count(sa.distinct(s.id)).label("n"))
                .join(kernels_table, k.session_id == s.id)
                .where(holding)
                .group_by(s.owner)
            )
        }
        shape = sa.cast(k.slots, sa.Text)
        held: dict[str, ResourceSlot] = defaultdict(ResourceSlot)
        in_group: dict[str, ResourceSlot] = defaultdict(ResourceSlot)
        parsed: dict[str, ResourceSlot] = {}
        for row in self.conn.execute(
            sa.select(s.owner, s.resource_group, shape.label("shape"), sa.func.count().label("n"))
            .join(kernels_table, k.session_id == s.id)
            .where(holding)
            .group_by(s.owner, s.resource_group, shape)
        ):
            slots = parsed.get(row.shape)
            if slots is None:
                slots = parsed[row.shape] = ResourceSlot(json.loads(row.shape))
            amount = slots * int(row.n)
            held[row.owner] = held[row.owner] + amount
            if row.resource_group == resource_group:
                in_group[row.owner] = in_group[row.owner] + amount
        return sessions, dict(held), dict(in_group)

    def pending_for_pass(self, resource_group: str) -> list[Session]:
        """The group's pending sessions, oldest first, as a pass needs them: no history, no
        kernels, no front ends' meta; a spec stored many times over is parsed once."""
        s = sessions_table.c
        specs: dict[str, SessionSpec] = {}
        found = []
        for row in self.conn.execute(
            sa.select(
                s.id, s.owner, s.created_at, s.status_info, s.status_data, s.result,
                sa.cast(s.spec, sa.Text).label("spec"),
            )
            .where(s.resource_group == resource_group, s.status == Status.PENDING.value)
            .order_by(s.created_at, s.id)
        ):  # fmt: skip
            spec = specs.get(row.spec)
            if spec is None:
                spec = specs[row.spec] = parse_spec(json.loads(row.spec), bounded=False)
            found.append(
                Session(
                    id=row.id,
                    owner=row.owner,
                    spec=spec,
                    created_at=row.created_at,
                    status_info=row.status_info,
                    status_data=row.status_data,
                    result=SessionResult(row.result),
                )
            )
        return found

    def write_decisions(
        self, sessions: Sequence[Session], placed: Mapping[str, Sequence[str]]
    ) -> None:
        """Write what a pass decided for pending ``sessions`` (loaded by
        :meth:`pending_for_pass`, moved in memory to SCHEDULED or CANCELLED): their rows and
        newest history entry, their kernels (agent and status, in the order main1, sub1 …;
        ``placed``: session id → agent ids), the agents' ``occupied``. A few statements in
        all, whatever the number of sessions."""
        if not sessions:
            return
        self.changed = True
        update_many(
            self.conn,
            sessions_table,
            [{"id": x.id, "status": x.status.value, "status_info": x.status_info,
              "status_data": x.status_data} for x in sessions],
        )  # fmt: skip
        last = [(x.id, x.status_history[-1]) for x in sessions]
        insert_many(
            self.conn,
            history_table,
            [{"session_id": i, "status": e.status.value, "at": e.at, "info": e.info}
             for i, e in last],
        )  # fmt: skip
        k = kernels_table.c
        kernels: list[dict[str, Any]] = []
        deltas: dict[str, list[tuple[ResourceSlot, int]]] = defaultdict(list)
        shapes: dict[str, ResourceSlot] = {}
        for chunk in chunks(sorted(placed)):
            rows = self.conn.execute(
                sa.select(k.id, k.session_id, sa.cast(k.slots, sa.Text).label("slots"))
                .where(k.session_id.in_(chunk))
                .order_by(k.session_id, k.role, k.cluster_idx)
            )
            index: dict[str, int] = defaultdict(int)
            for row in rows:
                agent_id = placed[row.session_id][index[row.session_id]]
                index[row.session_id] += 1
                kernels.append({"id": row.id, "agent_id": agent_id, "status": "SCHEDULED"})
                slots = shapes.get(row.slots)
                if slots is None:
                    slots = shapes[row.slots] = ResourceSlot(json.loads(row.slots))
                deltas[agent_id].append((slots, +1))
        update_many(self.conn, kernels_table, kernels)
        ended = [x for x in sessions if x.id not in placed]
        # Pending kernels hold nothing: their status alone changes.
        update_many(
            self.conn,
            kernels_table,
            [{"session_id": x.id, "status": x.status.value, "status_info": x.status_info}
             for x in ended],
            key="session_id",
        )  # fmt: skip
        adjust_occupied(self.conn, deltas)
        # Their events, in this transaction: every kernel now has its session's status.
        hosts: dict[str, list[str]] = defaultdict(list)
        for chunk in chunks([x.id for x in sessions]):
            rows = self.conn.execute(
                sa.select(k.session_id, k.hostname)
                .where(k.session_id.in_(chunk))
                .order_by(k.session_id, k.role, k.cluster_idx)
            )
            for row in rows:
                hosts[row.session_id].append(row.hostname)
        log_events(
            self.conn,
            [
                {**session_event(x), "kernels": {h: x.status.value for h in hosts[x.id]}}
                for x in sessions
            ],
        )

    def change_count(self) -> int:
        row = self.conn.execute(
            sa.select(meta_table.c.value).where(meta_table.c.key == _CHANGES)
        ).first()
        return int(row.value) if row else 0

    def bump_changes(self) -> None:
        """Count one more change (the caller holds the store's write lock)."""
        value = meta_table.c.value
        done = self.conn.execute(
            sa.update(meta_table)
            .where(meta_table.c.key == _CHANGES)
            .values(value=sa.cast(sa.cast(value, sa.Integer) + 1, sa.String))
        )
        if not done.rowcount:
            self.conn.execute(sa.insert(meta_table), [{"key": _CHANGES, "value": "1"}])

    def idle_mark(self, resource_group: str) -> dict[str, Any] | None:
        """What the group's last pass that placed nothing left (None: no such pass)."""
        row = self.conn.execute(
            sa.select(meta_table.c.value).where(meta_table.c.key == _idle_key(resource_group))
        ).first()
        return None if row is None else dict(json.loads(row.value))

    def set_idle_mark(self, resource_group: str, mark: dict[str, Any] | None) -> None:
        """Leave (or, with None, clear) the group's idle mark; no change for the counter."""
        key = _idle_key(resource_group)
        if mark is None:
            self.conn.execute(sa.delete(meta_table).where(meta_table.c.key == key))
            return
        value = json.dumps(mark, separators=(",", ":"))
        done = self.conn.execute(
            sa.update(meta_table).where(meta_table.c.key == key).values(value=value)
        )
        if not done.rowcount:
            self.conn.execute(sa.insert(meta_table), [{"key": key, "value": value}])

    def count_tries(
        self, resource_group: str, tried_at: float, now: float
    ) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """One more try, at ``now``, for each pending session of the group last tried at
        ``tried_at`` (what a pass that found nothing changed records): their new
        scheduler records, and the ids of all the group's pending sessions, oldest first."""
        s = sessions_table.c
        records: dict[str, dict[str, Any]] = {}
        updates, pending = [], []
        rows = self.conn.execute(
            sa.select(s.id, s.status_data)
            .where(s.resource_group == resource_group, s.status == Status.PENDING.value)
            .order_by(s.created_at, s.id)
        )
        for row in rows:
            pending.append(row.id)
            record = (row.status_data or {}).get("scheduler") or {}
            if record.get("last_try") == tried_at:
                record = {**record, "retries": int(record.get("retries", 0)) + 1, "last_try": now}
                records[row.id] = record
                updates.append(
                    {"id": row.id, "status_data": {**row.status_data, "scheduler": record}}
                )
        update_many(self.conn, sessions_table, updates)
        return records, pending
