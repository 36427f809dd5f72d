"""Cluster roles: a request naming kernels by role, each its own size and image (pure parts)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduler import SINGLE, agent, run

from bai_jupyter.kernel_plan import kernel_environ
from bai_jupyter.model import Agent, Session
from bai_jupyter.request import SpecError, parse_spec, spec_to_json
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.scheduler import SchedulerConfig
from bai_jupyter.scheduler.context import PassContext, Snapshot
from bai_jupyter.scheduler.placement import never_fits
from bai_jupyter.scheduler.simulator import simulate

GPU_MAIN = {
    "image": "bai-jupyter/python:3.11",
    "resources": {"cpu": 1, "mem": "1g"},
    "roles": [
        {"name": "main", "image": "gpu/image:1", "resources": {"cpu": 4, "cuda.device": 1}},
        {"name": "worker", "replicas": 3, "resources": {"cpu": 2}, "env": {"ROLE_ENV": "w"}},
    ],
}


def _session(request: dict[str, Any], sid: str = "s1", owner: str = "alice") -> Session:
    return Session.create(parse_spec(request), owner, 0.0, sid)


def test_kernels_follow_their_roles() -> None:
    session = _session(GPU_MAIN)
    assert [k.hostname for k in session.kernels] == ["main1", "worker1", "worker2", "worker3"]
    assert session.spec.cluster_size == 4
    assert session.kernels[0].slots == ResourceSlot({"cpu": 4, "mem": "1g", "cuda.device": 1})
    assert session.kernels[1].slots == ResourceSlot({"cpu": 2, "mem": "1g"})
    assert session.spec.total_resources == ResourceSlot({"cpu": 10, "mem": "4g", "cuda.device": 1})
    assert session.spec.images == ["bai-jupyter/python:3.11", "gpu/image:1"]
    env = kernel_environ(session, session.kernels[2])
    assert (env["BACKENDAI_CLUSTER_ROLE"], env["BACKENDAI_CLUSTER_IDX"]) == ("worker", "2")
    assert env["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,worker:3"
    assert env["BACKENDAI_CLUSTER_HOSTS"] == "main1,worker1,worker2,worker3"
    assert (env["WORLD_SIZE"], env["RANK"], env["ROLE_ENV"]) == ("4", "2", "w")
    main_env = kernel_environ(session, session.kernels[0])
    assert main_env["BACKENDAI_CLUSTER_ROLE"] == "main" and "ROLE_ENV" not in main_env
    assert parse_spec(spec_to_json(session.spec)) == session.spec  # stored and read back


def test_a_role_called_sub_keeps_todays_names() -> None:
    session = _session({"roles": [{"name": "sub", "replicas": 2}]})
    plain = _session({"cluster_size": 3})
    assert [k.hostname for k in session.kernels] == [k.hostname for k in plain.kernels]
    assert (
        kernel_environ(session, session.kernels[1])["BACKENDAI_CLUSTER_REPLICAS"]
        == (kernel_environ(plain, plain.kernels[1])["BACKENDAI_CLUSTER_REPLICAS"])
    )


@pytest.mark.parametrize(
    ("roles", "field"),
    [
        ([{"name": "main", "replicas": 2}], "roles[0].replicas"),
        ([{"name": "w1"}], "roles[0].name"),
        ([{"name": "w"}, {"name": "w"}], "roles[1].name"),
        ([{"name": "w", "gpu": 1}], "roles[0].gpu"),
        ([{"name": "main"}], "roles"),
        ([{"name": "w", "replicas": 0}], "roles[0].replicas"),
        ([{"name": "w", "resources": {"cpu": -1}}], "roles[0].resources.cpu"),
    ],
)
def test_a_wrong_role_names_its_field(roles: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"roles": roles})
    assert caught.value.field == field


def test_cluster_size_must_agree_with_the_roles() -> None:
    with pytest.raises(SpecError, match="cluster_size"):
        parse_spec({"cluster_size": 2, "roles": [{"name": "w", "replicas": 3}]})
    assert (
        parse_spec({"cluster_size": 4, "roles": [{"name": "w", "replicas": 3}]}).cluster_size == 4
    )


# --- scheduling kernels of different sizes --------------------------------------------------

MIXED = {
    "resources": {"cpu": 1, "mem": "1g"},
    "roles": [{"name": "main", "resources": {"cpu": 4}}, {"name": "worker", "replicas": 2}],
}


def test_single_node_needs_the_sum_on_one_agent() -> None:
    session = _session(MIXED)  # 4 + 1 + 1 cpus
    result = run([agent("small", cpu=5), agent("big", cpu=6)], [session])
    assert [p.agent_ids for p in result.placements] == [["big", "big", "big"]]
    assert never_fits(session.spec, [agent("small", cpu=5)]) is not None


def test_multi_node_places_each_kernel_all_or_nothing() -> None:
    session = _session({**MIXED, "cluster_mode": "multi-node"})
    agents = [agent("a", cpu=4), agent("b", cpu=2)]
    result = run(agents, [session])
    (placed,) = result.placements
    assert placed.agent_ids == ["a", "b", "b"]  # main1's 4 cpus on a, the workers on b
    nothing = run([agent("a", cpu=4), agent("b", cpu=1)], [session])
    assert nothing.placements == [] and session.id in nothing.failures
    assert never_fits(session.spec, [agent("a", cpu=3), agent("b", cpu=3)]) is not None
    assert never_fits(session.spec, agents) is None


def test_the_roles_example_trace_gives_the_documented_waits() -> None:
    """``examples/traces/roles.json``: train spreads over n1, n2; small waits for n1."""
    trace = REPO / "examples" / "traces" / "roles.json"
    result = simulate(json.loads(trace.read_text())).to_json()
    rows = {row["id"]: row for row in result["sessions"]}
    assert (rows["train"]["agents"], rows["train"]["wait"]) == (["n1", "n2"], 0)
    assert (rows["small"]["agents"], rows["small"]["wait"]) == (["n1"], 99)
    assert result["metrics"]["makespan"] == 150


def test_a_cpu_role_stays_off_the_gpu_agent() -> None:
    request = {
        "cluster_mode": "multi-node",
        "resources": {"cpu": 2, "mem": "1g"},
        "roles": [{"name": "main", "resources": {"cuda.device": 1}}, {"name": "worker"}],
    }
    session = _session(request)
    result = run([agent("gpu", cpu=2, gpu=1), agent("cpu", cpu=2)], [session])
    assert [p.agent_ids for p in result.placements] == [["gpu", "cpu"]]


def test_drf_counts_what_the_roles_really_hold() -> None:
    session = _session(GPU_MAIN)
    snapshot = Snapshot(agents=[agent("a", cpu=20, mem="64g", gpu=2)], pending=[])
    ctx = PassContext(0.0, SchedulerConfig(), snapshot, ResourceSlot({"cpu": 20, "cuda.device": 2}))
    ctx.record_placement(session)
    assert ctx.dominant_share("alice") == Decimal("0.5")  # 10 of 20 cpus, 1 of 2 GPUs


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 4),  # main1's cpus
            st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=3),
            st.booleans(),  # multi-node
        ),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(2, 8), min_size=1, max_size=4),
)
def test_kernels_of_any_sizes_never_over_allocate(
    shapes: list[tuple[int, list[tuple[int, int]], bool]], cpus: list[int]
) -> None:
    sessions = []
    for n, (main_cpu, workers, multi) in enumerate(shapes):
        roles: list[dict[str, Any]] = [{"name": "main", "resources": {"cpu": main_cpu}}]
        roles += [
            {"name": f"r{chr(97 + i)}", "replicas": replicas, "resources": {"cpu": cpu}}
            for i, (cpu, replicas) in enumerate(workers)
        ]
        request: dict[str, Any] = {"resources": {"cpu": 1, "mem": "1g"}, "roles": roles}
        if multi:
            request["cluster_mode"] = "multi-node"
        sessions.append(_session(request, sid=f"s{n}", owner=f"u{n % 3}"))
    agents: list[Agent] = [agent(f"a{i}", cpu=c, mem="64g") for i, c in enumerate(cpus)]
    result = run(agents, sessions, "drf", "dispersed")
    held = {a.id: ResourceSlot() for a in agents}
    by_id = {s.id: s for s in sessions}
    for placement in result.placements:
        session = by_id[placement.session_id]
        assert len(placement.agent_ids) == len(session.kernels)
        if session.spec.cluster_mode is SINGLE:
            assert len(set(placement.agent_ids)) == 1
        for kernel, agent_id in zip(session.kernels, placement.agent_ids):
            held[agent_id] = held[agent_id] + kernel.slots
    for a in agents:
        assert held[a.id].fits_in(a.capacity), (a.id, held[a.id], a.capacity)
