"""The pure parts of endpoints: the spec, the load meter, the autoscaler, the replica plan."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bai_jupyter.endpoints import (
    Autoscaler,
    Endpoint,
    Load,
    LoadMeter,
    ReplicaState,
    Route,
    Scaling,
    parse_endpoint,
    parse_update,
    plan_replicas,
)
from bai_jupyter.endpoints.router import Replica
from bai_jupyter.request import SpecError

REPLICA = {"startup_command": "serve", "service_ports": ["model:http:8000"]}
M = {"name": "m", "replica": REPLICA}


# --- the spec -------------------------------------------------------------------------------


def test_a_minimal_endpoint_gets_its_defaults() -> None:
    name, spec = parse_endpoint({"name": "m", "replica": REPLICA})
    assert name == "m"
    assert spec.service == "model"  # the only HTTP service port
    assert spec.replica["type"] == "inference"
    assert (spec.health_path, spec.scaling) == ("/", Scaling())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "m"}, "replica"),
        ({"name": "bad name", "replica": REPLICA}, "name"),
        ({"name": "m", "replica": {**REPLICA, "type": "batch"}}, "replica.type"),
        ({"name": "m", "replica": {**REPLICA, "cluster_size": 0}}, "replica.cluster_size"),
        ({"name": "m", "replica": {**REPLICA, "name": "x"}}, "replica.name"),
        ({"name": "m", "replica": {"service_ports": ["ssh:tcp:22"]}}, "service"),
        ({**M, "service": "other"}, "service"),
        ({**M, "health_path": "health"}, "health_path"),
        (
            {**M, "scaling": {"max_replicas": 33}},
            "scaling.max_replicas",
        ),
        ({**M, "scaling": {"min_replicas": 0}}, "scaling.min_replicas"),
        ({**M, "scaling": {"metric": "cpu"}}, "scaling.metric"),
        ({**M, "scaling": {"target": 0}}, "scaling.target"),
        ({**M, "scaling": {"burst": 1}}, "scaling.burst"),
        ({**M, "replicas": 2}, "replicas"),
    ],
)
def test_a_wrong_field_names_itself(body: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_endpoint(body)
    assert caught.value.field == field, caught.value


def test_an_update_keeps_what_it_leaves_out_and_merges_scaling() -> None:
    _, spec = parse_endpoint({**M, "scaling": {"max_replicas": 4, "target": 2}})
    changed = parse_update({"scaling": {"min_replicas": 2}, "health_path": "/ok"}, spec)
    assert changed.replica == spec.replica
    assert changed.scaling == Scaling(min_replicas=2, max_replicas=4, target=2)
    assert changed.health_path == "/ok"
    raised = parse_update({"scaling": {"min_replicas": 6}}, spec)  # max follows the minimum
    assert (raised.scaling.min_replicas, raised.scaling.max_replicas) == (6, 6)
    with pytest.raises(SpecError):
        parse_update({"name": "other"}, spec)


def test_an_update_merges_the_replica_key_by_key() -> None:
    """A PATCH of only ``env`` keeps the command, the ports and the other variables."""
    base = {**REPLICA, "image": "m:1", "env": {"A": "1", "B": "2"}, "resources": {"cpu": 1}}
    _, spec = parse_endpoint({**M, "replica": base})
    changed = parse_update({"replica": {"env": {"B": "3"}}}, spec)
    assert changed.replica == {**base, "type": "inference", "env": {"A": "1", "B": "3"}}
    assert changed.service == "model"
    dropped = parse_update({"replica": {"env": {"A": None}, "resources": None}}, spec)
    assert dropped.replica["env"] == {"B": "2"} and "resources" not in dropped.replica
    ports = parse_update({"replica": {"service_ports": ["api:http:9000"]}}, spec)
    assert ports.service == "api"  # the routed port went: the replica's only HTTP one
    with pytest.raises(SpecError) as caught:
        parse_update({"replica": {"startup_command": None, "env": {"B": 3}}}, spec)
    assert caught.value.field == "replica.env.B"


def test_a_rollout_given_up_goes_back_to_the_generation_that_serves() -> None:
    _, spec = parse_endpoint(M)
    endpoint = Endpoint("e1", "m", "alice", spec, 0.0)
    endpoint.begin_rollout(10.0)  # as an update does: then the new spec
    endpoint.spec = parse_update({"replica": {"env": {"V": "2"}}}, spec)
    endpoint.begin_rollout(20.0)  # a second update while rolling: still from generation 1
    endpoint.spec = parse_update({"replica": {"env": {"V": "3"}}}, endpoint.spec)
    assert endpoint.rollout is not None
    assert (endpoint.generation, endpoint.rollout["from"]) == (3, 1)
    endpoint.end_rollout(2, False, "stale", 30.0)  # an older rollout's verdict: nothing
    assert endpoint.generation == 3
    endpoint.end_rollout(3, False, "no new replica became healthy", 30.0)
    assert (endpoint.generation, endpoint.spec) == (1, spec)
    assert endpoint.rollout["state"] == "failed" and endpoint.rollout["generation"] == 3
    assert endpoint.decisions[-1].reason == "no new replica became healthy"
    assert Endpoint.from_json(endpoint.to_json()) == endpoint  # kept in the store
    endpoint.begin_rollout(40.0)  # the next update: above the failed generation
    assert (endpoint.generation, endpoint.rollout["from"]) == (4, 1)
    endpoint.end_rollout(4, True, "done", 50.0)
    assert endpoint.rollout is None and endpoint.generation == 4


# --- measuring ------------------------------------------------------------------------------


def test_the_meter_integrates_requests_in_flight_over_time() -> None:
    meter = LoadMeter(0.0)
    meter.begin(0.0)
    meter.begin(1.0)
    meter.end(2.0)
    meter.end(3.0)  # 1 in flight for 1 s, 2 for 1 s, 1 for 1 s, then none
    load = meter.sample(4.0, window=10)
    assert load == Load(in_flight=1.0, rps=0.5, seconds=4.0)
    later = meter.sample(20.0, window=10)  # the busy second is out of the window
    assert later.in_flight == 0 and later.seconds == 16.0


def test_a_route_goes_round_robin_over_ready_replicas_only() -> None:
    route = Route("e1", "m", "alice")
    for sid, healthy in (("a", True), ("b", True), ("c", False)):
        route.replicas[sid] = Replica(sid, 1, "10.0.0.1", 8000, healthy=healthy)
    picks = [route.pick() for _ in range(4)]
    assert [p.session_id for p in picks if p] in (["b", "a", "b", "a"], ["a", "b", "a", "b"])
    route.replicas["a"].draining = True
    assert {route.pick().session_id for _ in range(3)} == {"b"}  # type: ignore[union-attr]
    assert route.pick(tried={"b"}) is None


# --- scaling --------------------------------------------------------------------------------

SCALING = Scaling(min_replicas=1, max_replicas=4, metric="inflight", target=2, window=10)


def test_load_adds_replicas_at_once_and_quiet_removes_one_per_window() -> None:
    scaler = Autoscaler()
    count, why = scaler.step(SCALING, 1, Load(in_flight=7, seconds=10), 0)
    assert count == 4 and "7.00 requests in flight" in why
    assert scaler.step(SCALING, 4, Load(in_flight=0, seconds=10), 1) == (4, "")
    assert scaler.step(SCALING, 4, Load(in_flight=0, seconds=10), 9) == (4, "")
    count, why = scaler.step(SCALING, 4, Load(in_flight=0, seconds=10), 11)
    assert count == 3 and "one fewer" in why
    assert scaler.step(SCALING, 3, Load(in_flight=0, seconds=10), 15)[0] == 3  # a window apart
    assert scaler.step(SCALING, 3, Load(in_flight=0, seconds=10), 21.5)[0] == 2


def test_a_changed_rule_moves_the_count_into_its_bounds() -> None:
    count, why = Autoscaler().step(Scaling(min_replicas=3, max_replicas=5), 1, Load(), 0)
    assert count == 3 and "3 to 5" in why


@given(
    st.integers(1, 32),
    st.integers(0, 31),
    st.floats(0, 1000),
    st.floats(0, 1000),
    st.sampled_from(["inflight", "rps"]),
    st.lists(st.floats(0, 100), max_size=20),
)
def test_the_count_stays_within_the_bounds(
    low: int, extra: int, in_flight: float, rps: float, metric: str, steps: list[float]
) -> None:
    scaling = Scaling(min_replicas=low, max_replicas=min(low + extra, 32), metric=metric)
    scaler, count, now = Autoscaler(), low, 0.0
    for step in steps:
        now += step
        count, _ = scaler.step(scaling, count, Load(in_flight, rps, 30), now)
        assert scaling.min_replicas <= count <= scaling.max_replicas


# --- the replica plan -----------------------------------------------------------------------


def _r(sid: str, generation: int = 1, ready: bool = True, in_flight: int = 0) -> ReplicaState:
    return ReplicaState(sid, generation, ready, in_flight)


def test_a_rolling_update_goes_one_replica_at_a_time() -> None:
    old = [_r("a"), _r("b", in_flight=3)]
    assert plan_replicas(old, 2, 2).create == 1  # a new one first; nothing drains yet
    starting = [*old, _r("n1", 2, ready=False)]
    assert plan_replicas(starting, 2, 2) == plan_replicas([], 0, 2)  # wait for it
    ready = [*old, _r("n1", 2)]
    step = plan_replicas(ready, 2, 2)
    assert step.drain == ("a",) and step.create == 1  # the idle old one goes; the next new


def test_scaling_down_drains_what_is_not_ready_then_the_idlest() -> None:
    plan = plan_replicas([_r("a", in_flight=2), _r("b", ready=False), _r("c", in_flight=1)], 1, 1)
    assert plan.drain == ("b", "c")


@given(
    st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.integers(0, 5)), max_size=10),
    st.integers(1, 8),
    st.integers(1, 3),
)
def test_the_plan_never_drains_below_what_is_ready_nor_overshoots(
    shapes: list[tuple[int, bool, int]], desired: int, generation: int
) -> None:
    replicas = [_r(f"r{i}", g, ready, n) for i, (g, ready, n) in enumerate(shapes)]
    plan = plan_replicas(replicas, desired, generation)
    drained = set(plan.drain)
    assert drained <= {r.id for r in replicas}
    ready_before = sum(r.ready for r in replicas)
    ready_after = sum(r.ready for r in replicas if r.id not in drained)
    assert ready_after >= min(ready_before, desired)
    live_after = len(replicas) - len(drained) + plan.create
    assert live_after <= max(desired + 1, len(replicas) - len(drained))
    assert len(replicas) - len(drained) + plan.create >= min(desired, len(replicas))
