"""Find sequencers and agent selectors by name through entry points.

The built-ins are registered in ``pyproject.toml`` exactly as a third-party
package would register its own, so there is one lookup path for both: the
package's one plugin lookup (``bai_jupyter.plugins``), as for agent backends.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..plugins import PluginError, load_plugin, plugin_names
from .config import COMMON_OPTIONS, SchedulerConfig, SchedulerConfigError
from .selectors import AgentSelector
from .sequencers import Sequencer

SEQUENCER_GROUP = "bai_jupyter.sequencers"
SELECTOR_GROUP = "bai_jupyter.agent_selectors"

T = TypeVar("T", Sequencer, AgentSelector)


def available(group: str) -> list[str]:
    """Names registered in an entry-point group."""
    return plugin_names(group)


def _load(group: str, name: str, base: type[T]) -> type[T]:
    kind = "sequencer" if base is Sequencer else "agent selector"
    try:
        return load_plugin(group, name, base, kind)
    except PluginError as exc:
        raise SchedulerConfigError(exc.message) from None


def load_plugins(config: SchedulerConfig) -> tuple[Sequencer, AgentSelector]:
    """Instantiate the configured sequencer and selector, each with its own options."""
    seq_cls = _load(SEQUENCER_GROUP, config.sequencer, Sequencer)
    sel_cls = _load(SELECTOR_GROUP, config.selector, AgentSelector)
    seq_opts: dict[str, Any] = {}
    sel_opts: dict[str, Any] = {}
    for key, value in config.options.items():
        if key in seq_cls.OPTIONS:
            seq_opts[key] = value
        elif key in sel_cls.OPTIONS:
            sel_opts[key] = value
        else:
            known = ", ".join(sorted({*seq_cls.OPTIONS, *sel_cls.OPTIONS, *COMMON_OPTIONS}))
            raise SchedulerConfigError(
                f"unknown scheduler option {key!r} for {config.sequencer}/{config.selector} "
                f"(known: {known})"
            )
    return seq_cls(seq_opts), sel_cls(sel_opts)
