"""Opening the store: the engine, the schema check, and write/read transactions."""

from __future__ import annotations

import copy
import secrets
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..model import (
    Session,
)
from .errors import StoreError, StoreVersionError
from .migrations import MIGRATIONS, migrate
from .notify import Listener
from .tables import SCHEMA_VERSION, meta_table, metadata
from .transaction import Transaction

_NO_FILE = (None, "", ":memory:")
#: The PostgreSQL advisory lock that makes opening (creating, migrating) a store one at a time.
_OPEN_LOCK = 0x6261_695F_6F70_656E  # "bai_open"


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


class Store:
    """The bai-jupyter database: open it once per process and share it."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.engine = _make_engine(self.url)
        try:
            self._open()
        except BaseException:
            self.engine.dispose()  # a refused store holds no connection to it
            raise

    def _open(self) -> None:
        with self.engine.connect().execution_options(bai_write=True) as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                # Replicas started together on an empty database: one creates the schema
                # and the secrets, the others wait here, then read them (SQLite's write
                # transaction already excludes the others).
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _OPEN_LOCK})
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
            if version is not None and version.isdigit() and int(version) in MIGRATIONS:
                version = migrate(conn, int(version))
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

    def listen(self, woken: Callable[[], None]) -> Listener | None:
        """Call ``woken()`` (in a thread) whenever a process logs events on this store: on
        PostgreSQL at once (NOTIFY); ``None`` on SQLite, whose log is read on a timer."""
        if self.engine.dialect.name != "postgresql":
            return None
        return Listener(self.engine, woken)

    @contextmanager
    def write(self, serial: bool = True) -> Iterator[Transaction]:
        """A serialized write transaction: commits on success, rolls back on error.

        ``serial=False``: on PostgreSQL, not serialized with the other writes: only for
        rows no pass reads and no event tells of (the lease, the notes of use)."""
        with self.engine.connect().execution_options(bai_write=True) as conn, conn.begin():
            if serial and self.engine.dialect.name != "sqlite":
                conn.execute(
                    sa.select(meta_table.c.key)
                    .where(meta_table.c.key == "schema_version")
                    .with_for_update()
                )
            tx = Transaction(conn)
            yield tx
            if tx.changed:  # under the write lock still: no other writer counts meanwhile
                tx.bump_changes()

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        """A consistent read-only view."""
        with self.engine.connect() as conn, conn.begin():
            yield Transaction(conn)

    @contextmanager
    def edit(self, session_id: str, **extra: Any) -> Iterator[Session]:
        """Load a session in a write transaction, let the caller change it, save the diff
        and its event (with ``extra``)."""
        with self.write() as tx:
            session = tx.get_session(session_id)
            if session is None:
                raise KeyError(session_id)
            before = copy.deepcopy(session)
            yield session
            tx.save_session(session, before, **extra)
