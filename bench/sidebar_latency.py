"""Status change on the server → shown in the JupyterLab sidebar: how long it takes.

Run: ``.venv/bin/python bench/sidebar_latency.py [--changes N] [--backend local|docker]``
(needs the built JupyterLab extension, which ``./scripts/test`` or ``./scripts/lab``
build, and Debian's ``chromium``; ``--backend docker`` also a Docker engine and the
kernel image).

One ``jupyter lab`` (its store in a temporary directory) and one headless Chromium
with the bai sidebar open. In the page, a ``MutationObserver`` notes the wall-clock
time at which each session's card first shows each status (``data-status`` of its
badge). Sessions are created and destroyed through the REST API, one after the other,
until ``--changes`` status changes have been shown; each change's server time is the
``at`` of that status in the session's ``status_history`` (written when the manager
made the change). Same machine, same clock: the difference is the whole path —
store, event stream, the extension's fold, and the redraw. Prints each change, then
the median, p90 and max over the first ``--changes`` and the goal (median < 250 ms).
A status the sidebar never showed (two changes within one redraw) is not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

TOKEN = "bench-token"
CHROMIUM = "/usr/bin/chromium"
GOAL_MS = 250.0
OBSERVER = """
() => {
  window.__baiSeen = [];
  const seen = new Set();
  const note = () => {
    const t = (performance.timeOrigin + performance.now()) / 1000;
    for (const badge of document.querySelectorAll('.bai-Session .bai-Status')) {
      const id = badge.closest('.bai-Session').dataset.sessionId;
      const key = id + ' ' + badge.dataset.status;
      if (!seen.has(key)) {
        seen.add(key);
        window.__baiSeen.push({ id, status: badge.dataset.status, t });
      }
    }
  };
  new MutationObserver(note).observe(document.body, { subtree: true, childList: true });
  note();
}
"""


def call(url: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}bai/api/v1/{path}",
        data=data,
        method=method,
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read() or b"null")


def start_lab(root: Path, backend: str) -> tuple[subprocess.Popen[bytes], str]:
    (root / "config").mkdir(parents=True)
    (root / "config" / "jupyter_server_config.py").write_text(
        f"c.BaiSessionManager.store_url = {f'sqlite:///{root}/store.sqlite'!r}\n"
        f"c.BaiSessionManager.backend = {backend!r}\n"
        f"c.BaiSessionManager.local_kernels_dir = {str(root / 'kernels')!r}\n"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
    }
    with (root / "lab.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={root}",
            ],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if call(url, "GET", "agents")["agents"]:
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"jupyter lab did not start:\n{(root / 'lab.log').read_text()[-3000:]}")


def wait(url: str, sid: str, statuses: set[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if call(url, "GET", f"sessions/{sid}")["status"] in statuses:
            return
        time.sleep(0.2)
    raise SystemExit(f"session {sid} did not reach {statuses}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=20, help="status changes (default 20)")
    parser.add_argument("--backend", choices=["local", "docker"], default="local")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="bai-sidebar-bench-"))
    proc, url = start_lab(root, args.backend)
    made: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}lab?token={TOKEN}")
            page.locator('.lm-TabBar-tab[data-id="bai-jupyter-sessions"]').click(timeout=120_000)
            page.locator(".bai-Sidebar-title").wait_for()
            page.evaluate(OBSERVER)
            shown: list[dict[str, Any]] = []
            while len(shown) < args.changes:
                request = {"resources": {"cpu": "0.1", "mem": "128m"}}
                sid = call(url, "POST", "sessions", request)["id"]
                made.append(sid)
                wait(url, sid, {"RUNNING"})
                time.sleep(0.3)
                call(url, "DELETE", f"sessions/{sid}")
                wait(url, sid, {"TERMINATED", "ERROR", "CANCELLED"})
                time.sleep(0.5)  # the last redraw
                seen = page.evaluate("() => window.__baiSeen")
                history = call(url, "GET", f"sessions/{sid}")["status_history"]
                at = {entry["status"]: entry["at"] for entry in history}
                for record in seen:
                    if record["id"] == sid and record["status"] in at:
                        ms = (record["t"] - at[record["status"]]) * 1000
                        shown.append({"status": record["status"], "ms": ms})
            browser.close()
    finally:
        for sid in made:
            with contextlib.suppress(OSError):
                call(url, "DELETE", f"sessions/{sid}")
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    figures = [change["ms"] for change in shown[: args.changes]]
    for n, change in enumerate(shown[: args.changes], 1):
        print(f"{n:3} {change['status']:12} {change['ms']:7.1f} ms")
    median = statistics.median(figures)
    p90 = statistics.quantiles(figures, n=10)[-1] if len(figures) > 1 else figures[0]
    print(f"\nstatus change on the server → shown in the sidebar ({args.backend} backend):")
    print(
        f"median {median:.1f} ms, p90 {p90:.1f} ms, max {max(figures):.1f} ms "
        f"over {len(figures)} changes"
    )
    print(f"goal: median < {GOAL_MS:.0f} ms: {'PASS' if median < GOAL_MS else 'FAIL'}")


if __name__ == "__main__":
    main()
