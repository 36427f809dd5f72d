"""A bai kernel that dies at start: the server log and the launch error say why.

Jupyter itself reports only "the kernel died"; the reason is in the session's
status and main1's log, which the provisioner now reports.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_server_harness import start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MARK = "no-gpu-driver-here: this kernel cannot start"


async def test_a_kernel_that_dies_at_start_is_explained_in_the_server_log(tmp_path: Path) -> None:
    from bai_jupyter.kernelspecs import kernelspec_json

    # An ipykernel_launcher that fails the way a broken image's would; the runtime is fine.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "ipykernel_launcher.py").write_text(f"raise SystemExit({MARK!r})\n")
    root = tmp_path / "server"
    spec_dir = root / "data" / "kernels" / "bai-broken"
    spec_dir.mkdir(parents=True)
    config = {"env": {"PYTHONPATH": str(broken)}, "launch_timeout": 120.0}
    (spec_dir / "kernel.json").write_text(json.dumps(kernelspec_json("bai broken", config)))
    server = start_server(root, 'c.BaiSessionManager.backend = "local"\n')
    try:
        reply = await server.fetch("POST", "api/kernels", {"name": "bai-broken"})
        assert reply.code < 500 or MARK in reply.body.decode(), (reply.code, reply.body)
        for _ in range(120):  # until the provisioner has seen the session end
            if "bai kernel" in server.tail() and MARK in server.tail():
                break
            await asyncio.sleep(1)
        log = server.log.read_text(errors="replace")
        lines = [line for line in log.splitlines() if "bai kernel" in line and "ended" in line]
        assert lines, log[-4000:]
        assert MARK in log[log.index(lines[0]) :], log[-4000:]
    finally:
        server.stop()
