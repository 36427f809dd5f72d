"""Resource slots: exact parsing, arithmetic, comparison (bai_jupyter.resources)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bai_jupyter.resources import (
    DEVICE_SLOTS,
    KNOWN_SLOTS,
    ZERO,
    Amount,
    ResourceError,
    ResourceSlot,
    format_amount,
    parse_amount,
    total,
)

GIB = 1024**3
MIB = 1024**2


# --- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slot", "value", "expected"),
    [
        ("cpu", "2", Decimal(2)),
        ("cpu", "0.5", Decimal("0.5")),
        ("cpu", " 0.25 ", Decimal("0.25")),
        ("cpu", ".5", Decimal("0.5")),
        ("cpu", "4.", Decimal(4)),
        ("cpu", "+3", Decimal(3)),
        ("cpu", 2, Decimal(2)),
        ("cpu", 0.1, Decimal("0.1")),
        ("cpu", Decimal("1.50"), Decimal("1.5")),
        ("cpu", "0", Decimal(0)),
        ("cpu", "-0", Decimal(0)),
        ("cuda.device", "1", Decimal(1)),
        ("cuda.device", "0.5", Decimal("0.5")),
        ("mem", "512m", Decimal(512 * MIB)),
        ("mem", "2g", Decimal(2 * GIB)),
        ("mem", "2G", Decimal(2 * GIB)),
        ("mem", "2gb", Decimal(2 * GIB)),
        ("mem", "2GiB", Decimal(2 * GIB)),
        ("mem", "1.5GiB", Decimal(3 * GIB // 2)),
        ("mem", "1.5g", Decimal(1610612736)),
        ("mem", "0.5k", Decimal(512)),
        ("mem", "1k", Decimal(1024)),
        ("mem", "1Ki", Decimal(1024)),
        ("mem", "1t", Decimal(1024**4)),
        ("mem", "1p", Decimal(1024**5)),
        ("mem", "1e", Decimal(1024**6)),
        ("mem", "4 g", Decimal(4 * GIB)),
        ("mem", "1000", Decimal(1000)),
        ("mem", 4096, Decimal(4096)),
        ("mem", "2.9", Decimal(2)),  # a fraction of a byte is dropped
        ("mem", Decimal("2E+9"), Decimal(2_000_000_000)),
        ("mem", 1e20, Decimal(10**20)),
    ],
)
def test_parse_amount_exact(slot: str, value: Amount, expected: Decimal) -> None:
    amount = parse_amount(slot, value)
    assert isinstance(amount, Decimal)
    assert amount == expected


def test_parse_is_exact_not_float() -> None:
    a = ResourceSlot({"cpu": "0.1"}) + ResourceSlot({"cpu": "0.2"})
    assert a["cpu"] == Decimal("0.3")
    assert a == ResourceSlot({"cpu": "0.3"})
    assert parse_amount("mem", "1.1g") == Decimal(int(Decimal("1.1") * GIB))


@pytest.mark.parametrize(
    ("slot", "value", "words"),
    [
        ("cpu", "-1", ["cpu", "negative"]),
        ("cpu", -0.5, ["cpu", "negative"]),
        ("cpu", Decimal("-2"), ["cpu", "negative"]),
        ("mem", "-512m", ["mem", "negative"]),
        ("cuda.device", "-1", ["cuda.device", "negative"]),
        ("mem", "2x", ["mem", "unknown unit", "'x'"]),
        ("mem", "2q", ["mem", "unknown unit"]),
        ("mem", "2zb", ["mem", "unknown unit"]),
        ("cpu", "2g", ["cpu", "unit", "plain count"]),
        ("cuda.device", "1m", ["cuda.device", "unit"]),
        ("cpu", "", ["cpu", "cannot parse"]),
        ("cpu", "two", ["cpu", "cannot parse"]),
        ("cpu", "1e3", ["cpu", "cannot parse"]),
        ("cpu", "1.2.3", ["cpu", "cannot parse"]),
        ("mem", "g", ["mem", "cannot parse"]),
        ("mem", "1 2g", ["mem", "cannot parse"]),
        ("cpu", float("nan"), ["cpu", "cannot parse"]),
        ("cpu", float("inf"), ["cpu", "cannot parse"]),
        ("cpu", Decimal("NaN"), ["cpu", "cannot parse"]),
        ("cpu", True, ["cpu", "expected a number"]),
        ("cpu", None, ["cpu", "expected a number"]),
        ("cpu", [1], ["cpu", "expected a number"]),
        ("gpu", "1", ["unknown resource slot", "'gpu'", "cpu", "mem", "cuda.device"]),
        ("CPU", "1", ["unknown resource slot"]),
    ],
)
def test_parse_amount_errors_name_the_problem(slot: str, value: object, words: list[str]) -> None:
    with pytest.raises(ResourceError) as info:
        parse_amount(slot, value)  # type: ignore[arg-type]
    for word in words:
        assert word in str(info.value)


def test_resource_error_is_a_value_error() -> None:
    assert issubclass(ResourceError, ValueError)


def test_unknown_slot_in_mapping_raises_even_when_zero() -> None:
    with pytest.raises(ResourceError, match="unknown resource slot 'tpu'"):
        ResourceSlot({"cpu": 1, "tpu": 0})


def test_negative_in_mapping_raises() -> None:
    with pytest.raises(ResourceError, match="mem: amount must not be negative"):
        ResourceSlot({"cpu": 1, "mem": "-1g"})


# --- the mapping --------------------------------------------------------------------------


def test_zero_amounts_are_not_stored_and_missing_counts_as_zero() -> None:
    slots = ResourceSlot({"cpu": "0", "mem": "1g", "cuda.device": 0})
    assert dict(slots) == {"mem": Decimal(GIB)}
    assert len(slots) == 1
    assert "cpu" not in slots
    assert slots.get_amount("cpu") == 0
    assert slots.get_amount("cuda.device") == 0
    with pytest.raises(KeyError):
        slots["cpu"]
    assert ResourceSlot() == ZERO
    assert ResourceSlot({"cpu": 0}) == ZERO
    assert not ZERO
    assert ResourceSlot(None) == ZERO


def test_equal_however_written() -> None:
    a = ResourceSlot({"cpu": "2", "mem": "2g"})
    b = ResourceSlot({"mem": 2 * GIB, "cpu": Decimal("2.000"), "cuda.device": "0"})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != ResourceSlot({"cpu": "2"})
    assert a != {"cpu": Decimal(2), "mem": Decimal(2 * GIB)}  # not a ResourceSlot
    assert list(b) == ["cpu", "mem"]  # always in KNOWN_SLOTS order


def test_iteration_order_is_known_slot_order() -> None:
    slots = ResourceSlot({"cuda.device": 1, "mem": "1g", "cpu": 1})
    assert list(slots) == [s for s in KNOWN_SLOTS if s in slots]
    assert "cuda.device" in DEVICE_SLOTS


def test_add() -> None:
    a = ResourceSlot({"cpu": "1.5", "mem": "1g"})
    b = ResourceSlot({"cpu": "0.5", "cuda.device": 1})
    assert a + b == ResourceSlot({"cpu": 2, "mem": "1g", "cuda.device": 1})
    assert a + ZERO == a
    assert ZERO + a == a
    assert a + b == b + a


def test_subtract() -> None:
    a = ResourceSlot({"cpu": 4, "mem": "4g", "cuda.device": 1})
    assert a - ResourceSlot({"cpu": "1.5", "mem": "1g"}) == ResourceSlot(
        {"cpu": "2.5", "mem": "3g", "cuda.device": 1}
    )
    assert a - a == ZERO
    assert a - ZERO == a


@pytest.mark.parametrize(
    ("left", "right", "words"),
    [
        ({"cpu": 1}, {"cpu": 2}, ["cpu", "cannot take 2 from 1"]),
        ({"cpu": 1}, {"mem": "1g"}, ["mem", "cannot take 1g from 0"]),
        ({"mem": "1g"}, {"mem": "2g"}, ["mem", "2g", "1g"]),
        ({}, {"cuda.device": "0.5"}, ["cuda.device", "0.5"]),
    ],
)
def test_subtract_below_zero_raises(
    left: dict[str, Amount], right: dict[str, Amount], words: list[str]
) -> None:
    with pytest.raises(ResourceError) as info:
        ResourceSlot(left) - ResourceSlot(right)
    for word in words:
        assert word in str(info.value)


def test_multiply_by_count() -> None:
    a = ResourceSlot({"cpu": "0.5", "mem": "512m"})
    assert a * 3 == ResourceSlot({"cpu": "1.5", "mem": "1536m"})
    assert 2 * a == ResourceSlot({"cpu": 1, "mem": "1g"})
    assert a * 0 == ZERO
    for bad in (-1, 1.5, True):
        with pytest.raises(ResourceError, match="multiply"):
            a * bad  # type: ignore[operator]


def test_fits_in() -> None:
    free = ResourceSlot({"cpu": 4, "mem": "8g"})
    assert ResourceSlot({"cpu": 4, "mem": "8g"}).fits_in(free)
    assert ResourceSlot({"cpu": "3.5"}).fits_in(free)
    assert ZERO.fits_in(free)
    assert ZERO.fits_in(ZERO)
    assert not ResourceSlot({"cpu": "4.5"}).fits_in(free)
    assert not ResourceSlot({"mem": "8g"}).fits_in(ResourceSlot({"cpu": 100}))
    # A slot the free side lacks counts as zero.
    assert not ResourceSlot({"cuda.device": "0.5"}).fits_in(free)
    assert not ResourceSlot({"cpu": 1}).fits_in(ZERO)


def test_shortfall() -> None:
    free = ResourceSlot({"cpu": 4, "mem": "8g"})
    need = ResourceSlot({"cpu": 8, "mem": "1g", "cuda.device": 1})
    assert need.shortfall(free) == {
        "cpu": (Decimal(8), Decimal(4)),
        "cuda.device": (Decimal(1), Decimal(0)),
    }
    assert ResourceSlot({"cpu": 4}).shortfall(free) == {}


def test_total() -> None:
    parts = [ResourceSlot({"cpu": "0.5"}), ResourceSlot({"mem": "1g"}), ResourceSlot({"cpu": 1})]
    assert total(parts) == ResourceSlot({"cpu": "1.5", "mem": "1g"})
    assert total(iter(parts)) == total(parts)
    assert total([]) == ZERO


def test_json_and_describe() -> None:
    slots = ResourceSlot({"cpu": "0.5", "mem": "1.5g", "cuda.device": 2})
    assert slots.to_json() == {"cpu": "0.5", "mem": "1610612736", "cuda.device": "2"}
    assert ResourceSlot(slots.to_json()) == slots
    assert slots.describe() == "cpu=0.5 mem=1.5g cuda.device=2"
    assert ZERO.describe() == "nothing"
    assert ResourceSlot({"cpu": 10}).to_json() == {"cpu": "10"}  # no exponent
    assert "ResourceSlot(" in repr(slots)


@pytest.mark.parametrize(
    ("slot", "amount", "text"),
    [
        ("mem", Decimal(4 * GIB), "4g"),
        ("mem", Decimal(512 * MIB), "512m"),
        ("mem", Decimal(1536), "1.5k"),
        ("mem", Decimal(1000), "1000"),
        ("mem", Decimal(0), "0"),
        ("mem", Decimal(1024**6), "1e"),
        ("cpu", Decimal("0.50"), "0.5"),
        ("cpu", Decimal(100), "100"),
        ("cuda.device", Decimal(0), "0"),
    ],
)
def test_format_amount(slot: str, amount: Decimal, text: str) -> None:
    assert format_amount(slot, amount) == text


# --- properties ----------------------------------------------------------------------------

counts = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False)
byte_amounts = st.integers(min_value=0, max_value=2**62)
slot_maps = st.fixed_dictionaries(
    {},
    optional={"cpu": counts, "mem": byte_amounts, "cuda.device": counts},
)


@settings(max_examples=150, deadline=None)
@given(slot_maps, slot_maps)
def test_arithmetic_properties(
    a_raw: dict[str, Decimal | int], b_raw: dict[str, Decimal | int]
) -> None:
    a, b = ResourceSlot(a_raw), ResourceSlot(b_raw)
    assert (a + b) - b == a
    assert a + b == b + a
    assert a.fits_in(a + b)
    assert (a + b).fits_in(a + b)
    assert a.fits_in(b) == (not a.shortfall(b))
    assert a.fits_in(b) == all(a.get_amount(s) <= b.get_amount(s) for s in KNOWN_SLOTS)
    if a.fits_in(b):
        assert (b - a) + a == b
    else:
        with pytest.raises(ResourceError):
            b - a
    assert ResourceSlot(a.to_json()) == a
    assert (a * 3) == a + a + a
    assert total([a, b, a]) == a * 2 + b


@settings(max_examples=150, deadline=None)
@given(byte_amounts)
def test_memory_format_round_trips(amount: int) -> None:
    text = format_amount("mem", Decimal(amount))
    assert parse_amount("mem", text) == amount


@settings(max_examples=100, deadline=None)
@given(counts)
def test_count_format_round_trips(amount: Decimal) -> None:
    assert parse_amount("cpu", format_amount("cpu", amount)) == amount
    assert parse_amount("cpu", str(amount)) == amount
