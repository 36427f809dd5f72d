"""The leader's lease: one manager process per store runs the scheduler and the watchdogs.

A lease row names its holder and a deadline by the store's own clock (PostgreSQL's
``clock_timestamp()``; on SQLite, whose processes share a machine, that machine's
clock), so replicas on machines whose clocks differ agree on when it lapsed. Taking
and renewing is one conditional ``UPDATE``: of two processes that both saw it lapse,
the second finds it taken (PostgreSQL re-checks the condition on the row the first
wrote). These writes touch only this row and log no event, so they run outside the
store's serialized writes (``Store.write(serial=False)``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .tables import leases_table

__all__ = ["Lease", "LeaseRecords"]


@dataclass(frozen=True)
class Lease:
    """A lease as the store has it now (``holder`` empty: never taken, or released)."""

    holder: str
    epoch: int
    #: Seconds until it lapses (negative: lapsed), by the store's clock.
    expires_in: float
    #: When its holder took it (epoch seconds, the store's clock).
    since: float

    def held_by(self, holder: str) -> bool:
        return self.holder == holder and self.expires_in > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "replica": self.holder if self.expires_in > 0 else None,
            "epoch": self.epoch,
            "expires_in": round(max(self.expires_in, 0.0), 3),
        }


class LeaseRecords:
    conn: Connection

    def clock(self) -> float:
        """Now, by the store's clock (epoch seconds)."""
        if self.conn.dialect.name == "postgresql":
            now = self.conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())"))
            return float(now.scalar_one())
        return time.time()

    def read_lease(self, name: str) -> Lease:
        """The lease ``name`` as it is now."""
        row = self.conn.execute(sa.select(leases_table).where(leases_table.c.name == name)).first()
        if row is None:
            return Lease("", 0, 0.0, 0.0)
        return Lease(row.holder, int(row.epoch), float(row.expires) - self.clock(), row.since)

    def take_lease(self, name: str, holder: str, ttl: float) -> Lease:
        """Take the lease (or renew it) for ``ttl`` seconds if it lapsed or is ours; the
        lease as it is after (``held_by(holder)`` says whether it is ours now)."""
        now = self.clock()
        table = leases_table
        ours = table.c.holder == holder
        renewed = self.conn.execute(
            sa.update(table)
            .where(table.c.name == name, ours, table.c.expires > now)
            .values(expires=now + ttl)
        )
        if not renewed.rowcount:
            self.conn.execute(
                sa.update(table)
                .where(table.c.name == name, sa.or_(table.c.expires <= now, table.c.holder == ""))
                .values(holder=holder, epoch=table.c.epoch + 1, expires=now + ttl, since=now)
            )
            if self.read_lease(name).epoch == 0:  # never taken: the first to insert it wins
                try:
                    with self.conn.begin_nested():
                        row = {"name": name, "holder": holder, "epoch": 1}
                        self.conn.execute(
                            sa.insert(table), [{**row, "expires": now + ttl, "since": now}]
                        )
                except sa.exc.IntegrityError:
                    pass
        return self.read_lease(name)

    def release_lease(self, name: str, holder: str) -> bool:
        """Give the lease up now (a clean stop): another may take it at once."""
        done = self.conn.execute(
            sa.update(leases_table)
            .where(leases_table.c.name == name, leases_table.c.holder == holder)
            .values(holder="", expires=0.0)
        )
        return bool(done.rowcount)
