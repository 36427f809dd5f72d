"""What a new user meets first: a launch that cannot fit, then stopping the server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_server_harness import start_server

from bai_jupyter.model import Status

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


async def test_kernel_keys_only_to_the_owner_who_asks(tmp_path: Path) -> None:
    """Lists and plain reads hide kernels' HMAC keys; ``?connection=true`` gives the owner's."""
    from test_server_harness import MULTI_USER

    server = start_server(tmp_path / "server", MULTI_USER)
    try:
        alice = server.client("alice-token")
        made = await alice.create({"type": "interactive"})
        await alice.wait_for(made.id, [Status.RUNNING], timeout=120)

        def keys(view: dict[str, Any]) -> list[Any]:
            return [k["info"].get("connection", {}).get("key") for k in view["kernels"]]

        path = f"bai/api/v1/sessions/{made.id}"
        listing = await server.fetch("GET", "bai/api/v1/sessions", token="alice-token")
        (listed,) = json.loads(listing.body)["sessions"]
        assert keys(listed) == [None]
        plain = json.loads((await server.fetch("GET", path, token="alice-token")).body)
        assert keys(plain) == [None]
        assert plain["kernels"][0]["info"]["connection"]["shell_port"]
        asked = await server.fetch("GET", path + "?connection=true", token="alice-token")
        (key,) = keys(json.loads(asked.body))
        assert isinstance(key, str) and key
        admin = await server.fetch("GET", path + "?connection=true", token="admin-token")
        assert admin.code == 403, admin.body
        assert json.loads(admin.body)["error"] == "forbidden"
        everyone = await server.fetch("GET", "bai/api/v1/sessions?all=true", token="admin-token")
        assert all(keys(v) == [None] for v in json.loads(everyone.body)["sessions"])
    finally:
        server.stop()
