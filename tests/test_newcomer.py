"""What a new user meets first: a launch that cannot fit, then stopping the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_server_harness import start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_a_launch_that_cannot_fit_is_a_4xx_and_the_server_still_stops(
    tmp_path: Path,
) -> None:
    """A kernelspec no agent can ever run: a clean 4xx, no traceback, and SIGTERM still exits."""
    from bai_jupyter.kernelspecs import kernelspec_json

    root = tmp_path / "server"
    spec_dir = root / "data" / "kernels" / "bai-huge"
    spec_dir.mkdir(parents=True)
    spec = kernelspec_json("bai huge", {"resources": {"cpu": "512"}, "launch_timeout": 5.0})
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    server = start_server(root)
    try:
        reply = await server.fetch("POST", "api/kernels", {"name": "bai-huge"})
        assert 400 <= reply.code < 500, (reply.code, reply.body, server.tail())
        session_reply = await server.fetch(
            "POST",
            "api/sessions",
            {"path": "a.ipynb", "type": "notebook", "kernel": {"name": "bai-huge"}},
        )
        assert 400 <= session_reply.code < 500, (session_reply.code, session_reply.body)
    finally:
        server.stop()
    log = server.log.read_text(errors="replace")
    assert server.proc.returncode == 0, log[-4000:]
    assert "Traceback" not in log, log[-4000:]
