"""Agents by backend name, through the entry-point group ``bai_jupyter.agents``.

The built-in backends (``docker``, ``local``) are registered in ``pyproject.toml``
exactly as a third-party package registers its own :class:`AgentBackend`
subclass, so there is one lookup path for both, and the manager names none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traitlets import TraitError
from traitlets.config import Configurable

from ..errors import ConfigError, Unavailable
from ..plugins import PluginError, load_plugin, plugin_names
from .base import AgentBackend

__all__ = ["AUTO", "GROUP", "backend_class", "backend_names", "make_agents"]

GROUP = "bai_jupyter.agents"
#: The backend setting that picks the first backend able to run kernels here.
AUTO = "auto"
#: The backend of an entry of ``BaiSessionManager.agents`` that names none.
DEFAULT_BACKEND = "docker"


def backend_names() -> list[str]:
    """The names registered in the entry-point group."""
    return plugin_names(GROUP)


def backend_class(name: str) -> type[AgentBackend]:
    """The backend registered as ``name``; ConfigError when there is none."""
    try:
        return load_plugin(GROUP, name, AgentBackend, "agent backend")  # type: ignore[type-abstract]
    except PluginError as exc:
        raise ConfigError(exc.message) from None


async def make_agents(
    configs: Sequence[Mapping[str, Any]], backend: str, parent: Configurable
) -> list[AgentBackend]:
    """The configured agents (each ``{"backend": name, **traits}``, over the class config
    of ``parent``); none configured: the one agent ``backend`` chooses."""
    made = [_configured(index, conf, parent) for index, conf in enumerate(configs)]
    return made or [await _chosen(backend, parent)]


def _configured(index: int, conf: Mapping[str, Any], parent: Configurable) -> AgentBackend:
    options = dict(conf)
    name = str(options.pop("backend", DEFAULT_BACKEND))
    cls = backend_class(name)
    known = set(cls.class_trait_names(config=True))
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"agents[{index}]: the {name} backend has no option {', '.join(unknown)} "
            f"(options: {', '.join(sorted(known))})"
        )
    options["id"] = options.get("id") or f"{name}-{index + 1}"
    try:
        return cls(parent=parent, **options)
    except TraitError as exc:
        raise ConfigError(f"agents[{index}]: {exc}") from exc


async def _chosen(backend: str, parent: Configurable) -> AgentBackend:
    """The named backend's agent, or for ``auto`` the first by ``auto_rank`` available."""
    if backend != AUTO:
        agent = backend_class(backend)(parent=parent)
        if not await agent.available():
            await agent.close()
            raise Unavailable(f"backend {backend!r} is configured but {agent.unavailable_reason}")
        agent.announce(f"backend={backend}")
        return agent
    ranked = [cls for cls in map(backend_class, backend_names()) if cls.auto_rank is not None]
    passed_over: list[str] = []
    for cls in sorted(ranked, key=lambda cls: cls.auto_rank or 0):
        agent = cls(parent=parent)
        if await agent.available():
            agent.announce("; ".join(passed_over) or f"backend={AUTO}")
            return agent
        passed_over.append(agent.unavailable_reason)
        await agent.close()
    raise Unavailable(f"no agent backend can run kernels here: {'; '.join(passed_over)}")
