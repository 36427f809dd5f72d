"""Writing many rows at once: one statement on PostgreSQL, an executemany on SQLite.

A pass writes thousands of rows; on PostgreSQL each row of an executemany still costs a
round of the protocol and of Python, so the rows go as one array per column, unnested
by the server. SQLite runs in the process: its executemany is cheap once the rows go to
the driver as tuples (SQLAlchemy's per-value processing is most of its cost).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

#: The PostgreSQL array type each column type goes as (JSON goes as text, cast back).
_ARRAY_OF = {
    sa.String: "text",
    sa.Text: "text",
    sa.JSON: "text",
    sa.Float: "double precision",
    sa.Integer: "bigint",
    sa.BigInteger: "bigint",
    sa.Boolean: "boolean",
}


def _array_type(column: sa.Column[Any]) -> str:
    for kind, name in _ARRAY_OF.items():
        if isinstance(column.type, kind):
            return name
    raise TypeError(f"no bulk form for {column.table.name}.{column.name}: {column.type!r}")


def _arrays(
    table: sa.Table, names: Sequence[str], rows: Sequence[dict[str, Any]]
) -> tuple[list[str], dict[str, list[Any]]]:
    """Per column: the unnest argument and its array of values."""
    args, params = [], {}
    for i, name in enumerate(names):
        column = table.c[name]
        values = [row[name] for row in rows]
        if isinstance(column.type, sa.JSON):
            values = [json.dumps(v) for v in values]  # None too: JSON null, as SQLAlchemy does
        args.append(f"CAST(:a{i} AS {_array_type(column)}[])")
        params[f"a{i}"] = values
    return args, params


def _driver_rows(
    table: sa.Table, names: Sequence[str], rows: Sequence[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    """The rows as the driver takes them: tuples, JSON as text."""
    json_at = [i for i, name in enumerate(names) if isinstance(table.c[name].type, sa.JSON)]
    out = []
    for row in rows:
        values = [row[name] for name in names]
        for i in json_at:
            values[i] = json.dumps(values[i])
        out.append(tuple(values))
    return out


def _value(table: sa.Table, name: str, quoted: str) -> str:
    return f"v.{quoted}::json" if isinstance(table.c[name].type, sa.JSON) else f"v.{quoted}"


def update_many(
    conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]], key: str = "id"
) -> None:
    """Set each row's columns (every row names the same ones) where ``key`` matches."""
    if not rows:
        return
    names = [key, *(name for name in rows[0] if name != key)]
    quote = conn.dialect.identifier_preparer.quote
    if conn.dialect.name not in ("postgresql", "sqlite"):  # another engine: its executemany
        conn.execute(
            sa.update(table)
            .where(table.c[key] == sa.bindparam(f"b_{key}"))
            .values({name: sa.bindparam(f"b_{name}") for name in names[1:]}),
            [{f"b_{name}": row[name] for name in names} for row in rows],
        )
        return
    if conn.dialect.name == "sqlite":
        order = [*names[1:], key]
        conn.exec_driver_sql(
            f"UPDATE {quote(table.name)} SET {', '.join(f'{quote(n)} = ?' for n in names[1:])} "
            f"WHERE {quote(key)} = ?",
            _driver_rows(table, order, rows),
        )
        return
    args, params = _arrays(table, names, rows)
    sets = ", ".join(f"{quote(n)} = {_value(table, n, quote(n))}" for n in names[1:])
    conn.execute(
        sa.text(
            f"UPDATE {quote(table.name)} SET {sets} FROM unnest({', '.join(args)}) "
            f"AS v({', '.join(quote(n) for n in names)}) "
            f"WHERE {quote(table.name)}.{quote(key)} = v.{quote(key)}"
        ),
        params,
    )


def insert_many(conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows (every row names the same columns)."""
    if not rows:
        return
    quote = conn.dialect.identifier_preparer.quote
    names = list(rows[0])
    if conn.dialect.name not in ("postgresql", "sqlite"):
        conn.execute(sa.insert(table), list(rows))
        return
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(
            f"INSERT INTO {quote(table.name)} ({', '.join(quote(n) for n in names)}) "
            f"VALUES ({', '.join('?' for _ in names)})",
            _driver_rows(table, names, rows),
        )
        return
    args, params = _arrays(table, names, rows)
    picked = ", ".join(_value(table, n, quote(n)) for n in names)
    conn.execute(
        sa.text(
            f"INSERT INTO {quote(table.name)} ({', '.join(quote(n) for n in names)}) "
            f"SELECT {picked} FROM unnest({', '.join(args)}) "
            f"AS v({', '.join(quote(n) for n in names)})"
        ),
        params,
    )
