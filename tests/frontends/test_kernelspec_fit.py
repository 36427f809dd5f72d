"""``bai-jupyter kernelspec install`` warns when the request cannot run on this machine now."""

from __future__ import annotations

import json
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


# --- the server's config is the command's config ------------------------------------------------

#: One local agent of a known size: what a server configured so would schedule on.
AGENT = {"id": "tiny", "backend": "local", "slots": {"cpu": "2", "mem": "4g"}}
TINY = {"BaiSessionManager": {"agents": [AGENT]}}


def _provisioner_config(tmp_path: Path, name: str) -> dict[str, object]:
    spec = json.loads((tmp_path / "data" / "kernels" / name / "kernel.json").read_text())
    config: dict[str, object] = spec["metadata"]["kernel_provisioner"]["config"]
    return config


def test_the_jupyter_server_config_gives_the_agents(tmp_path: Path) -> None:
    """``jupyter_server_config.json`` in the Jupyter config dir, as the server reads it."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(TINY))
    proc = _install(tmp_path, "py")
    assert proc.returncode == 0, proc.stderr
    # Half of the configured agent, not of this machine's engine or host.
    assert _provisioner_config(tmp_path, "py")["resources"] == {"cpu": "1", "mem": "2g"}
    assert "(Python 3 · bai · 1 CPU · 2 GiB)" in proc.stdout
    proc = _install(tmp_path, "big", "--cpu", "3", "--mem", "1g")
    assert proc.returncode == 0, proc.stderr
    assert "the biggest agent (tiny) has cpu=2 mem=4g" in proc.stderr, proc.stderr


def test_the_groups_minimum_in_the_config_is_kept(tmp_path: Path) -> None:
    """Half of the agent is below the default group's min_resources: the minimum is asked."""
    floor = {"min_resources": "cpu=1.5", "default_resources": "cpu=1.5"}
    groups = {"default": {"options": floor}}
    config = {"BaiSessionManager": {"agents": [AGENT], "resource_groups": groups}}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
    proc = _install(tmp_path, "py")
    assert proc.returncode == 0, proc.stderr
    assert _provisioner_config(tmp_path, "py")["resources"] == {"cpu": "1.5", "mem": "2g"}


def _bad_server_config(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"BaiSessionManager": {"agents": [{"id": "x", "backend": "nope"}]}})
    )


def test_config_names_a_config_file_to_read_instead(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere" / "site_config.py"
    other.parent.mkdir()
    other.write_text(f"c.BaiSessionManager.agents = [{AGENT!r}]\n")
    _bad_server_config(tmp_path)  # not read: --config replaces it, as for `jupyter server`
    proc = _install(tmp_path, "py", "--cpu", "0.5", "--config", str(other))
    assert proc.returncode == 0, proc.stderr
    assert _provisioner_config(tmp_path, "py")["resources"] == {"cpu": "0.5", "mem": "2g"}


def test_agents_the_config_cannot_make_are_an_install_error(tmp_path: Path) -> None:
    _bad_server_config(tmp_path)
    proc = _install(tmp_path, "py")
    assert proc.returncode == 2
    assert proc.stderr.startswith("bai-jupyter kernelspec install: error: resources: "), proc.stderr
    assert "unknown agent backend 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "data" / "kernels" / "py").exists()
