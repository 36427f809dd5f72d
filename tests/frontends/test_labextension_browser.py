"""The JupyterLab extension in a real browser, against a real ``jupyter lab`` whose
sessions run on the real Docker engine: the sidebar, the new-session dialog, the
queue, a service-port link, a batch job's log, terminate, the status-bar item of
a queued notebook and the cells run while it waits, an inference endpoint (its
route, scaling it, deleting it), and the warm pools under the agents (a notebook
claiming a warm session, the refill).

One lab for the module, on one agent of 2 CPUs, so the tests can fill it and see a
session wait. It keeps a warm pool of one small session (``python``: 0.25 CPU, on
the kernelspec ``bai-warm``) and has one pool it refuses (``huge``), so every test
also runs beside a warm session that gives way when a user's session needs its room.

Headless Debian ``chromium`` driven by PyPI ``playwright`` (never
``playwright install``). Screenshots go to ``BAI_TEST_SHOTS`` (default
``/tmp/bai-labext-shots``) for a person to look at; the DOM is what is asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CHROMIUM, CHROMIUM_ARGS, skip_or_fail
from harness.endpoints import endpoint_request
from harness.lab import start_lab
from harness.notebooks import put_file, put_notebook
from harness.server import TOKEN, Server, end_all

from bai_jupyter.cli.app import main as cli_main
from bai_jupyter.kernel_plan import LABEL_SESSION
from bai_jupyter.model import Session, SessionSpec, Status
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime.protocol import DEFAULT_IMAGE
from bai_jupyter.scheduler.queue import enqueue
from bai_jupyter.store import Store

#: Runs the active cell and, being the last, opens a new one below it for typing.
RUN_AND_INSERT = "() => { window.jupyterapp.commands.execute('notebook:run-cell-and-select-next') }"
#: Whether the notebook's code-cell prompts read the given texts, in order.
PROMPTS_ARE = """want => JSON.stringify([...document.querySelectorAll(
    '.jp-Notebook .jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim()))
    === JSON.stringify(want)"""
#: Opens a notebook in the lab, as the file browser would.
OPEN_NOTEBOOK = "p => { window.jupyterapp.commands.execute('docmanager:open', {path: p}); }"
SHOTS = Path(os.environ.get("BAI_TEST_SHOTS", "/tmp/bai-labext-shots"))
#: The boxes of the text of the bai status item and of its neighbours' (JupyterLab's
#: own text items on the left of the status bar).
STATUS_BOXES = """() => {
    const text = e => {
        const range = document.createRange();
        range.selectNodeContents(e);
        const r = range.getBoundingClientRect();
        return {top: r.top, height: r.height};
    };
    const bai = document.querySelector('.bai-StatusItem');
    const left = '#jp-main-statusbar .jp-StatusBar-Left .jp-StatusBar-TextItem';
    const others = [...document.querySelectorAll(left)]
        .filter(e => e !== bai && e.textContent.trim() && e.offsetParent !== null);
    return {bai: text(bai), neighbours: others.map(text)};
}"""
#: Long enough for a container to start on a busy 2-core machine.
WAIT = 120_000
#: The lab's warm pools: one kept warm, one whose request can never fit (refused).
POOLS = [
    {"name": "python", "size": 1, "kernelspec": "bai-warm"},
    {"name": "huge", "size": 1, "request": {"resources": {"cpu": "64", "mem": "256m"}}},
]

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


def lab_request(server: Server, method: str, path: str) -> Any:
    """A call of the Jupyter server (JupyterLab's own API) as the lab's user."""
    request = urllib.request.Request(
        f"{server.url}{path}", method=method, headers={"Authorization": f"token {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read() or b"null")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, kernel_image: str) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("labext")
    # The file browser's root apart from the store and the Jupyter dirs, so notebooks'
    # kernels get it mounted (nothing inside a dir holding the store is ever mounted).
    notebooks = tmp_path_factory.mktemp("labext-notebooks")
    config = (
        f"c.ServerApp.root_dir = {str(notebooks)!r}\n"
        'c.BaiSessionManager.backend = "docker"\n'
        'c.BaiSessionManager.agents = [{"id": "docker", "slots": {"cpu": "2", "mem": "4g"}}]\n'
        f"c.BaiSessionManager.warm_pools = {POOLS!r}\n"
        "c.LabApp.expose_app_in_browser = True\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        # The pool's kernelspec exists before the server reads its pools.
        patch.setenv("JUPYTER_DATA_DIR", str(root / "data"))
        warm = ["bai-warm", "--cpu", "0.25", "--mem", "256m"]
        assert cli_main(["kernelspec", "install", *warm]) == 0
        server = start_lab(root, patch, "bai-q", "--cpu", "2", "--mem", "512m", extra_config=config)
        cluster = ["bai-c2", "--cluster-size", "2", "--cpu", "0.5", "--mem", "256m"]
        assert cli_main(["kernelspec", "install", *cluster]) == 0  # before the page loads
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
            # The tests count with the warm session there (it started while the page loaded).
            tab.locator('.bai-Pool[data-pool="python"] .bai-Status[data-state="full"]').wait_for(
                timeout=WAIT
            )
            yield tab
        finally:
            context.close()


@pytest.fixture(autouse=True)
def clean(lab: Server, page: Any) -> Iterator[None]:
    """Each test starts with no live session, no Jupyter kernel and no dialog left open
    by the one before. Kernels are shut down through Jupyter first: a kernel whose
    session alone ended would be restarted by Jupyter on a new session."""
    end_all(lab)
    yield
    while page.locator(".jp-Dialog").count():
        page.keyboard.press("Escape")
        page.wait_for_timeout(100)
    for kernel in lab_request(lab, "GET", "api/kernels"):
        lab_request(lab, "DELETE", f"api/kernels/{kernel['id']}")
    end_all(lab)


def shot(element: Any, name: str) -> None:
    """A screenshot of a sidebar element, which a redraw may replace meanwhile (an event
    arrived): the locator finds the new one on the next try."""
    from playwright.sync_api import Error

    for attempt in range(3):
        try:
            element.screenshot(path=str(SHOTS / name))
            return
        except Error as exc:
            if "not attached" not in str(exc) or attempt == 2:
                raise


def shots_light_and_dark(page: Any, element: Any, name: str) -> None:
    """``name``-light.png and ``name``-dark.png of ``element``, for a person to look at;
    the light theme is back afterwards."""
    shot(element, f"{name}-light.png")
    for theme, light in (("JupyterLab Dark", "false"), ("JupyterLab Light", "true")):
        page.evaluate(
            "t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme
        )
        page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{light}'")
        page.wait_for_timeout(500)  # the theme's stylesheet applies
        if light == "false":
            shot(element, f"{name}-dark.png")


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


def create_from_dialog(
    page: Any, open_notebook: bool = False, offer_says: str = "", **fields: str
) -> None:
    dialog = fill_dialog(page, **fields)
    accept_dialog(page, dialog, fields.get("type"), open_notebook, offer_says)


def accept_dialog(
    page: Any,
    dialog: Any,
    type: str | None = None,
    open_notebook: bool = False,
    offer_says: str = "",
) -> None:
    """Create once the server accepts the form; an interactive session's notebook offer
    (which says ``offer_says``) answered."""
    accept = dialog.locator("button.jp-mod-accept")
    page.wait_for_function("b => !b.disabled", arg=accept.element_handle(), timeout=30_000)
    accept.click()
    if type in (None, "interactive"):
        offer = page.locator(".jp-Dialog", has_text="Open a notebook")
        offer.filter(has_text=offer_says).wait_for()
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
    assert meter.get_attribute("aria-valuenow") == "38"  # 0.5 and the warm pool's 0.25 of 2 CPUs
    # The launcher's card opens the same dialog.
    card_ = page.locator(".jp-LauncherCard", has_text="New bai Session")
    card_.click()
    page.locator(".jp-Dialog", has_text="New bai session").locator("button.jp-mod-reject").click()
    page.screenshot(path=str(SHOTS / "sidebar-light.png"))


def pool_counts(pool: dict[str, Any]) -> str:
    return (
        f"Claims {pool['claims']} · hits {pool['hits']} · misses {pool['misses']}"
        f" · given way {pool['given_way']}"
    )


#: Records each state the pool ``python`` is drawn in (the sidebar redraws its body).
WATCH_POOL = """() => {
  window.baiPoolStates = [];
  const body = document.querySelector('.bai-Sidebar-body');
  new MutationObserver(() => {
    const badge = body.querySelector('.bai-Pool[data-pool="python"] .bai-Status');
    const state = badge ? badge.dataset.state : null;
    if (state && window.baiPoolStates[window.baiPoolStates.length - 1] !== state) {
      window.baiPoolStates.push(state);
    }
  }).observe(body, {childList: true, subtree: true});
}"""


def test_a_notebook_claims_the_warm_session_and_the_pool_refills(lab: Server, page: Any) -> None:
    """The Pools block under the agents: the pool warm, its counts as the API gives them;
    a notebook on the pool's kernelspec claims the warm session (claims and hits + 1),
    the pool is drawn short then warm again, all from the event stream; the refused
    pool says why; the block is labelled and keyboard reachable, in both themes."""
    before = {p["name"]: p for p in api(lab, "GET", "pools")["pools"]}
    python = page.locator('.bai-Pool[data-pool="python"]')
    huge = page.locator('.bai-Pool[data-pool="huge"]')
    assert page.locator("#bai-heading-pools").inner_text() == "Warm pools (2)"
    assert python.locator(".bai-Status").inner_text() == "1/1 warm"
    assert python.locator('[data-role="from"]').inner_text() == (
        "From kernelspec bai-warm: 1 × 0.25 CPU · 256 MiB in default"
    )
    assert python.locator('[data-role="size"]').inner_text() == "Size 1 · 1 warm · 0 starting"
    assert python.locator('[data-role="held"]').inner_text() == (
        "Holds 0.25 CPU · 256 MiB of at most 0.25 CPU · 256 MiB"  # size 1 × each, no max_slots
    )
    counts = python.locator('[data-role="counts"]')
    assert counts.inner_text() == pool_counts(before["python"])
    # The refused pool keeps nothing warm and says why (the server's words).
    assert huge.locator('.bai-Status[data-state="refused"]').inner_text() == "refused"
    error = huge.locator('[data-role="error"]').inner_text()
    assert error == before["huge"]["error"], error
    assert error.startswith("resource group 'default': needs cpu=64"), error
    # The agent: its warm session by pool, and that session's kernel as the pool's.
    agent = page.locator(".bai-Agent[data-agent-id='docker']")
    assert agent.locator('[data-role="warm"]').inner_text() == "warm: 1 · python"
    warm_kernel = agent.locator("li.bai-mod-warm")
    assert warm_kernel.all_inner_texts() == ["main1 warm in pool python · 0.25 CPU · 256 MiB"]
    # Labelled for screen readers, and reached with the keyboard.
    group = page.get_by_role("group", name="Warm pools (2)")
    assert group.get_by_role("listitem").count() == 2
    python.focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("() => document.activeElement.dataset.focusKey") == "pool-python"
    label = python.get_attribute("aria-label") or ""
    assert label.startswith("warm pool python, kernelspec bai-warm, 1 of 1 warm, 0 starting;")
    shot(group, "pools-warm.png")

    # A notebook on the pool's kernelspec gets the warm session; the pool refills.
    page.evaluate(WATCH_POOL)
    put_notebook(lab, "warm.ipynb", "", kernelspec="bai-warm")
    page.evaluate(OPEN_NOTEBOOK, "warm.ipynb")
    try:
        page.locator(".bai-StatusItem", has_text="bai: RUNNING").wait_for(timeout=WAIT)
        claimed = {
            "claims": before["python"]["claims"] + 1,
            "hits": before["python"]["hits"] + 1,
            "misses": before["python"]["misses"],
            "given_way": before["python"]["given_way"],
        }
        counts.filter(has_text=pool_counts(claimed)).wait_for(timeout=WAIT)
        python.locator('.bai-Status[data-state="full"]').wait_for(timeout=WAIT)
        states = page.evaluate("() => window.baiPoolStates")
        assert states[-1] == "full" and ("short" in states or "filling" in states), states
        (mine,) = [
            s
            for s in api(lab, "GET", "sessions")["sessions"]
            if s["status"] == "RUNNING" and s["status_data"].get("warm_pool")
        ]
        assert mine["meta"]["notebook_path"].endswith("warm.ipynb")
        session = page.locator(f'.bai-Session[data-session-id="{mine["id"]}"]')
        assert session.locator('[data-role="warm"]').inner_text() == (
            "Started warm: claimed from pool python"
        )
        # The claimed kernel is now the user's; a fresh one is the pool's.
        agent.locator("li", has_text=f"main1 of {mine['id'][:8]}").wait_for(timeout=WAIT)
        assert warm_kernel.count() == 1
        assert agent.locator('[data-role="warm"]').inner_text() == "warm: 1 · python"
        (after,) = [p for p in api(lab, "GET", "pools")["pools"] if p["name"] == "python"]
        assert counts.inner_text() == pool_counts(after)
        assert after["sessions"] != before["python"]["sessions"]  # a new warm session
        page.screenshot(path=str(SHOTS / "pools-claimed.png"))
        agents_section = page.locator('section[aria-labelledby="bai-heading-agents"]')
        shot(agents_section, "pools-light.png")
        page.evaluate(
            "() => window.jupyterapp.commands.execute('apputils:change-theme',"
            " {theme: 'JupyterLab Dark'})"
        )
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
        page.wait_for_timeout(500)  # the theme's stylesheet applies
        shot(agents_section, "pools-dark.png")
        page.evaluate(
            "() => window.jupyterapp.commands.execute('apputils:change-theme',"
            " {theme: 'JupyterLab Light'})"
        )
    finally:
        close_notebook(lab, page)


def test_a_session_that_cannot_fit_waits_with_its_reason_then_runs(lab: Server, page: Any) -> None:
    """Two wait: their places and reasons; cancelling the first (confirmed) moves the
    second up while it is watched; freeing the room starts it."""
    create_from_dialog(page, name="big", cpu="1.5", mem="256m")
    wait_status(page, "big", "RUNNING")
    # The answer to a create that must wait says why it waits, at once.
    waits = "It waits in the queue: needs cpu=1 but the largest agent has 0.25 free."
    create_from_dialog(page, name="waiter", cpu="1", mem="256m", offer_says=waits)
    waiting = wait_status(page, "waiter", "PENDING")
    why = waiting.locator('[data-role="why-pending"]')
    why.filter(has_text="Queued #1 of 1 — needs cpu=1 but the largest agent has").wait_for(
        timeout=WAIT
    )
    api(lab, "POST", "sessions", {"name": "later", "resources": {"cpu": "1", "mem": "256m"}})
    later = wait_status(page, "later", "PENDING").locator('[data-role="why-pending"]')
    later.filter(has_text="Queued #2 of 2").wait_for(timeout=WAIT)
    why.filter(has_text="Queued #1 of 2").wait_for(timeout=WAIT)
    queue = page.locator('ol[aria-label="Queue of resource group default"] li')
    assert [line.split(" · ")[0] for line in queue.all_inner_texts()] == ["#1 waiter", "#2 later"]
    page.screenshot(path=str(SHOTS / "sidebar-queued.png"))
    # The whole panel (the README's picture): a window tall enough that nothing scrolls.
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 1800})
    try:
        page.locator(".bai-Sidebar-body").screenshot(path=str(SHOTS / "sidebar-queued-panel.png"))
    finally:
        page.set_viewport_size(size)
    # Cancel asks first; the one behind moves up, in the card and in the queue.
    card(page, "waiter").locator(".bai-Button", has_text="Cancel").click()
    confirm = page.locator(".jp-Dialog", has_text="Cancel session waiter?")
    body = confirm.locator(".jp-Dialog-body").inner_text()
    assert body == "waiter leaves the queue and never starts.", body
    assert confirm.locator("button").all_inner_texts() == ["Keep waiting", "Cancel"]
    confirm.locator(".jp-Dialog-content").screenshot(path=str(SHOTS / "cancel-confirm.png"))
    confirm.locator("button.jp-mod-warn").click()
    wait_status(page, "waiter", "CANCELLED")
    later.filter(has_text="Queued #1 of 1").wait_for(timeout=WAIT)
    assert [line.split(" · ")[0] for line in queue.all_inner_texts()] == ["#1 later"]
    terminate(page, "big")
    wait_status(page, "big", "TERMINATED")
    wait_status(page, "later", "RUNNING")
    assert page.locator('ol[aria-label="Queue of resource group default"]').count() == 0


def test_a_session_another_process_makes_on_the_store_appears_without_a_refresh(
    lab: Server, page: Any
) -> None:
    """A `jupyter console` kernel's embedded manager (here: this test process, writing to
    the lab's store as that manager does) makes a session: the sidebar shows it and its
    end, live, with no click on refresh (the events come from the store)."""
    later = time.time() + 86400
    owner = api(lab, "POST", "sessions", {"name": "mine", "starts_at": later})["owner"]
    store = Store(f"sqlite:///{lab.log.parent / 'store.sqlite'}")
    spec = SessionSpec(
        image=DEFAULT_IMAGE,
        name="from-console",
        starts_at=later,
        resources=ResourceSlot({"cpu": "0.5", "mem": "256m"}),
    )
    made = Session.create(spec, owner, time.time())
    try:
        enqueue(store, made)
        wait_status(page, "from-console", "PENDING")
        with store.edit(made.id) as session:  # that process cancels it: the card says so
            for kernel in session.kernels:
                kernel.set_status(Status.CANCELLED, "user-requested")
            session.set_status(Status.CANCELLED, time.time(), "user-requested")
        wait_status(page, "from-console", "CANCELLED")
    finally:
        store.close()


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
    service.screenshot(path=str(SHOTS / "service-page.png"))
    service.close()


#: Whether a session's kernel's CPU reads "N %" (of its slots) with N above a bar.
CPU_ABOVE = r"""([id, kernel, bar]) => {
    const el = document.querySelector(
        `[data-usage-session="${id}"] [data-kernel="${kernel}"] [data-role="usage-CPU"]`);
    const m = /^(\d+) %$/.exec(el ? el.textContent : '');
    return m !== null && Number(m[1]) > bar; }"""


def _theme(page: Any, theme: str) -> None:
    page.evaluate(
        "t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme
    )
    page.wait_for_timeout(500)  # the theme's stylesheet applies


def test_a_running_sessions_card_charts_its_usage_per_kernel(lab: Server, page: Any) -> None:
    """The card of a running session of two kernels draws each one's CPU and memory over
    the last minutes, from the stream's usage events; main1 burning CPU shows it; the
    agent's chart beside its occupancy bars sums the user's kernels; both themes."""
    request = {"name": "busy", "cluster_size": 2, "resources": {"cpu": "0.5", "mem": "256m"}}
    session = api(lab, "POST", "sessions", request)
    busy = wait_status(page, "busy", "RUNNING")
    burn = "nohup python3 -c 'while True: pass' >/dev/null 2>&1 &"
    reply = api(lab, "POST", f"sessions/{session['id']}/exec", {"command": ["sh", "-c", burn]})
    assert reply["exit_code"] == 0, reply
    usage = busy.locator('[data-role="usage"]')
    main1 = usage.locator('[data-kernel="main1"]')
    page.wait_for_function(  # by selector each time: a new reading redraws the chart
        CPU_ABOVE, arg=[session["id"], "main1", 15], timeout=60_000
    )
    mem = main1.locator('[data-role="usage-Mem"]').inner_text()
    assert re.fullmatch(r"\d+(\.\d+)?/256 MiB", mem), mem  # used of its limit
    caption = main1.locator(".bai-Usage-caption").first.get_attribute("title")
    assert re.fullmatch(r"CPU: \d+ % of 0\.5 cpu", caption or ""), caption
    assert usage.locator('[data-kernel="sub1"] [data-role="usage-CPU"]').inner_text().endswith("%")
    assert main1.locator("svg.bai-Spark polyline").count() == 2  # CPU and memory
    assert (
        main1.locator("svg.bai-Spark")
        .first.get_attribute("aria-label")
        .startswith("main1 CPU over the last minutes")
    )
    agent = page.locator('.bai-Agent[data-agent-id="docker"] [data-role="agent-usage"]')
    agent.locator("svg.bai-Spark").first.wait_for(timeout=30_000)
    assert re.search(r"CPU \d\.\d\d/2 cores", agent.inner_text())
    page.wait_for_timeout(4000)  # a few more points on the charts for the screenshots
    shot(card(page, "busy"), "usage-card-light.png")
    shot(page.locator('.bai-Agent[data-agent-id="docker"]'), "usage-agent-light.png")
    _theme(page, "JupyterLab Dark")
    try:
        shot(card(page, "busy"), "usage-card-dark.png")
        shot(page.locator('.bai-Agent[data-agent-id="docker"]'), "usage-agent-dark.png")
    finally:
        _theme(page, "JupyterLab Light")


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


def test_a_system_session_from_the_dialog_shows_its_sftp_login(lab: Server, page: Any) -> None:
    dialog = fill_dialog(page, type="system", name="files", cpu="0.25", mem="128m", mounts="data")
    assert dialog.locator("#bai-field-cluster_size").is_hidden()
    assert dialog.locator("#bai-field-startup_command").is_hidden()
    accept_dialog(page, dialog, "system")
    files = wait_status(page, "files", "RUNNING")
    login = files.locator('[data-role="sftp"] code')
    login.wait_for(timeout=WAIT)
    assert re.fullmatch(r"sftp -P \d+ -i KEY_FILE work@127\.0\.0\.1", login.inner_text())
    shot(files, "system-session.png")
    terminate(page, "files")
    files.locator('.bai-Status[data-status="TERMINATED"]').wait_for(timeout=WAIT)


def test_a_queued_notebook_says_so_and_runs_its_cells_once_started(lab: Server, page: Any) -> None:
    """The status bar says the notebook's session waits, and why; cells run meanwhile
    are held (``[*]``), not dropped, and run in order once the kernel has started."""
    blocker = api(lab, "POST", "sessions", {"name": "hog", "resources": {"cpu": "1.5"}})
    wait_status(page, "hog", "RUNNING")
    put_notebook(lab, "queued.ipynb", "x = 6 * 7", kernelspec="bai-q")
    # As on a busy machine: JupyterLab sets its new session's path a while after the
    # kernel started, so "RUNNING" shows before it holds the kernel (see close_notebook).
    page.route("**/api/sessions/*", slow_patch)
    page.evaluate(OPEN_NOTEBOOK, "queued.ipynb")
    item = page.locator(".bai-StatusItem")
    item.filter(has_text="bai: queued #1 — needs cpu=2").wait_for(timeout=WAIT)
    page.screenshot(path=str(SHOTS / "statusbar-queued.png"))
    (session,) = [s for s in api(lab, "GET", "sessions")["sessions"] if s["status"] == "PENDING"]
    assert session["meta"]["notebook_path"].endswith("/queued.ipynb")
    item.click()  # reveals the session in the sidebar
    highlighted = page.locator(".bai-Session.bai-mod-highlighted")
    assert highlighted.get_attribute("data-session-id") == session["id"]
    # Two cells run while it waits, the second needing the first.
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.evaluate(RUN_AND_INSERT)
    page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".cm-content").click()
    page.keyboard.type("print(x)")
    page.keyboard.press("Shift+Enter")
    prompts = page.locator(".jp-Notebook .jp-Cell.jp-CodeCell .jp-InputPrompt")
    page.wait_for_function(PROMPTS_ARE, arg=["[*]:", "[*]:", "[ ]:"], timeout=WAIT)
    page.screenshot(path=str(SHOTS / "notebook-queued-held-cells.png"))
    api(lab, "DELETE", f"sessions/{blocker['id']}")
    item.filter(has_text="bai: RUNNING").wait_for(timeout=WAIT)
    page.locator(".jp-OutputArea-output", has_text="42").wait_for(timeout=WAIT)
    page.wait_for_function(PROMPTS_ARE, arg=["[1]:", "[2]:", "[ ]:"], timeout=WAIT)
    assert prompts.count() == 3
    page.screenshot(path=str(SHOTS / "notebook-queued-cells-ran.png"))
    close_notebook(lab, page)
    page.unroute("**/api/sessions/*", slow_patch)


def test_cells_held_for_a_kernel_that_never_starts_are_reported(lab: Server, page: Any) -> None:
    """A queued notebook's session cancelled while a cell waits for it: JupyterLab says
    why the kernel did not start, and a notification says the held cell was not run."""
    blocker = api(lab, "POST", "sessions", {"name": "hog", "resources": {"cpu": "1.5"}})
    wait_status(page, "hog", "RUNNING")
    put_notebook(lab, "never.ipynb", "print('never')", kernelspec="bai-q")
    page.evaluate(OPEN_NOTEBOOK, "never.ipynb")
    page.locator(".bai-StatusItem", has_text="bai: queued #1").wait_for(timeout=WAIT)
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.keyboard.press("Control+Enter")
    page.wait_for_function(PROMPTS_ARE, arg=["[*]:"], timeout=WAIT)
    (session,) = [s for s in api(lab, "GET", "sessions")["sessions"] if s["status"] == "PENDING"]
    api(lab, "DELETE", f"sessions/{session['id']}")
    error = page.locator(".jp-Dialog", has_text="ended before its kernel started")
    error.wait_for(timeout=WAIT)
    toast = page.locator(".Toastify__toast", has_text="1 cell was not run")
    toast.wait_for(timeout=WAIT)
    assert "never.ipynb did not start" in toast.inner_text()
    page.wait_for_function(PROMPTS_ARE, arg=["[ ]:"], timeout=WAIT)
    page.screenshot(path=str(SHOTS / "notebook-held-cell-not-run.png"))
    page.keyboard.press("Escape")  # the error dialog
    api(lab, "DELETE", f"sessions/{blocker['id']}")
    page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:close-all-files'); }")


def slow_patch(route: Any) -> None:
    """Hold JupyterLab's PATCH of a session for a second."""
    if route.request.method == "PATCH":
        time.sleep(1)
    route.continue_()


def test_a_cluster_notebook_is_interrupted_from_its_card_by_keyboard(
    lab: Server, page: Any
) -> None:
    """The status bar of a notebook on a cluster kernelspec, queued then running; the card
    reached and driven with the keyboard by its buttons' accessible names: Interrupt,
    then Copy id."""
    hog = api(lab, "POST", "sessions", {"name": "hog", "resources": {"cpu": "1.5"}})
    wait_status(page, "hog", "RUNNING")
    put_notebook(lab, "cluster.ipynb", "import time\ntime.sleep(300)", kernelspec="bai-c2")
    page.evaluate(OPEN_NOTEBOOK, "cluster.ipynb")
    try:
        # Two kernels of 0.5 CPU on one agent with 0.5 free: it waits, and says why.
        queued = page.locator(".bai-StatusItem", has_text="bai: queued #1 — needs cpu=1")
        queued.wait_for(timeout=WAIT)
        page.screenshot(path=str(SHOTS / "cluster-queued.png"))
        api(lab, "DELETE", f"sessions/{hog['id']}")
        item = page.locator(".bai-StatusItem", has_text="bai: RUNNING · cluster ×2")
        item.wait_for(timeout=WAIT)
        # The notebook's kernel is connected and idle before its cell runs.
        page.get_by_text(re.compile(r"bai cluster ×2 .*\| Idle")).wait_for(timeout=WAIT)
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").wait_for(timeout=WAIT)
        item.focus()
        page.keyboard.press("Enter")  # the status item reveals the notebook's session
        card_ = page.locator(".bai-Session.bai-mod-highlighted")
        card_.wait_for()
        shot(card_, "cluster-notebook-card.png")
        name = card_.locator(".bai-Session-name").inner_text()
        assert (
            card_.locator(".bai-Session-detail")
            .inner_text()
            .startswith("interactive · main1, sub1")
        )
        card_.get_by_role("button", name=f"Interrupt what main1 of {name} runs").focus()
        page.keyboard.press("Enter")
        confirm = page.locator(".jp-Dialog", has_text=f"Interrupt {name}?")
        confirm.locator("button.jp-mod-warn").focus()
        page.keyboard.press("Enter")
        page.locator(".jp-OutputArea-output", has_text="KeyboardInterrupt").wait_for(timeout=WAIT)
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        card_.get_by_role("button", name=f"Copy the id of {name}").focus()
        page.keyboard.press("Enter")
        copied = page.evaluate("() => navigator.clipboard.readText()")
        assert copied == card_.get_attribute("data-session-id")
    finally:
        close_notebook(lab, page)  # what follows needs no kernel left


def test_open_a_notebook_on_a_new_session_and_the_dark_theme(lab: Server, page: Any) -> None:
    create_from_dialog(page, open_notebook=True, name="nb", cpu="0.5", mem="512m")
    page.get_by_text("bai session nb | Idle").wait_for(timeout=WAIT)
    session = wait_status(page, "nb", "RUNNING")
    session.locator(".bai-Kernel", has_text="Untitled").wait_for(timeout=WAIT)
    item = page.locator(".bai-StatusItem", has_text="bai: RUNNING")
    item.wait_for()
    # In line with its neighbours: the same text box (top and height) as theirs.
    boxes = page.evaluate(STATUS_BOXES)
    assert boxes["neighbours"] and all(
        abs(box["top"] - boxes["bai"]["top"]) < 1
        and abs(box["height"] - boxes["bai"]["height"]) < 1
        for box in boxes["neighbours"]
    ), boxes
    shots_light_and_dark(page, page.locator("#jp-main-statusbar"), "statusbar")
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


def test_the_ended_sessions_settings_take_effect_from_the_settings_editor(
    lab: Server, page: Any
) -> None:
    """``maxEnded`` and ``showEnded``, changed in JupyterLab's Settings Editor (saved by the
    settings registry), change at once which ended sessions the sidebar keeps."""
    from playwright.sync_api import expect

    for name in ("gone-1", "gone-2"):
        made = api(lab, "POST", "sessions", {"name": name, "starts_at": 4e9})
        api(lab, "DELETE", f"sessions/{made['id']}")
        wait_status(page, name, "CANCELLED")
    ended = page.locator(
        '.bai-SessionList .bai-Status:is([data-status="TERMINATED"], [data-status="CANCELLED"],'
        ' [data-status="ERROR"])'
    )
    shown = ended.count()  # these two, and what the tests before ended (10 at most)
    assert 2 <= shown <= 10, shown
    page.evaluate(
        "() => window.jupyterapp.commands.execute('settingeditor:open', {query: 'bai sessions'})"
    )
    prefix = "jp-SettingsEditor-bai-jupyter:plugin_"
    most, show = page.locator(f'[id="{prefix}maxEnded"]'), page.locator(f'[id="{prefix}showEnded"]')
    try:
        most.fill("1")
        expect(ended).to_have_count(1, timeout=30_000)
        assert card(page, "gone-2").count() == 1  # the most recent one stays
        saved = lab_request(lab, "GET", "lab/api/settings/bai-jupyter:plugin")["settings"]
        assert saved.get("maxEnded") == 1, saved  # the registry saved it for the user
        show.uncheck()
        expect(ended).to_have_count(0, timeout=30_000)
        empty = page.locator(".bai-Sidebar .bai-Empty").first
        assert empty.inner_text() == (
            "No live sessions; ended ones are hidden (Settings → bai sessions)."
        )
        page.locator(".bai-Sidebar-body").screenshot(path=str(SHOTS / "settings-no-ended.png"))
    finally:
        show.check()
        most.fill("10")
        expect(ended).to_have_count(shown)
        page.evaluate("() => window.jupyterapp.commands.execute('application:close')")


#: True once the current notebook's session context holds its kernel, connected.
NOTEBOOK_HAS_KERNEL = """() => {
    const kernel = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
    return kernel?.connectionStatus === 'connected';
}"""


def close_notebook(lab: Server, page: Any) -> None:
    """Close the current notebook and shut its kernel down, as a user would.

    Only once JupyterLab holds the notebook's kernel: the bai status item says RUNNING
    as soon as the session runs, a moment before JupyterLab has set its new session's
    path, and a notebook closed in that moment leaves its kernel behind (JupyterLab's
    ``SessionContext`` drops a session it gets after it was disposed)."""
    page.wait_for_function(NOTEBOOK_HAS_KERNEL, timeout=WAIT)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:close-and-shutdown'); }")
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    for _ in range(100):
        if not lab_request(lab, "GET", "api/kernels"):
            return
        page.wait_for_timeout(100)
    raise AssertionError("the notebook's kernel was not shut down")


@pytest.fixture
def no_endpoint_left(lab: Server) -> Iterator[None]:
    """Delete what a test left, then wait until its replicas have ended: a kept
    endpoint would start them again after ``clean`` ends them, and the next tests
    need the agent to themselves."""
    yield
    for endpoint in api(lab, "GET", "endpoints")["endpoints"]:
        api(lab, "DELETE", f"endpoints/{endpoint['name']}")
    deadline = time.monotonic() + 60
    while any(
        s["meta"].get("endpoint") and s["status"] != "TERMINATED"
        for s in api(lab, "GET", "sessions")["sessions"]
    ):
        assert time.monotonic() < deadline, "the endpoint's replicas did not end"
        time.sleep(0.2)


def test_an_endpoint_in_the_sidebar_is_scaled_and_deleted(
    lab: Server, page: Any, kernel_image: str, no_endpoint_left: None
) -> None:
    heading = page.locator("#bai-heading-endpoints")
    assert heading.count() == 0  # no endpoint, no section
    scaling = {"min_replicas": 1, "max_replicas": 2, "metric": "inflight", "target": 4,
               "window": 5}  # fmt: skip
    api(lab, "POST", "endpoints", endpoint_request("echo", kernel_image, scaling=scaling))
    echo = page.locator('.bai-Endpoint[data-endpoint="echo"]')
    # No event says when a replica passes its health check: the section follows it.
    echo.locator('.bai-Status[data-state="ready"]').wait_for(timeout=WAIT)
    assert heading.inner_text().lower() == "endpoints (1)"
    assert echo.locator('[data-role="replicas"]').inner_text() == (
        "Replicas: 1 ready of 1 wanted (min 1, max 2)"
    )
    assert echo.locator('[data-role="load"]').inner_text() == "Load: 0 in flight · 0 req/s"
    (replica,) = api(lab, "GET", "endpoints/echo")["replicas"]
    line = echo.locator(f'.bai-Replicas li[data-session-id="{replica["session_id"]}"]')
    assert line.inner_text() == f"{replica['session_id'][:8]} · RUNNING · healthy · gen 1"
    decision = echo.locator(".bai-Decisions li").first
    assert re.fullmatch(r"\d+ s ago · 0 → 1: created: min_replicas 1", decision.inner_text())
    # Its replica is one of "My sessions", and says so.
    replica_card = page.locator(f'.bai-Session[data-session-id="{replica["session_id"]}"]')
    assert (
        replica_card.locator(".bai-Session-detail")
        .inner_text()
        .startswith("inference of endpoint echo (gen 1) · main1")
    )
    # The route opens in a new tab, through the lab's own login, under the lab's URL.
    assert echo.locator('[data-role="route"]').inner_text() == "Route: /bai/endpoints/echo/ ↗"
    route = echo.locator('[data-role="route"] a.bai-Link')
    assert route.get_attribute("href") == f"{lab.url}bai/endpoints/echo/"
    with page.context.expect_page() as opened:
        route.click()
    tab = opened.value
    tab.wait_for_load_state()
    assert tab.url == f"{lab.url}bai/endpoints/echo/"
    assert '"not found"' in tab.inner_text("body")  # the model server's own 404
    tab.goto(f"{lab.url}bai/endpoints/echo/predict")
    assert json.loads(tab.inner_text("body"))["replica"] == replica["session_id"]
    tab.close()
    shown = page.locator('section[aria-labelledby="bai-heading-endpoints"]')

    # Scale…: what cannot be meant is said at once, the server's refusal after Scale.
    echo.locator(".bai-Button", has_text="Scale…").click()
    dialog = page.locator(".jp-Dialog", has_text="Scale endpoint echo")
    accept = dialog.locator("button.jp-mod-accept")
    assert dialog.locator('[data-role="now"]').inner_text() == (
        "Now: 1 ready of 1 wanted (min 1, max 2)"
    )
    assert dialog.locator("#bai-field-min_replicas").input_value() == "1"
    assert dialog.locator("#bai-field-max_replicas").input_value() == "2"
    dialog.locator(".jp-Dialog-content").screenshot(path=str(SHOTS / "endpoint-scale-dialog.png"))
    dialog.locator("#bai-field-min_replicas").fill("3")
    assert dialog.locator("#bai-msg-max_replicas").inner_text() == (
        "must be at least the minimum (3), got 2"
    )
    assert accept.is_disabled()
    dialog.locator("#bai-field-max_replicas").fill("40")
    assert accept.is_enabled()
    accept.click()
    refused = page.locator(".jp-Dialog", has_text="Scale endpoint echo")
    refused.locator("#bai-msg-max_replicas").filter(has_text="got 40").wait_for()
    assert refused.locator("#bai-msg-max_replicas").inner_text() == (
        "must be an integer from 1 to 32, got 40"
    )
    assert refused.locator("#bai-field-min_replicas").input_value() == "3"
    assert refused.locator("button.jp-mod-accept").is_disabled()
    refused.locator(".jp-Dialog-content").screenshot(path=str(SHOTS / "endpoint-scale-refused.png"))
    refused.locator("#bai-field-min_replicas").fill("2")
    refused.locator("#bai-field-max_replicas").fill("3")
    refused.locator("button.jp-mod-accept").click()
    echo.locator('[data-role="replicas"]', has_text="2 ready of 2 wanted (min 2, max 3)").wait_for(
        timeout=WAIT
    )
    assert echo.locator(".bai-Replicas li").count() == 2
    scaled = api(lab, "GET", "endpoints/echo")
    assert scaled["spec"]["scaling"]["min_replicas"] == 2
    assert scaled["spec"]["scaling"]["max_replicas"] == 3
    assert scaled["ready_replicas"] == 2
    assert len(scaled["replicas"]) == 2
    newest = echo.locator(".bai-Decisions li").first.inner_text()
    assert re.fullmatch(r"\d+ s ago · 1 → 2: scaling is now 2 to 3 replicas", newest), newest
    page.screenshot(path=str(SHOTS / "endpoint-light.png"))
    shot(shown, "endpoint-light-section.png")
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme',"
        " {theme: 'JupyterLab Dark'})"
    )
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(500)  # the theme's stylesheet applies
    shot(shown, "endpoint-dark-section.png")
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme',"
        " {theme: 'JupyterLab Light'})"
    )

    # Delete asks first; then the section goes with the endpoint.
    echo.locator(".bai-Button", has_text="Delete").click()
    confirm = page.locator(".jp-Dialog", has_text="Delete endpoint echo?")
    assert confirm.locator(".jp-Dialog-body").inner_text() == (
        "Its route /bai/endpoints/echo/ stops answering and its 2 replicas end."
    )
    confirm.locator(".jp-Dialog-content").screenshot(path=str(SHOTS / "endpoint-delete.png"))
    confirm.locator("button.jp-mod-warn").click()
    heading.wait_for(state="detached", timeout=30_000)
    assert api(lab, "GET", "endpoints")["endpoints"] == []


def test_an_endpoint_gone_meanwhile_is_not_scaled_and_says_so(
    lab: Server, page: Any, kernel_image: str, no_endpoint_left: None
) -> None:
    scaling = {"min_replicas": 1, "max_replicas": 1, "window": 5}
    api(lab, "POST", "endpoints", endpoint_request("echo", kernel_image, scaling=scaling))
    echo = page.locator('.bai-Endpoint[data-endpoint="echo"]')
    echo.locator('[data-role="replicas"]', has_text="(fixed at 1)").wait_for(timeout=WAIT)
    echo.locator(".bai-Button", has_text="Scale…").click()
    dialog = page.locator(".jp-Dialog", has_text="Scale endpoint echo")
    dialog.locator("#bai-field-max_replicas").fill("2")
    api(lab, "DELETE", "endpoints/echo")  # someone else, meanwhile
    dialog.locator("button.jp-mod-accept").click()
    failed = page.locator(".jp-Dialog", has_text="Endpoint echo was not scaled")
    failed.wait_for()
    body = failed.locator(".jp-Dialog-body").inner_text()
    assert re.fullmatch(r"no endpoint 'echo' of \S+ \(404 not-found\)", body), body
    # The sidebar no longer shows what is gone, the message still there to read.
    page.locator("#bai-heading-endpoints").wait_for(state="detached", timeout=30_000)
    page.screenshot(path=str(SHOTS / "endpoint-scale-failed.png"))
    failed.locator("button.jp-mod-accept").click()
    failed.wait_for(state="detached")


#: The id of the Jupyter kernel the current notebook holds.
NOTEBOOK_KERNEL = "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id"
#: Saves and closes every open document and the launcher (nothing asks what to do).
CLOSE_ALL = """async () => {
    await window.jupyterapp.commands.execute('docmanager:save-all');
    await window.jupyterapp.commands.execute('application:close-all');
}"""


def run_in_notebook(page: Any, code: str) -> None:
    """Type ``code`` into the current notebook's first cell and run it."""
    notebook = page.locator(".jp-NotebookPanel:visible")  # the current one, not one left open
    notebook.locator(".jp-CodeCell").first.locator(".cm-content").click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")


def wait_notice(page: Any, text: str) -> Any:
    """The bar above the current notebook, once it says ``text`` where one can read it."""
    bar = page.locator(".jp-NotebookPanel:visible .bai-KernelEnd")
    bar.locator(".bai-KernelEnd-text", has_text=text).wait_for(timeout=WAIT)
    box = bar.bounding_box()
    assert box and box["height"] >= 20, box  # laid out, not squeezed to nothing
    return bar


def sessions_of_kernel(lab: Server, kernel_id: str) -> list[dict[str, Any]]:
    return [
        s
        for s in api(lab, "GET", "sessions")["sessions"]
        if s["meta"].get("jupyter_kernel_id") == kernel_id
    ]


def kernel_gone(lab: Server, page: Any, kernel_id: str) -> None:
    """Wait until the Jupyter server no longer lists the kernel."""
    deadline = time.monotonic() + 60
    while kernel_id in {k["id"] for k in lab_request(lab, "GET", "api/kernels")}:
        assert time.monotonic() < deadline, "the notebook's kernel is still listed"
        page.wait_for_timeout(200)


def test_a_notebook_from_the_dialog_runs_in_the_notebooks_folder_and_its_card_goes_with_it(
    lab: Server, page: Any
) -> None:
    """The dialog's Open notebook: the notebook's kernel runs in the file browser's root
    (the notebooks mounted, as for a bai kernelspec's notebook), where it sees a file
    put there. The session's launcher card goes once the session is terminated from the
    sidebar, without a reload."""
    from playwright.sync_api import expect

    put_file(lab, "beside.txt", "next to the notebook")
    create_from_dialog(page, open_notebook=True, name="here", cpu="0.5", mem="256m")
    try:
        page.get_by_text("bai session here | Idle").wait_for(timeout=WAIT)
        page.wait_for_function(NOTEBOOK_HAS_KERNEL, timeout=WAIT)
        kernel_id = page.evaluate(NOTEBOOK_KERNEL)
        run_in_notebook(page, "import os; print(os.getcwd(), sorted(os.listdir()))")
        output = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output", has_text="beside")
        output.wait_for(timeout=WAIT)
        cwd, listing = output.inner_text().split(" ", 1)
        assert cwd == "/home/work/notebooks", output.inner_text()
        assert "'beside.txt'" in listing and ".ipynb'" in listing, listing
        page.screenshot(path=str(SHOTS / "dialog-notebook-cwd.png"))
        # The session's card in JupyterLab's launcher, gone when the session ends.
        page.evaluate("() => window.jupyterapp.commands.execute('launcher:create')")
        notebook_card = (
            '.jp-LauncherCard[data-category="Notebook"][title="Python 3 · bai session here"]'
        )
        cards = page.locator(notebook_card)
        page.locator(f"{notebook_card}:visible").wait_for(timeout=WAIT)
        page.screenshot(path=str(SHOTS / "launcher-session-card.png"))
        terminate(page, "here")
        wait_status(page, "here", "TERMINATED")
        expect(cards).to_have_count(0, timeout=30_000)  # every launcher, no reload
        page.evaluate("() => window.jupyterapp.commands.execute('application:close')")  # launcher
        wait_notice(page, "bai session here was ended (user-requested)")
        page.screenshot(path=str(SHOTS / "dialog-notebook-session-ended.png"))
        kernel_gone(lab, page, kernel_id)
        page.screenshot(path=str(SHOTS / "launcher-session-card-gone.png"))
    finally:
        page.evaluate(CLOSE_ALL)


def test_a_notebook_whose_session_is_terminated_says_who_ended_it_and_stays_ended(
    lab: Server, page: Any
) -> None:
    """Terminate in the sidebar first asks, naming the notebook whose kernel the session
    holds, then ends the notebook's kernel for good: the notebook says
    in words who ended its session and why; Jupyter drops the kernel and starts no new
    session for it."""
    put_notebook(lab, "ended.ipynb", "x = 1", kernelspec="bai-warm")
    page.evaluate(OPEN_NOTEBOOK, "ended.ipynb")
    try:
        page.wait_for_function(NOTEBOOK_HAS_KERNEL, timeout=WAIT)
        page.locator(".bai-StatusItem", has_text="bai: RUNNING").wait_for(timeout=WAIT)
        kernel_id = page.evaluate(NOTEBOOK_KERNEL)
        (session,) = sessions_of_kernel(lab, kernel_id)
        bar = page.locator(f'.bai-KernelEnd[data-kernel-id="{kernel_id}"]')
        assert bar.is_hidden()
        name = session["name"] or session["id"][:8]  # the card's label
        card(page, name).locator(".bai-Button", has_text="Terminate").click()
        confirm = page.locator(".jp-Dialog", has_text=f"Terminate session {name}?")
        # The question says the session holds this notebook's kernel, and what is lost.
        confirm.get_by_text(
            "It runs the kernel of your notebook ended.ipynb: what that kernel holds is "
            "lost, and it does not restart."
        ).wait_for()
        shots_light_and_dark(page, confirm.locator(".jp-Dialog-content"), "terminate-own-notebook")
        confirm.locator("button.jp-mod-warn").click()
        said = (
            f"bai session {session['name'] or session['id']} was ended (user-requested) "
            f"by {session['owner']}; its kernel does not restart: start a new one"
        )
        assert wait_notice(page, said).get_attribute("data-kernel-id") == kernel_id
        page.screenshot(path=str(SHOTS / "notebook-session-ended.png"))
        kernel_gone(lab, page, kernel_id)
        # Nothing restarts it: no new session for the kernel while we look.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert [s["id"] for s in sessions_of_kernel(lab, kernel_id)] == [session["id"]]
            page.wait_for_timeout(500)
    finally:
        page.evaluate(CLOSE_ALL)


def test_a_notebook_whose_session_died_says_it_restarted_on_a_new_session(
    lab: Server, page: Any, docker_engine: Any
) -> None:
    """main1 killed: the session died (not ended on purpose), Jupyter restarts the
    kernel on a new session, and the notebook says which."""
    put_notebook(lab, "died.ipynb", "x = 1", kernelspec="bai-warm")
    page.evaluate(OPEN_NOTEBOOK, "died.ipynb")
    try:
        page.wait_for_function(NOTEBOOK_HAS_KERNEL, timeout=WAIT)
        page.locator(".bai-StatusItem", has_text="bai: RUNNING").wait_for(timeout=WAIT)
        kernel_id = page.evaluate(NOTEBOOK_KERNEL)
        (died,) = sessions_of_kernel(lab, kernel_id)
        label = f"{LABEL_SESSION}={died['id']}"
        (main1,) = docker_engine.containers.list(filters={"label": label})
        main1.kill()
        bar = wait_notice(page, "its kernel restarted on a new session")
        (ended, new) = sessions_of_kernel(lab, kernel_id)
        assert ended["id"] == died["id"] and ended["end_notice"] is None, ended
        assert bar.locator(".bai-KernelEnd-text").inner_text() == (
            f"bai session {died['id'][:8]} ended ({ended['status_info']}): "
            f"its kernel restarted on a new session, {new['id'][:8]}; what the old one held is gone"
        )
        assert new["status"] == "RUNNING", new
        page.wait_for_function(NOTEBOOK_HAS_KERNEL, timeout=WAIT)  # no shutdown mid-restart
        page.screenshot(path=str(SHOTS / "notebook-session-died.png"))
    finally:
        page.evaluate(CLOSE_ALL)


# --- words, sizes and order a person reads (issue 29) ------------------------------------------


def test_an_agent_named_after_its_backend_is_not_named_twice(lab: Server, page: Any) -> None:
    """The lab's one agent is ``docker`` on the docker backend: "docker · 1 kernel", never
    "docker · docker · 1 kernel"."""
    head = page.locator('.bai-Agent[data-agent-id="docker"] .bai-Agent-head')
    head.wait_for(timeout=WAIT)
    assert re.fullmatch(r"docker · \d+ kernels?", head.inner_text().strip()), head.inner_text()
    agents = page.locator('section[aria-labelledby="bai-heading-agents"]')
    shots_light_and_dark(page, agents, "agents-section")


def test_the_dialog_shows_every_error_at_once_outlining_only_the_fields_at_fault(
    lab: Server, page: Any
) -> None:
    """Three wrong fields: three messages at once, each slot named, only those inputs
    outlined, and the dialog as wide as it was."""
    dialog = fill_dialog(page, name="errors")
    content = dialog.locator(".jp-Dialog-content")
    accept = dialog.locator("button.jp-mod-accept")
    page.wait_for_function("b => !b.disabled", arg=accept.element_handle(), timeout=30_000)
    width = content.bounding_box()["width"]
    dialog.locator("#bai-field-cluster_size").fill("0")
    dialog.locator("#bai-field-cpu").fill("abc")
    dialog.locator("#bai-field-mem").fill("-1")
    resources = dialog.locator("#bai-msg-resources")
    resources.filter(has_text="mem:").wait_for(timeout=30_000)
    assert resources.inner_text().splitlines() == [
        "cpu: cannot parse 'abc' as an amount",
        "mem: amount must not be negative, got '-1'",
    ]
    size = dialog.locator("#bai-msg-cluster_size").inner_text()
    assert size == "must be an integer from 1 to 64, got 0", size
    faulty = dialog.locator("[aria-invalid='true']").evaluate_all("els => els.map(e => e.id)")
    assert sorted(faulty) == ["bai-field-cluster_size", "bai-field-cpu", "bai-field-mem"]
    border = "id => getComputedStyle(document.getElementById(id)).borderTopColor"
    assert page.evaluate(border, "bai-field-cpu") != page.evaluate(border, "bai-field-gpu")
    assert content.bounding_box()["width"] == width
    assert accept.is_disabled()
    shots_light_and_dark(page, content, "dialog-every-error")
    dialog.locator("button.jp-mod-reject").click()


def test_a_failure_in_a_dialog_names_the_session_and_wraps(lab: Server, page: Any) -> None:
    """Interrupt a session that ended while the question was open: the failure names it
    (no 32-character id) in lines that fit the dialog, no sideways scrolling."""
    made = api(lab, "POST", "sessions", {"name": "gone", "resources": {"cpu": "0.25"}})
    wait_status(page, "gone", "RUNNING")
    card(page, "gone").locator(".bai-Button", has_text="Interrupt").click()
    confirm = page.locator(".jp-Dialog", has_text="Interrupt gone?")
    confirm.wait_for()
    api(lab, "DELETE", f"sessions/{made['id']}")
    wait_status(page, "gone", "TERMINATED")
    confirm.locator("button.jp-mod-warn").click()
    failed = page.locator(".jp-Dialog", has_text="Interrupt failed")
    body = failed.locator(".bai-DialogError")
    body.wait_for()
    text = body.inner_text()
    assert text == "session gone has ended (TERMINATED) (409 conflict)", text
    fits = """e => [e, e.closest('.jp-Dialog-body')].every(n => n.scrollWidth <= n.clientWidth)"""
    assert page.evaluate(fits, body.element_handle())
    shots_light_and_dark(page, failed.locator(".jp-Dialog-content"), "dialog-failure")
    failed.locator("button.jp-mod-accept").click()


def test_every_occupancy_bar_is_visible_at_the_default_sidebar_width(
    lab: Server, page: Any
) -> None:
    """A track that leaves its text room but is itself seen, and a fill of a few pixels
    for the smallest share held (not a fraction of a pixel)."""
    agent = page.locator('.bai-Agent[data-agent-id="docker"]')
    agent.wait_for(timeout=WAIT)
    for bar in agent.locator(".bai-Bar").all():
        track = bar.locator(".bai-Bar-track").bounding_box()
        fill = bar.locator(".bai-Bar-fill").bounding_box()
        held = int(bar.locator(".bai-Bar-track").get_attribute("aria-valuenow") or 0)
        assert track["width"] >= 48, (bar.inner_text(), track)
        assert not held or fill["width"] >= 3, (bar.inner_text(), fill)


def test_ended_sessions_are_listed_by_when_they_ended(lab: Server, page: Any) -> None:
    """Made first, ended last: it leads the ended ones (not the order they were made in)."""
    later = time.time() + 86400  # queued until then: nothing to start
    made = [
        api(lab, "POST", "sessions", {"name": name, "starts_at": later})
        for name in ("made-first", "made-second")
    ]
    for session in reversed(made):  # the second ends first
        api(lab, "DELETE", f"sessions/{session['id']}")
        wait_status(page, session["name"], "CANCELLED")
    cards = page.locator(".bai-SessionList > li")
    names = [n for n in cards.locator(".bai-Session-name").all_inner_texts() if "made-" in n]
    assert names == ["made-first", "made-second"], names
