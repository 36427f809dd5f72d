"""Templates: named, stored defaults a request is deep-merged over."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import SessionSpec
from .bounds import MAX_TEXT
from .parsers import SpecError, bound_text, nonempty_str, parse_name, show
from .schema import parse_spec, unknown_field, validate_partial


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` (a request) over ``base`` (a template) into a new dict.

    Where both sides hold a mapping (``env``, ``resources``) they merge key by
    key, recursively; anything else, lists included, is replaced by the
    override's value. A ``None`` in the override is a value like any other: it
    replaces, even a mapping, so a request can clear a template's setting (see
    the module docs for what ``null`` then means). Neither input is mutated and
    the result shares no mutable part with them.
    """
    result: dict[str, Any] = {}
    for key, value in base.items():
        if key not in override:
            result[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(override[key], Mapping):
            result[key] = merge(value, override[key])
        else:
            result[key] = copy.deepcopy(override[key])
    for key, value in override.items():
        if key not in result:
            result[key] = copy.deepcopy(value)
    return result


_TEMPLATE_KEYS: Mapping[str, None] = dict.fromkeys(("name", "spec", "description", "owner"))


@dataclass
class Template:
    """Named, stored defaults for creating a session; a request's fields override them.

    ``spec`` is a partial request in JSON form, each field valid on its own;
    ``owner`` ``None`` means the template is shared by all users.
    """

    name: str
    spec: dict[str, Any]
    description: str = ""
    owner: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Template:
        """Validate a stored or posted template; errors name ``spec.<field>``."""
        if not isinstance(data, Mapping):
            raise SpecError("", f"a template must be a JSON object, got {show(data)}")
        for key in data:
            if key not in _TEMPLATE_KEYS:
                raise unknown_field(key, _TEMPLATE_KEYS, "")
        if data.get("name") is None:
            raise SpecError("name", "required: give the template a name")
        name = parse_name(data["name"], "name")
        raw_spec = data.get("spec")
        spec = validate_partial({} if raw_spec is None else raw_spec, "spec.")
        description = data.get("description")
        if description is None:
            description = ""
        if not isinstance(description, str):
            raise SpecError("description", f"must be a string, got {show(description)}")
        bound_text(MAX_TEXT)(description, "description")
        owner = data.get("owner")
        if owner is not None:
            owner = nonempty_str(owner, "owner", "a user name, or null for a shared template")
        return cls(name=name, spec=spec, description=description, owner=owner)

    def to_json(self) -> dict[str, Any]:
        """JSON form that :meth:`from_json` reads back equal."""
        return {
            "name": self.name,
            "spec": copy.deepcopy(self.spec),
            "description": self.description,
            "owner": self.owner,
        }


def apply_template(template: Template | None, request: Mapping[str, Any]) -> SessionSpec:
    """The session spec for ``request`` created from ``template`` (cross-field rules run here)."""
    if not isinstance(request, Mapping):
        raise SpecError("", f"a request must be a JSON object, got {show(request)}")
    return parse_spec(merge(template.spec, request) if template is not None else request)
