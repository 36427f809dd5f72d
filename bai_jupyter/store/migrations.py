"""Bringing an older store up to this version, one step per schema version."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .tables import endpoints_table, meta_table, owners_table


@dataclass(frozen=True)
class Step:
    """The step from one schema version to the next: add tables, then move rows into them."""

    tables: tuple[sa.Table, ...]
    move: Callable[[Connection], None] | None = None


#: version → the step to its successor.
MIGRATIONS: dict[int, Step] = {
    1: Step((owners_table,)),
    2: Step((endpoints_table,)),
}


def migrate(conn: Connection, version: int) -> str:
    """Bring a store of ``version`` up to this version, step by step; the version it has now."""
    while version in MIGRATIONS:
        step = MIGRATIONS[version]
        for table in step.tables:
            table.create(conn, checkfirst=True)
        if step.move is not None:
            step.move(conn)
        version += 1
    conn.execute(
        sa.update(meta_table).where(meta_table.c.key == "schema_version").values(value=str(version))
    )
    return str(version)
