"""Persistence of sessions, kernels, agents, templates and status history.

SQLAlchemy 2 Core on any URL; by default a SQLite file in the Jupyter data
directory. Every change goes through a write transaction (:meth:`Store.write`):
on SQLite it is ``BEGIN IMMEDIATE``, elsewhere the first statement locks the
schema row (``SELECT … FOR UPDATE``). So a scheduling pass that loads a
snapshot, decides and reserves slots is serialized against every other writer,
in this process or another, and no slot is ever given out twice.

The store is synchronous; async callers run it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .model import (
    OCCUPYING,
    Agent,
    HistoryEntry,
    Kernel,
    Session,
    SessionResult,
    Status,
)
from .request import Template, parse_spec, spec_to_json
from .resources import ResourceSlot
from .wire import kernel_from_json, kernel_to_json

#: Bump with every change of the tables below (and teach :meth:`Store._migrate` the step).
SCHEMA_VERSION = 1

metadata = sa.MetaData()

meta_table = sa.Table(
    "bai_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

sessions_table = sa.Table(
    "bai_sessions",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("owner", sa.String(256), nullable=False, index=True),
    sa.Column("name", sa.String(64), nullable=True),
    sa.Column("resource_group", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("status_info", sa.String(256), nullable=True),
    sa.Column("status_data", sa.JSON, nullable=False),
    sa.Column("result", sa.String(16), nullable=False),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    #: Front ends' facts about the session (e.g. the Jupyter kernel id behind it).
    sa.Column("meta", sa.JSON, nullable=False, default=dict),
    sa.Index("ix_bai_sessions_group_status", "resource_group", "status"),
)

kernels_table = sa.Table(
    "bai_kernels",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "session_id",
        sa.String(32),
        sa.ForeignKey("bai_sessions.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("role", sa.String(8), nullable=False),
    sa.Column("cluster_idx", sa.Integer, nullable=False),
    sa.Column("hostname", sa.String(64), nullable=False),
    sa.Column("slots", sa.JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("status_info", sa.String(256), nullable=True),
    sa.Column("agent_id", sa.String(128), nullable=True, index=True),
    sa.Column("container_id", sa.String(128), nullable=True),
    #: Where the kernel can be reached (host, ports, connection info), set when it starts.
    sa.Column("info", sa.JSON, nullable=False, default=dict),
    #: The kernel's output, kept when its container is removed (batch logs after the end).
    sa.Column("logs", sa.Text, nullable=True),
)

agents_table = sa.Table(
    "bai_agents",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("resource_group", sa.String(64), nullable=False, index=True),
    sa.Column("backend", sa.String(16), nullable=False),
    sa.Column("address", sa.String(512), nullable=True),
    sa.Column("capacity", sa.JSON, nullable=False),
    sa.Column("occupied", sa.JSON, nullable=False),
    sa.Column("schedulable", sa.Boolean, nullable=False),
)

templates_table = sa.Table(
    "bai_templates",
    metadata,
    sa.Column("owner", sa.String(256), primary_key=True),  # "" = shared by everyone
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),
)

history_table = sa.Table(
    "bai_status_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "session_id",
        sa.String(32),
        sa.ForeignKey("bai_sessions.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("info", sa.String(256), nullable=True),
)

_LIVE = [s.value for s in Status if not s.is_terminal]
_OCCUPYING = [s.value for s in OCCUPYING]


_NO_FILE = (None, "", ":memory:")


class StoreError(RuntimeError):
    """The store cannot be used as it is; the message says what to do."""


class StoreVersionError(StoreError):
    """The store was written by a bai-jupyter with another schema version."""


class NameConflict(StoreError):
    """The owner already has a live session with that name."""


def default_url() -> str:
    """``sqlite:///<jupyter data dir>/bai_jupyter/store.sqlite``."""
    from jupyter_core.paths import jupyter_data_dir

    path = Path(jupyter_data_dir()) / "bai_jupyter" / "store.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _make_engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    engine = sa.create_engine(url, connect_args={"timeout": 60})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see _on_begin).
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        # With WAL, NORMAL loses no committed data when a process crashes (only on power loss).
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Readers take a snapshot; writers take the database write lock up front.
        mode = "IMMEDIATE" if conn.get_execution_options().get("bai_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


# --- row ↔ model ---------------------------------------------------------------------------


def _slots(value: dict[str, str]) -> ResourceSlot:
    return ResourceSlot(value)


def _agent_from_row(row: sa.Row[Any]) -> Agent:
    return Agent(
        id=row.id,
        capacity=_slots(row.capacity),
        occupied=_slots(row.occupied),
        resource_group=row.resource_group,
        backend=row.backend,
        address=row.address,
        schedulable=row.schedulable,
    )


#: A kernel's columns but its kept logs (up to a MiB each): read only by ``get_logs``.
_KERNEL_COLUMNS = [c for c in kernels_table.c if c.name != "logs"]


def _kernel_values(kernel: Kernel) -> dict[str, Any]:
    return {**kernel_to_json(kernel), "session_id": kernel.session_id}


def _session_values(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "owner": session.owner,
        "name": session.spec.name,
        "resource_group": session.spec.resource_group,
        "status": session.status.value,
        "status_info": session.status_info,
        "status_data": session.status_data,
        "result": session.result.value,
        "exit_code": session.exit_code,
        "spec": spec_to_json(session.spec),
        "created_at": session.created_at,
        "meta": session.meta,
    }


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
        for chunk in _chunks(ids):
            for krow in self.conn.execute(
                sa.select(*_KERNEL_COLUMNS)
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
                    sessions_table.c.status.in_(_LIVE).desc(), sessions_table.c.created_at.desc()
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
                    sessions_table.c.status.in_(_LIVE),
                )
            ).first()
            if clash is not None:
                raise NameConflict(
                    f"{session.owner} already has a live session named {session.spec.name!r} "
                    f"({clash.id}); pick another name or end that session first"
                )
        self.conn.execute(sa.insert(sessions_table), [_session_values(session)])
        self.conn.execute(sa.insert(kernels_table), [_kernel_values(k) for k in session.kernels])
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
            .values(_session_values(session))
        )
        old = {k.id: k for k in before.kernels}
        deltas: dict[str, list[tuple[ResourceSlot, int]]] = defaultdict(list)
        for kernel in session.kernels:
            prev = old[kernel.id]
            if _kernel_values(kernel) != _kernel_values(prev):
                self.conn.execute(
                    sa.update(kernels_table)
                    .where(kernels_table.c.id == kernel.id)
                    .values(_kernel_values(kernel))
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
            occupied = _slots(row.occupied)
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
        for chunk in _chunks(list(set(ids))):
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
            .where(kernels_table.c.status.in_(_OCCUPYING))
        )
        if resource_group is not None:
            query = query.where(sessions_table.c.resource_group == resource_group)
        sessions: dict[str, set[str]] = defaultdict(set)
        held: dict[str, ResourceSlot] = {}
        for row in self.conn.execute(query):
            sessions[row.owner].add(row.id)
            held[row.owner] = held.get(row.owner, ResourceSlot()) + _slots(row.slots)
        return {owner: len(ids) for owner, ids in sessions.items()}, held

    # --- agents ---------------------------------------------------------------------------

    def list_agents(self, resource_group: str | None = None) -> list[Agent]:
        query = sa.select(agents_table).order_by(agents_table.c.id)
        if resource_group is not None:
            query = query.where(agents_table.c.resource_group == resource_group)
        return [_agent_from_row(row) for row in self.conn.execute(query)]

    def put_agent(self, agent: Agent) -> None:
        """Register or update an agent; its reservations are recomputed from its kernels."""
        occupied = ResourceSlot()
        for row in self.conn.execute(
            sa.select(kernels_table.c.slots).where(
                kernels_table.c.agent_id == agent.id, kernels_table.c.status.in_(_OCCUPYING)
            )
        ):
            occupied = occupied + _slots(row.slots)
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
        return _template_from_row(rows[0]) if rows else None

    def list_templates(self, owner: str | None = None) -> list[Template]:
        """Shared templates and ``owner``'s own (all templates when owner is None)."""
        query = sa.select(templates_table).order_by(templates_table.c.name, templates_table.c.owner)
        if owner is not None:
            query = query.where(templates_table.c.owner.in_([owner, ""]))
        return [_template_from_row(row) for row in self.conn.execute(query)]

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
        for chunk in _chunks(list(ids)):
            for table in (history_table, kernels_table):
                self.conn.execute(sa.delete(table).where(table.c.session_id.in_(chunk)))
            result = self.conn.execute(
                sa.delete(sessions_table).where(sessions_table.c.id.in_(chunk))
            )
            gone += result.rowcount or 0
        return gone

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


def _template_from_row(row: sa.Row[Any]) -> Template:
    return Template(
        name=row.name, spec=row.spec, description=row.description, owner=row.owner or None
    )


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Store:
    """The bai-jupyter database: open it once per process and share it."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.engine = _make_engine(self.url)
        self._open()

    def _open(self) -> None:
        with self.engine.connect().execution_options(bai_write=True) as conn, conn.begin():
            tables = set(sa.inspect(conn).get_table_names())
            ours = {t.name for t in metadata.sorted_tables}
            if meta_table.name not in tables:
                if tables & ours:
                    raise StoreError(
                        f"{self._where()} has bai-jupyter tables but no schema version; "
                        "it is damaged or was not written by bai-jupyter"
                    )
                metadata.create_all(conn)
                conn.execute(
                    sa.insert(meta_table),
                    [
                        {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                        {"key": "store_id", "value": uuid.uuid4().hex},
                    ],
                )
            row = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
            ).first()
            version = row.value if row else None
            if version != str(SCHEMA_VERSION):
                raise StoreVersionError(
                    f"{self._where()} has schema version {version}, but this bai-jupyter "
                    f"reads version {SCHEMA_VERSION}; use the bai-jupyter release that wrote it "
                    "or point the store URL elsewhere (nothing was changed)"
                )
            row = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "store_id")
            ).first()
            #: Tells this store's kernels from other stores' on a shared engine.
            self.id: str = row.value if row else ""
            row = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "token_secret")
            ).first()
            #: Signs the per-session tokens kernels get (shared by every server on the store).
            self.token_secret: str = row.value if row else self._add_token_secret(conn)

        if self.engine.dialect.name == "sqlite" and self.engine.url.database not in _NO_FILE:
            # WAL: readers and the writer stop blocking each other. Set only once the
            # file is known to be ours, so a refused file is left exactly as it was.
            raw = self.engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA journal_mode=WAL")  # type: ignore[union-attr]
            finally:
                raw.close()

    @staticmethod
    def _add_token_secret(conn: Connection) -> str:
        """A secret for a store made before it existed; another process may add it first."""
        secret = secrets.token_hex(32)
        try:
            with conn.begin_nested():
                conn.execute(sa.insert(meta_table), [{"key": "token_secret", "value": secret}])
        except sa.exc.IntegrityError:
            row = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "token_secret")
            ).one()
            return str(row.value)
        return secret

    def _where(self) -> str:
        return f"the store at {self.engine.url.render_as_string(hide_password=True)}"

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        """A serialized write transaction: commits on success, rolls back on error."""
        with self.engine.connect().execution_options(bai_write=True) as conn, conn.begin():
            if self.engine.dialect.name != "sqlite":
                conn.execute(
                    sa.select(meta_table.c.key)
                    .where(meta_table.c.key == "schema_version")
                    .with_for_update()
                )
            yield Transaction(conn)

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        """A consistent read-only view."""
        with self.engine.connect() as conn, conn.begin():
            yield Transaction(conn)

    @contextmanager
    def edit(self, session_id: str) -> Iterator[Session]:
        """Load a session in a write transaction, let the caller change it, save the diff."""
        with self.write() as tx:
            session = tx.get_session(session_id)
            if session is None:
                raise KeyError(session_id)
            before = copy.deepcopy(session)
            yield session
            tx.save_session(session, before)
