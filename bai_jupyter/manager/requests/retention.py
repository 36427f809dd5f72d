"""Records of ended sessions: deleted on request, or once past ``ended_retention``.

An ended session's record (status, history, kernels' logs) is kept so its owner
can still read why it ended; without a limit they would pile up forever.
"""

from __future__ import annotations

import time
from typing import Protocol

from ...errors import Conflict
from ...model import TERMINAL, Session
from ..core import Core

__all__ = ["Retention"]


class RetentionSettings(Protocol):
    @property
    def ended_retention(self) -> float: ...

    @property
    def retention_interval(self) -> float: ...


class Retention:
    """Deletes ended sessions' records: one on request, the old ones periodically."""

    def __init__(self, core: Core, settings: RetentionSettings) -> None:
        self.core = core
        self.settings = settings

    async def purge(self, key: str, owner: str | None = None) -> Session:
        """Delete an ended session's record (its logs too); Conflict while it has not ended."""
        session = await self.core.get(key, owner)
        if not session.status.is_terminal:
            raise Conflict(
                f"session {session.id} is {session.status.value}: only an ended session's "
                "record can be deleted; end it first (DELETE without purge)"
            )
        await self.core.db(lambda tx: tx.delete_sessions([session.id]))
        return session

    async def purge_ended(self, older_than: float) -> int:
        """Delete the records of sessions that ended more than ``older_than`` seconds ago."""
        cutoff = time.time() - older_than
        ended = await self.core.list_sessions(statuses=TERMINAL)
        old = [s.id for s in ended if (s.status_history[-1].at if s.status_history else 0) < cutoff]
        return await self.core.db(lambda tx: tx.delete_sessions(old)) if old else 0

    async def loop(self) -> None:
        """Ended sessions do not pile up: delete those past ``ended_retention``."""
        settings = self.settings
        if settings.ended_retention <= 0:
            return
        interval = lambda: settings.retention_interval  # noqa: E731
        what = "deleting ended sessions"
        await self.core.every(interval, self._purge_old, what, minimum=1.0, wait_first=False).run()

    async def _purge_old(self) -> None:
        retention = self.settings.ended_retention
        if retention <= 0:
            return  # turned off meanwhile
        gone = await self.purge_ended(retention)
        if gone:
            self.core.log.info("bai-jupyter: deleted %d ended sessions past retention", gone)
