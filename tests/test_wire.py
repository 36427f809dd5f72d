"""The JSON form of a session reads back equal."""

from __future__ import annotations

import json

from bai_jupyter.model import Session, Status
from bai_jupyter.request import parse_spec
from bai_jupyter.wire import session_from_json, session_to_json


def test_session_round_trips_through_json() -> None:
    spec = parse_spec(
        {
            "name": "s",
            "cluster_size": 3,
            "resources": {"cpu": "0.5", "mem": "1g"},
            "env": {"A": "1"},
        }
    )
    session = Session.create(spec, "alice", 100.0)
    session.set_status(Status.SCHEDULED, 101.0, "placed")
    session.kernels[0].info = {"host": "10.0.0.2", "connection": {"shell_port": 2300}}
    session.meta = {"jupyter_kernel_id": "k1"}
    data = json.loads(json.dumps(session_to_json(session)))
    assert session_from_json(data) == session
    assert data["kernels"][1]["hostname"] == "sub1"
    assert data["status_history"][-1] == {"status": "SCHEDULED", "at": 101.0, "info": "placed"}
