"""Endpoints' records in one transaction (each stored whole as JSON, its name unique)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..endpoints import Endpoint
from .errors import NameConflict
from .tables import endpoints_table, kernel_tokens_table


class EndpointRecords:
    """Endpoints by name or id."""

    conn: Connection

    def add_endpoint(self, endpoint: Endpoint) -> None:
        """Insert a new endpoint; NameConflict when its name is taken (by anyone)."""
        if self.get_endpoint(endpoint.name) is not None:
            raise NameConflict(f"an endpoint named {endpoint.name!r} exists already")
        self.conn.execute(
            sa.insert(endpoints_table),
            [{"id": endpoint.id, "name": endpoint.name, "owner": endpoint.owner,
              "data": endpoint.to_json()}],
        )  # fmt: skip

    def save_endpoint(self, endpoint: Endpoint) -> None:
        self.conn.execute(
            sa.update(endpoints_table)
            .where(endpoints_table.c.id == endpoint.id)
            .values(data=endpoint.to_json())
        )

    def get_endpoint(
        self, name: str | None = None, endpoint_id: str | None = None
    ) -> Endpoint | None:
        """An endpoint by name or by id."""
        column, key = (
            (endpoints_table.c.name, name)
            if endpoint_id is None
            else (endpoints_table.c.id, endpoint_id)
        )
        row = self.conn.execute(sa.select(endpoints_table.c.data).where(column == key)).first()
        return None if row is None else Endpoint.from_json(row.data)

    def list_endpoints(self, owner: str | None = None) -> list[Endpoint]:
        """Every endpoint (``owner``'s only, when given), by name."""
        query = sa.select(endpoints_table.c.data).order_by(endpoints_table.c.name)
        if owner is not None:
            query = query.where(endpoints_table.c.owner == owner)
        return [Endpoint.from_json(row.data) for row in self.conn.execute(query)]

    def delete_endpoint(self, endpoint_id: str) -> None:
        """Remove the endpoint, and the record of the kernel token that created it."""
        tokens = kernel_tokens_table.c
        self.conn.execute(
            sa.delete(kernel_tokens_table).where(
                tokens.kind == "endpoint", tokens.target == endpoint_id
            )
        )
        self.conn.execute(sa.delete(endpoints_table).where(endpoints_table.c.id == endpoint_id))
