"""The ``roles`` field: a cluster's kernels by role, each with its own image and resources.

``[{"name": "main", "image": "…", "resources": {"cpu": 4}},
{"name": "worker", "replicas": 3, "resources": {"cpu": 2}}]`` gives ``main1`` and
``worker1`` … ``worker3``. A field a role leaves out is the session's; ``main``
may be left out (then main1 is the session's image and resources).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..model import MAIN_ROLE, RoleSpec
from .bounds import MAX_CLUSTER_SIZE
from .parsers import (
    SpecError,
    bound_env,
    bound_image,
    bound_mounts,
    bound_resources,
    int_parser,
    list_of,
    mapping_of,
    nonempty_str,
    parse_env,
    parse_image,
    parse_mounts,
    parse_resources,
    show,
)

__all__ = ["MAX_ROLES", "ROLE_NAME_RE", "bound_roles", "parse_roles"]

#: A role's name is its kernels' hostname stem: letters and digits, ending in a letter.
ROLE_NAME_RE = re.compile(r"[a-z](?:[a-z0-9]{0,14}[a-z])?")
MAX_ROLES = 8
_ROLE_KEYS = ("name", "replicas", "image", "resources", "env", "mounts")
_replicas = int_parser(1, MAX_CLUSTER_SIZE)


def _role(item: Any, where: str, seen: set[str]) -> RoleSpec:
    entry: Mapping[str, Any] = mapping_of(
        item, where, 'a role object, e.g. {"name": "worker", "replicas": 3}'
    )
    unknown = [key for key in entry if key not in _ROLE_KEYS]
    if unknown:
        raise SpecError(
            f"{where}.{unknown[0]}", f"unknown field; a role has {', '.join(_ROLE_KEYS)}"
        )
    name = nonempty_str(entry.get("name"), f"{where}.name", "a role name")
    if ROLE_NAME_RE.fullmatch(name) is None:
        raise SpecError(
            f"{where}.name",
            f"must be lowercase letters and digits, starting and ending with a letter "
            f"(the kernels' hostnames are name1, name2 …), got {show(name)}",
        )
    if name in seen:
        raise SpecError(f"{where}.name", f"role {name!r} is named twice")
    seen.add(name)
    replicas = _replicas(entry.get("replicas", 1), f"{where}.replicas")
    if name == MAIN_ROLE and replicas != 1:
        raise SpecError(f"{where}.replicas", "the main role has exactly one kernel, main1")
    image = entry.get("image")
    return RoleSpec(
        name=name,
        replicas=replicas,
        image=None if image is None else parse_image(image, f"{where}.image"),
        resources=parse_resources(entry.get("resources") or {}, f"{where}.resources"),
        env=parse_env(entry.get("env") or {}, f"{where}.env"),
        mounts=parse_mounts(entry.get("mounts") or [], f"{where}.mounts"),
    )


def parse_roles(value: Any, path: str) -> list[RoleSpec]:
    seen: set[str] = set()
    roles = [
        _role(item, f"{path}[{i}]", seen)
        for i, item in enumerate(list_of(value, path, "role objects"))
    ]
    if roles and all(role.name == MAIN_ROLE for role in roles):
        raise SpecError(path, "name at least one role besides main (or leave roles out)")
    return roles


def bound_roles(value: list[Mapping[str, Any]], path: str) -> None:
    """The limits of a new request, on the (already parsed, so well-formed) JSON value."""
    if len(value) > MAX_ROLES:
        raise SpecError(path, f"at most {MAX_ROLES} roles, got {len(value)}")
    kernels = 1 + sum(int(r.get("replicas", 1)) for r in value if r["name"] != MAIN_ROLE)
    if kernels > MAX_CLUSTER_SIZE:
        raise SpecError(path, f"at most {MAX_CLUSTER_SIZE} kernels in all, got {kernels}")
    for i, role in enumerate(value):
        where = f"{path}[{i}]"
        if role.get("image") is not None:
            bound_image(role["image"], f"{where}.image")
        for key, bound in (
            ("resources", bound_resources),
            ("env", bound_env),
            ("mounts", bound_mounts),
        ):
            if role.get(key):
                bound(role[key], f"{where}.{key}")
