"""A kernel's resource counters as an agent reads them at one instant.

Counters, not rates: the manager's usage watch (``manager/usage.py``) turns two
readings into CPU % and network rates, so an agent keeps no history of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KernelReading"]


@dataclass(frozen=True)
class KernelReading:
    """One kernel's counters at ``at`` (``None``: the backend cannot tell)."""

    kernel_id: str
    #: When it was read (``time.monotonic()`` of the reading process).
    at: float
    #: CPU time used so far, in seconds.
    cpu_seconds: float | None = None
    #: Memory in use now (the page cache left out), in bytes.
    mem_bytes: int | None = None
    #: The kernel's memory limit, in bytes.
    mem_limit: int | None = None
    #: Bytes received and sent so far, over every interface.
    rx_bytes: int | None = None
    tx_bytes: int | None = None
