"""Owners' user groups and the store's own key-value table, in one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .rows import chunks
from .tables import meta_table, owners_table


class MetaRecords:
    """What the store knows beside sessions: owners' groups, its own keys."""

    conn: Connection
    changed: bool

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
        if self.owner_groups([owner]).get(owner, []) != values["groups"]:
            self.changed = True  # group fair share and group policies may change
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
