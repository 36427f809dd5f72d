"""Request schema, templates and deep merge (bai_jupyter.request)."""

from __future__ import annotations

import copy
import dataclasses
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bai_jupyter.model import ClusterMode, SessionSpec, SessionType
from bai_jupyter.request import (
    FIELDS,
    SpecError,
    Template,
    apply_template,
    field_help,
    merge,
    parse_spec,
    spec_to_json,
    validate_partial,
)
from bai_jupyter.resources import ResourceSlot

FULL: dict[str, Any] = {
    "image": "python:3.12",
    "name": "train-1.v2",
    "type": "batch",
    "resources": {"cpu": "0.5", "mem": "4g", "cuda.device": 1},
    "cluster_size": 3,
    "cluster_mode": "multi-node",
    "resource_group": "gpu",
    "priority": 50,
    "depends_on": ["prep", "0123abcd"],
    "starts_at": 1700000000.5,
    "startup_command": "python train.py",
    "batch_timeout": 3600,
    "env": {"FOO": "1", "_bar2": ""},
    "mounts": ["data", "models"],
    "service_ports": ["tensorboard:http:6006", "ssh-alt:tcp:2222"],
}


def test_fields_cover_session_spec_exactly() -> None:
    assert list(FIELDS) == [f.name for f in dataclasses.fields(SessionSpec)]
    docs = field_help()
    assert list(docs) == list(FIELDS)
    assert all(text and "\n" not in text for text in docs.values())
    assert "(default: 10)" in docs["priority"]
    assert "batch" in docs["type"]


def test_parse_full_request() -> None:
    spec = parse_spec(FULL)
    assert spec.type is SessionType.BATCH
    assert spec.cluster_mode is ClusterMode.MULTI_NODE
    assert spec.resources == ResourceSlot({"cpu": "0.5", "mem": "4g", "cuda.device": 1})
    assert spec.resources["mem"] == 4 * 1024**3
    assert spec.batch_timeout == 3600.0 and isinstance(spec.batch_timeout, float)
    assert spec.env == {"FOO": "1", "_bar2": ""}
    assert spec.service_ports == ["tensorboard:http:6006", "ssh-alt:tcp:2222"]


def test_empty_request_gives_defaults_and_null_means_default() -> None:
    assert parse_spec({}) == SessionSpec()
    assert parse_spec(dict.fromkeys(FIELDS)) == SessionSpec()


def test_round_trip() -> None:
    for spec in (SessionSpec(), parse_spec(FULL)):
        data = spec_to_json(spec)
        assert parse_spec(data) == spec
        assert data["type"] == spec.type.value
        assert isinstance(data["resources"], dict)
    assert spec_to_json(parse_spec(FULL))["resources"] == {
        "cpu": "0.5",
        "mem": str(4 * 1024**3),
        "cuda.device": "1",
    }


def test_round_trip_big_memory_amount() -> None:
    # Decimal normalization turns 2000000000 into 2E+9; the JSON form must not.
    spec = parse_spec({"resources": {"mem": 2_000_000_000, "cpu": Decimal("100")}})
    assert parse_spec(spec_to_json(spec)) == spec


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"imag": "x"}, "imag", "did you mean 'image'"),
    ({"bogus": 1}, "bogus", "known fields: image, name"),
    ({"image": ""}, "image", "image reference"),
    ({"image": 3}, "image", "got 3"),
    ({"name": "-x"}, "name", "starting with a letter"),
    ({"name": "a b"}, "name", "got 'a b'"),
    ({"name": "abc\n"}, "name", "got"),
    ({"name": "x" * 65}, "name", "1 to 64"),
    ({"type": "nope"}, "type", "one of interactive, batch, inference, system"),
    ({"type": 1}, "type", "got 1"),
    ({"resources": [1]}, "resources", "mapping of slot"),
    ({"resources": {"mem": "lots"}}, "resources.mem", "cannot parse"),
    ({"resources": {"cpu": "-1"}}, "resources.cpu", "negative"),
    ({"resources": {"cpu": "2g"}}, "resources.cpu", "plain count"),
    ({"resources": {"cpu": True}}, "resources.cpu", "expected a number"),
    ({"resources": {"gpu": 1}}, "resources.gpu", "unknown resource slot"),
    ({"cluster_size": 0}, "cluster_size", "must be an integer from 1 to 64, got 0"),
    ({"cluster_size": 65}, "cluster_size", "got 65"),
    ({"cluster_size": True}, "cluster_size", "got True"),
    ({"cluster_size": 2.0}, "cluster_size", "got 2.0"),
    ({"cluster_mode": "single"}, "cluster_mode", "single-node, multi-node"),
    ({"resource_group": ""}, "resource_group", "non-empty"),
    ({"priority": 101}, "priority", "from 0 to 100"),
    ({"priority": -1}, "priority", "from 0 to 100"),
    ({"priority": "5"}, "priority", "got '5'"),
    ({"depends_on": "a"}, "depends_on", "must be a list"),
    ({"depends_on": ["a", ""]}, "depends_on[1]", "session id or name"),
    ({"depends_on": ["a", 3]}, "depends_on[1]", "got 3"),
    ({"starts_at": "tomorrow"}, "starts_at", "seconds since the epoch"),
    ({"starts_at": True}, "starts_at", "got True"),
    ({"starts_at": float("nan")}, "starts_at", "epoch"),
    ({"startup_command": ["ls"]}, "startup_command", "shell command"),
    (
        {"type": "batch", "startup_command": "x", "batch_timeout": 0},
        "batch_timeout",
        "greater than 0",
    ),
    ({"type": "batch", "startup_command": "x", "batch_timeout": "1"}, "batch_timeout", "'1'"),
    ({"env": ["FOO=1"]}, "env", "mapping of variable name"),
    ({"env": {"1FOO": "x"}}, "env.1FOO", "not a valid variable name"),
    ({"env": {"FOO-BAR": "x"}}, "env.FOO-BAR", "not a valid variable name"),
    ({"env": {"FOO": 1}}, "env.FOO", "must be a string"),
    ({"env": {3: "x"}}, "env.3", "must be strings"),
    ({"mounts": "data"}, "mounts", "must be a list"),
    ({"mounts": ["data", None]}, "mounts[1]", "data folder"),
    ({"service_ports": "a:http:80"}, "service_ports", "must be a list"),
    ({"service_ports": ["web:http"]}, "service_ports[0]", "name:proto:port"),
    ({"service_ports": ["Web:http:80"]}, "service_ports[0]", "service name"),
    ({"service_ports": ["web:udp:80"]}, "service_ports[0]", "got protocol 'udp'"),
    ({"service_ports": ["web:http:0"]}, "service_ports[0]", "1 to 65535"),
    ({"service_ports": ["web:http:65536"]}, "service_ports[0]", "1 to 65535"),
    ({"service_ports": ["web:http:x"]}, "service_ports[0]", "port"),
    ({"service_ports": ["a:http:1", "a:tcp:2"]}, "service_ports[1]", "declared twice"),
    # cross-field rules
    ({"type": "batch"}, "startup_command", "required when type is batch"),
    ({"type": "batch", "startup_command": "  "}, "startup_command", "required"),
    ({"batch_timeout": 5}, "batch_timeout", "only allowed when type is batch"),
    (
        {"ssh_public_key": "ssh-ed25519 AAAA x"},
        "ssh_public_key",
        "only allowed when type is system",
    ),
    ({"type": "system", "ssh_public_key": "AAAA"}, "ssh_public_key", "OpenSSH public key"),
    ({"type": "system", "ssh_public_key": "ssh-ed25519 AAAA\nssh-rsa B"}, "ssh_public_key", "one"),
    ({"type": "system", "cluster_size": 2}, "cluster_size", "system (SFTP) session has one"),
]


@pytest.mark.parametrize(("data", "field", "text"), BAD)
def test_errors_name_the_field(data: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert text in str(info.value)
    assert isinstance(info.value, ValueError)


def test_id_like_names_are_refused_in_new_requests_only() -> None:
    """Records an older version stored still load (``bounded=False``)."""
    for name in ("0123abcd", "f" * 32, "0" * 20):
        with pytest.raises(SpecError, match=r"^name: looks like a session id"):
            parse_spec({"name": name})
        assert parse_spec({"name": name}, bounded=False).name == name
    for name in ("0123abc", "f" * 33, "0123ABCD", "job-0123abcd"):
        assert parse_spec({"name": name}).name == name


def test_the_loaders_variables_are_refused_in_a_new_requests_env() -> None:
    """They would load code into the runtime (root) before any of its own code runs."""
    for key in ("LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"):
        with pytest.raises(SpecError, match=f"^env.{key}: the dynamic loader"):
            parse_spec({"env": {key: "/home/work/x.so"}})
        with pytest.raises(SpecError, match=rf"^roles\[0\]\.env\.{key}: the dynamic loader"):
            parse_spec({"roles": [{"name": "worker", "env": {key: "x"}}]})


@pytest.mark.parametrize(
    "field",
    [
        {"env": {"PYTHONPATH": "/home/work/data"}},
        {"service_ports": ["web:http:8080"]},
        {"startup_command": "python3 -m http.server"},
    ],
)
def test_a_system_session_takes_no_field_that_would_run_code(field: dict[str, Any]) -> None:
    (name,) = field
    with pytest.raises(SpecError, match=f"^{name}: not allowed when type is system"):
        parse_spec({"type": "system", **field})
    assert parse_spec({"type": "interactive", **field}) is not None
    stored = parse_spec({"type": "system", **field}, bounded=False)  # an older record
    assert stored.type is SessionType.SYSTEM


def test_error_message_example_from_the_docs() -> None:
    with pytest.raises(SpecError, match=r"^cluster_size: must be an integer from 1 to 64, got 0$"):
        parse_spec({"cluster_size": 0})


def test_non_mapping_request() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(["image"])  # type: ignore[arg-type]
    assert info.value.field == ""
    with pytest.raises(SpecError):
        apply_template(None, "x")  # type: ignore[arg-type]


def test_service_port_is_normalized() -> None:
    assert parse_spec({"service_ports": ["web:http:0080"]}).service_ports == ["web:http:80"]


def test_null_inside_mappings_is_dropped() -> None:
    spec = parse_spec({"env": {"A": "1", "B": None}, "resources": {"cpu": 1, "mem": None}})
    assert spec.env == {"A": "1"}
    assert spec.resources == ResourceSlot({"cpu": 1})


# --- merge -----------------------------------------------------------------


def test_merge_deep_for_mappings_replace_for_lists() -> None:
    base = {
        "image": "a",
        "env": {"A": "1", "B": "2"},
        "resources": {"cpu": 1, "mem": "1g"},
        "mounts": ["x", "y"],
        "nested": {"deeper": {"k": "v", "keep": "me"}},
    }
    over = {
        "env": {"B": "3", "C": "4"},
        "resources": {"mem": "2g"},
        "mounts": ["z"],
        "nested": {"deeper": {"k": "w"}},
        "name": "n",
    }
    base_before, over_before = copy.deepcopy(base), copy.deepcopy(over)
    out = merge(base, over)
    assert out == {
        "image": "a",
        "env": {"A": "1", "B": "3", "C": "4"},
        "resources": {"cpu": 1, "mem": "2g"},
        "mounts": ["z"],
        "nested": {"deeper": {"k": "w", "keep": "me"}},
        "name": "n",
    }
    assert base == base_before and over == over_before
    # The result shares nothing mutable with the inputs.
    out["env"]["A"] = "changed"
    out["mounts"].append("q")
    out["nested"]["deeper"]["keep"] = "no"
    assert base == base_before and over == over_before


def test_merge_none_replaces_and_scalar_replaces_mapping() -> None:
    assert merge({"env": {"A": "1"}}, {"env": None}) == {"env": None}
    assert merge({"env": {"A": "1"}}, {"env": {"A": None}}) == {"env": {"A": None}}
    assert merge({"x": {"a": 1}}, {"x": 5}) == {"x": 5}
    assert merge({"x": 5}, {"x": {"a": 1}}) == {"x": {"a": 1}}


_leaf = st.one_of(st.text(max_size=3), st.lists(st.text(max_size=2), max_size=2))
_flat = st.dictionaries(st.text(max_size=3), _leaf, max_size=4)
# Leaf keys and mapping keys come from disjoint alphabets, so a given path holds
# the same kind of value in every dict (mixing kinds is not associative by design).
_nested: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.dictionaries(st.sampled_from("abc"), st.text(max_size=2), max_size=3),
    lambda children: st.builds(
        lambda leaves, subs: {**leaves, **subs},
        st.dictionaries(st.sampled_from("abc"), st.text(max_size=2), max_size=3),
        st.dictionaries(st.sampled_from("XYZ"), children, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(_flat)
def test_merge_identities(a: dict[str, Any]) -> None:
    assert merge(a, {}) == a
    assert merge({}, a) == a
    assert merge(a, a) == a


@settings(max_examples=60, deadline=None)
@given(_nested, _nested, _nested)
def test_merge_is_associative_and_pure(
    a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]
) -> None:
    before = copy.deepcopy((a, b, c))
    assert merge(merge(a, b), c) == merge(a, merge(b, c))
    assert (a, b, c) == before
    assert merge(a, {}) == a and merge({}, b) == b


@settings(max_examples=60, deadline=None)
@given(_nested, _nested)
def test_merge_override_wins_on_its_leaves(a: dict[str, Any], b: dict[str, Any]) -> None:
    out = merge(a, b)
    assert set(out) == set(a) | set(b)
    for key, value in b.items():
        if not isinstance(value, dict):
            assert out[key] == value


# --- templates -------------------------------------------------------------


def test_template_round_trip_and_apply() -> None:
    data = {
        "name": "gpu-batch",
        "description": "one GPU, batch",
        "owner": None,
        "spec": {
            "type": "batch",
            "image": "pytorch:2",
            "resources": {"cpu": 4, "cuda.device": 1},
            "env": {"A": "1", "B": "2"},
            "mounts": ["data"],
        },
    }
    template = Template.from_json(data)
    assert template.to_json() == data
    assert Template.from_json(template.to_json()) == template
    assert template.spec is not data["spec"]

    spec = apply_template(
        template,
        {"startup_command": "python x.py", "env": {"B": "3"}, "resources": {"mem": "8g"}},
    )
    assert spec.type is SessionType.BATCH
    assert spec.image == "pytorch:2"
    assert spec.env == {"A": "1", "B": "3"}
    assert spec.resources == ResourceSlot({"cpu": 4, "cuda.device": 1, "mem": "8g"})
    assert spec.mounts == ["data"]
    assert template.spec["env"] == {"A": "1", "B": "2"}  # template untouched


def test_template_partial_spec_needs_no_cross_field_rules_but_apply_does() -> None:
    template = Template.from_json({"name": "b", "spec": {"type": "batch", "batch_timeout": 9}})
    with pytest.raises(SpecError) as info:
        apply_template(template, {})
    assert info.value.field == "startup_command"
    assert apply_template(template, {"startup_command": "run"}).batch_timeout == 9.0
    # A request can clear what a template set.
    cleared = apply_template(template, {"type": "interactive", "batch_timeout": None})
    assert cleared.type is SessionType.INTERACTIVE and cleared.batch_timeout is None


def test_template_request_null_clears_template_values() -> None:
    template = Template.from_json(
        {"name": "t", "spec": {"env": {"A": "1", "B": "2"}, "priority": 70}}
    )
    spec = apply_template(template, {"env": {"B": None}, "priority": None})
    assert spec.env == {"A": "1"}
    assert spec.priority == 10


def test_apply_without_template() -> None:
    assert apply_template(None, {"image": "x"}) == SessionSpec(image="x")


TEMPLATE_BAD: list[tuple[Any, str, str]] = [
    ({"spec": {}}, "name", "required"),
    ({"name": "bad name"}, "name", "letters, digits"),
    ({"name": "t", "spc": {}}, "spc", "did you mean 'spec'"),
    ({"name": "t", "spec": []}, "spec", "JSON object"),
    ({"name": "t", "spec": {"cluster_size": 0}}, "spec.cluster_size", "1 to 64"),
    ({"name": "t", "spec": {"resources": {"mem": "x"}}}, "spec.resources.mem", "parse"),
    ({"name": "t", "spec": {"env": {"A": 1}}}, "spec.env.A", "string"),
    ({"name": "t", "spec": {"imgae": "x"}}, "spec.imgae", "did you mean 'image'"),
    ({"name": "t", "spec": {"service_ports": ["x"]}}, "spec.service_ports[0]", "name:proto"),
    ({"name": "t", "description": 3}, "description", "string"),
    ({"name": "t", "owner": ""}, "owner", "user name"),
    ("t", "", "JSON object"),
]


@pytest.mark.parametrize(("data", "field", "text"), TEMPLATE_BAD)
def test_template_errors_name_the_field(data: Any, field: str, text: str) -> None:
    with pytest.raises(SpecError) as info:
        Template.from_json(data)
    assert info.value.field == field
    assert text in str(info.value)


def test_validate_partial_returns_a_copy() -> None:
    data = {"env": {"A": "1"}}
    out = validate_partial(data)
    out["env"]["A"] = "2"
    assert data == {"env": {"A": "1"}}
