"""The trace simulator (bai_jupyter.scheduler.simulator): production scheduler, simulated clock."""

from __future__ import annotations

import copy
import json
import random
import time
from decimal import Decimal
from typing import Any

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from bai_jupyter.model import SessionResult, Status
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.scheduler.config import SchedulerConfig
from bai_jupyter.scheduler.context import PassContext, Snapshot
from bai_jupyter.scheduler.shares import dominant_share
from bai_jupyter.scheduler.simulator import (
    Overrides,
    SessionRow,
    SimulationResult,
    TraceError,
    format_table,
    simulate,
)

TRACES = REPO / "examples" / "traces"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((TRACES / name).read_text())
    return data


def rows(result: SimulationResult) -> dict[str, SessionRow]:
    return {row.id: row for row in result.sessions}


def trace(*sessions: dict[str, Any], agents: Any = None, until: float = 1000) -> dict[str, Any]:
    """A trace with defaults filled in: one agent of 8 cpu / 32g unless told."""
    return {
        "until": until,
        "agents": agents or [{"id": "a1", "slots": {"cpu": "8", "mem": "32g"}}],
        "sessions": [
            {"submit_at": 0, "resources": {"cpu": "1", "mem": "1g"}, **s} for s in sessions
        ],
    }


# ---------------------------------------------------------------------------
# The documented examples


def test_basic_example_gives_the_documented_output() -> None:
    result = simulate(load("basic.json"))
    assert result.to_json() == {
        "sessions": [
            {
                "id": "s1",
                "status": "TERMINATED",
                "result": "SUCCESS",
                "status_info": "task-finished",
                "submit_at": 0,
                "scheduled_at": 0,
                "finished_at": 100,
                "wait": 0,
                "agents": ["a1"],
            }
        ],
        "metrics": {
            "makespan": 100,
            "mean_wait": 0,
            "p95_wait": 0,
            "utilization": {"cpu": 0.1111, "mem": 0.2222},
            "dominant_share": {"alice": 0.2222},
            "dominant_share_at_until": {"alice": 0},
        },
    }
    # Numbers that are whole are written as integers, as in the docs.
    assert '"makespan": 100,' in json.dumps(result.to_json())


def test_drf_reproduces_the_ghodsi_example() -> None:
    """9 CPU / 18 GB; A asks <1 CPU, 4 GB>, B <3 CPU, 1 GB>: DRF runs 3 of A, 2 of B."""
    data = load("drf.json")
    assert data["scheduler"]["sequencer"] == "drf"
    assert sum(s["owner"] == "A" for s in data["sessions"]) == 10
    assert all(s.get("duration") is None and s["submit_at"] == 0 for s in data["sessions"])
    result = simulate(data)
    running: dict[str, int] = {}
    for row in result.sessions:
        if row.status is Status.RUNNING:
            running[row.owner] = running.get(row.owner, 0) + 1
        else:
            assert row.status is Status.PENDING and row.status_data["scheduler"]["msg"]
    assert running == {"A": 3, "B": 2}
    assert result.metrics.dominant_share_at_until == {"A": 0.6667, "B": 0.6667}
    # Oldest-first instead hands the agent to whoever comes first: shares far apart.
    fifo = simulate(data, Overrides(sequencer="fifo")).metrics.dominant_share_at_until
    assert abs(fifo["A"] - fifo["B"]) > 0.5


def test_head_of_line_strict_heuristic_and_hol_max_wait() -> None:
    data = load("head_of_line.json")
    small = [s["id"] for s in data["sessions"] if s["id"].startswith("small-")]

    strict = rows(simulate(data))
    big = strict["big"].scheduled_at
    assert big is not None
    assert all((strict[s].scheduled_at or 0) >= big for s in small), "small ones wait behind big"

    heuristic = rows(simulate(data, Overrides(options={"num_retries_to_skip": "2"})))
    big = heuristic["big"].scheduled_at
    assert big is not None
    assert all((heuristic[s].scheduled_at or 0) < big for s in small), "small ones go first"
    assert heuristic["small-1"].wait == 0

    bounded = rows(
        simulate(data, Overrides(options={"num_retries_to_skip": "2", "hol_max_wait": "15"}))
    )
    big = bounded["big"].scheduled_at
    assert big == 50  # the head again after 15 s; it starts as soon as warmup ends
    early = [s for s in small if (bounded[s].scheduled_at or 0) < big]
    late = [s for s in small if (bounded[s].scheduled_at or 0) > big]
    assert early == ["small-1", "small-2"]  # started while big was pushed back
    assert late == small[2:]  # then the queue drained for big
    assert all(row.status is Status.TERMINATED for row in bounded.values())


# ---------------------------------------------------------------------------
# Placement, lifecycle, dependencies


def _agents(n: int, cpu: str = "2") -> list[dict[str, Any]]:
    return [{"id": f"n{i}", "slots": {"cpu": cpu, "mem": "8g"}} for i in range(1, n + 1)]


def test_multi_node_spreads_over_agents_when_none_holds_it_all() -> None:
    result = simulate(
        trace(
            {
                "id": "mpi",
                "cluster_size": 3,
                "cluster_mode": "multi-node",
                "resources": {"cpu": "2"},
            },
            agents=_agents(3),
        )
    )
    row = rows(result)["mpi"]
    assert row.status is Status.RUNNING
    assert sorted(row.agents) == ["n1", "n2", "n3"]
    assert result.metrics.utilization["cpu"] == 1.0


def test_multi_node_goes_to_one_agent_when_it_fits_there() -> None:
    agents = [*_agents(2), {"id": "wide", "slots": {"cpu": "8", "mem": "8g"}}]
    result = simulate(
        trace(
            {
                "id": "mpi",
                "cluster_size": 3,
                "cluster_mode": "multi-node",
                "resources": {"cpu": "2"},
            },
            agents=agents,
        )
    )
    assert rows(result)["mpi"].agents == ["wide"]


def test_multi_node_is_all_or_nothing() -> None:
    """Only 2 of 3 kernels fit while `hog` runs: nothing is placed, nothing is held."""
    result = simulate(
        trace(
            {"id": "hog", "duration": 100, "resources": {"cpu": "2"}},
            {
                "id": "mpi",
                "submit_at": 1,
                "duration": 10,
                "cluster_size": 3,
                "cluster_mode": "multi-node",
                "resources": {"cpu": "2"},
            },
            agents=_agents(3),
        )
    )
    hog, mpi = rows(result)["hog"], rows(result)["mpi"]
    assert mpi.scheduled_at == 100  # not a kernel placed before hog left
    assert sorted(mpi.agents) == ["n1", "n2", "n3"]
    # While it waited, only hog's 2 of 6 cpus were held (no partial reservation).
    assert hog.agents == ["n1"]
    assert result.metrics.utilization["cpu"] == round((2 * 100 + 6 * 10) / (6 * 110), 4)


def test_multi_node_waits_with_its_reason_when_only_two_fit() -> None:
    result = simulate(
        trace(
            {"id": "hog", "resources": {"cpu": "2"}},
            {
                "id": "mpi",
                "submit_at": 1,
                "cluster_size": 3,
                "cluster_mode": "multi-node",
                "resources": {"cpu": "2"},
            },
            agents=_agents(3),
            until=50,
        )
    )
    mpi = rows(result)["mpi"]
    assert mpi.status is Status.PENDING
    assert mpi.agents == [] and mpi.scheduled_at is None and mpi.wait is None
    record = mpi.status_data["scheduler"]
    assert record["retries"] == 1 and record["failed_predicates"][0]["name"] == "resources"
    assert result.to_json()["sessions"][1]["status_data"] == mpi.status_data


def test_failed_dependency_cancels_the_whole_chain() -> None:
    result = simulate(
        trace(
            {"id": "A", "duration": 10, "exit_code": 1},
            {"id": "B", "duration": 10, "depends_on": ["A"]},
            {"id": "C", "duration": 10, "depends_on": ["B"]},
            {"id": "D", "duration": 10},
        )
    )
    by_id = rows(result)
    assert by_id["A"].status is Status.TERMINATED
    assert by_id["A"].result is SessionResult.FAILURE
    assert by_id["A"].status_info == "task-failed"
    for sid in ("B", "C"):
        assert by_id[sid].status is Status.CANCELLED, sid
        assert by_id[sid].status_info == "dependency-failed"
        assert by_id[sid].scheduled_at is None and by_id[sid].finished_at == 10
        assert by_id[sid].status_data["scheduler"]["msg"]
    assert by_id["D"].result is SessionResult.SUCCESS


def test_successful_dependency_chain_runs_in_order() -> None:
    result = simulate(
        trace(
            {"id": "A", "duration": 10},
            {"id": "B", "duration": 5, "depends_on": ["A"]},
            {"id": "C", "submit_at": 1, "duration": 5, "depends_on": ["B", "A"]},
        )
    )
    by_id = rows(result)
    assert [by_id[s].scheduled_at for s in "ABC"] == [0, 10, 15]
    assert result.metrics.makespan == 20


def test_dependency_on_a_session_submitted_later_waits_for_it() -> None:
    result = simulate(
        trace(
            {"id": "B", "duration": 5, "depends_on": ["A"]},
            {"id": "A", "submit_at": 20, "duration": 10},
        )
    )
    assert rows(result)["B"].scheduled_at == 30


def test_never_fits_is_cancelled_at_submit() -> None:
    result = simulate(
        trace(
            {"id": "huge", "submit_at": 5, "resources": {"cpu": "64"}},
            {"id": "gpu", "submit_at": 6, "resources": {"cuda.device": "1"}},
            {"id": "after", "submit_at": 7, "depends_on": ["huge"]},
        )
    )
    by_id = rows(result)
    for sid, at in (("huge", 5), ("gpu", 6)):
        assert by_id[sid].status is Status.CANCELLED
        assert by_id[sid].status_info == "never-fits"
        assert by_id[sid].finished_at == at
        assert by_id[sid].status_data["scheduler"]["msg"]
    assert "cpu=64" in by_id["huge"].status_data["scheduler"]["msg"]
    assert by_id["after"].status_info == "dependency-failed"
    row = next(r for r in result.to_json()["sessions"] if r["id"] == "huge")
    assert row["status_data"]["scheduler"]["msg"]


def test_pending_at_until_is_listed_with_why() -> None:
    result = simulate(
        trace(
            {"id": "hog", "resources": {"cpu": "8"}},
            {"id": "waiter", "submit_at": 3},
            until=10,
        )
    )
    waiter = result.to_json()["sessions"][1]
    assert waiter["status"] == "PENDING"
    assert waiter["scheduled_at"] is None and waiter["wait"] is None
    assert "cpu=1" in waiter["status_data"]["scheduler"]["msg"]
    assert result.metrics.makespan == 10  # hog still runs at until
    assert "waiter: needs cpu=1" in format_table(result)


def test_lifecycle_and_same_instant_order() -> None:
    """At t=10: `first` finishes, then `second` is submitted, then one pass starts it."""
    result = simulate(
        trace(
            {"id": "first", "duration": 10, "resources": {"cpu": "8"}},
            {"id": "second", "submit_at": 10, "duration": 0, "resources": {"cpu": "8"}},
            {"id": "third", "submit_at": 10, "duration": 5, "resources": {"cpu": "8"}},
        )
    )
    by_id = rows(result)
    assert by_id["second"].scheduled_at == 10 and by_id["second"].finished_at == 10
    assert by_id["third"].scheduled_at == 10  # after second's zero-length run, same instant
    assert by_id["third"].finished_at == 15


def test_duration_null_runs_until_the_end_and_nothing_happens_after_until() -> None:
    result = simulate(
        trace(
            {"id": "forever", "duration": None, "owner": "ann", "resources": {"cpu": "4"}},
            {"id": "late-finish", "submit_at": 90, "duration": 50, "owner": "bo"},
            {"id": "late-submit", "submit_at": 101},
            until=100,
        )
    )
    by_id = rows(result)
    assert "late-submit" not in by_id
    assert by_id["forever"].status is Status.RUNNING and by_id["forever"].finished_at is None
    assert by_id["late-finish"].status is Status.RUNNING
    m = result.metrics
    assert m.makespan == 100
    assert m.utilization["cpu"] == round((4 * 100 + 1 * 10) / (8 * 100), 4)
    assert m.dominant_share == {"ann": 0.5, "bo": round(0.125 * 10 / 100, 4)}
    assert m.dominant_share_at_until == {"ann": 0.5, "bo": 0.125}


def test_starts_at_and_pending_timeout_wake_the_scheduler() -> None:
    result = simulate(
        trace(
            {"id": "later", "starts_at": 40, "duration": 5},
            {"id": "hog", "duration": 100, "resources": {"cpu": "8"}, "submit_at": 1},
            {"id": "impatient", "submit_at": 2},
        ),
        Overrides(options={"pending_timeout": "30"}),
    )
    by_id = rows(result)
    assert by_id["later"].status is Status.CANCELLED  # hog took the agent; then timed out
    assert by_id["impatient"].status_info == "pending-timeout"
    assert by_id["impatient"].finished_at == 32
    quiet = rows(simulate(trace({"id": "later", "starts_at": 40, "duration": 5})))
    assert quiet["later"].scheduled_at == 40


def test_roundrobin_keeps_its_pointer_across_passes() -> None:
    sessions = [{"id": f"s{i}", "submit_at": i} for i in range(4)]
    result = simulate(trace(*sessions, agents=_agents(3)), Overrides(selector="roundrobin"))
    assert [row.agents for row in result.sessions] == [["n1"], ["n2"], ["n3"], ["n1"]]


def test_priority_and_wait_metrics() -> None:
    result = simulate(
        trace(
            {"id": "hog", "duration": 10, "resources": {"cpu": "8"}},
            {"id": "low", "submit_at": 1, "duration": 10, "resources": {"cpu": "8"}},
            {
                "id": "high",
                "submit_at": 2,
                "duration": 10,
                "priority": 50,
                "resources": {"cpu": "8"},
            },
        )
    )
    by_id = rows(result)
    assert by_id["high"].scheduled_at == 10 and by_id["low"].scheduled_at == 20
    assert result.metrics.mean_wait == round((0 + 8 + 19) / 3, 4)
    assert result.metrics.p95_wait == 19


def test_concurrency_limit_option() -> None:
    sessions = [{"id": f"s{i}", "duration": 10, "owner": "ann"} for i in range(3)]
    result = simulate(trace(*sessions), Overrides(options={"max_concurrent_sessions": "1"}))
    assert [row.scheduled_at for row in result.sessions] == [0, 10, 20]


def test_empty_session_list() -> None:
    result = simulate(trace())
    assert result.sessions == []
    assert result.metrics.makespan == 0 and result.metrics.utilization == {"cpu": 0, "mem": 0}
    assert "sessions         0" in format_table(result)


def test_table_is_readable() -> None:
    text = format_table(simulate(load("head_of_line.json")))
    header, first = text.splitlines()[:2]
    assert header.split() == [
        "ID", "OWNER", "STATUS", "RESULT/INFO", "SUBMIT", "START", "FINISH", "WAIT", "AGENTS",
    ]  # fmt: skip
    assert first.split()[:5] == ["warmup", "alice", "TERMINATED", "SUCCESS", "task-finished"]
    assert header.index("AGENTS") == first.index("a1")  # columns line up
    assert "utilization      cpu 84.38%" in text
    assert "dominant share" in text and "(at until)" in text


# ---------------------------------------------------------------------------
# Invariants on random traces


_session = st.fixed_dictionaries(
    {
        "owner": st.sampled_from(["ann", "bo", "cy"]),
        "submit_at": st.integers(0, 50),
        "duration": st.one_of(st.none(), st.integers(0, 40)),
        "resources": st.fixed_dictionaries(
            {"cpu": st.sampled_from(["1", "2", "3", "0.5"]), "mem": st.sampled_from(["1g", "3g"])}
        ),
        "cluster_size": st.integers(1, 3),
        "cluster_mode": st.sampled_from(["single-node", "multi-node"]),
        "priority": st.sampled_from([5, 10]),
        "exit_code": st.sampled_from([0, 0, 1]),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    sessions=st.lists(_session, max_size=12),
    sequencer=st.sampled_from(["fifo", "lifo", "drf"]),
    selector=st.sampled_from(["concentrated", "dispersed", "roundrobin"]),
    skip=st.sampled_from(["0", "2"]),
)
def test_random_traces_keep_the_invariants(
    sessions: list[dict[str, Any]], sequencer: str, selector: str, skip: str
) -> None:
    data = trace(*[{"id": f"s{i}", **s} for i, s in enumerate(sessions)], agents=_agents(3, "4"))
    data["until"] = 100
    options = {"num_retries_to_skip": skip} if sequencer == "fifo" else {}
    before = copy.deepcopy(data)
    result = simulate(data, Overrides(sequencer, selector, options))
    assert data == before  # the input is not mutated
    assert [row.id for row in result.sessions] == [f"s{i}" for i in range(len(sessions))]
    for row, spec in zip(result.sessions, sessions):
        if row.scheduled_at is not None:
            assert row.scheduled_at >= row.submit_at
            assert 1 <= len(row.agents) <= spec["cluster_size"]
            if spec["cluster_mode"] == "single-node":
                assert len(row.agents) == 1
        if row.status is Status.TERMINATED:
            assert row.finished_at == (row.scheduled_at or 0) + spec["duration"]
            assert row.result is (
                SessionResult.SUCCESS if spec["exit_code"] == 0 else SessionResult.FAILURE
            )
        assert row.status in {Status.PENDING, Status.RUNNING, Status.TERMINATED, Status.CANCELLED}
    m = result.metrics
    assert all(0 <= u <= 1 for u in m.utilization.values())
    assert all(
        0 <= s <= 1 for s in [*m.dominant_share.values(), *m.dominant_share_at_until.values()]
    )
    json.dumps(result.to_json())  # always serializable


# ---------------------------------------------------------------------------
# Malformed traces: one error naming the field


def _bad(mutate: Any) -> dict[str, Any]:
    data = load("basic.json")
    mutate(data)
    return data


def _session0(**fields: Any) -> Any:
    return lambda d: d["sessions"][0].update(fields)


def _sched(**fields: Any) -> Any:
    return lambda d: d["scheduler"].update(fields)


OTHER_GROUP = {"id": "a2", "slots": {"cpu": 1}, "resource_group": "x"}
OPT = "scheduler.options"

MALFORMED: list[tuple[Any, str, str]] = [
    ([1, 2], "trace", "JSON object"),
    (_bad(lambda d: d.pop("agents")), "agents", "required"),
    (_bad(lambda d: d.pop("sessions")), "sessions", "required"),
    (_bad(lambda d: d.pop("until")), "until", "required"),
    (_bad(lambda d: d.update(until="soon")), "until", "number of seconds"),
    (_bad(lambda d: d.update(extra=1)), "extra", "unknown field"),
    (_bad(lambda d: d.update(sessions={})), "sessions", "list"),
    (_bad(lambda d: d["sessions"].append(3)), "sessions[1]", "JSON object"),
    (_bad(_session0(resources={"cpu": "1", "mem": "lots"})), "sessions[0].resources.mem", "parse"),
    (_bad(_session0(resources={"gpu": "1"})), "sessions[0].resources.gpu", "unknown resource slot"),
    (_bad(_session0(resources=None)), "sessions[0].resources", "required"),
    (_bad(_session0(duration=-1)), "sessions[0].duration", "negative"),
    (_bad(_session0(submit_at=-5)), "sessions[0].submit_at", "negative"),
    (_bad(_session0(submit_at=True)), "sessions[0].submit_at", "number"),
    (_bad(_session0(exit_code="0")), "sessions[0].exit_code", "integer"),
    (_bad(_session0(cluster_size=0)), "sessions[0].cluster_size", "integer from 1"),
    (_bad(_session0(cluster_mode="far")), "sessions[0].cluster_mode", "single-node"),
    (_bad(_session0(priorty=3)), "sessions[0].priorty", "did you mean 'priority'"),
    (_bad(_session0(depends_on=["ghost"])), "sessions[0].depends_on[0]", "unknown session"),
    (_bad(_session0(depends_on=["s1"])), "sessions[0].depends_on[0]", "itself"),
    (_bad(_session0(owner="")), "sessions[0].owner", "non-empty"),
    (_bad(lambda d: d["sessions"].append(dict(d["sessions"][0]))), "sessions[1].id", "duplicate"),
    (_bad(lambda d: d["agents"].append(d["agents"][0])), "agents[1].id", "duplicate"),
    (_bad(lambda d: d.update(agents=[])), "agents", "at least one"),
    (_bad(lambda d: d["agents"][0].update(slots={"cpu": "x"})), "agents[0].slots.cpu", "parse"),
    (_bad(lambda d: d["agents"][0].update(slots={})), "agents[0].slots", "capacity"),
    (_bad(lambda d: d["agents"][0].pop("slots")), "agents[0].slots", "required"),
    (_bad(lambda d: d["agents"].append(OTHER_GROUP)), "agents[1].resource_group", "simulates one"),
    (_bad(lambda d: d.update(scheduler=[])), "scheduler", "JSON object"),
    (_bad(_sched(sequencer="sjf")), "scheduler.sequencer", "available: drf, fifo, lifo"),
    (_bad(_sched(selector="x")), "scheduler.selector", "concentrated, dispersed, roundrobin"),
    (_bad(_sched(options={"nope": 1})), "scheduler.options.nope", "unknown scheduler option"),
    (_bad(_sched(options={"num_retries_to_skip": -1})), f"{OPT}.num_retries_to_skip", "negative"),
    (_bad(_sched(options={"pending_timeout": 0})), f"{OPT}.pending_timeout", "> 0"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "path", "words"), MALFORMED)
def test_malformed_trace_names_the_field(data: Any, path: str, words: str) -> None:
    with pytest.raises(TraceError) as info:
        simulate(data)
    assert info.value.path == path
    assert words in info.value.problem
    assert "\n" not in str(info.value)


def test_dependency_cycle_is_malformed() -> None:
    data = trace(
        {"id": "a", "depends_on": ["c"]},
        {"id": "b", "depends_on": ["a"]},
        {"id": "c", "depends_on": ["b"]},
    )
    with pytest.raises(TraceError, match=r"dependency cycle a -> c -> b -> a"):
        simulate(data)


def test_override_errors_name_the_flag() -> None:
    data = load("basic.json")
    with pytest.raises(TraceError) as info:
        simulate(data, Overrides(options={"hol_max_wait": "soon"}))
    assert info.value.path == "--option hol_max_wait"
    with pytest.raises(TraceError) as info:
        simulate(data, Overrides(selector="nearest"))
    assert info.value.path == "--selector" and "available:" in info.value.problem
    # The trace's fifo-only option does not fit a drf sequencer chosen on the command line.
    with pytest.raises(TraceError) as info:
        simulate(data, Overrides(sequencer="drf"))
    assert info.value.path == "scheduler.options.num_retries_to_skip"


def test_flag_options_win_and_merge() -> None:
    data = load("head_of_line.json")
    data["scheduler"]["options"] = {"num_retries_to_skip": 2, "max_concurrent_sessions": 100}
    result = simulate(data, Overrides(options={"num_retries_to_skip": "0"}))
    assert result.config.options == {"num_retries_to_skip": "0"}
    assert result.config.default_policy.max_concurrent_sessions == 100
    assert rows(result)["small-1"].scheduled_at == 110  # strict again


@pytest.mark.slow
def test_five_thousand_sessions_on_a_hundred_agents_take_seconds() -> None:
    rng = random.Random(7)
    agents = [{"id": f"n{i:03d}", "slots": {"cpu": "32", "mem": "128g"}} for i in range(100)]
    sessions, now = [], 0.0
    for i in range(5000):
        now += rng.expovariate(1 / 4)
        sessions.append(
            {
                "id": f"s{i}",
                "owner": f"u{rng.randrange(20)}",
                "submit_at": round(now, 2),
                "duration": rng.choice([30, 60, 300, 900, 1800]),
                "resources": {"cpu": str(rng.choice([1, 2, 4, 8])), "mem": "8g"},
                "cluster_size": rng.choice([1, 1, 2, 4]),
                "cluster_mode": rng.choice(["single-node", "multi-node"]),
            }
        )
    started = time.perf_counter()
    result = simulate({"until": 10**9, "agents": agents, "sessions": sessions})
    elapsed = time.perf_counter() - started
    assert all(row.status is Status.TERMINATED for row in result.sessions)
    assert elapsed < 30, f"{elapsed:.1f} s"  # about 2 s on a laptop; slack for busy CI


_amounts = st.decimals(min_value=0, max_value=64, places=2)


@given(held=st.dictionaries(st.sampled_from(["cpu", "mem", "cuda.device"]), _amounts))
def test_the_simulators_share_is_the_drf_sequencers(held: dict[str, Decimal]) -> None:
    """One dominant share for both: the simulator's figures are what DRF orders by."""
    capacity = ResourceSlot({"cpu": "9", "mem": "18"})
    slots = ResourceSlot(held)
    snapshot = Snapshot(agents=[], pending=[], owner_group_occupied={"alice": slots})
    ctx = PassContext(0.0, SchedulerConfig(), snapshot, capacity)
    assert dominant_share(slots, capacity) == ctx.dominant_share("alice")
    assert dominant_share(ResourceSlot(), capacity) == ctx.dominant_share("bob") == 0
