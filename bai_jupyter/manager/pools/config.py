"""What a warm pool is: the ``warm_pools`` setting, checked once, and how a pool's
request becomes the key that a launch must match.

A pool names its request one of three ways: ``request`` (a session request as
the REST API takes it), ``template`` (a shared template, with ``request``
overriding it), or ``kernelspec`` (a bai kernelspec: the request its launch
makes). Requests with a name, dependencies, a start time or data folders have
nothing to pool: those are decided per user, at creation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from ...errors import ConfigError
from ...model import Session, SessionSpec, SessionType
from ...request import NAME_RE, spec_to_json
from ...request.kernel_launch import launch_request
from ...resources import ResourceError, ResourceSlot
from ...store import Transaction
from ..owners import POOL_OWNER

__all__ = [
    "MARK",
    "POOL_OWNER",
    "PoolConfig",
    "count",
    "parse_pools",
    "pool_key",
    "pool_stats",
    "reserved",
    "warm_mark",
]

#: ``meta`` of an unclaimed warm session: ``{"pool", "key"}`` (and ``"reserved"`` while a
#: claim hands it over); ``status_data`` of a claimed one: ``{"pool", "claimed_at"}``.
MARK: Final = "warm_pool"
#: A reservation older than this is a claim that died half-way: the session is free again.
RESERVED_FOR = 60.0
#: What each pool counts (kept in the store): launches that matched it, served warm,
#: started cold, and warm sessions ended to give their room to a user's.
COUNTS = ("claims", "hits", "misses", "given_way")
#: The most warm sessions one pool keeps.
MAX_SIZE = 64
_KEYS = ("name", "size", "request", "template", "kernelspec", "notebook", "max_slots")
#: Request fields no pool may set: they are the user's, decided at creation.
_PER_USER = ("name", "depends_on", "starts_at", "mounts", "ssh_public_key")


@dataclass(frozen=True)
class PoolConfig:
    """One pool as configured (its request resolved against templates at each round)."""

    name: str
    size: int
    request: dict[str, Any]
    template: str | None = None
    kernelspec: str | None = None
    #: Warm sessions mount the notebooks' root (and serve launches from notebooks).
    notebook: bool = True
    #: The most its warm sessions may hold in all (``None``: ``size`` alone bounds it).
    max_slots: ResourceSlot | None = None


def pool_key(spec: SessionSpec) -> str:
    """What a launch must equal to claim from a pool: the whole spec after templates and
    defaults, but its name and priority (a claim keeps the caller's)."""
    fields = {k: v for k, v in spec_to_json(spec).items() if k not in ("name", "priority")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def warm_mark(session: Session) -> dict[str, Any]:
    """The pool mark of an unclaimed warm session (``{}`` for any other session)."""
    mark = session.meta.get(MARK) if session.owner == POOL_OWNER else None
    return mark if isinstance(mark, dict) else {}


def reserved(session: Session, now: float) -> bool:
    """Whether a claim is handing this warm session over right now."""
    at = warm_mark(session).get("reserved")
    return isinstance(at, (int, float)) and now - at < RESERVED_FOR


def _stats_key(name: str) -> str:
    return f"warm-pool-stats:{name}"


def pool_stats(tx: Transaction, name: str) -> dict[str, int]:
    """A pool's counts as the store keeps them."""
    raw = tx.get_meta(_stats_key(name))
    try:
        loaded = json.loads(raw) if raw else {}
    except ValueError:
        loaded = {}
    return {k: int(loaded.get(k, 0)) for k in COUNTS}


def count(tx: Transaction, name: str, what: str) -> None:
    """One more ``what`` for the pool ``name`` (in the caller's transaction)."""
    stats = pool_stats(tx, name)
    stats[what] += 1
    tx.set_meta(_stats_key(name), json.dumps(stats))


def _kernelspec(name: str, where: str) -> tuple[dict[str, Any], str | None, bool]:
    """A bai kernelspec's request, template and notebook mount (blocking: reads files)."""
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise ConfigError(f"{where}.kernelspec: no kernelspec named {name!r}") from None
    provisioner = (spec.metadata or {}).get("kernel_provisioner") or {}
    if provisioner.get("provisioner_name") != "bai":
        raise ConfigError(f"{where}.kernelspec: {name!r} is not a bai kernelspec")
    config = dict(provisioner.get("config") or {})
    if config.get("session"):
        raise ConfigError(
            f"{where}.kernelspec: {name!r} attaches to session {config['session']!r}; "
            "only kernelspecs that make sessions can be pooled"
        )
    template = config.get("template")
    return (
        launch_request(config),
        template if isinstance(template, str) else None,
        bool(config.get("mount_notebook_dir", True)),
    )


def _one(entry: Any, where: str) -> PoolConfig:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: must be a mapping, got {entry!r}")
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(_KEYS)})")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}.name: a name of letters, digits, . _ - is required")
    size = entry.get("size", 1)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE:
        raise ConfigError(f"{where}.size: a whole number from 0 to {MAX_SIZE}, got {size!r}")
    request = entry.get("request") or {}
    template = entry.get("template")
    notebook = entry.get("notebook", True)
    if not isinstance(request, Mapping):
        raise ConfigError(f"{where}.request: must be a session request (a mapping)")
    if template is not None and not isinstance(template, str):
        raise ConfigError(f"{where}.template: must be a template's name")
    if not isinstance(notebook, bool):
        raise ConfigError(f"{where}.notebook: must be true or false")
    kernelspec = entry.get("kernelspec")
    if kernelspec is not None:
        if request or template is not None or "notebook" in entry:
            raise ConfigError(
                f"{where}: a kernelspec gives the request, template and notebook mount; "
                "set none of them beside it"
            )
        request, template, notebook = _kernelspec(str(kernelspec), where)
    request = {"type": SessionType.INTERACTIVE.value, **request}
    if request["type"] != SessionType.INTERACTIVE.value:
        raise ConfigError(f"{where}.request.type: only interactive sessions are pooled")
    for field in _PER_USER:
        if request.get(field):
            raise ConfigError(
                f"{where}.request.{field}: decided per user when a session is made; "
                "a pool cannot hold it"
            )
    try:
        max_slots = None if entry.get("max_slots") is None else ResourceSlot(entry["max_slots"])
    except (ResourceError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.max_slots: {exc}") from None
    return PoolConfig(
        name=name,
        size=size,
        request=dict(request),
        template=template,
        kernelspec=None if kernelspec is None else str(kernelspec),
        notebook=notebook,
        max_slots=max_slots,
    )


def parse_pools(entries: Sequence[Any]) -> list[PoolConfig]:
    """The ``warm_pools`` setting, every entry checked (blocking: a kernelspec is read);
    ConfigError names the first bad one."""
    pools = [_one(entry, f"warm_pools[{i}]") for i, entry in enumerate(entries)]
    names = [p.name for p in pools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"warm_pools: the name {twice[0]!r} is used twice")
    return pools
