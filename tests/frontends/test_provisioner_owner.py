"""Multi-user server: a kernel session started through Jupyter belongs to the requesting user."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.server import MULTI_USER, Server, start_server

from bai_jupyter.kernelspecs import kernelspec_json

pytestmark = [pytest.mark.timeout(300)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    spec_dir = tmp_path / "data" / "kernels" / "bai-test"
    spec_dir.mkdir(parents=True)
    spec = kernelspec_json("bai test", {"resources": {"cpu": "0.5", "mem": "256m"}})
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    srv = start_server(tmp_path, MULTI_USER + 'c.BaiSessionManager.backend = "local"\n')
    yield srv
    srv.stop()


async def _sessions(server: Server, token: str) -> list[dict[str, object]]:
    reply = await server.fetch("GET", "bai/api/v1/sessions", token=token)
    assert reply.code == 200, reply.body
    sessions: list[dict[str, object]] = json.loads(reply.body)["sessions"]
    return sessions


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("api/kernels", {"name": "bai-test"}),
        (
            "api/sessions",
            {"path": "a.ipynb", "type": "notebook", "kernel": {"name": "bai-test"}},
        ),
    ],
)
async def test_the_requesting_user_owns_the_kernel_session(
    server: Server, path: str, body: dict[str, object]
) -> None:
    reply = await server.fetch("POST", path, body, token="alice-token")
    assert reply.code == 201, (reply.body, server.tail())
    started = json.loads(reply.body)
    kernel_id = started["id"] if path == "api/kernels" else started["kernel"]["id"]
    try:
        (session,) = await _sessions(server, "alice-token")
        assert session["owner"] == "alice"
        assert session["meta"]["jupyter_kernel_id"] == kernel_id  # type: ignore[index]
        assert await _sessions(server, "bob-token") == []
        reply = await server.fetch("GET", f"bai/api/v1/sessions/{session['id']}", token="bob-token")
        assert reply.code == 404
    finally:
        await server.fetch("DELETE", f"api/kernels/{kernel_id}", token="alice-token")
