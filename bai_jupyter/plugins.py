"""Plugins by name, through entry-point groups: one lookup for every kind.

Agent backends (``bai_jupyter.agents``), session sequencers
(``bai_jupyter.sequencers``) and agent selectors (``bai_jupyter.agent_selectors``)
are found the same way. The built-ins are registered in ``pyproject.toml``
exactly as a third-party package registers its own, so there is one path for both.

Stdlib only, and nothing of the package: every layer may use it. Each caller
turns :class:`PluginError` into its own kind of error, with the same message.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TypeVar

__all__ = ["PluginError", "check_known", "load_plugin", "plugin_names"]

T = TypeVar("T")


class PluginError(LookupError):
    """No plugin of that name in the group, or one that is not of the expected kind."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def plugin_names(group: str) -> list[str]:
    """The names registered in an entry-point group, sorted."""
    return sorted({ep.name for ep in entry_points(group=group)})


def check_known(group: str, name: str, kind: str) -> None:
    """PluginError, saying which names there are, unless ``name`` is registered in ``group``.

    ``kind`` names what the group holds in the message (``"agent backend"``)."""
    if name not in plugin_names(group):
        raise _unknown(group, name, kind)


def _unknown(group: str, name: str, kind: str) -> PluginError:
    known = ", ".join(plugin_names(group)) or "none"
    return PluginError(f"unknown {kind} {name!r} (available: {known})")


def load_plugin(group: str, name: str, base: type[T], kind: str) -> type[T]:
    """The class registered as ``name`` in ``group``, a subclass of ``base``; PluginError
    for an unknown name (listing the known ones) or a class of another kind."""
    matches = [ep for ep in entry_points(group=group) if ep.name == name]
    if not matches:
        raise _unknown(group, name, kind)
    cls = matches[0].load()
    if not (isinstance(cls, type) and issubclass(cls, base)):
        article = "an" if base.__name__[:1].lower() in "aeiou" else "a"
        raise PluginError(f"{group}:{name} is not {article} {base.__name__} subclass")
    return cls
