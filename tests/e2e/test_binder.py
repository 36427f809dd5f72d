"""Binder's steps, replayed on this machine: mybinder.org itself cannot be reached here.
The demo notebook also runs under ``jupyter execute``, with no server at all.

A fresh virtual environment gets only what ``binder/`` says (``requirements.txt``, then
``postBuild`` from the repository's root, as repo2docker runs them), JupyterLab starts
from it with no Docker engine reachable, and the demo notebook runs to its end in a
real browser, on the local backend, with no error. The screenshot (with the sidebar)
goes to ``BAI_TEST_SHOTS`` (default ``/tmp/bai-labext-shots``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CHROMIUM, CHROMIUM_ARGS, REPO, copy_checkout, skip_or_fail
from harness.server import free_port

SHOTS = Path(os.environ.get("BAI_TEST_SHOTS", "/tmp/bai-labext-shots"))
TOKEN = "binder-token"
WAIT = 180_000

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    """Run one build step; on failure, fail with the end of its output."""
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        code = subprocess.call(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        pytest.fail(f"{' '.join(argv)} exited {code}:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The repository as Binder checks it out, built as Binder builds it, served by
    ``jupyter lab`` with no Docker engine; its URL and the repository copy."""
    root = tmp_path_factory.mktemp("binder")
    repo = copy_checkout(root / "repo")
    venv = root / "venv"
    log = root / "build.log"
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        # Binder has no Docker engine: nothing answers here either.
        "DOCKER_HOST": f"unix://{root / 'no-docker.sock'}",
    }
    env.pop("PYTHONPATH", None)
    run([sys.executable, "-m", "venv", str(venv)], root, env, log)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    run([*pip, "-r", "binder/requirements.txt"], repo, env, log)
    run(["bash", "binder/postBuild"], repo, env, log)
    port = free_port()
    server_log = (root / "lab.log").open("wb")
    lab = subprocess.Popen(
        [
            str(venv / "bin" / "jupyter"),
            "lab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={repo}",
            "--LabApp.expose_app_in_browser=True",
        ],
        cwd=repo,
        env=env,
        stdout=server_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        agents = wait_for_agents(url, lab, root / "lab.log")
        assert [a["backend"] for a in agents] == ["local"]
        yield url, repo
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=60)
        except subprocess.TimeoutExpired:
            lab.kill()
        server_log.close()


def wait_for_agents(url: str, lab: subprocess.Popen[bytes], log: Path) -> Any:
    request = urllib.request.Request(
        f"{url}bai/api/v1/agents", headers={"Authorization": f"token {TOKEN}"}
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if lab.poll() is not None:
            pytest.fail(f"jupyter lab exited:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                agents = json.load(reply)["agents"]
                if agents:
                    return agents
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer:\n{log.read_text()[-4000:]}")


def test_the_binder_demo_runs_to_its_end_on_the_local_backend(
    binder: tuple[str, Path],
) -> None:
    url, repo = binder
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("no playwright (pip install -e '.[dev]')")
    if not shutil.which(CHROMIUM):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}lab/tree/binder/demo.ipynb?token={TOKEN}")
            page.locator('.lm-TabBar-tab[data-id="bai-jupyter-sessions"]').click(timeout=WAIT)
            page.get_by_text("bai · 0.5 CPU · 512 MiB | Idle").wait_for(timeout=WAIT)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            last = page.locator(".jp-CodeCell").last.locator(".jp-InputPrompt")
            last.filter(has_text="[7]").wait_for(timeout=WAIT)
            page.get_by_text("bai · 0.5 CPU · 512 MiB | Idle").wait_for(timeout=WAIT)
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            page.screenshot(path=str(SHOTS / "binder-demo.png"))
        finally:
            browser.close()
    check_demo_outputs(json.loads((repo / "binder" / "demo.ipynb").read_text()))


def test_the_binder_demo_runs_to_its_end_under_jupyter_execute(tmp_path: Path) -> None:
    """With no Jupyter server (``jupyter execute``; papermill and nbclient alike) the
    kernel's session is on a manager embedded in that process, which serves ``%bai`` too;
    on the local backend, as on Binder."""
    notebook = tmp_path / "demo.ipynb"
    shutil.copy(REPO / "binder" / "demo.ipynb", notebook)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))},
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}",
    }
    install = [sys.executable, "-m", "bai_jupyter.cli", "kernelspec", "install", "bai-python"]
    subprocess.run([*install, "--cpu", "0.5", "--mem", "512m"], env=env, check=True)
    execute = Path(sys.executable).parent / "jupyter-execute"
    done = subprocess.run(
        [str(execute), "--inplace", str(notebook)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    check_demo_outputs(json.loads(notebook.read_text()))


def check_demo_outputs(notebook: dict[str, Any]) -> None:
    """The demo ran every step: no error, no magic's one-line error, each step's output."""
    outputs = [out for cell in notebook["cells"] for out in cell.get("outputs", [])]
    errors = [out for out in outputs if out["output_type"] == "error"]
    assert not errors, errors
    text = "".join(
        "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
        for out in outputs
    )
    assert "\nbai: " not in "\n" + text, text  # a magic's one-line error
    assert "hello from a batch session" in text and "42" in text
    assert "waiting for" in text  # why `after` waits
    assert "[main1] I am main1 of main1" in text
