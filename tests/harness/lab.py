"""A Jupyter server with JupyterLab on, for the browser tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from bai_jupyter.cli import main
from harness.server import _OTHERS_OFF, Server, start_server


def start_lab(
    root: Path, monkeypatch: pytest.MonkeyPatch, *kernelspec: str, extra_config: str = ""
) -> Server:
    """A Jupyter server with JupyterLab and bai_jupyter, whose data dir holds one bai
    kernelspec installed by the CLI as a user would (``kernelspec``: its arguments)."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(root / "data"))
    assert main(["kernelspec", "install", *kernelspec]) == 0
    return start_server(
        root,
        config=f"c.ServerApp.jpserver_extensions = "
        f"{{**{_OTHERS_OFF!r}, 'jupyterlab': True, 'bai_jupyter': True}}\n" + extra_config,
    )
