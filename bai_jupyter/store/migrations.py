"""Bringing an older store up to this version, one step per schema version."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .rows import chunks
from .tables import (
    activity_table,
    endpoints_table,
    events_table,
    kernel_tokens_table,
    leases_table,
    meta_table,
    owners_table,
    servers_table,
    sessions_table,
)


@dataclass(frozen=True)
class Step:
    """The step from one schema version to the next: add tables, then move rows into them."""

    tables: tuple[sa.Table, ...]
    move: Callable[[Connection], None] | None = None


#: Version 3 kept kernel tokens' records as keys of ``bai_meta`` (prefix → the record's kind).
_OLD_TOKEN_KEYS = {
    "kernel-token-child:": "session",  # + the created session's id = the token's session
    "kernel-token-endpoint:": "endpoint",  # + the created endpoint's id = the token's session
    "kernel-tokens-revoked:": "revoked",  # + the session's id = ms of the revocation
}


def _existing(conn: Connection, table: sa.Table, ids: set[str]) -> set[str]:
    found: set[str] = set()
    for chunk in chunks(sorted(ids)):
        found.update(conn.execute(sa.select(table.c.id).where(table.c.id.in_(chunk))).scalars())
    return found


def _kernel_tokens_out_of_meta(conn: Connection) -> None:
    """Move version 3's kernel-token keys into ``bai_kernel_tokens``.

    Those keys outlived the sessions (and endpoints) they were about: only the records
    whose sessions and endpoints still exist move; every such key leaves ``bai_meta``."""
    keys = meta_table.c.key
    found = conn.execute(
        sa.select(keys, meta_table.c.value).where(
            sa.or_(*(keys.startswith(prefix) for prefix in _OLD_TOKEN_KEYS))
        )
    ).all()
    records: list[tuple[str, str, str, int | None]] = []  # session, kind, target, at
    for key, value in found:
        prefix = next(p for p in _OLD_TOKEN_KEYS if key.startswith(p))
        kind, about = _OLD_TOKEN_KEYS[prefix], key[len(prefix) :]
        if kind != "revoked":
            records.append((value, kind, about, None))
        elif value.isdigit():
            records.append((about, kind, "", int(value)))
    sessions = _existing(
        conn,
        sessions_table,
        {r[0] for r in records} | {r[2] for r in records if r[1] == "session"},
    )
    endpoints = _existing(conn, endpoints_table, {r[2] for r in records if r[1] == "endpoint"})
    kept = [
        {"session_id": session_id, "kind": kind, "target": target, "at": at}
        for session_id, kind, target, at in records
        if session_id in sessions
        and (kind != "session" or target in sessions)
        and (kind != "endpoint" or target in endpoints)
    ]
    if kept:
        conn.execute(sa.insert(kernel_tokens_table), kept)
    for chunk in chunks([key for key, _ in found]):
        conn.execute(sa.delete(meta_table).where(keys.in_(chunk)))


#: version → the step to its successor.
MIGRATIONS: dict[int, Step] = {
    1: Step((owners_table,)),
    2: Step((endpoints_table,)),
    3: Step((kernel_tokens_table,), _kernel_tokens_out_of_meta),
    4: Step((events_table,)),
    5: Step((leases_table, servers_table, activity_table)),
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
