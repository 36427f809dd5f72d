"""``pip install bai-jupyter`` alone (no extras) gives a working local kernel.

A fresh virtual environment (no system site-packages: a missing dependency must show)
gets only the repository's base install; a bai kernelspec on the local backend (no
Docker engine answers) then runs code to a result through ``jupyter_client``, as
``jupyter console``, ``jupyter execute`` and papermill start it. The JupyterLab extension
is not built (``SKIP_JUPYTER_BUILDER``): only the Python dependencies are under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_checkout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RUN = """
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="bai-base", startup_timeout=120)
out = []
try:
    kc.execute_interactive(
        "import sys, ipykernel; print('answer', 6 * 7, sys.prefix)",
        timeout=60,
        output_hook=lambda msg: out.append(msg["content"].get("text", "")),
    )
finally:
    kc.stop_channels()
    km.shutdown_kernel()
print("".join(out))
"""


def _call(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def test_the_base_install_alone_runs_a_local_bai_kernel(tmp_path: Path) -> None:
    repo = copy_checkout(tmp_path / "repo", leave_out=("labextension/",))
    venv = tmp_path / "venv"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))},
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "HOME": str(tmp_path / "home"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}",  # the local backend
        "SKIP_JUPYTER_BUILDER": "1",
    }
    env.pop("PYTHONPATH", None)
    (tmp_path / "home").mkdir()
    # No pip inside the venv: this test's pip installs into it (--python), which saves
    # ensurepip's time and keeps the venv to what the package itself depends on.
    _call([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env, 120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    _call([*pip, "install", "-q", str(repo)], tmp_path, env, 420)
    python = str(venv / "bin" / "python")
    bai = str(venv / "bin" / "bai-jupyter")
    _call([bai, "kernelspec", "install", "bai-base", "--sys-prefix", "--cpu", "0.5"], repo, env, 60)
    out = _call([python, "-c", RUN], tmp_path, env, 180)
    assert f"answer 42 {venv}" in out, out
