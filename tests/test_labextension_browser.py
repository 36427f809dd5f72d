"""The JupyterLab extension in a real browser, against a real ``jupyter lab`` whose
sessions run on the real Docker engine: the sidebar, the new-session dialog, the
queue, a service-port link, a batch job's log, terminate, and the status-bar item of
a queued notebook.

One lab for the module, on one agent of 2 CPUs, so the tests can fill it and see a
session wait. Headless Debian ``chromium`` driven by PyPI ``playwright`` (never
``playwright install``). Screenshots go to ``BAI_TEST_SHOTS`` (default
``/tmp/bai-labext-shots``) for a person to look at; the DOM is what is asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CHROMIUM, CHROMIUM_ARGS, skip_or_fail
from test_launcher_browser import start_lab
from test_server_harness import TOKEN, Server, end_all
from test_widgets_browser import put_notebook

SHOTS = Path(os.environ.get("BAI_TEST_SHOTS", "/tmp/bai-labext-shots"))
#: Long enough for a container to start on a busy 2-core machine.
WAIT = 120_000

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(300)]


def api(server: Server, method: str, path: str, body: Any = None) -> Any:
    """A call of the REST API as the lab's user (the tests' own moves, not the UI's)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{server.url}bai/api/v1/{path}",
        data=data,
        method=method,
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read() or b"null")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("labext")
    config = (
        'c.BaiSessionManager.backend = "docker"\n'
        'c.BaiSessionManager.agents = [{"id": "docker", "slots": {"cpu": "2", "mem": "4g"}}]\n'
        "c.LabApp.expose_app_in_browser = True\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        server = start_lab(root, patch, "bai-q", "--cpu", "2", "--mem", "512m", extra_config=config)
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {SHOTS}")
    try:
        yield server
    finally:
        end_all(server)
        server.stop()


@pytest.fixture(scope="module")
def page(lab: Server) -> Iterator[Any]:
    """One browser page on the lab, with the bai sidebar open."""
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("no playwright (pip install -e '.[dev]')")
    if not shutil.which(CHROMIUM):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    profile = SHOTS / "profile"
    shutil.rmtree(profile, ignore_errors=True)
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            tab = context.new_page()
            tab.goto(f"{lab.url}lab?token={TOKEN}")
            tab.locator('.lm-TabBar-tab[data-id="bai-jupyter-sessions"]').click(timeout=WAIT)
            tab.locator(".bai-Sidebar-title").wait_for(timeout=WAIT)
            yield tab
        finally:
            context.close()


@pytest.fixture(autouse=True)
def clean(lab: Server, page: Any) -> Iterator[None]:
    """Each test starts with no live session and no dialog left open by the one before."""
    end_all(lab)
    yield
    while page.locator(".jp-Dialog").count():
        page.keyboard.press("Escape")
        page.wait_for_timeout(100)
    end_all(lab)


def card(page: Any, name: str) -> Any:
    exact = re.compile(f"^{re.escape(name)}$")
    return page.locator(".bai-Session", has=page.locator(".bai-Session-name", has_text=exact))


def wait_status(page: Any, name: str, status: str) -> Any:
    found = card(page, name).locator(f'.bai-Status[data-status="{status}"]')
    found.wait_for(timeout=WAIT)
    return card(page, name)


def fill_dialog(page: Any, **fields: str) -> Any:
    """Open the dialog from the sidebar and type into its fields; the dialog."""
    page.locator(".bai-Sidebar .bai-Button", has_text="New session").click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("#bai-field-name").wait_for()
    for key, value in fields.items():
        field = dialog.locator(f"#bai-field-{key}")
        if key in ("type", "template", "cluster_mode"):
            field.select_option(value)
        else:
            field.fill(value)
    return dialog


def create_from_dialog(page: Any, open_notebook: bool = False, **fields: str) -> None:
    dialog = fill_dialog(page, **fields)
    accept = dialog.locator("button.jp-mod-accept")
    page.wait_for_function("b => !b.disabled", arg=accept.element_handle(), timeout=30_000)
    accept.click()
    if fields.get("type", "interactive") == "interactive":
        offer = page.locator(".jp-Dialog", has_text="Open a notebook")
        offer.wait_for()
        label = "Open notebook" if open_notebook else "Not now"
        offer.locator("button", has_text=label).click()


def terminate(page: Any, name: str, verb: str = "Terminate") -> None:
    card(page, name).locator(".bai-Button", has_text=verb).click()
    confirm = page.locator(".jp-Dialog", has_text=f"{verb} session {name}?")
    confirm.locator("button.jp-mod-warn").click()


def test_the_dialog_checks_as_you_type_and_the_session_runs(lab: Server, page: Any) -> None:
    dialog = fill_dialog(page, name="first", cpu="-1", mem="256m")
    message = dialog.locator("#bai-msg-resources")
    message.filter(has_text="must not be negative").wait_for(timeout=30_000)
    assert dialog.locator("button.jp-mod-accept").is_disabled()
    dialog.screenshot(path=str(SHOTS / "dialog-validation.png"))
    dialog.locator("#bai-field-cpu").fill("0.5")
    page.wait_for_function(
        "m => m.textContent === ''", arg=message.element_handle(), timeout=30_000
    )
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    page.locator(".jp-Dialog", has_text="Open a notebook").locator(
        "button", has_text="Not now"
    ).click()
    session = wait_status(page, "first", "RUNNING")
    detail = session.locator(".bai-Session-detail").inner_text()
    assert detail == "interactive · main1 · 0.5 CPU · 256 MiB"
    agents = page.locator(".bai-Agent[data-agent-id='docker']")
    agents.locator("li", has_text="main1 of first").wait_for(timeout=WAIT)
    meter = agents.locator('[role="meter"]').first
    assert meter.get_attribute("aria-valuenow") == "25"  # 0.5 of 2 CPUs
    # The launcher's card opens the same dialog.
    card_ = page.locator(".jp-LauncherCard", has_text="New bai Session")
    card_.click()
    page.locator(".jp-Dialog", has_text="New bai session").locator("button.jp-mod-reject").click()
    page.screenshot(path=str(SHOTS / "sidebar-light.png"))


def test_a_session_that_cannot_fit_waits_with_its_reason_then_runs(lab: Server, page: Any) -> None:
    create_from_dialog(page, name="big", cpu="1.5", mem="256m")
    wait_status(page, "big", "RUNNING")
    create_from_dialog(page, name="waiter", cpu="1", mem="256m")
    waiting = wait_status(page, "waiter", "PENDING")
    why = waiting.locator('[data-role="why-pending"]')
    why.filter(has_text="Queued #1 of 1 — needs cpu=1 but the largest agent has").wait_for(
        timeout=WAIT
    )
    queue = page.locator('ol[aria-label="Queue of resource group default"] li')
    assert queue.first.inner_text().startswith("#1 waiter")
    page.screenshot(path=str(SHOTS / "sidebar-queued.png"))
    page.locator(".bai-Sidebar-body").screenshot(path=str(SHOTS / "sidebar-queued-panel.png"))
    terminate(page, "big")
    wait_status(page, "big", "TERMINATED")
    wait_status(page, "waiter", "RUNNING")
    assert page.locator('ol[aria-label="Queue of resource group default"]').count() == 0


def test_a_service_port_link_opens_the_service(lab: Server, page: Any) -> None:
    request = {
        "name": "site",
        "resources": {"cpu": "0.5", "mem": "256m"},
        "service_ports": ["web:http:8080"],
    }
    session = api(lab, "POST", "sessions", request)
    site = wait_status(page, "site", "RUNNING")
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-m', 'http.server', '8080'], cwd='/etc')\n"
        "time.sleep(1)\nprint('started')"
    )
    reply = api(lab, "POST", f"sessions/{session['id']}/execute", {"code": code})
    assert reply["status"] == "finished", reply
    link = site.locator("a.bai-Link", has_text="web")
    with page.context.expect_page() as opened:
        link.click()
    service = opened.value
    service.get_by_text("Directory listing for /").wait_for(timeout=30_000)
    assert "/bai/sessions/" in service.url and "/proxy/web/" in service.url
    service.close()


def test_a_batch_jobs_log_is_followed_to_its_result(lab: Server, page: Any) -> None:
    command = "for i in 1 2 3 4; do echo step-$i; sleep 1; done; exit 3"
    create_from_dialog(
        page, type="batch", name="job", cpu="0.5", mem="256m", startup_command=command
    )
    wait_status(page, "job", "RUNNING")
    card(page, "job").locator(".bai-Button", has_text="Logs").click()
    viewer = page.locator(".bai-Logs")
    viewer.locator(".bai-Logs-text", has_text="step-1").wait_for(timeout=WAIT)
    status = viewer.locator(".bai-Logs-status")
    status.filter(has_text="FAILURE (exit code 3)").wait_for(timeout=WAIT)
    assert "step-4" in viewer.locator(".bai-Logs-text").inner_text()
    result = card(page, "job").locator('[data-role="result"]')
    assert result.inner_text() == "FAILURE (exit code 3)"
    page.screenshot(path=str(SHOTS / "batch-log.png"))
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="Logs: job").locator(
        ".lm-TabBar-tabCloseIcon"
    ).click()


def test_a_queued_notebook_says_so_in_the_status_bar(lab: Server, page: Any) -> None:
    blocker = api(lab, "POST", "sessions", {"name": "hog", "resources": {"cpu": "1.5"}})
    wait_status(page, "hog", "RUNNING")
    put_notebook(lab, "queued.ipynb", "", kernelspec="bai-q")
    opening = "p => { window.jupyterapp.commands.execute('docmanager:open', {path: p}); }"
    page.evaluate(opening, "queued.ipynb")
    item = page.locator(".bai-StatusItem")
    item.filter(has_text="bai: queued #1 — needs cpu=2").wait_for(timeout=WAIT)
    page.screenshot(path=str(SHOTS / "statusbar-queued.png"))
    (session,) = [s for s in api(lab, "GET", "sessions")["sessions"] if s["status"] == "PENDING"]
    assert session["meta"]["notebook_path"].endswith("/queued.ipynb")
    item.click()  # reveals the session in the sidebar
    highlighted = page.locator(".bai-Session.bai-mod-highlighted")
    assert highlighted.get_attribute("data-session-id") == session["id"]
    api(lab, "DELETE", f"sessions/{blocker['id']}")
    item.filter(has_text="bai: RUNNING").wait_for(timeout=WAIT)
    close_notebook(lab, page)


def test_open_a_notebook_on_a_new_session_and_the_dark_theme(lab: Server, page: Any) -> None:
    create_from_dialog(page, open_notebook=True, name="nb", cpu="0.5", mem="512m")
    page.get_by_text("bai session nb | Idle").wait_for(timeout=WAIT)
    session = wait_status(page, "nb", "RUNNING")
    session.locator(".bai-Kernel", has_text="Untitled").wait_for(timeout=WAIT)
    page.locator(".bai-StatusItem", has_text="bai: RUNNING").wait_for()
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme',"
        " {theme: 'JupyterLab Dark'})"
    )
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(500)  # the theme's stylesheet applies
    page.screenshot(path=str(SHOTS / "sidebar-dark.png"))
    page.locator(".bai-Sidebar-body").screenshot(path=str(SHOTS / "sidebar-dark-panel.png"))
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme',"
        " {theme: 'JupyterLab Light'})"
    )
    close_notebook(lab, page)  # the session stays: the kernel was only attached to it
    terminate(page, "nb")
    wait_status(page, "nb", "TERMINATED")


def close_notebook(lab: Server, page: Any) -> None:
    """Close the current notebook and shut its kernel down, as a user would."""
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:close-and-shutdown'); }")
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    for _ in range(100):
        with urllib.request.urlopen(
            urllib.request.Request(
                f"{lab.url}api/kernels", headers={"Authorization": f"token {TOKEN}"}
            ),
            timeout=30,
        ) as reply:
            if not json.load(reply):
                return
        page.wait_for_timeout(100)
    raise AssertionError("the notebook's kernel was not shut down")
