"""JupyterLab's launcher in a real browser shows a bai kernelspec's card: its own logo
and a name that says the size and the resources a click asks for.

Headless Debian ``chromium`` driven by PyPI ``playwright`` (never ``playwright
install``: the browser is the system's, which ``scripts/_env.sh`` installs).
Skipped where either is missing, except with ``CI=true``, where that fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import skip_or_fail
from test_server_harness import _OTHERS_OFF, TOKEN, Server, start_server

from bai_jupyter.cli import main

CHROMIUM = os.environ.get("BAI_TEST_CHROMIUM", "/usr/bin/chromium")
#: Where the screenshot goes, for a person to look at (the DOM is what is asserted).
SCREENSHOT = Path(os.environ.get("BAI_TEST_SCREENSHOT", "/tmp/kspec-launcher.png"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless system Chromium with a fresh profile."""
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("no playwright (pip install -e '.[dev]')")
    if not shutil.which(CHROMIUM):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A Jupyter server with JupyterLab and bai_jupyter, whose data dir holds one bai
    kernelspec installed by the CLI as a user would."""
    root = tmp_path / "lab"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(root / "data"))
    argv = ["kernelspec", "install", "bai-c3", "--cluster-size", "3", "--cpu", "1"]
    assert main([*argv, "--mem", "2g"]) == 0
    server = start_server(
        root,
        config=f"c.ServerApp.jpserver_extensions = "
        f"{{**{_OTHERS_OFF!r}, 'jupyterlab': True, 'bai_jupyter': True}}\n",
    )
    try:
        yield server
    finally:
        server.stop()


def test_the_launcher_shows_the_bai_card_with_its_logo_and_resources(
    lab: Server, browser: Any
) -> None:
    page = browser.new_page()
    page.goto(f"{lab.url}lab?token={TOKEN}")
    name = "Python 3 · bai cluster ×3 · 1 CPU · 2 GiB"
    card = page.locator(f'.jp-LauncherCard[title="{name}"]').first
    card.wait_for(state="visible", timeout=120_000)
    icon = card.locator(".jp-LauncherCard-icon img")
    icon.wait_for(state="visible")
    src = icon.get_attribute("src") or ""
    assert "/kernelspecs/bai-c3/logo-" in src
    # The image really loaded (a broken icon has no natural size).
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=icon.element_handle())
    assert card.locator(".jp-LauncherCard-label").inner_text().strip() == name
    page.screenshot(path=str(SCREENSHOT))
