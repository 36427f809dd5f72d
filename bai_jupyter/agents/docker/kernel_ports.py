"""Where main1's ipykernel listens in its container: a fresh port base per session.

The address of an ended session's main1 goes back to the engine's pool and the next
container often gets it. A client of the ended kernel (a notebook's, a console's, an
execute run's) that reconnects there must not reach the new session's kernel, so each
main1 listens on five ports from a base picked at random in
``runtime.protocol.KERNEL_PORT_RANGE``, never one of the last bases picked here.
"""

from __future__ import annotations

import collections
import random

from ...kernel_plan import LABEL_ROOT
from ...runtime.protocol import KERNEL_PORT_BASES

__all__ = ["LABEL_PORT_BASE", "PortBases"]

#: The label of main1's container that holds its Jupyter ports' base (picked at create).
LABEL_PORT_BASE = f"{LABEL_ROOT}.kernel-port-base"


class PortBases:
    """Picks port bases at random, none of the last half of all bases picked here."""

    def __init__(self) -> None:
        self._recent: collections.deque[int] = collections.deque(maxlen=len(KERNEL_PORT_BASES) // 2)

    def pick(self) -> int:
        recent = set(self._recent)
        base = random.choice([b for b in KERNEL_PORT_BASES if b not in recent])
        self._recent.append(base)
        return base
