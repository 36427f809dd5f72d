"""ipywidgets views of sessions: a launcher form, a live sessions table, session cards.

The widgets only render a :class:`~bai_jupyter.sessions_model.SessionsModel` (kept
current from the server's event stream by :class:`~bai_jupyter.sessions_model.LiveSessions`)
and send the user's clicks to the server. They never block the kernel:
coroutines go to a :class:`~bai_jupyter.sessions_model.Runner` (the magics pass their
private event loop thread) and results come back as callbacks.
"""

from __future__ import annotations

import concurrent.futures
import html
import os
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as w  # type: ignore[import-untyped]  # ships no type information

from .client import RemoteManager
from .errors import BaiError
from .model import ClusterMode, SessionType, Status
from .request import Template
from .sessions_model import (
    LiveSessions,
    Runner,
    SessionRow,
    SessionsModel,
    build_request,
    check_request,
    kernels_summary,
)
from .text import cluster_text, counts_text, runs_in_containers

__all__ = ["Launcher", "SessionCard", "SessionsView"]


# --- widgets ------------------------------------------------------------------------------------


def _error_html(text: str) -> str:
    return f'<span style="color:#c62828">{html.escape(text)}</span>'


def _report(future: concurrent.futures.Future[Any], show: Callable[[str], None], done: str) -> None:
    """Show ``done`` (formatted with the result) or the error of a finished request."""
    if future.cancelled():
        return
    exc = future.exception()
    if isinstance(exc, BaiError):
        show(_error_html(exc.message))
    elif exc is not None:
        show(_error_html(f"{type(exc).__name__}: {exc}"))
    else:
        show(html.escape(done.format(future.result())))


class Launcher(w.VBox):  # type: ignore[misc]  # VBox is untyped (Any)
    """A form that creates a session; it checks the request on every keystroke."""

    def __init__(self, remote: RemoteManager, runner: Runner, templates: list[Template]) -> None:
        self.remote, self.runner = remote, runner
        self.templates = {t.name: t for t in templates}
        style = {"description_width": "8em"}
        self.template = w.Dropdown(
            options=[("(none)", ""), *((n, n) for n in self.templates)],
            description="template",
            style=style,
        )
        self.name = w.Text(description="name", placeholder="optional", style=style)
        self.image = w.Text(description="image", placeholder="server default", style=style)
        # The JupyterLab dialog's types: inference sessions are an endpoint's replicas.
        self.type = w.Dropdown(
            options=[t.value for t in SessionType if t is not SessionType.INFERENCE],
            description="type",
            style=style,
        )
        self.cluster_size = w.IntText(value=1, description="cluster size", style=style)
        self.cluster_mode = w.Dropdown(
            options=[m.value for m in ClusterMode], description="cluster mode", style=style
        )
        self.cpu = w.Text(description="cpu", placeholder="e.g. 2", style=style)
        self.mem = w.Text(description="mem", placeholder="e.g. 4g", style=style)
        self.startup_command = w.Text(description="command", placeholder="batch only", style=style)
        self.create = w.Button(description="Create session", button_style="primary")
        self.message = w.HTML()
        fields = [
            self.template,
            self.name,
            self.image,
            self.type,
            self.cluster_size,
            self.cluster_mode,
            self.cpu,
            self.mem,
            self.startup_command,
        ]
        super().__init__([*fields, self.create, self.message])
        self.template.observe(self._fill_from_template, "value")
        for widget in fields:
            widget.observe(lambda _change: self.validate(), "value")
        self.create.on_click(lambda _button: self.submit())
        self.validate()

    def _fill_from_template(self, change: dict[str, Any]) -> None:
        spec = self.templates[change["new"]].spec if change["new"] else {}
        resources = spec.get("resources") or {}
        self.image.value = str(spec.get("image") or "")
        self.type.value = str(spec.get("type") or SessionType.INTERACTIVE.value)
        self.cluster_size.value = int(spec.get("cluster_size") or 1)
        self.cluster_mode.value = str(spec.get("cluster_mode") or ClusterMode.SINGLE_NODE.value)
        self.cpu.value = str(resources.get("cpu") or "")
        self.mem.value = str(resources.get("mem") or "")
        self.startup_command.value = str(spec.get("startup_command") or "")

    def request(self) -> dict[str, Any]:
        return build_request(
            name=self.name.value,
            image=self.image.value,
            type=self.type.value,
            cluster_size=self.cluster_size.value,
            cluster_mode=self.cluster_mode.value,
            cpu=self.cpu.value,
            mem=self.mem.value,
            startup_command=self.startup_command.value,
        )

    def validate(self) -> str | None:
        """Show what is wrong (and disable Create), or that the request is fine."""
        error = check_request(self.request(), self.templates.get(self.template.value))
        self.create.disabled = error is not None
        self.message.value = _error_html(error) if error else ""
        return error

    def submit(self) -> concurrent.futures.Future[Any] | None:
        """Create the session; the outcome is shown under the form when the server answers."""
        if self.validate() is not None:
            return None
        self.create.disabled = True
        self.message.value = "creating …"
        future = self.runner.submit(
            self.remote.create(self.request(), template=self.template.value or None)
        )

        def finished(done: concurrent.futures.Future[Any]) -> None:
            self.create.disabled = False
            _report(done, self._show, "session {0.id} created ({0.status.value})")

        future.add_done_callback(finished)
        return future

    def _show(self, text: str) -> None:
        self.message.value = text


def _services_html(row: SessionRow) -> str:
    links = []
    for service in row.services:
        label = html.escape(f"{service['name']} ({service['protocol']}:{service['port']})")
        if service.get("url") and row.status == Status.RUNNING.value:
            url = html.escape(str(service["url"]), quote=True)
            links.append(f'<a href="{url}" target="_blank" rel="noopener">{label}</a>')
        else:
            links.append(label)
    return ", ".join(links) or "none"


class SessionCard(w.VBox):  # type: ignore[misc]  # VBox is untyped (Any)
    """One session: its state, kernels and service-port links, and a terminate button
    that asks first (as the sidebar does), saying when the session holds this kernel."""

    def __init__(
        self,
        row: SessionRow,
        remote: RemoteManager,
        runner: Runner,
        agents: list[dict[str, Any]] | None = None,
    ) -> None:
        """``agents`` (``GET agents``): show the session in full, as ``%bai status
        SESSION --text`` prints it (its image only where it runs in containers)."""
        self.remote, self.runner = remote, runner
        self.agents = agents
        self.info = w.HTML()
        self.detail = w.HTML()
        self.terminate = w.Button(description="Terminate", button_style="danger")
        self.message = w.HTML()
        self.confirm = w.Button(button_style="danger")
        self.keep = w.Button(description="Keep it")
        self.question = w.HBox([self.confirm, self.keep])
        self.question.layout.display = "none"
        self.terminate.on_click(lambda _button: self.ask())
        self.confirm.on_click(lambda _button: self.end())
        self.keep.on_click(lambda _button: self._answered())
        super().__init__(
            [self.info, self.detail, w.HBox([self.terminate, self.message]), self.question]
        )
        self.row = row
        self.update(row)

    def ask(self) -> None:
        """Ask before ending the session; nothing is done until the answer."""
        cancel = self.row.phase == "queued"
        what = "cancel" if cancel else "terminate"
        text = f"{what.capitalize()} session {self.row.label}?"
        if self.row.id == os.environ.get("BACKENDAI_SESSION_ID"):
            text += " It runs this notebook's own kernel: its state is lost, and the kernel ends."
        elif not cancel:
            text += " Its kernels end, with what they hold in memory."
        self.message.value = html.escape(text)
        self.confirm.description = f"Yes, {what}"
        self.terminate.disabled = True
        self.question.layout.display = None

    def _answered(self) -> None:
        self.question.layout.display = "none"
        self.message.value = ""
        self.terminate.disabled = self.row.ended

    def update(self, row: SessionRow) -> None:
        self.row = row
        state = row.status if not row.ended else row.outcome
        if row.why_pending:
            state += f" — #{row.queue_position or '?'} in the queue: {row.why_pending}"
        if row.pulling:
            state += f" — {row.pulling}"
        self.info.value = (
            f"<b>{html.escape(row.label)}</b> {html.escape(row.type)} · "
            f"{html.escape(state)}<br>kernels: {html.escape(kernels_summary(row.kernels))} · "
            f"{html.escape(row.resources)} each<br>services: {_services_html(row)}"
        )
        if self.agents is not None and row.data:
            containers = runs_in_containers(row.data, self.agents)
            text = cluster_text(self.remote, row.data, containers)
            self.detail.value = f"<pre>{html.escape(text)}</pre>"
        asking = self.question.layout.display != "none"
        self.terminate.disabled = row.ended or asking
        self.terminate.description = "Cancel" if row.phase == "queued" else "Terminate"

    def end(self) -> concurrent.futures.Future[Any]:
        """Cancel (pending) or terminate the session (the answer to :meth:`ask`)."""
        self.question.layout.display = "none"
        self.terminate.disabled = True
        future = self.runner.submit(self.remote.destroy(self.row.id))
        future.add_done_callback(
            lambda done: _report(done, self._show, "{0.status.value} ({0.status_info})")
        )
        return future

    def _show(self, text: str) -> None:
        self.message.value = text


_COLUMNS = ("session", "type", "status", "queue", "why pending", "kernels", "resources")


def _table_html(rows: list[SessionRow]) -> str:
    if not rows:
        return "<i>no sessions</i>"
    head = "".join(f"<th style='text-align:left'>{c}</th>" for c in _COLUMNS)
    body = []
    for row in rows:
        cells = (
            row.label,
            row.type,
            row.outcome
            if row.ended
            else (f"{row.status}: {row.pulling}" if row.pulling else row.status),
            str(row.queue_position or ""),
            row.why_pending or "",
            kernels_summary(row.kernels),
            row.resources,
        )
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


class SessionsView(w.VBox):  # type: ignore[misc]  # VBox is untyped (Any)
    """The caller's sessions, live: a table and a card per session (or one session's card)."""

    def __init__(
        self,
        remote: RemoteManager,
        runner: Runner,
        all_states: bool = False,
        only: str | None = None,
        agents: list[dict[str, Any]] | None = None,
    ) -> None:
        """``only``: one session's card, in full where ``agents`` are given (see
        :class:`SessionCard`); else a counts line, the table and a card per session."""
        self.remote, self.runner = remote, runner
        self.all_states, self.only, self.agents = all_states, only, agents
        self.model = SessionsModel()
        self.live = LiveSessions(remote, self.model)
        self.counts = w.HTML()
        self.table = w.HTML()
        self.cards: dict[str, SessionCard] = {}
        self.card_box = w.VBox()
        self.status = w.HTML()
        parts = [self.card_box, self.status]
        super().__init__(parts if only else [self.counts, self.table, *parts])
        self._lock = threading.Lock()
        self.model.on_change(self.render)
        self.render()
        self._feed = runner.submit(self.live.run())
        self._feed.add_done_callback(self._ended)

    def rows(self) -> list[SessionRow]:
        if self.only is not None:
            return [r for r in self.model.rows.values() if self.only in (r.id, r.name)]
        return self.model.visible(self.all_states)

    def render(self) -> None:
        """Redraw from the model (called on every model change)."""
        with self._lock:
            rows = self.rows()
            live = [row for row in rows if not row.ended]
            self.counts.value = html.escape(counts_text(live))
            self.table.value = _table_html(rows)
            for row in rows:
                card = self.cards.get(row.id)
                if card is None:
                    self.cards[row.id] = SessionCard(row, self.remote, self.runner, self.agents)
                else:
                    card.update(row)
            shown = {row.id for row in rows}
            for gone in set(self.cards) - shown:
                self.cards.pop(gone).close()
            self.card_box.children = [self.cards[row.id] for row in rows]

    def _ended(self, future: concurrent.futures.Future[None]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        reason = exc.message if isinstance(exc, BaiError) else str(exc or "the server went away")
        self.status.value = _error_html(f"live updates stopped: {reason}")

    @property
    def updating(self) -> bool:
        """Whether the view still follows the server's events."""
        return not self._feed.done()

    def stop(self, reason: str) -> None:
        """Stop the live updates (and close their event stream), saying why on the view."""
        self._feed.cancel()
        self.status.value = _error_html(f"live updates stopped: {reason}")

    def close(self) -> None:
        """Stop the live updates and remove the view."""
        self._feed.cancel()
        if self in _LIVE:
            _LIVE.remove(self)
        super().close()


#: Live views of this kernel, oldest first; each holds an event stream to the server.
_LIVE: list[SessionsView] = []
#: Older views stop updating (a cleared output does not close a widget).
MAX_LIVE_VIEWS = 3


def live_view(view: SessionsView) -> SessionsView:
    """Register a new view; the oldest beyond :data:`MAX_LIVE_VIEWS` stop updating."""
    _LIVE.append(view)
    while len(_LIVE) > MAX_LIVE_VIEWS:
        _LIVE.pop(0).stop("a newer view took over (run the command again to refresh)")
    return view
