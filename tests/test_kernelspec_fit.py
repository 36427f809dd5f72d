"""``bai-jupyter kernelspec install`` warns when the request cannot run on this machine now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bai_jupyter.kernelspecs import fit_warning
from bai_jupyter.resources import ResourceSlot

pytestmark = pytest.mark.timeout(120)


def _install(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script, as a person runs it, with its own Jupyter dirs."""
    env = {
        **os.environ,
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }
    script = str(Path(sys.executable).with_name("bai-jupyter"))
    return subprocess.run(
        [script, "kernelspec", "install", *args], env=env, capture_output=True, text=True
    )


def test_a_request_bigger_than_this_machine_warns_and_says_what_fits(tmp_path: Path) -> None:
    proc = _install(tmp_path, "huge", "--cpu", "4096")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "data" / "kernels" / "huge" / "kernel.json").exists()
    assert "warning: this request cannot run on the agents this machine has now" in proc.stderr
    assert "cpu=4096" in proc.stderr and "What fits: at most cpu=" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_request_that_fits_installs_quietly(tmp_path: Path) -> None:
    proc = _install(tmp_path, "small", "--cpu", "0.25", "--mem", "64m")
    assert proc.returncode == 0, proc.stderr
    assert "warning:" not in proc.stderr, proc.stderr


def test_fit_warning_per_kernel_in_multi_node_and_for_the_session_in_single_node() -> None:
    agents = {"a": ResourceSlot({"cpu": 4, "mem": "8g"}), "b": ResourceSlot({"cpu": 2})}
    three = {"resources": {"cpu": "2"}, "cluster_size": 3}
    assert fit_warning({**three, "cluster_mode": "multi-node"}, agents) is None
    single = fit_warning(three, agents)
    assert single is not None and "cpu=6" in single and "(a)" in single, single
    assert fit_warning({**three, "template": "big"}, agents) is None  # the server judges
