"""Templates' records in one transaction: each owner's, and the shared ones (owner ``""``)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..request import Template
from .rows import template_from_row
from .tables import templates_table


class TemplateRecords:
    """Templates by owner and name."""

    conn: Connection

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
        return template_from_row(rows[0]) if rows else None

    def list_templates(self, owner: str | None = None) -> list[Template]:
        """Shared templates and ``owner``'s own (all templates when owner is None)."""
        query = sa.select(templates_table).order_by(templates_table.c.name, templates_table.c.owner)
        if owner is not None:
            query = query.where(templates_table.c.owner.in_([owner, ""]))
        return [template_from_row(row) for row in self.conn.execute(query)]

    def delete_template(self, name: str, owner: str | None = None) -> bool:
        result = self.conn.execute(
            sa.delete(templates_table).where(
                templates_table.c.name == name, templates_table.c.owner == (owner or "")
            )
        )
        return bool(result.rowcount)
