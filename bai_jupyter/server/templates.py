"""``/bai/api/v1/templates…``: the caller's templates and the shared ones (admins write those)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import Conflict, Forbidden, InvalidRequest, NotFound
from ..request import SpecError, Template
from ..store import Transaction
from .base import TEMPLATES, BaiHandler

__all__ = ["TemplateHandler", "TemplatesHandler", "template_view"]

_BODY_KEYS = ("name", "spec", "description", "shared")


def template_view(template: Template) -> dict[str, Any]:
    """A template as the API shows it: ``shared`` says whether every user sees it."""
    return {**template.to_json(), "shared": template.owner is None}


class _TemplateBase(BaiHandler):
    auth_resource = TEMPLATES

    async def _parse(self, name: str | None) -> Template:
        """A posted template; ``shared: true`` needs the admin resource."""
        body = self.json_body()
        unknown = [key for key in body if key not in _BODY_KEYS]
        if unknown:
            raise InvalidRequest(
                f"{unknown[0]}: unknown field; known fields: {', '.join(_BODY_KEYS)}"
            )
        if name is not None:
            if body.get("name") not in (None, name):
                raise InvalidRequest(f"name: {body['name']!r} differs from the URL's {name!r}")
            body["name"] = name
        shared = body.pop("shared", False)
        if not isinstance(shared, bool):
            raise InvalidRequest(f"shared: must be true or false, got {shared!r}")
        if shared and not await self.is_admin("write"):
            raise Forbidden("only an admin may write shared templates")
        try:
            return Template.from_json({**body, "owner": None if shared else self.owner})
        except SpecError as exc:
            raise InvalidRequest(str(exc)) from exc


class TemplatesHandler(_TemplateBase):
    """List the templates the caller can use; create one (409 if the name is taken)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        found = await self.db(lambda tx: tx.list_templates(self.owner))
        self.write_json({"templates": [template_view(t) for t in found]})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        template = await self._parse(None)

        def create(tx: Transaction) -> bool:
            existing = tx.get_template(template.name, template.owner)
            if existing is not None and existing.owner == template.owner:
                return False
            tx.put_template(template)
            return True

        if not await self.db(create, write=True):
            raise Conflict(f"a template named {template.name!r} exists: PUT it to replace it")
        self.write_json(template_view(template), status=201)


class TemplateHandler(_TemplateBase):
    """One template: the caller's own of that name, else the shared one."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        found = await self.db(lambda tx: tx.get_template(name, self.owner))
        if found is None:
            raise NotFound(f"no template named {name!r}")
        self.write_json(template_view(found))

    @web.authenticated
    @authorized
    async def put(self, name: str) -> None:
        template = await self._parse(name)
        await self.db(lambda tx: tx.put_template(template), write=True)
        self.write_json(template_view(template))

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        shared = self.get_argument("shared", "false").lower() in ("1", "true", "yes")
        if shared and not await self.is_admin("write"):
            raise Forbidden("only an admin may delete shared templates")
        owner = None if shared else self.owner
        if not await self.db(lambda tx: tx.delete_template(name, owner), write=True):
            raise NotFound(f"no {'shared ' if shared else ''}template named {name!r}")
        self.set_status(204)
        self.finish()
