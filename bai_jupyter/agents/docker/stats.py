"""Kernels' counters from the engine's one-shot stats.

One reading of all of an agent's running kernels is one job in one of the
engine's threads, a ``GET /containers/{id}/stats?stream=false&one-shot=true`` per
container (the engine answers at once, without its one-second second sample).
That is cheaper here than a streaming reader per container, which the engine
feeds every second whether or not anyone looks (``bench/usage.py`` measured both).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import docker.errors
import requests.exceptions

from ..usage import KernelReading

__all__ = ["parse_stats", "read_usage"]


def parse_stats(kernel_id: str, at: float, stats: Mapping[str, Any]) -> KernelReading | None:
    """A reading from one stats answer; ``None`` for the empty one of a stopped container."""
    cpu = (stats.get("cpu_stats") or {}).get("cpu_usage") or {}
    mem = stats.get("memory_stats") or {}
    if "total_usage" not in cpu:
        return None
    used: int | None = mem.get("usage")
    if used is not None:
        extra = mem.get("stats") or {}
        # cgroup v1 counts the page cache in usage ("cache"), v2 names it "inactive_file".
        cache = extra.get("total_inactive_file", extra.get("inactive_file", extra.get("cache", 0)))
        used = max(0, int(used) - int(cache))
    nets = (stats.get("networks") or {}).values()
    return KernelReading(
        kernel_id,
        at,
        cpu_seconds=int(cpu["total_usage"]) / 1e9,
        mem_bytes=used,
        mem_limit=mem.get("limit"),
        rx_bytes=sum(int(n.get("rx_bytes", 0)) for n in nets) if nets else None,
        tx_bytes=sum(int(n.get("tx_bytes", 0)) for n in nets) if nets else None,
    )


def read_usage(api: Any, containers: Mapping[str, str]) -> list[KernelReading]:
    """Blocking: one-shot stats of each container (kernel id → container id), in turn.

    A container removed meanwhile, or one that does not answer, is left out."""
    readings: list[KernelReading] = []
    for kernel_id, cid in containers.items():
        try:
            stats = api.stats(cid, stream=False, one_shot=True)
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            continue
        reading = parse_stats(kernel_id, time.monotonic(), stats)
        if reading is not None:
            readings.append(reading)
    return readings
