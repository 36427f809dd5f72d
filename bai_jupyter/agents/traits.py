"""Trait types of agent options that traitlets lacks: resource slots and host paths.

Both are checked when the option is set (in a config file, on the command line,
or as a keyword), so a typo fails at start with the option's name, not later in
the middle of a scheduling pass.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traitlets import TraitError, TraitType

from ..resources import Amount, ResourceError, ResourceSlot

__all__ = ["HostPath", "OptionalSlots", "Slots"]


_SLOTS_INFO = "resource slots {slot: amount}, e.g. {'cpu': 4, 'mem': '8g'}"


def _slots(trait: TraitType[Any, Any], obj: Any, value: Any) -> ResourceSlot:
    if not isinstance(value, Mapping):
        trait.error(obj, value)
    try:
        return ResourceSlot(value)
    except ResourceError as exc:
        raise TraitError(f"The '{trait.name}' trait of {type(obj).__name__}: {exc}") from exc


class Slots(TraitType[ResourceSlot, Mapping[str, Amount]]):
    """Resource slots ``{slot: amount}`` (e.g. ``{"cpu": 4, "mem": "8g"}``), held exactly."""

    info_text = _SLOTS_INFO

    def validate(self, obj: Any, value: Any) -> ResourceSlot:
        return _slots(self, obj, value)

    def from_string(self, s: str) -> Any:
        """``--LocalAgent.reserve="{'mem': '1g'}"`` on a command line."""
        return ast.literal_eval(s)


class OptionalSlots(TraitType[ResourceSlot | None, Mapping[str, Amount] | None]):
    """:class:`Slots`, or ``None`` (the default: not set)."""

    info_text = _SLOTS_INFO + ", or None"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(None, allow_none=True, **kwargs)

    def validate(self, obj: Any, value: Any) -> ResourceSlot | None:
        return None if value is None else _slots(self, obj, value)

    def from_string(self, s: str) -> Any:
        return None if s == "None" else ast.literal_eval(s)


class HostPath(TraitType[Path, str | os.PathLike[str]]):
    """A path of this host, held as a :class:`~pathlib.Path`."""

    info_text = "a path"

    def validate(self, obj: Any, value: Any) -> Path:
        if not isinstance(value, (str, os.PathLike)):
            self.error(obj, value)
        return Path(value)
