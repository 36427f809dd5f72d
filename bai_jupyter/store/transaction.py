"""Reads and writes inside one store transaction."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..endpoints import Endpoint
from ..model import (
    Agent,
    HistoryEntry,
    Kernel,
    Session,
    SessionResult,
    Status,
)
from ..request import Template, parse_spec
from ..resources import ResourceSlot
from ..wire import kernel_from_json
from .errors import NameConflict
from .rows import (
    KERNEL_COLUMNS,
    LIVE,
    OCCUPYING_VALUES,
    agent_from_row,
    chunks,
    kernel_values,
    session_values,
    template_from_row,
)
from .tables import (
    agents_table,
    endpoints_table,
    history_table,
    kernels_table,
    meta_table,
    owners_table,
    sessions_table,
    templates_table,
)


class Transaction:
    """Reads and writes inside one transaction; obtained from :meth:`Store.write`/``read``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # --- sessions -------------------------------------------------------------------------

    def _load_sessions(self, rows: Sequence[sa.Row[Any]], history: bool) -> list[Session]:
        if not rows:
            return []
        ids = [row.id for row in rows]
        kernels: dict[str, list[Kernel]] = defaultdict(list)
        hist: dict[str, list[HistoryEntry]] = defaultdict(list)
        for chunk in chunks(ids):
            for krow in self.conn.execute(
                sa.select(*KERNEL_COLUMNS)
                .where(kernels_table.c.session_id.in_(chunk))
                .order_by(
                    kernels_table.c.session_id, kernels_table.c.role, kernels_table.c.cluster_idx
                )
            ):
                kernels[krow.session_id].append(kernel_from_json(krow.session_id, krow._asdict()))
            if history:
                for hrow in self.conn.execute(
                    sa.select(history_table)
                    .where(history_table.c.session_id.in_(chunk))
                    .order_by(history_table.c.id)
                ):
                    hist[hrow.session_id].append(
                        HistoryEntry(Status(hrow.status), hrow.at, hrow.info)
                    )
        return [
            Session(
                id=row.id,
                owner=row.owner,
                spec=parse_spec(row.spec, bounded=False),
                created_at=row.created_at,
                status=Status(row.status),
                status_info=row.status_info,
                status_data=row.status_data,
                status_history=hist[row.id],
                result=SessionResult(row.result),
                exit_code=row.exit_code,
                kernels=kernels[row.id],
                meta=row.meta or {},
            )
            for row in rows
        ]

    def get_session(self, key: str, owner: str | None = None) -> Session | None:
        """A session by id, or by name among ``owner``'s live sessions (then newest)."""
        query = sa.select(sessions_table).where(sessions_table.c.id == key)
        if owner is not None:
            query = query.where(sessions_table.c.owner == owner)
        rows = self.conn.execute(query).all()
        if not rows and owner is not None:
            rows = self.conn.execute(
                sa.select(sessions_table)
                .where(sessions_table.c.owner == owner, sessions_table.c.name == key)
                .order_by(
                    sessions_table.c.status.in_(LIVE).desc(), sessions_table.c.created_at.desc()
                )
                .limit(1)
            ).all()
        found = self._load_sessions(rows, history=True)
        return found[0] if found else None

    def list_sessions(
        self,
        owner: str | None = None,
        statuses: Iterable[Status] | None = None,
        resource_group: str | None = None,
        history: bool = True,
    ) -> list[Session]:
        """Sessions, oldest first, filtered by owner, statuses and resource group."""
        query = sa.select(sessions_table).order_by(sessions_table.c.created_at, sessions_table.c.id)
        if owner is not None:
            query = query.where(sessions_table.c.owner == owner)
        if statuses is not None:
            query = query.where(sessions_table.c.status.in_([s.value for s in statuses]))
        if resource_group is not None:
            query = query.where(sessions_table.c.resource_group == resource_group)
        return self._load_sessions(self.conn.execute(query).all(), history)

    def add_session(self, session: Session) -> None:
        """Insert a new session with its kernels and first history entry."""
        if session.spec.name is not None:
            clash = self.conn.execute(
                sa.select(sessions_table.c.id).where(
                    sessions_table.c.owner == session.owner,
                    sessions_table.c.name == session.spec.name,
                    sessions_table.c.status.in_(LIVE),
                )
            ).first()
            if clash is not None:
                raise NameConflict(
                    f"{session.owner} already has a live session named {session.spec.name!r} "
                    f"({clash.id}); pick another name or end that session first"
                )
        self.conn.execute(sa.insert(sessions_table), [session_values(session)])
        self.conn.execute(sa.insert(kernels_table), [kernel_values(k) for k in session.kernels])
        self._add_history(session.id, session.status_history)

    def _add_history(self, session_id: str, entries: Iterable[HistoryEntry]) -> None:
        rows = [
            {"session_id": session_id, "status": e.status.value, "at": e.at, "info": e.info}
            for e in entries
        ]
        if rows:
            self.conn.execute(sa.insert(history_table), rows)

    def save_session(self, session: Session, before: Session) -> None:
        """Write ``session``'s changes against its loaded state ``before``.

        Kernels that start or stop occupying slots adjust their agents'
        ``occupied`` in the same transaction.
        """
        self.conn.execute(
            sa.update(sessions_table)
            .where(sessions_table.c.id == session.id)
            .values(session_values(session))
        )
        old = {k.id: k for k in before.kernels}
        deltas: dict[str, list[tuple[ResourceSlot, int]]] = defaultdict(list)
        for kernel in session.kernels:
            prev = old[kernel.id]
            if kernel_values(kernel) != kernel_values(prev):
                self.conn.execute(
                    sa.update(kernels_table)
                    .where(kernels_table.c.id == kernel.id)
                    .values(kernel_values(kernel))
                )
            was = prev.agent_id if prev.status.occupies else None
            now = kernel.agent_id if kernel.status.occupies else None
            if was != now:
                if was is not None:
                    deltas[was].append((prev.slots, -1))
                if now is not None:
                    deltas[now].append((kernel.slots, +1))
        self._adjust_occupied(deltas)
        self._add_history(session.id, session.status_history[len(before.status_history) :])

    def _adjust_occupied(self, deltas: dict[str, list[tuple[ResourceSlot, int]]]) -> None:
        for agent_id, changes in deltas.items():
            row = self.conn.execute(
                sa.select(agents_table.c.occupied).where(agents_table.c.id == agent_id)
            ).first()
            if row is None:
                continue  # the agent was removed; nothing is reserved there any more
            occupied = ResourceSlot(row.occupied)
            for slots, sign in changes:
                occupied = occupied + slots if sign > 0 else occupied - slots
            self.conn.execute(
                sa.update(agents_table)
                .where(agents_table.c.id == agent_id)
                .values(occupied=occupied.to_json())
            )

    def save_logs(self, kernel_id: str, logs: str) -> None:
        """Keep a kernel's output after its container is gone."""
        self.conn.execute(
            sa.update(kernels_table).where(kernels_table.c.id == kernel_id).values(logs=logs)
        )

    def get_logs(self, kernel_id: str) -> str | None:
        row = self.conn.execute(
            sa.select(kernels_table.c.logs).where(kernels_table.c.id == kernel_id)
        ).first()
        return None if row is None else row.logs

    def dependency_states(self, ids: Iterable[str]) -> dict[str, tuple[Status, SessionResult]]:
        states: dict[str, tuple[Status, SessionResult]] = {}
        for chunk in chunks(list(set(ids))):
            for row in self.conn.execute(
                sa.select(
                    sessions_table.c.id, sessions_table.c.status, sessions_table.c.result
                ).where(sessions_table.c.id.in_(chunk))
            ):
                states[row.id] = (Status(row.status), SessionResult(row.result))
        return states

    def occupancy_by_owner(
        self, resource_group: str | None = None
    ) -> tuple[dict[str, int], dict[str, ResourceSlot]]:
        """Per owner: sessions holding slots, and the slots held (optionally in one group)."""
        query = (
            sa.select(sessions_table.c.id, sessions_table.c.owner, kernels_table.c.slots)
            .join(kernels_table, kernels_table.c.session_id == sessions_table.c.id)
            .where(kernels_table.c.status.in_(OCCUPYING_VALUES))
        )
        if resource_group is not None:
            query = query.where(sessions_table.c.resource_group == resource_group)
        sessions: dict[str, set[str]] = defaultdict(set)
        held: dict[str, ResourceSlot] = {}
        for row in self.conn.execute(query):
            sessions[row.owner].add(row.id)
            held[row.owner] = held.get(row.owner, ResourceSlot()) + ResourceSlot(row.slots)
        return {owner: len(ids) for owner, ids in sessions.items()}, held

    # --- agents ---------------------------------------------------------------------------

    def list_agents(self, resource_group: str | None = None) -> list[Agent]:
        query = sa.select(agents_table).order_by(agents_table.c.id)
        if resource_group is not None:
            query = query.where(agents_table.c.resource_group == resource_group)
        return [agent_from_row(row) for row in self.conn.execute(query)]

    def put_agent(self, agent: Agent) -> None:
        """Register or update an agent; its reservations are recomputed from its kernels."""
        occupied = ResourceSlot()
        for row in self.conn.execute(
            sa.select(kernels_table.c.slots).where(
                kernels_table.c.agent_id == agent.id, kernels_table.c.status.in_(OCCUPYING_VALUES)
            )
        ):
            occupied = occupied + ResourceSlot(row.slots)
        values = {
            "id": agent.id,
            "resource_group": agent.resource_group,
            "backend": agent.backend,
            "address": agent.address,
            "capacity": agent.capacity.to_json(),
            "occupied": occupied.to_json(),
            "schedulable": agent.schedulable,
        }
        if self.conn.execute(
            sa.select(agents_table.c.id).where(agents_table.c.id == agent.id)
        ).first():
            self.conn.execute(
                sa.update(agents_table).where(agents_table.c.id == agent.id).values(values)
            )
        else:
            self.conn.execute(sa.insert(agents_table), [values])

    def remove_agent(self, agent_id: str) -> None:
        self.conn.execute(sa.delete(agents_table).where(agents_table.c.id == agent_id))

    # --- templates ------------------------------------------------------------------------

    def put_template(self, template: Template) -> None:
        owner = template.owner or ""
        key = (templates_table.c.owner == owner) & (templates_table.c.name == template.name)
        self.conn.execute(sa.delete(templates_table).where(key))
        self.conn.execute(
            sa.insert(templates_table),
            [
                {
                    "owner": owner,
                    "name": template.name,
                    "description": template.description,
                    "spec": template.spec,
                }
            ],
        )

    def get_template(self, name: str, owner: str | None = None) -> Template | None:
        """``owner``'s own template of that name, else the shared one."""
        rows = sorted(
            self.conn.execute(
                sa.select(templates_table).where(
                    templates_table.c.name == name, templates_table.c.owner.in_([owner or "", ""])
                )
            ),
            key=lambda r: r.owner == "",  # the owner's own first
        )
        return template_from_row(rows[0]) if rows else None

    def list_templates(self, owner: str | None = None) -> list[Template]:
        """Shared templates and ``owner``'s own (all templates when owner is None)."""
        query = sa.select(templates_table).order_by(templates_table.c.name, templates_table.c.owner)
        if owner is not None:
            query = query.where(templates_table.c.owner.in_([owner, ""]))
        return [template_from_row(row) for row in self.conn.execute(query)]

    def delete_template(self, name: str, owner: str | None = None) -> bool:
        result = self.conn.execute(
            sa.delete(templates_table).where(
                templates_table.c.name == name, templates_table.c.owner == (owner or "")
            )
        )
        return bool(result.rowcount)

    def delete_sessions(self, ids: Iterable[str]) -> int:
        """Remove sessions' records (kernels, logs and history with them); how many went."""
        gone = 0
        for chunk in chunks(list(ids)):
            for table in (history_table, kernels_table):
                self.conn.execute(sa.delete(table).where(table.c.session_id.in_(chunk)))
            result = self.conn.execute(
                sa.delete(sessions_table).where(sessions_table.c.id.in_(chunk))
            )
            gone += result.rowcount or 0
        return gone

    # --- endpoints ------------------------------------------------------------------------

    def add_endpoint(self, endpoint: Endpoint) -> None:
        """Insert a new endpoint; NameConflict when its name is taken (by anyone)."""
        if self.get_endpoint(endpoint.name) is not None:
            raise NameConflict(f"an endpoint named {endpoint.name!r} exists already")
        self.conn.execute(
            sa.insert(endpoints_table),
            [{"id": endpoint.id, "name": endpoint.name, "owner": endpoint.owner,
              "data": endpoint.to_json()}],
        )  # fmt: skip

    def save_endpoint(self, endpoint: Endpoint) -> None:
        self.conn.execute(
            sa.update(endpoints_table)
            .where(endpoints_table.c.id == endpoint.id)
            .values(data=endpoint.to_json())
        )

    def get_endpoint(
        self, name: str | None = None, endpoint_id: str | None = None
    ) -> Endpoint | None:
        """An endpoint by name or by id."""
        column, key = (
            (endpoints_table.c.name, name)
            if endpoint_id is None
            else (endpoints_table.c.id, endpoint_id)
        )
        row = self.conn.execute(sa.select(endpoints_table.c.data).where(column == key)).first()
        return None if row is None else Endpoint.from_json(row.data)

    def list_endpoints(self, owner: str | None = None) -> list[Endpoint]:
        """Every endpoint (``owner``'s only, when given), by name."""
        query = sa.select(endpoints_table.c.data).order_by(endpoints_table.c.name)
        if owner is not None:
            query = query.where(endpoints_table.c.owner == owner)
        return [Endpoint.from_json(row.data) for row in self.conn.execute(query)]

    def delete_endpoint(self, endpoint_id: str) -> None:
        self.conn.execute(sa.delete(endpoints_table).where(endpoints_table.c.id == endpoint_id))

    # --- scheduling -----------------------------------------------------------------------

    def set_status_data(self, updates: dict[str, dict[str, Any]]) -> None:
        """Replace many sessions' ``status_data`` at once (the scheduler's records)."""
        if updates:
            self.conn.execute(
                sa.update(sessions_table)
                .where(sessions_table.c.id == sa.bindparam("sid"))
                .values(status_data=sa.bindparam("data")),
                [{"sid": sid, "data": data} for sid, data in updates.items()],
            )

    # --- meta -----------------------------------------------------------------------------

    def owner_groups(self, owners: Iterable[str]) -> dict[str, list[str]]:
        """The user groups of each of ``owners`` the store knows (owners it does not: left out)."""
        found: dict[str, list[str]] = {}
        for chunk in chunks(sorted(set(owners))):
            rows = self.conn.execute(
                sa.select(owners_table.c.owner, owners_table.c.groups).where(
                    owners_table.c.owner.in_(chunk)
                )
            )
            found.update({row.owner: list(row.groups) for row in rows})
        return found

    def set_owner_groups(self, owner: str, groups: Sequence[str], now: float) -> None:
        """Remember ``owner``'s user groups (as the authenticator said, most recently)."""
        values = {"groups": sorted(set(groups)), "updated_at": now}
        done = self.conn.execute(
            sa.update(owners_table).where(owners_table.c.owner == owner).values(values)
        )
        if not done.rowcount:
            self.conn.execute(sa.insert(owners_table), [{"owner": owner, **values}])

    def get_meta(self, key: str) -> str | None:
        """A value of the store's own key-value table (``None`` when unset)."""
        row = self.conn.execute(
            sa.select(meta_table.c.value).where(meta_table.c.key == key)
        ).first()
        return None if row is None else str(row.value)

    def set_meta(self, key: str, value: str) -> None:
        """Set a key of the store's own key-value table (insert or replace)."""
        done = self.conn.execute(
            sa.update(meta_table).where(meta_table.c.key == key).values(value=value)
        )
        if not done.rowcount:
            self.conn.execute(sa.insert(meta_table), [{"key": key, "value": value}])
