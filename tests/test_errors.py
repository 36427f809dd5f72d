"""Errors carry the request field they are about, from the parsers to the client's exception."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bai_jupyter import errors
from bai_jupyter.event_stream import api_error
from bai_jupyter.request import SpecError, apply_template, parse_spec
from bai_jupyter.resources import ResourceError, ResourceSlot
from bai_jupyter.scheduler.config import SchedulerConfig
from bai_jupyter.server.base import error_body


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"resources": {"cpu": "-1"}}, "resources.cpu"),
        ({"mounts": ["data", "more", 3]}, "mounts[2]"),
        (
            {"roles": [{"name": "main", "image": "a:1"}, {"name": "w", "image": 3}]},
            "roles[1].image",
        ),
        ({"name": "two words"}, "name"),
        ({"env": {"A": 1}}, "env.A"),
        ({"imgae": "python:3.12"}, "imgae"),
    ],
)
def test_the_parsers_name_the_field(request_: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(request_)
    assert refused.value.field == field
    with pytest.raises(SpecError) as templated:  # the manager's way in: under a template
        apply_template(None, request_)
    assert templated.value.field == field
    error = errors.InvalidRequest(str(refused.value), field=refused.value.field)
    assert (error.field, error.message) == (field, str(refused.value))
    assert json.loads(error_body(error.code, error.message, error.field))["field"] == field


def test_a_whole_request_problem_has_no_field() -> None:
    assert errors.InvalidRequest("the body is not valid JSON").field is None
    assert errors.InvalidRequest("x", field="").field is None  # SpecError's "" is no field
    assert json.loads(error_body("invalid-request", "x")) == {
        "error": "invalid-request",
        "message": "x",
    }


def test_a_group_minimum_names_the_slot() -> None:
    with pytest.raises(ResourceError) as refused:  # the default minimum is above 0.005
        SchedulerConfig().kernel_resources(ResourceSlot({"cpu": "0.005"}))
    assert refused.value.field == "resources.cpu"
    assert ResourceError("cpu: bad").field is None


def test_the_client_keeps_the_field() -> None:
    body = {"error": "invalid-request", "message": "tail: must be …", "field": "tail"}
    error = api_error(400, "Bad Request", json.dumps(body).encode())
    assert isinstance(error, errors.InvalidRequest) and error.field == "tail"
    conflict = {"error": "conflict", "message": "bob already has …", "field": "name"}
    error = api_error(409, "Conflict", json.dumps(conflict).encode())
    assert isinstance(error, errors.Conflict) and error.field == "name"
    plain = api_error(400, "Bad Request", b'{"error": "invalid-request", "message": "m"}')
    assert isinstance(plain, errors.InvalidRequest) and plain.field is None


def test_an_operators_configuration_error_is_its_own_500() -> None:
    assert not issubclass(errors.ConfigError, errors.InvalidRequest)
    assert (errors.ConfigError.code, errors.ConfigError.status) == ("configuration", 500)
    body = {"error": "configuration", "message": "policies.default.max_sessions: …"}
    error = api_error(500, "Internal Server Error", json.dumps(body).encode())
    assert type(error) is errors.ConfigError and error.message.startswith("policies.")
    # A 500 without our body stays a plain error, not a configuration error.
    bare = api_error(500, "Internal Server Error", b"")
    assert type(bare) is errors.BaiError and bare.status == 500
