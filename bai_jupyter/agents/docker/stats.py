"""Kernels' counters from the engine's stats streams: one reader per container.

Each container asked about gets one ``GET /containers/{id}/stats?stream=true`` read
by a thread of its own on a client of its own (a stream holds its connection), which
keeps the latest sample; a reading of the agent's kernels is then a look at those
samples, with no request. The engine sends a sample a second. This is cheaper for the
manager than a one-shot request per kernel per reading (an HTTP request through the
SDK costs some milliseconds of CPU; a streamed sample's decoding a fraction of one),
and one-shot requests in a row would each wait up to a second for the engine's
collector (``bench/usage.py`` measures both). A reader ends when its container does,
or when nobody asked about its container for :data:`IDLE_AFTER` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import docker.errors
import requests.exceptions

from ..usage import KernelReading

__all__ = ["IDLE_AFTER", "StatsStreams", "parse_stats"]

#: Seconds a container's reader goes on without anyone asking for its samples.
IDLE_AFTER = 10.0


def parse_stats(kernel_id: str, at: float, stats: Mapping[str, Any]) -> KernelReading | None:
    """A reading from one stats sample; ``None`` for the empty one of a stopped container."""
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


class StatsStreams:
    """An agent's stats readers, by container id, and their latest samples."""

    def __init__(self, new_client: Callable[[], Any]) -> None:
        self._new_client = new_client
        self._client: Any = None
        self._lock = threading.Lock()
        self._latest: dict[str, KernelReading] = {}
        self._asked: dict[str, float] = {}
        self._readers: dict[str, threading.Thread] = {}
        self._closed = False

    def readings(self, containers: Mapping[str, str]) -> list[KernelReading]:
        """Blocking (the first call makes the client): the latest sample of each container
        (kernel id → container id) that has one; a reader starts for each that has none."""
        if self._client is None:
            self._client = self._new_client()
        now, found = time.monotonic(), []
        with self._lock:
            for kernel_id, cid in containers.items():
                self._asked[cid] = now
                reader = self._readers.get(cid)
                if (reader is None or not reader.is_alive()) and not self._closed:
                    reader = threading.Thread(
                        target=self._read, args=(cid,), name=f"bai-stats-{cid[:12]}", daemon=True
                    )
                    self._readers[cid] = reader
                    reader.start()
                latest = self._latest.get(cid)
                if latest is not None:
                    found.append(replace(latest, kernel_id=kernel_id))
        return found

    def _read(self, cid: str) -> None:
        try:
            for stats in self._client.api.stats(cid, stream=True, decode=True):
                reading = parse_stats("", time.monotonic(), stats)
                with self._lock:
                    if self._closed or time.monotonic() - self._asked.get(cid, 0) > IDLE_AFTER:
                        return
                    if reading is not None:
                        self._latest[cid] = reading
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            pass  # the container is gone, or the engine: a later reading starts a new one
        finally:
            with self._lock:
                self._latest.pop(cid, None)
                self._asked.pop(cid, None)
                if self._readers.get(cid) is threading.current_thread():
                    del self._readers[cid]

    def close(self) -> None:
        """Make every reader end at its next sample (within a second); drop the client."""
        with self._lock:
            self._closed = True
        if self._client is not None:
            self._client.close()
