"""Session sequencers: which pending session the pass tries next.

A pass calls :meth:`Sequencer.order` once per priority band (highest first).
A custom sequencer subclasses :class:`Sequencer` and registers itself in the
entry-point group ``bai_jupyter.sequencers``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, ClassVar

from ..model import Session
from .config import (
    OptionParser,
    fair_share_by,
    non_negative_int,
    parse_options,
    positive_seconds,
)
from .context import PassContext

#: DRF's order: group share, owner share, oldest pending, owner.
_DRFKey = tuple[Decimal, Decimal, float, str]


class Sequencer:
    """Base class of session sequencers."""

    name: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, OptionParser]] = {}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = parse_options(options or {}, self.OPTIONS, f"sequencer {self.name!r}")

    def order(self, band: list[Session], ctx: PassContext) -> Iterator[Session]:
        """Yield the band's sessions in the order they should be tried."""
        raise NotImplementedError

    def on_no_fit(self, session: Session, info: dict[str, Any], ctx: PassContext) -> bool:
        """Called when ``session`` found no room (``info`` is its updated record).

        Return True to stop the pass here (head-of-line blocking).
        """
        return False

    def steady_until(self, info: Mapping[str, Any], now: float) -> float | None:
        """Until when a session that found no room (``info``: its record after
        :meth:`on_no_fit`) keeps its place in this order, if nothing else changes: None
        for ever, ``now`` for not even the next pass. A sequencer whose order moves with
        time or with the count of tries says so here, or idle passes would be skipped."""
        return None


class FIFOSequencer(Sequencer):
    """Oldest first. Strict by default: a session that does not fit blocks the queue.

    With ``num_retries_to_skip = N > 0`` a session that has failed N tries is
    pushed behind the others (so smaller sessions can start) until
    ``hol_max_wait`` seconds have passed; then it is back at the head and the
    queue drains for it.
    """

    name = "fifo"
    OPTIONS: ClassVar[dict[str, OptionParser]] = {
        "num_retries_to_skip": non_negative_int,
        "hol_max_wait": positive_seconds,
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.num_retries_to_skip: int = self.options.get("num_retries_to_skip", 0)
        self.hol_max_wait: float = self.options.get("hol_max_wait", 600.0)

    def pushed_back(self, info: Mapping[str, Any], now: float) -> bool:
        pushed_at = info.get("pushed_at")
        return (
            self.num_retries_to_skip > 0
            and pushed_at is not None
            and now < pushed_at + self.hol_max_wait
        )

    def order(self, band: list[Session], ctx: PassContext) -> Iterator[Session]:
        return iter(
            sorted(
                band,
                key=lambda s: (self.pushed_back(s.scheduler_data, ctx.now), s.created_at, s.id),
            )
        )

    def on_no_fit(self, session: Session, info: dict[str, Any], ctx: PassContext) -> bool:
        if self.num_retries_to_skip == 0:
            return True
        if info.get("retries", 0) >= self.num_retries_to_skip and "pushed_at" not in info:
            info["pushed_at"] = ctx.now
        return not self.pushed_back(info, ctx.now)

    def steady_until(self, info: Mapping[str, Any], now: float) -> float | None:
        if self.num_retries_to_skip == 0:
            return None
        if "pushed_at" not in info:
            return now  # its tries count towards being pushed back: every pass matters
        pushed_at = float(info["pushed_at"])
        return pushed_at + self.hol_max_wait if self.pushed_back(info, now) else None


class LIFOSequencer(Sequencer):
    """Newest first; a session that does not fit is skipped."""

    name = "lifo"

    def order(self, band: list[Session], ctx: PassContext) -> Iterator[Session]:
        return iter(sorted(band, key=lambda s: (-s.created_at, s.id)))


class DRFSequencer(Sequencer):
    """Dominant resource fairness: the owner with the smallest dominant share goes next.

    Shares are recomputed as the pass places sessions, so one pass already
    interleaves owners fairly. Within an owner, oldest first. With
    ``fair_share = "groups"`` the group with the smallest share (of what all its
    members hold) goes first, then the owner with the smallest share within it.
    """

    name = "drf"
    OPTIONS: ClassVar[dict[str, OptionParser]] = {"fair_share": fair_share_by}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.by_groups = self.options.get("fair_share", "users") == "groups"

    def _key(self, owner: str, queue: deque[Session], ctx: PassContext) -> _DRFKey:
        group = ctx.group_share(ctx.fair_share_group(owner)) if self.by_groups else Decimal(0)
        return (group, ctx.dominant_share(owner), queue[0].created_at, owner)

    def order(self, band: list[Session], ctx: PassContext) -> Iterator[Session]:
        queues: dict[str, deque[Session]] = {}
        for session in sorted(band, key=lambda s: (s.created_at, s.id)):
            queues.setdefault(session.owner, deque()).append(session)
        heap = [self._key(owner, queue, ctx) for owner, queue in queues.items()]
        heapq.heapify(heap)
        while heap:
            owner = heapq.heappop(heap)[-1]
            queue = queues[owner]
            yield queue.popleft()
            if self.by_groups:  # a placement moves its group's share: every key changes
                heap = [self._key(o, q, ctx) for o, q in queues.items() if q]
                heapq.heapify(heap)
            elif queue:
                heapq.heappush(heap, self._key(owner, queue, ctx))
