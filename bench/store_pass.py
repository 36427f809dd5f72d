"""Scheduling passes in a store, new against the old way, on SQLite and on PostgreSQL.

Run: ``.venv/bin/python bench/scheduler.py --scale [--repeat N]`` (PostgreSQL through
``BAI_TEST_POSTGRES_URL``, as ``./scripts/test`` sets up; without it, SQLite only).

Per size (pending sessions × agents) and engine, on fresh stores (medians of N):

* the first pass, which places what fits (load, decide, write), by ``run_pass``;
* the same first pass done the old way (side by side, same data): every pending session
  and every running kernel loaded as records, each placement written row by row with
  ``save_session`` and a read-modify-write of its agents;
* a pass that places nothing and must look (the store changed since the last);
* a pass that places nothing with nothing changed since (the idle mark: tries counted).
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import sqlalchemy as sa

from bai_jupyter.model import Session, Status
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.scheduler import SchedulerConfig, Snapshot, load_plugins, schedule
from bai_jupyter.scheduler.queue import run_pass
from bai_jupyter.store import Store, Transaction
from bai_jupyter.store.rows import OCCUPYING_VALUES, kernel_values, session_values
from bai_jupyter.store.tables import agents_table, history_table, kernels_table, sessions_table

SCALE_SIZES = [(1_000, 100), (10_000, 1_000)]
CONFIG = SchedulerConfig.from_options("drf", "concentrated")


def fill(store: Store, snapshot: Snapshot) -> None:
    """Store the agents and pending sessions in bulk (setting up is not timed)."""
    sessions = snapshot.pending
    with store.write() as tx:
        for agent in snapshot.agents:
            tx.put_agent(agent)
        tx.conn.execute(sa.insert(sessions_table), [session_values(s) for s in sessions])
        tx.conn.execute(
            sa.insert(kernels_table), [kernel_values(k) for s in sessions for k in s.kernels]
        )
        tx.conn.execute(
            sa.insert(history_table),
            [
                {"session_id": s.id, "status": e.status.value, "at": e.at, "info": e.info}
                for s in sessions
                for e in s.status_history
            ],
        )


def old_pass(store: Store, group: str, now: float) -> int:
    """The pass as it was: whole records, two owner scans, row-by-row writes."""
    seq, sel = load_plugins(CONFIG)
    with store.write() as tx:
        pending = tx.list_sessions(statuses=[Status.PENDING], resource_group=group, history=False)
        snapshot = Snapshot(agents=tx.list_agents(group), pending=pending)
        for _ in range(2):  # the old owner scans: every occupying kernel, twice
            for row in tx.conn.execute(
                sa.select(sessions_table.c.owner, kernels_table.c.slots)
                .join(kernels_table, kernels_table.c.session_id == sessions_table.c.id)
                .where(kernels_table.c.status.in_(OCCUPYING_VALUES))
            ):
                ResourceSlot(row.slots)
        result = schedule(snapshot, CONFIG, seq, sel, now)
        by_id = {s.id: s for s in pending}
        for placement in result.placements:
            session = by_id[placement.session_id]
            before = copy.deepcopy(session)
            for kernel, agent_id in zip(session.kernels, placement.agent_ids):
                kernel.agent_id = agent_id
                kernel.set_status(Status.SCHEDULED)
            session.set_status(Status.SCHEDULED, now, None, session.status_data.copy())
            _old_save(tx, session, before)
        tx.set_status_data(
            {sid: {**by_id[sid].status_data, "scheduler": r} for sid, r in result.failures.items()}
        )
        return len(result.placements)


def _old_save(tx: Transaction, session: Session, before: Session) -> None:
    """``save_session`` as it was: every column, each kernel, each agent, one by one."""
    tx.conn.execute(
        sa.update(sessions_table)
        .where(sessions_table.c.id == session.id)
        .values(session_values(session))
    )
    old = {k.id: k for k in before.kernels}
    for kernel in session.kernels:
        if kernel_values(kernel) != kernel_values(old[kernel.id]):
            tx.conn.execute(
                sa.update(kernels_table)
                .where(kernels_table.c.id == kernel.id)
                .values(kernel_values(kernel))
            )
        if kernel.agent_id is not None:
            row = tx.conn.execute(
                sa.select(agents_table.c.occupied).where(agents_table.c.id == kernel.agent_id)
            ).one()
            tx.conn.execute(
                sa.update(agents_table)
                .where(agents_table.c.id == kernel.agent_id)
                .values(occupied=(ResourceSlot(row.occupied) + kernel.slots).to_json())
            )
    for entry in session.status_history[len(before.status_history) :]:
        tx.conn.execute(
            sa.insert(history_table),
            [{"session_id": session.id, "status": entry.status.value, "at": entry.at}],
        )


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _new_way(url: str, snapshot: Snapshot) -> tuple[float, float, list[float]]:
    """The first pass, a pass after a change that makes no room, three unchanged passes."""
    seq, sel = load_plugins(CONFIG)
    store = Store(url)
    try:
        fill(store, snapshot)
        now = time.time()

        def one(at: float) -> float:
            return _timed(lambda: run_pass(store, "default", CONFIG, seq, sel, at))

        first = one(now)
        with store.write() as tx:  # a change that makes no room: the next pass must look
            tx.changed = True
        looked = one(now + 1)
        return first, looked, [one(now + 2 + k) for k in range(3)]
    finally:
        store.close()


def _old_way(url: str, snapshot: Snapshot) -> float:
    store = Store(url)
    try:
        fill(store, snapshot)
        return _timed(lambda: old_pass(store, "default", time.time()))
    finally:
        store.close()


def _fresh_urls(engine: str, work: Path) -> Callable[[], AbstractContextManager[str]]:
    """Makes fresh, empty stores of one engine (an SQLite file, a PostgreSQL database)."""

    @contextmanager
    def sqlite() -> Iterator[str]:
        yield f"sqlite:///{tempfile.mkdtemp(dir=work)}/store.sqlite"

    @contextmanager
    def postgresql() -> Iterator[str]:
        from conftest import postgres_database

        with postgres_database(os.environ["BAI_TEST_POSTGRES_URL"]) as url:
            yield url

    return sqlite if engine == "sqlite" else postgresql


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.0f} ms" if samples else "—"


def measure_scale(make: Callable[[int, int], Snapshot], repeat: int, old_at_10k: bool) -> None:
    """Print one line per size × engine: the pass times (medians over fresh stores)."""
    engines = ["sqlite"] + (["postgresql"] if os.environ.get("BAI_TEST_POSTGRES_URL") else [])
    work = Path(tempfile.mkdtemp(prefix="bai-bench-scale-"))
    print(
        f"{'size':<10}{'engine':<12}{'first pass':>12}{'old way':>12}{'old ÷ new':>11}"
        f"{'nothing fits':>14}{'unchanged':>11}"
    )
    for size in SCALE_SIZES:
        for engine in engines:
            fresh = _fresh_urls(engine, work)
            first, old, looked, idle = [], [], [], []
            for _ in range(repeat):
                with fresh() as url:
                    a, b, c = _new_way(url, make(*size))
                first.append(a)
                looked.append(b)
                idle += c
                if size == SCALE_SIZES[0] or old_at_10k:
                    with fresh() as url:
                        old.append(_old_way(url, make(*size)))
            ratio = f"{statistics.median(old) / statistics.median(first):.1f}×" if old else ""
            name = f"{size[0] // 1000}k×{size[1]}"
            print(
                f"{name:<10}{engine:<12}{_ms(first):>12}{_ms(old):>12}{ratio:>11}"
                f"{_ms(looked):>14}{_ms(idle):>11}",
                flush=True,
            )
