"""The one background-loop helper and the one backoff (``bai_jupyter.loops``): no Docker."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from bai_jupyter.loops import Backoff, Periodic

LOG = logging.getLogger("test-loops")


def _periodic(step: object, interval: float = 0.01, **kwargs: object) -> Periodic:
    return Periodic(step, lambda: interval, "the test step", lambda: LOG, **kwargs)  # type: ignore[arg-type]


def test_backoff_doubles_to_its_cap_and_resets_on_success() -> None:
    backoff = Backoff(1.0, 10.0)
    assert backoff.delay == 0.0 and backoff.failures == 0
    assert [backoff.failed() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.failures == 6 and backoff.delay == 10.0
    backoff.reset()
    assert backoff.delay == 0.0
    assert backoff.failed() == 1.0
    # The replicas' retry: 5 s doubled, at most 300.
    replicas = Backoff(5.0, 300.0)
    assert [replicas.failed() for _ in range(8)][-3:] == [160.0, 300.0, 300.0]


async def test_a_stuck_step_stops_at_once_on_stop() -> None:
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()  # never set: stuck in an await
        except asyncio.CancelledError:
            cancelled.set()
            raise

    periodic = _periodic(stuck)
    task = periodic.start()
    await asyncio.wait_for(entered.wait(), 2)
    began = time.monotonic()
    await periodic.stop()
    assert time.monotonic() - began < 0.5
    assert task.done() and task.cancelled()  # the cancellation was not swallowed
    assert cancelled.is_set()


async def test_a_loop_waiting_for_a_wake_up_stops_even_when_woken_as_it_is_cancelled() -> None:
    """The wait between steps never swallows a cancellation (``wait_for`` could, < 3.12)."""
    for _ in range(20):
        periodic = _periodic(lambda: asyncio.sleep(0), interval=60.0)
        task = periodic.start()
        await asyncio.sleep(0.001)  # in its wait now
        periodic.wake()  # the wake-up and the cancellation arrive together
        await asyncio.wait_for(periodic.stop(), 1)
        assert task.cancelled()


async def test_stop_does_not_swallow_the_stoppers_own_cancellation() -> None:
    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # a step that takes a moment to clean up
            raise

    periodic = _periodic(stubborn)
    periodic.start()
    await asyncio.sleep(0.01)
    stopper = asyncio.ensure_future(periodic.stop())
    await asyncio.sleep(0.01)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper


async def test_an_exception_in_a_step_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0
    again = asyncio.Event()

    async def failing() -> None:
        nonlocal calls
        calls += 1
        if calls >= 3:
            again.set()
        raise RuntimeError("boom")

    periodic = _periodic(failing)
    with caplog.at_level(logging.ERROR, logger=LOG.name):
        periodic.start()
        await asyncio.wait_for(again.wait(), 2)
        await periodic.stop()
    assert calls >= 3
    failed = [r for r in caplog.records if r.getMessage() == "bai-jupyter: the test step failed"]
    assert failed and failed[0].exc_info is not None


async def test_woken_steps_at_once_and_wait_first_waits() -> None:
    steps: list[float] = []

    async def step() -> None:
        steps.append(time.monotonic())

    periodic = _periodic(step, interval=60.0, wait_first=True, minimum=0.0)
    periodic.start()
    await asyncio.sleep(0.05)
    assert steps == []  # waits an interval (or a wake-up) first
    periodic.wake()
    await asyncio.sleep(0.05)
    assert len(steps) == 1
    assert not periodic.event.is_set()  # the wake-up was taken
    await periodic.stop()


async def test_the_interval_has_a_floor() -> None:
    steps = 0

    async def step() -> None:
        nonlocal steps
        steps += 1

    periodic = _periodic(step, interval=0.0, minimum=0.05)
    began = time.monotonic()
    periodic.start()
    await asyncio.sleep(0.12)
    await periodic.stop()
    assert 1 <= steps <= (time.monotonic() - began) / 0.05 + 1  # not a busy loop


async def test_a_burst_of_wake_ups_within_the_gap_is_served_by_one_step_after_it() -> None:
    """The scheduler's coalescing: a lone wake-up is served at once; 50 more within the
    gap that follows give one step once the gap is over, not 50."""
    steps: list[float] = []
    stepped = asyncio.Event()

    async def step() -> None:
        steps.append(time.monotonic())
        stepped.set()

    periodic = _periodic(step, interval=60.0, gap=lambda: 0.5, wait_first=True)
    periodic.start()
    try:
        await asyncio.sleep(0.05)
        woken = time.monotonic()
        periodic.wake()  # alone: no gap to wait for
        await asyncio.wait_for(stepped.wait(), 5)
        stepped.clear()
        assert steps[0] - woken < 0.4
        for _ in range(50):  # a burst within the gap
            periodic.wake()
            await asyncio.sleep(0.002)
        await asyncio.wait_for(stepped.wait(), 5)
        assert steps[1] - steps[0] >= 0.5
        await asyncio.sleep(0.3)
        assert len(steps) == 2, steps  # the burst was one step
    finally:
        await periodic.stop()
