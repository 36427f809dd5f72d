"""JupyterLab's launcher in a real browser shows a bai kernelspec's card: its own logo
and a name that says the size and the resources a click asks for.

Headless Debian ``chromium`` driven by PyPI ``playwright`` (never ``playwright
install``: the browser is the system's, which ``scripts/_env.sh`` installs).
Skipped where either is missing, except with ``CI=true``, where that fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.lab import start_lab
from harness.server import TOKEN, Server

#: Where the screenshot goes, for a person to look at (the DOM is what is asserted).
SCREENSHOT = Path(os.environ.get("BAI_TEST_SCREENSHOT", "/tmp/kspec-launcher.png"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    argv = ["bai-c3", "--cluster-size", "3", "--cpu", "1", "--mem", "2g"]
    server = start_lab(tmp_path / "lab", monkeypatch, *argv)
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
