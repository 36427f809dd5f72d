"""A bai kernel that dies at start: the launch error Jupyter shows says why.

Jupyter itself reports only "the kernel died"; the reason is in the session's status
and main1's log. The runtime says ready only once the ipykernel listens, so a kernel
that dies at start fails its session's start, and the launch's error (the dialog
JupyterLab shows, the reply's ``message``) carries the status, the reason and main1's
last log lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.server import start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MARK = "no-gpu-driver-here: this kernel cannot start"


async def test_a_kernel_that_dies_at_start_is_explained_in_the_launch_error(tmp_path: Path) -> None:
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
        kernel = await server.fetch("POST", "api/kernels", {"name": "bai-broken"})
        session = await server.fetch(
            "POST",
            "api/sessions",
            {"path": "a.ipynb", "type": "notebook", "kernel": {"name": "bai-broken"}},
        )
        # What JupyterLab's "Error Starting Kernel" dialog shows: the reply's message.
        for reply in (kernel, session):
            assert reply.code == 503, (reply.code, reply.body, server.tail())
            message = json.loads(reply.body)["message"]
            assert "ended before its kernel started: CANCELLED (failed-to-start)" in message
            assert MARK in message, message  # main1's last log lines
            assert "kernel exited with code 1 before it listened" in message, message
        log = server.log.read_text(errors="replace")
        assert MARK in log and "Traceback" not in log, log[-4000:]
    finally:
        server.stop()
