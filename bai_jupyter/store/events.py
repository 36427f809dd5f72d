"""The change log of sessions: what every event stream of every process reads.

A change of a session and its event are one transaction: an event is never told
of a change that did not happen, nor a change made without its event, whichever
process (a Jupyter server, a manager service replica, a console kernel's embedded
manager) made it. Readers follow the log by ``seq``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .notify import notify
from .tables import events_table

__all__ = ["EventRecords", "log_events"]


def log_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    """Log ``events`` (``model.session_event``) in the transaction of the changes they tell of."""
    if events:
        rows = [{"at": e["at"], "session_id": e["session_id"], "data": e} for e in events]
        conn.execute(sa.insert(events_table), rows)
        notify(conn)


class EventRecords:
    conn: Connection

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Log ``events`` with the changes they tell of (sessions' writes log their own)."""
        log_events(self.conn, events)

    def events_after(self, seq: int, limit: int = 1000) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``limit`` events logged after ``seq``, oldest first, with their ``seq``."""
        rows = self.conn.execute(
            sa.select(events_table.c.seq, events_table.c.data)
            .where(events_table.c.seq > seq)
            .order_by(events_table.c.seq)
            .limit(limit)
        )
        return [(int(r.seq), dict(r.data)) for r in rows]

    def event_bounds(self) -> tuple[int, int]:
        """The ``seq`` of the oldest event kept less one, and of the newest (0 when none):
        a reader that has seen up to at least the first misses nothing kept."""
        row = self.conn.execute(
            sa.select(sa.func.min(events_table.c.seq), sa.func.max(events_table.c.seq))
        ).one()
        newest = int(row[1] or 0)
        return (int(row[0]) - 1 if row[0] is not None else newest), newest

    def prune_events(self, before: float) -> int:
        """Delete the events logged before ``before`` (epoch seconds); how many."""
        done = self.conn.execute(sa.delete(events_table).where(events_table.c.at < before))
        return int(done.rowcount or 0)
