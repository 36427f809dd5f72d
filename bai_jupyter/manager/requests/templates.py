"""Templates: named, stored defaults, the caller's own and the shared ones."""

from __future__ import annotations

from ...errors import Conflict, NotFound
from ...request import Template
from ...store import Transaction
from ..core import Core


class Templates:
    """Template records in the store; ``owner`` ``None`` is the shared set."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def list_templates(self, owner: str | None) -> list[Template]:
        """Shared templates and ``owner``'s own."""
        return await self.core.query(lambda tx: tx.list_templates(owner))

    async def get(self, name: str, owner: str | None) -> Template:
        """``owner``'s template of that name, else the shared one; NotFound otherwise."""
        found = await self.core.query(lambda tx: tx.get_template(name, owner))
        if found is None:
            raise NotFound(f"no template named {name!r}")
        return found

    async def put(self, template: Template, replace: bool = True) -> Template:
        """Store a template; without ``replace``, Conflict when its owner has one of that name."""

        def put(tx: Transaction) -> bool:
            existing = tx.get_template(template.name, template.owner)
            if not replace and existing is not None and existing.owner == template.owner:
                return False
            tx.put_template(template)
            return True

        if not await self.core.db(put):
            raise Conflict(f"a template named {template.name!r} exists: PUT it to replace it")
        return template

    async def delete(self, name: str, owner: str | None) -> None:
        """Remove ``owner``'s template of that name (``None``: the shared one)."""
        if not await self.core.db(lambda tx: tx.delete_template(name, owner)):
            raise NotFound(f"no {'' if owner else 'shared '}template named {name!r}")
