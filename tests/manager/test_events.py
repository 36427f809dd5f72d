"""Session events come from the store: every manager on a store tells every change made on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from conftest import make_manager, started_manager

from bai_jupyter.manager import BaiSessionManager

#: Never starts (a session that stays PENDING: nothing runs).
LATER = {"starts_at": time.time() + 86400 * 365}


async def _until(events: AsyncIterator[dict[str, Any]], session_id: str, status: str) -> int:
    """Read ``events`` until ``session_id`` is ``status``; that event's seq."""
    async for event in events:
        if (event.get("session_id"), event.get("status")) == (session_id, status):
            return int(event["seq"])
    raise AssertionError("the stream ended")


async def test_a_change_made_through_one_manager_reaches_every_manager_on_the_store(
    tmp_path: Path, store_url: str
) -> None:
    """Two managers on one store, as two replicas of a shared service (or a server and a
    console kernel's embedded manager): a change made through either is told by both. On
    PostgreSQL at once (NOTIFY: the log is read on a timer of a minute here); on SQLite,
    whose log is read on a timer, within it."""
    every = 60.0 if store_url.startswith("postgresql") else 0.05
    one = make_manager(tmp_path / "one", "local", store_url=store_url, event_interval=every)
    two = make_manager(tmp_path / "two", "local", store_url=store_url, event_interval=every)
    async with started_manager(one), started_manager(two):
        heard = [one.events(), two.events()]
        made = await one.create(LATER, "alice")
        for events in heard:
            await asyncio.wait_for(_until(events, made.id, "PENDING"), 10)
        await two.destroy(made.id)
        for events in heard:
            await asyncio.wait_for(_until(events, made.id, "CANCELLED"), 10)
        for events in heard:
            await events.aclose()  # type: ignore[attr-defined]


async def _resumed(manager: BaiSessionManager, since: int) -> list[tuple[str, str, int]]:
    found = []
    async for event in manager.events(since):
        found.append((event.get("session_id", ""), event["status"], event["seq"]))
        if event["status"] == "CANCELLED":
            return found
    raise AssertionError("the stream ended")


async def test_events_resumed_after_a_seq_come_from_the_store_then_go_on_live(
    tmp_path: Path,
) -> None:
    manager = make_manager(tmp_path, "local")
    async with started_manager(manager):
        events = manager.events()
        made = await manager.create(LATER, "alice")
        seq = await asyncio.wait_for(_until(events, made.id, "PENDING"), 10)
        await events.aclose()  # type: ignore[attr-defined]
        other = await manager.create(LATER, "bob")  # missed by the closed stream
        resumed = asyncio.ensure_future(_resumed(manager, seq))
        await asyncio.sleep(0.5)  # replayed what it missed; now it waits on live events
        await manager.destroy(other.id)
        found = await asyncio.wait_for(resumed, 10)
        # (Passes may also have told the first session's why-pending record: still PENDING.)
        others = [(sid, status) for sid, status, _ in found if sid == other.id]
        assert others[0] == (other.id, "PENDING") and others[-1] == (other.id, "CANCELLED")
        seqs = [s for _, _, s in found]
        assert seqs == sorted(set(seqs)) and seqs[0] > seq, found
        # Resuming after a seq the store does not hold: told to read everything again.
        stale = manager.events(10**15)
        assert (await asyncio.wait_for(stale.__anext__(), 10))["type"] == "reset"
        await stale.aclose()  # type: ignore[attr-defined]


async def test_a_queue_that_does_not_change_logs_no_more_events(tmp_path: Path) -> None:
    """Passes over an unchanged queue are skipped; they only count their tries, which is
    nothing for an event stream to tell (each pass used to log every waiting session)."""
    manager = make_manager(tmp_path, "local", pass_interval=0.1)
    async with started_manager(manager):
        made = await manager.create(LATER, "alice")
        store = manager.core.require_store()

        def logged() -> int:
            with store.read() as tx:
                return sum(e["session_id"] == made.id for _, e in tx.events_after(0, 10_000))

        await asyncio.sleep(1.0)  # the first pass writes why it waits, and tells it
        told = await asyncio.to_thread(logged)
        await asyncio.sleep(2.0)  # some twenty passes more, skipped
        assert await asyncio.to_thread(logged) == told
        tried = (await manager.get(made.id)).status_data["scheduler"]["retries"]
        assert tried >= 5  # they did count their tries
