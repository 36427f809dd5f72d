"""Sessions' records in one transaction: sessions, their kernels, history and logs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..model import (
    ID_LENGTH,
    HistoryEntry,
    Kernel,
    Session,
    SessionResult,
    SessionSpec,
    Status,
    is_id_key,
    session_event,
)
from ..request import parse_spec
from ..resources import ResourceSlot
from ..wire import kernel_from_json
from .bulk import insert_many, update_many
from .errors import AmbiguousKey, NameConflict
from .events import log_events
from .rows import (
    KERNEL_COLUMNS,
    NOT_ENDED_VALUES,
    chunks,
    kernel_values,
    session_values,
)
from .tables import (
    agents_table,
    events_table,
    history_table,
    kernel_tokens_table,
    kernels_table,
    sessions_table,
)

_UNSET = object()
#: Ids an ambiguous prefix's error shows at most.
_SHOWN = 3


class SessionRecords:
    """Sessions, their kernels and history; saving one adjusts its agents' reserved slots."""

    conn: Connection
    #: Whether this transaction may make room or add work (see ``Store.write``).
    changed: bool

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
        """A session by id (or a unique prefix of one, 8 characters at least), or by name
        among ``owner``'s live sessions (then newest).

        With an owner (a caller's key), which of the two ``key`` is follows
        :func:`~bai_jupyter.model.is_id_key` alone: an id-like key is never read as a
        name (a record of an older version named like an id is reached by its id
        only), a name never as an id. Without one, ``key`` is an id (names need an owner).
        A prefix that more than one of the sessions looked at begins: AmbiguousKey."""
        rows: Sequence[Any] = []
        if owner is None or is_id_key(key):
            ids = sessions_table.c.id
            query = sa.select(sessions_table).where(
                ids == key if len(key) >= ID_LENGTH else ids.startswith(key, autoescape=True)
            )
            if owner is not None:
                query = query.where(sessions_table.c.owner == owner)
            rows = self.conn.execute(query.order_by(ids).limit(_SHOWN + 1)).all()
            if len(rows) > 1:
                raise AmbiguousKey(key, [r.id for r in rows[:_SHOWN]], len(rows) > _SHOWN)
        elif owner is not None:
            rows = self.conn.execute(
                sa.select(sessions_table)
                .where(sessions_table.c.owner == owner, sessions_table.c.name == key)
                .order_by(
                    sessions_table.c.status.in_(NOT_ENDED_VALUES).desc(),
                    sessions_table.c.created_at.desc(),
                )
                .limit(1)
            ).all()
        found = self._load_sessions(rows, history=True)
        return found[0] if found else None

    def count_sessions(self, owner: str, statuses: Iterable[Status]) -> int:
        """How many of ``owner``'s sessions are in ``statuses`` (without reading them)."""
        table = sessions_table
        query = sa.select(sa.func.count()).where(
            table.c.owner == owner, table.c.status.in_([s.value for s in statuses])
        )
        return int(self.conn.execute(query).scalar_one())

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
                    sessions_table.c.status.in_(NOT_ENDED_VALUES),
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
        self.changed = True
        log_events(self.conn, [session_event(session)])

    def _add_history(self, session_id: str, entries: Iterable[HistoryEntry]) -> None:
        rows = _history_rows(session_id, entries)
        if rows:
            self.conn.execute(sa.insert(history_table), rows)

    def save_session(self, session: Session, before: Session, **extra: Any) -> None:
        """Write ``session``'s changes against its loaded state ``before``, and its event
        (with ``extra``, e.g. a ``notice``)."""
        self.save_sessions([(session, before)], **extra)

    def save_sessions(self, changes: Sequence[tuple[Session, Session]], **extra: Any) -> None:
        """Write sessions' changes against their loaded states, a few statements for all,
        and each one's event (with ``extra``).

        Only changed columns are written, one executemany per set of columns. Kernels that
        start or stop occupying slots adjust their agents' ``occupied`` in the same
        transaction. A change of status, result or a kernel's agent marks the transaction
        as one that may make room or add work (the scheduler's change counter)."""
        rows: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        kernel_rows: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        deltas: dict[str, list[tuple[ResourceSlot, int]]] = defaultdict(list)
        history: list[dict[str, Any]] = []
        for session, before in changes:
            new, old = _columns(session, before.spec), _columns(before, before.spec)
            cols = tuple(sorted(k for k in new if new[k] != old.get(k, _UNSET)))
            if cols:
                rows[cols].append({"id": session.id, **{k: new[k] for k in cols}})
                self.changed |= bool({"status", "result", "owner"} & set(cols))
            prev_of = {k.id: k for k in before.kernels}
            for kernel in session.kernels:
                prev = prev_of[kernel.id]
                knew, kold = kernel_values(kernel), kernel_values(prev)
                kcols = tuple(sorted(k for k in knew if knew[k] != kold[k]))
                if kcols:
                    kernel_rows[kcols].append({"id": kernel.id, **{k: knew[k] for k in kcols}})
                    self.changed |= bool({"status", "agent_id"} & set(kcols))
                was = prev.agent_id if prev.status.occupies else None
                now = kernel.agent_id if kernel.status.occupies else None
                if was != now:
                    if was is not None:
                        deltas[was].append((prev.slots, -1))
                    if now is not None:
                        deltas[now].append((kernel.slots, +1))
            added = session.status_history[len(before.status_history) :]
            history += _history_rows(session.id, added)
        for table, grouped in ((sessions_table, rows), (kernels_table, kernel_rows)):
            for params in grouped.values():
                update_many(self.conn, table, params)
        self.changed |= adjust_occupied(self.conn, deltas)
        insert_many(self.conn, history_table, history)
        log_events(self.conn, [session_event(session, **extra) for session, _ in changes])

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

    def delete_sessions(self, ids: Iterable[str]) -> int:
        """Remove sessions' records (kernels, logs, history, events and their kernel tokens'
        records with them, and the records of the kernel tokens that created them); how
        many went."""
        gone = 0
        tokens = kernel_tokens_table.c
        for chunk in chunks(list(ids)):
            for table in (history_table, kernels_table, kernel_tokens_table, events_table):
                self.conn.execute(sa.delete(table).where(table.c.session_id.in_(chunk)))
            self.conn.execute(
                sa.delete(kernel_tokens_table).where(
                    tokens.kind == "session", tokens.target.in_(chunk)
                )
            )
            result = self.conn.execute(
                sa.delete(sessions_table).where(sessions_table.c.id.in_(chunk))
            )
            gone += result.rowcount or 0
        self.changed |= gone > 0  # a dependency may be gone
        return gone

    def set_status_data(self, updates: dict[str, dict[str, Any]]) -> None:
        """Replace many sessions' ``status_data`` at once (the scheduler's records)."""
        rows = [{"id": sid, "status_data": data} for sid, data in updates.items()]
        update_many(self.conn, sessions_table, rows)


def _columns(session: Session, spec_before: SessionSpec) -> dict[str, Any]:
    """A session's row; the spec is serialized only when it is a new object."""
    return session_values(session, with_spec=session.spec is not spec_before)


def _history_rows(session_id: str, entries: Iterable[HistoryEntry]) -> list[dict[str, Any]]:
    return [
        {"session_id": session_id, "status": e.status.value, "at": e.at, "info": e.info}
        for e in entries
    ]


def adjust_occupied(conn: Connection, deltas: dict[str, list[tuple[ResourceSlot, int]]]) -> bool:
    """Apply slot changes to agents' ``occupied``, one read and one executemany; whether
    there were any."""
    if not deltas:
        return False
    updates: list[dict[str, Any]] = []
    for chunk in chunks(sorted(deltas)):
        for row in conn.execute(
            sa.select(agents_table.c.id, agents_table.c.occupied).where(
                agents_table.c.id.in_(chunk)
            )
        ):  # an agent removed meanwhile holds nothing any more: no row, nothing to do
            occupied = ResourceSlot(row.occupied)
            for slots, sign in deltas[row.id]:
                occupied = occupied + slots if sign > 0 else occupied - slots
            updates.append({"id": row.id, "occupied": occupied.to_json()})
    update_many(conn, agents_table, updates)
    return True
