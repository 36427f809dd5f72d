"""Bounded event queues where a slow reader loses the oldest, never blocks the writer."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

__all__ = ["put_dropping_oldest"]

T = TypeVar("T")


def put_dropping_oldest(queue: asyncio.Queue[T], item: T) -> None:
    """Put ``item``; when ``queue`` is full, drop its oldest entry first."""
    if queue.full():
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()
    queue.put_nowait(item)
