"""Per-user and per-group policies, and fair share across groups (pure: no store, no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from traitlets.config.loader import PyFileConfigLoader

from bai_jupyter.errors import ConfigError
from bai_jupyter.manager.requests.policies import Policies
from bai_jupyter.model import Agent, Session, SessionSpec
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.scheduler.config import OwnerPolicy, SchedulerConfig
from bai_jupyter.scheduler.context import PassContext, Snapshot
from bai_jupyter.scheduler.sequencers import DRFSequencer

CONFIG = {
    "default": {"max_pending": 5, "allowed_images": ["bai-jupyter/*"]},
    "groups": {
        "students": {"max_concurrent_sessions": 1, "max_resources": {"cpu": 2, "mem": "4g"}},
        "staff": {"max_concurrent_sessions": 4, "max_resources": {"cpu": 8}},
    },
    "users": {"bob": {"max_concurrent_sessions": 2, "allowed_images": ["*"]}},
}


def test_a_users_own_entry_wins_then_the_most_generous_group_then_default() -> None:
    policies = Policies(CONFIG)
    alice = policies.for_owner("alice", ["students", "staff"])
    assert alice.values["max_concurrent_sessions"] == 4
    assert alice.sources["max_concurrent_sessions"] == "policies.groups.staff,students"
    # Only the slots every group entry limits stay limited (staff sets no mem limit).
    assert alice.values["max_resources"] == ResourceSlot({"cpu": 8})
    assert alice.values["max_pending"] == 5
    bob = policies.for_owner("bob", ["students"])
    assert (bob.values["max_concurrent_sessions"], bob.sources["max_concurrent_sessions"]) == (
        2,
        "policies.users.bob",
    )
    assert policies.for_owner("dave", []).values == {
        "max_pending": 5,
        "allowed_images": ("bai-jupyter/*",),
    }


def test_refusals_name_the_entry_that_refused() -> None:
    dave = Policies(CONFIG).for_owner("dave", [])
    assert dave.refuse("bai-jupyter/python:3.11", "default", 0) is None
    refusal = dave.refuse("python:3.12", "default", 0)
    assert refusal is not None and refusal.startswith("policies.default.allowed_images")
    refusal = dave.refuse("bai-jupyter/python:3.11", "default", 5)
    assert refusal is not None and "max_pending" in refusal and "5" in refusal
    gpu_only = Policies({"users": {"dave": {"allowed_resource_groups": ["gpu"]}}})
    refusal = gpu_only.for_owner("dave", []).refuse("x", "default", 0)
    assert refusal is not None and "policies.users.dave.allowed_resource_groups" in refusal


def test_a_default_pending_cap_holds_where_no_entry_sets_max_pending() -> None:
    from bai_jupyter.manager.pools.config import POOL_OWNER

    policies = Policies({"users": {"bob": {"max_pending": 100}}}, 50)
    dave = policies.for_owner("dave", [])
    assert dave.refuse("x", "default", 49) is None
    refusal = dave.refuse("x", "default", 50)
    assert refusal is not None and refusal.startswith("BaiSessionManager.default_max_pending:")
    assert policies.for_owner("bob", []).refuse("x", "default", 99) is None  # his entry wins
    assert Policies(CONFIG, 50).for_owner("dave", []).values["max_pending"] == 5
    assert Policies({}, None).for_owner("dave", []).refuse("x", "default", 10**6) is None
    assert policies.for_owner(POOL_OWNER, []).refuse("x", "default", 10**6) is None


def test_scheduler_limits_fall_back_to_the_resource_groups() -> None:
    policies = Policies(CONFIG)
    group_own = OwnerPolicy(max_concurrent_sessions=9, max_resources=ResourceSlot({"cpu": 3}))
    assert policies.for_owner("dave", []).scheduler_policy(group_own) is group_own
    student = policies.for_owner("erin", ["students"]).scheduler_policy(group_own)
    assert student.max_concurrent_sessions == 1
    assert student.source == "policies.groups.students"


@pytest.mark.parametrize(
    "config",
    [
        {"everyone": {}},
        {"users": {"bob": {"max_sessions": 1}}},
        {"users": {"bob": {"max_pending": -1}}},
        {"groups": {"g": {"allowed_images": "bai-jupyter/*"}}},
        {"default": {"max_resources": {"cpu": "lots"}}},
    ],
)
def test_a_wrong_policy_is_refused_saying_where(config: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="policies"):
        Policies(config)


@given(
    st.lists(st.integers(0, 10), min_size=1, max_size=4),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
)
def test_a_group_policy_never_lowers_what_another_group_allows(
    limits: list[int], member_of: list[str]
) -> None:
    groups = {name: {"max_concurrent_sessions": n} for name, n in zip("abcd", limits)}
    resolved = Policies({"groups": groups}).for_owner("u", member_of)
    mine = [groups[g]["max_concurrent_sessions"] for g in member_of if g in groups]
    assert resolved.values.get("max_concurrent_sessions") == (max(mine) if mine else None)


# --- fair share across groups ---------------------------------------------------------------


def _session(owner: str, at: float) -> Session:
    return Session.create(SessionSpec(resources=ResourceSlot({"cpu": 1})), owner, at)


def test_drf_by_groups_serves_the_poorer_group_first_then_its_poorer_user() -> None:
    """ml (ann, bo) holds 3 cpus, physics (cy) holds 1: physics goes first; within ml,
    bo (who holds less) before ann."""
    held = {
        "ann": ResourceSlot({"cpu": 2}),
        "bo": ResourceSlot({"cpu": 1}),
        "cy": ResourceSlot({"cpu": 1}),
    }
    snapshot = Snapshot(
        agents=[Agent("a", ResourceSlot({"cpu": 8}))],
        pending=[],
        owner_group_occupied=dict(held),
        owner_groups={"ann": ["ml"], "bo": ["ml"], "cy": ["physics"]},
    )
    ctx = PassContext(0.0, SchedulerConfig(), snapshot, ResourceSlot({"cpu": 8}))
    band = [_session("ann", 1), _session("bo", 2), _session("cy", 3)]
    by_groups = list(DRFSequencer({"fair_share": "groups"}).order(band, ctx))
    assert [s.owner for s in by_groups] == ["cy", "bo", "ann"]
    by_users = list(DRFSequencer().order(band, ctx))
    assert [s.owner for s in by_users] == ["bo", "cy", "ann"]  # equal shares: oldest first


def test_the_hub_samples_limits_are_valid_and_bind_every_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shipped examples/jupyterhub/bai_manager_config.py loads (its store from the
    variable the Hub passes on) and limits a user of no entry."""
    monkeypatch.setenv("BAI_MANAGER_STORE_URL", "postgresql+psycopg://bai@db/bai")
    sample = Path(__file__).parents[2] / "examples" / "jupyterhub" / "bai_manager_config.py"
    config = PyFileConfigLoader(sample.name, str(sample.parent)).load_config()
    assert config.BaiSessionManager.store_url == "postgresql+psycopg://bai@db/bai"
    anyone = Policies(config.BaiSessionManager.policies).for_owner("anyone", [])
    assert anyone.values["max_concurrent_sessions"] >= 1
    assert anyone.values["max_resources"] == ResourceSlot({"cpu": 4, "mem": "16g"})
    assert anyone.values["idle_timeout"] > 0
