"""``/bai/api/v1/templates…``: the caller's templates and the shared ones (admins write those)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import InvalidRequest
from ..request import Template
from .base import TEMPLATES, BaiHandler

__all__ = ["TemplateHandler", "TemplatesHandler", "template_view"]

_BODY_KEYS = ("name", "spec", "description", "shared")


def template_view(template: Template) -> dict[str, Any]:
    """A template as the API shows it: ``shared`` says whether every user sees it."""
    return {**template.to_json(), "shared": template.owner is None}


class _TemplateBase(BaiHandler):
    auth_resource = TEMPLATES

    def _parse(self, name: str | None) -> tuple[Any, Any, Any, bool]:
        """A posted template as (name, spec, description, shared), as the caller wrote them."""
        body = self.json_body(known=_BODY_KEYS)
        if name is not None:
            if body.get("name") not in (None, name):
                raise InvalidRequest(
                    f"name: {body['name']!r} differs from the URL's {name!r}", field="name"
                )
            body["name"] = name
        shared = body.get("shared", False)
        if not isinstance(shared, bool):
            raise InvalidRequest(f"shared: must be true or false, got {shared!r}", field="shared")
        # The rest is checked where templates are made (bai_jupyter.request.Template).
        return body.get("name"), body.get("spec"), body.get("description"), shared


class TemplatesHandler(_TemplateBase):
    """List the templates the caller can use; create one (409 if the name is taken)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        found = await self.api.list_templates()
        self.write_json({"templates": [template_view(t) for t in found]})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        template = await self.api.create_template(*self._parse(None))
        self.write_json(template_view(template), status=201)


class TemplateHandler(_TemplateBase):
    """One template: the caller's own of that name, else the shared one."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        self.write_json(template_view(await self.api.get_template(name)))

    @web.authenticated
    @authorized
    async def put(self, name: str) -> None:
        self.write_json(template_view(await self.api.put_template(*self._parse(name))))

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        shared = self.get_argument("shared", "false").lower() in ("1", "true", "yes")
        await self.api.delete_template(name, shared=shared)
        self.set_status(204)
        self.finish()
