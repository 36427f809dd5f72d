"""Notes any manager process takes for the leader: servers' heartbeats, sessions' use.

A remote Jupyter server's heartbeat and a front end's use of a session reach
whichever manager replica the load balancer chose; the leader's watchdogs (the
server watch, the idle watch) read them here. Each process gathers its notes and
writes them in one upsert now and then, keeping the later of two times; they log no
event and take no part in passes, so they run outside the serialized writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .rows import chunks
from .tables import activity_table, servers_table, sessions_table

__all__ = ["NoteRecords"]


def _upsert(conn: Connection, table: sa.Table, rows: list[dict[str, object]], at: str) -> None:
    """Insert ``rows``, or move an existing row's ``at`` column (and the rest) later."""
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(table)
    keys = [c.name for c in table.primary_key.columns]
    later = {c: insert.excluded[c] for c in rows[0] if c not in keys}
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=keys, set_=later, where=table.c[at] < insert.excluded[at]
        ),
        rows,
    )


class NoteRecords:
    conn: Connection

    def note_servers(self, seen: Mapping[tuple[str, str], float]) -> None:
        """Each (owner, server)'s latest heartbeat (epoch seconds)."""
        rows = [{"owner": o, "server": s, "seen": at} for (o, s), at in sorted(seen.items())]
        _upsert(self.conn, servers_table, rows, "seen")

    def servers_seen(self, since: float) -> dict[tuple[str, str], float]:
        """Every (owner, server) heard from at or after ``since``, and when last."""
        table = servers_table
        rows = self.conn.execute(sa.select(table).where(table.c.seen >= since))
        return {(r.owner, r.server): float(r.seen) for r in rows}

    def forget_servers(self, before: float) -> None:
        """Drop heartbeats older than ``before``: their servers' sessions were ended."""
        self.conn.execute(sa.delete(servers_table).where(servers_table.c.seen < before))

    def note_activity(self, used: Mapping[str, tuple[float, str]]) -> None:
        """Each session's latest use (epoch seconds, its source); ended-and-purged ones:
        left out."""
        found: set[str] = set()
        for chunk in chunks(sorted(used)):
            ids = sa.select(sessions_table.c.id).where(sessions_table.c.id.in_(chunk))
            found.update(self.conn.execute(ids).scalars())
        rows = [
            {"session_id": sid, "at": used[sid][0], "source": used[sid][1][:32]}
            for sid in sorted(found)
        ]
        _upsert(self.conn, activity_table, rows, "at")

    def activity_of(self, session_ids: Iterable[str]) -> dict[str, tuple[float, str]]:
        """The latest use noted of each of ``session_ids`` (those with none: left out)."""
        table = activity_table
        found: dict[str, tuple[float, str]] = {}
        for chunk in chunks(sorted(set(session_ids))):
            rows = self.conn.execute(sa.select(table).where(table.c.session_id.in_(chunk)))
            found.update({r.session_id: (float(r.at), str(r.source)) for r in rows})
        return found
