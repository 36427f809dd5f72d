"""Live usage per kernel: the usage watch reads the Docker engine's stats of running
sessions and tells them as ``usage`` events, only to streams that may see them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager, started_manager

from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.manager.scoped import ScopedManager
from bai_jupyter.model import Session, Status

pytestmark = pytest.mark.docker

REQUEST: dict[str, Any] = {"resources": {"cpu": "0.5", "mem": "512m"}}
BURN = "nohup python3 -c 'while True: pass' >/dev/null 2>&1 &"
#: 150 MiB of pages written (a bytes of zeros is calloc'd and would not count).
ALLOCATE = (
    "nohup python3 -c \"b = b'x' * (150 << 20); import time; time.sleep(300)\" >/dev/null 2>&1 &"
)


@contextlib.asynccontextmanager
async def _following(api: ScopedManager, usage: bool = True) -> AsyncIterator[list[dict[str, Any]]]:
    """Every event of ``api``'s stream (``usage``: with usage), collected while the block
    runs."""
    seen: list[dict[str, Any]] = []

    async def pump() -> None:
        async for event in api.events(usage=usage):
            seen.append(event)

    task = asyncio.ensure_future(pump())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _main1(seen: list[dict[str, Any]], session: Session, check: Any, what: str) -> Any:
    """The first main1 usage of ``session`` (from now on) for which ``check`` holds."""
    start = len(seen)
    for _ in range(600):  # 60 s
        for event in seen[start:]:
            if event["type"] == "usage" and event["session_id"] == session.id:
                main1 = event["kernels"][0]
                if main1["kernel"] == "main1" and check(main1):
                    return main1
        await asyncio.sleep(0.1)
    last = [e for e in seen if e["type"] == "usage" and e["session_id"] == session.id][-1:]
    raise AssertionError(f"no usage event where {what}; last: {last}")


@pytest.fixture
async def usage_manager(tmp_path: Path, kernel_image: str) -> AsyncIterator[BaiSessionManager]:
    async with started_manager(make_manager(tmp_path, "docker", usage_interval=0.5)) as mgr:
        yield mgr


async def test_usage_events_show_a_busy_kernels_cpu_and_an_allocating_kernels_memory(
    usage_manager: BaiSessionManager,
) -> None:
    mgr = usage_manager
    busy, hungry = await asyncio.gather(mgr.create(REQUEST, "alice"), mgr.create(REQUEST, "alice"))
    for session in (busy, hungry):
        await mgr.wait_for(session.id, {Status.RUNNING}, timeout=120)
    alice, bob = ScopedManager(mgr, "alice"), ScopedManager(mgr, "bob")
    async with _following(alice) as seen, _following(bob) as bobs:
        idle = await _main1(
            seen,
            busy,
            lambda k: k["cpu_percent"] is not None and k["cpu_percent"] < 10,
            "idle (<10 %)",
        )
        assert idle["cpu_slots"] == 0.5 and idle["agent"] == "docker"
        before = await _main1(seen, hungry, lambda k: k["mem_bytes"] is not None, "memory read")
        assert before["mem_limit"] == 512 << 20

        await mgr.exec(busy.id, ["sh", "-c", BURN], owner="alice")
        await mgr.exec(hungry.id, ["sh", "-c", ALLOCATE], owner="alice")
        burning = await _main1(seen, busy, lambda k: (k["cpu_percent"] or 0) > 15, "CPU > 15 %")
        # Well above idle, though a loaded 2-core host may give the loop far less than
        # its half core.
        assert burning["cpu_cores"] > 0.075
        grown = await _main1(
            seen, hungry, lambda k: k["mem_bytes"] > before["mem_bytes"] + (100 << 20), "+100 MB"
        )
        assert grown["mem_bytes"] < grown["mem_limit"]
        assert grown["net_rx_rate"] is not None  # the engine gives eth0's counters

        # The same numbers on demand, for %bai status.
        now = await alice.usage(busy.id)
        assert now["type"] == "usage" and now["kernels"][0]["cpu_percent"] > 15
    # bob's stream saw alice's sessions' usage never (nor any of theirs).
    assert {e["session_id"] for e in bobs if e["type"] == "usage"} == set()
    assert mgr.core.hub.usage_followers == 0


async def test_no_usage_is_read_while_no_stream_asks_for_it(
    usage_manager: BaiSessionManager,
) -> None:
    mgr = usage_manager
    async with _following(ScopedManager(mgr, "alice"), usage=False) as seen:
        session = await mgr.create(REQUEST, "alice")
        await mgr.wait_for(session.id, {Status.RUNNING}, timeout=120)
        for _ in range(100):
            if any(e.get("status") == "RUNNING" for e in seen):
                break
            await asyncio.sleep(0.1)
        assert any(e.get("status") == "RUNNING" for e in seen)
        assert {e["type"] for e in seen} == {"session"}
        assert mgr.core.hub.usage_followers == 0
        assert mgr.usage.latest == {}  # the watch never read
