"""``%bai status`` in a bai kernel renders its widgets in JupyterLab, in a real browser.

The kernel image has no ipywidgets: the agent mounts the host's ipywidgets and comm
read-only beside the package, so every bai kernel can show them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.lab import start_lab
from harness.notebooks import put_notebook
from harness.server import TOKEN, Server

#: Where the screenshot goes, for a person to look at (the DOM is what is asserted).
SCREENSHOT = Path(os.environ.get("BAI_TEST_WIDGETS_SCREENSHOT", "/tmp/bai-widgets.png"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel_image: str) -> Iterator[Server]:
    server = start_lab(tmp_path / "lab", monkeypatch, "bai-w", "--cpu", "0.5", "--mem", "512m")
    try:
        yield server
    finally:
        server.stop()


def test_bai_status_renders_the_session_widget_in_a_bai_kernel(lab: Server, browser: Any) -> None:
    put_notebook(lab, "widgets.ipynb", "%load_ext bai_jupyter\n%bai status")
    page = browser.new_page()
    page.goto(f"{lab.url}lab/tree/widgets.ipynb?token={TOKEN}")
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.wait_for(state="visible", timeout=120_000)
    # The kernel is a container started through the scheduler: wait until it is idle.
    page.get_by_text("· 0.5 CPU · 512 MiB | Idle").wait_for(timeout=120_000)
    dialog = page.locator(".jp-Dialog button.jp-mod-accept")  # lab may still ask which kernel
    if dialog.count():
        dialog.first.click()
    editor.click()
    page.keyboard.press("Shift+Enter")
    try:
        output = page.locator(".jp-OutputArea-output").first
        # A rendered widget view, not the "Loading widget..." / text fallback.
        card = output.locator(".widget-html", has_text="main1").first
        card.wait_for(state="visible", timeout=120_000)
        assert "RUNNING" in card.inner_text()
        button = output.locator("button.widget-button", has_text="Terminate")
        button.wait_for(state="visible")
        assert "Loading widget" not in output.inner_text()
        # Terminate asks first, saying the session is this notebook's own kernel.
        button.click()
        yes = output.locator("button.widget-button", has_text="Yes, terminate")
        yes.wait_for(state="visible", timeout=30_000)
        assert "own kernel: its state is lost" in output.inner_text()
        page.screenshot(path=str(SCREENSHOT.with_name("widgets-terminate-asks.png")))
        output.locator("button.widget-button", has_text="Keep it").click()
        yes.wait_for(state="hidden", timeout=30_000)
        assert "RUNNING" in card.inner_text()
    finally:  # also on failure: what the user saw
        page.screenshot(path=str(SCREENSHOT))
