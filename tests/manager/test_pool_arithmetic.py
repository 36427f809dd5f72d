"""The pure parts of warm pools (``bai_jupyter.manager.pools``), with no engine: the key
a launch must match, the reservation window, the counts a pool keeps, the setting's
bounds, and the room a pool's warm sessions would give back."""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bai_jupyter.errors import ConfigError
from bai_jupyter.manager.pools.config import (
    COUNTS,
    MARK,
    MAX_SIZE,
    POOL_OWNER,
    RESERVED_FOR,
    count,
    parse_pools,
    pool_key,
    pool_stats,
    reserved,
    warm_mark,
)
from bai_jupyter.manager.pools.warm_pool import _fits, _give_back
from bai_jupyter.model import Agent, Session, SessionSpec
from bai_jupyter.request import parse_spec
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.store import Store, Transaction

NOW = 1_000.0


class _Meta:
    """The two calls of a transaction that pool counts use, over a dict."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get_meta(self, key: str) -> str | None:
        return self.values.get(key)

    def set_meta(self, key: str, value: str) -> None:
        self.values[key] = value


def _tx(meta: _Meta) -> Transaction:
    return cast(Transaction, meta)


def _warm(mark: dict[str, Any] | None, owner: str = POOL_OWNER) -> Session:
    session = Session.create(parse_spec({"type": "interactive"}), owner, NOW)
    if mark is not None:
        session.meta = {MARK: mark}
    return session


# --- pool_key -----------------------------------------------------------------------------


@given(
    name=st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)),
    priority=st.integers(min_value=-100, max_value=100),
)
def test_a_pool_key_ignores_the_name_and_the_priority(name: str | None, priority: int) -> None:
    base = parse_spec({"type": "interactive", "resources": {"cpu": "1", "mem": "1g"}})
    other = copy.deepcopy(base)
    other.name = name
    other.priority = priority
    assert pool_key(other) == pool_key(base)
    assert re.fullmatch(r"[0-9a-f]{16}", pool_key(base))


@given(cpu=st.integers(min_value=1, max_value=32), more=st.integers(min_value=1, max_value=32))
def test_a_pool_key_differs_with_what_the_session_holds(cpu: int, more: int) -> None:
    one = parse_spec({"type": "interactive", "resources": {"cpu": cpu}})
    two = parse_spec({"type": "interactive", "resources": {"cpu": cpu + more}})
    assert pool_key(one) != pool_key(two)


# --- warm_mark and reserved ---------------------------------------------------------------


def test_only_an_unclaimed_warm_session_has_a_mark() -> None:
    mark = {"pool": "p", "key": "k"}
    assert warm_mark(_warm(mark)) == mark
    assert warm_mark(_warm(mark, owner="alice")) == {}  # claimed: the user's now
    assert warm_mark(_warm(None)) == {}
    assert warm_mark(_warm(cast(Any, "not a mapping"))) == {}


@given(
    at=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    age=st.floats(min_value=0, max_value=10 * RESERVED_FOR, allow_nan=False),
    owner=st.sampled_from([POOL_OWNER, "alice"]),
)
def test_a_reservation_holds_for_its_window_and_only_on_a_warm_session(
    at: float, age: float, owner: str
) -> None:
    session = _warm({"pool": "p", "key": "k", "reserved": at}, owner)
    assert reserved(session, at + age) == (owner == POOL_OWNER and age < RESERVED_FOR)


def test_a_session_never_reserved_is_free() -> None:
    assert not reserved(_warm({"pool": "p", "key": "k"}), NOW)
    assert not reserved(_warm({"pool": "p", "key": "k", "reserved": "soon"}), NOW)


# --- count and pool_stats -----------------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(COUNTS)), max_size=40))
def test_pool_counts_are_exactly_what_was_counted(events: list[tuple[str, str]]) -> None:
    meta = _Meta()
    for name, what in events:
        count(_tx(meta), name, what)
    for name in ("a", "b"):
        stats = pool_stats(_tx(meta), name)
        assert set(stats) == set(COUNTS)
        assert all(n >= 0 for n in stats.values())
        expected = Counter(what for pool, what in events if pool == name)
        assert stats == {what: expected[what] for what in COUNTS}


def test_counts_of_an_unknown_or_unreadable_pool_are_zero() -> None:
    meta = _Meta()
    assert pool_stats(_tx(meta), "nobody") == dict.fromkeys(COUNTS, 0)
    meta.values["warm-pool-stats:broken"] = "{not json"
    assert pool_stats(_tx(meta), "broken") == dict.fromkeys(COUNTS, 0)
    count(_tx(meta), "broken", "hits")  # starts again from zero
    assert pool_stats(_tx(meta), "broken")["hits"] == 1


def test_an_unknown_count_is_refused() -> None:
    with pytest.raises(KeyError):
        count(_tx(_Meta()), "a", "nonsense")


def test_pool_counts_round_trip_through_a_real_store(tmp_path: Any) -> None:
    store = Store(f"sqlite:///{tmp_path}/store.sqlite")
    try:
        with store.write() as tx:
            count(tx, "p", "claims")
            count(tx, "p", "claims")
            count(tx, "p", "misses")
        with store.read() as tx:
            assert pool_stats(tx, "p") == {"claims": 2, "hits": 0, "misses": 1, "given_way": 0}
    finally:
        store.close()


# --- parse_pools --------------------------------------------------------------------------


@given(size=st.one_of(st.integers(min_value=-5, max_value=MAX_SIZE + 5), st.booleans()))
def test_a_pool_size_is_a_whole_number_within_bounds(size: Any) -> None:
    entry = {"name": "p", "size": size, "request": {"resources": {"cpu": "1"}}}
    if isinstance(size, bool) or not 0 <= size <= MAX_SIZE:
        with pytest.raises(ConfigError, match=r"warm_pools\[0\]\.size"):
            parse_pools([entry])
    else:
        (pool,) = parse_pools([entry])
        assert pool.size == size and pool.request["type"] == "interactive"


@pytest.mark.parametrize("field", ["name", "depends_on", "starts_at", "mounts"])
def test_what_each_user_decides_cannot_be_pooled(field: str) -> None:
    value: Any = ["x"] if field in ("depends_on", "mounts") else "x"
    with pytest.raises(ConfigError, match=rf"request\.{field}: decided per user"):
        parse_pools([{"name": "p", "request": {field: value}}])


def test_pool_names_are_unique_and_max_slots_are_slots() -> None:
    with pytest.raises(ConfigError, match="used twice"):
        parse_pools([{"name": "p"}, {"name": "q"}, {"name": "p"}])
    (pool,) = parse_pools([{"name": "p", "max_slots": {"cpu": "2", "mem": "1g"}}])
    assert pool.max_slots == ResourceSlot({"cpu": "2", "mem": "1g"})
    with pytest.raises(ConfigError, match="max_slots"):
        parse_pools([{"name": "p", "max_slots": {"cpu": "lots"}}])


# --- the room warm sessions give back -----------------------------------------------------

_amounts = st.integers(min_value=0, max_value=16)


def _placed(cpu: int, agent_id: str) -> Session:
    session = Session.create(
        parse_spec({"type": "interactive", "resources": {"cpu": cpu}}), POOL_OWNER, NOW
    )
    for kernel in session.kernels:
        kernel.agent_id = agent_id
    return session


@given(
    free=st.dictionaries(st.sampled_from(["a1", "a2"]), _amounts, min_size=1),
    warm=st.lists(st.tuples(_amounts.filter(bool), st.sampled_from(["a1", "a2", "gone"]))),
)
def test_giving_back_adds_exactly_what_warm_sessions_hold_on_known_agents(
    free: dict[str, int], warm: list[tuple[int, str]]
) -> None:
    room = {a: ResourceSlot({"cpu": n}) for a, n in free.items()}
    _give_back(room, [_placed(cpu, agent_id) for cpu, agent_id in warm])
    assert set(room) == set(free)  # an agent no longer known gains nothing
    for agent_id, before in free.items():
        held = sum(cpu for cpu, on in warm if on == agent_id)
        assert room[agent_id] == ResourceSlot({"cpu": before + held})


@given(
    free=_amounts,
    held=st.lists(_amounts.filter(bool), max_size=4),
    want=st.integers(min_value=1, max_value=40),
)
def test_a_request_fits_once_the_warm_sessions_are_given_back_exactly_when_the_sum_does(
    free: int, held: list[int], want: int
) -> None:
    total = free + sum(held)
    agents = [Agent("a1", ResourceSlot({"cpu": total, "mem": "64g"}), ResourceSlot())]
    room = {"a1": ResourceSlot({"cpu": free, "mem": "64g"})}
    spec: SessionSpec = parse_spec({"type": "interactive", "resources": {"cpu": want}})
    assert _fits(spec, agents, room, [_placed(cpu, "a1") for cpu in held]) == (want <= total)
