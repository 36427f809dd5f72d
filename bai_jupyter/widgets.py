"""ipywidgets views of sessions: a launcher form, a live sessions table, session cards.

Two layers, so the logic is testable without a browser: :class:`SessionsModel`
holds what the views show and is updated from API replies and event dicts
(:class:`LiveSessions` feeds it from the server's event stream, no polling);
the widgets only render the model and send the user's clicks to the server.
Widgets never block the kernel: coroutines go to a :class:`Runner` (the magics
pass their private event loop thread) and results come back as callbacks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import html
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import ipywidgets as w  # type: ignore[import-untyped]  # ships no type information

from .client import RemoteManager
from .errors import BaiError, NotFound
from .model import ClusterMode, SessionType, Status
from .resources import ResourceError, ResourceSlot
from .templates import SpecError, Template, merge, parse_spec, validate_partial
from .wire import session_to_json

__all__ = [
    "Launcher",
    "LiveSessions",
    "Runner",
    "SessionCard",
    "SessionRow",
    "SessionsModel",
    "SessionsView",
    "build_request",
    "check_request",
    "kernels_summary",
    "queue_positions",
    "why_pending",
]

T = TypeVar("T")
_STARTING = {s.value for s in (Status.SCHEDULED, Status.PREPARING, Status.PULLING)} | {
    Status.PREPARED.value,
    Status.CREATING.value,
}
_TERMINAL = {s.value for s in Status if s.is_terminal}


class Runner(Protocol):
    """Where widgets run coroutines: an event loop that is not the kernel's own."""

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]: ...


# --- the model ----------------------------------------------------------------------------------


def why_pending(session: Mapping[str, Any]) -> str | None:
    """The scheduler's reason a pending session waits, in one line (None if it has none)."""
    if session.get("status") != Status.PENDING.value:
        return None
    record = (session.get("status_data") or {}).get("scheduler") or {}
    reasons = [str(p.get("msg") or p.get("name")) for p in record.get("failed_predicates") or []]
    if record.get("msg"):
        reasons.append(str(record["msg"]))
    return "; ".join(dict.fromkeys(reasons)) or None


def queue_positions(scheduler: Mapping[str, Any]) -> dict[str, int]:
    """Session id → position in its resource group's pending queue (1 = next)."""
    positions: dict[str, int] = {}
    for group in (scheduler.get("resource_groups") or {}).values():
        for entry in group.get("queue") or []:
            if entry.get("session_id"):
                positions[entry["session_id"]] = int(entry["position"])
    return positions


def kernels_summary(kernels: Mapping[str, str]) -> str:
    """``main1,sub1 RUNNING`` when all agree, else each host with its own state."""
    states = set(kernels.values())
    if len(states) == 1:
        return f"{','.join(kernels)} {next(iter(states))}"
    return " ".join(f"{host}:{state}" for host, state in kernels.items())


@dataclass
class SessionRow:
    """One session as the views show it, from the API's session JSON."""

    id: str
    name: str | None
    type: str
    status: str
    status_info: str | None
    kernels: dict[str, str]
    resources: str
    image: str | None
    result: str
    exit_code: int | None
    created_at: float
    why_pending: str | None = None
    queue_position: int | None = None
    services: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionRow:
        spec = data.get("spec") or {}
        return cls(
            id=data["id"],
            name=data.get("name"),
            type=str(spec.get("type", "")),
            status=data["status"],
            status_info=data.get("status_info"),
            kernels={k["hostname"]: k["status"] for k in data.get("kernels") or []},
            resources=ResourceSlot(spec.get("resources") or {}).describe(),
            image=spec.get("image"),
            result=str(data.get("result", "UNDEFINED")),
            exit_code=data.get("exit_code"),
            created_at=float(data.get("created_at", 0)),
            why_pending=why_pending(data),
            services=list(data.get("services") or []),
        )

    @property
    def label(self) -> str:
        """The short id, with the name when there is one."""
        return f"{self.id[:8]} ({self.name})" if self.name else self.id[:8]

    @property
    def ended(self) -> bool:
        return self.status in _TERMINAL

    @property
    def phase(self) -> str:
        """Where a session is in queued → starting → running → result."""
        if self.status == Status.PENDING.value:
            return "queued"
        if self.status in _STARTING:
            return "starting"
        if self.ended:
            return "result"
        return "running"

    @property
    def outcome(self) -> str:
        """How it ended: the batch result and exit code, or the status and why."""
        if self.result != "UNDEFINED":
            return f"{self.result} (exit code {self.exit_code})"
        return f"{self.status} ({self.status_info})" if self.status_info else self.status


class SessionsModel:
    """The caller's sessions by id, kept current by API replies and events.

    Listeners are called after every change, on the thread that made it.
    """

    def __init__(self) -> None:
        self.rows: dict[str, SessionRow] = {}
        self._positions: dict[str, int] = {}
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def load(self, sessions: list[dict[str, Any]], scheduler: Mapping[str, Any]) -> None:
        """Replace everything with a full listing and the scheduler's queue."""
        self.rows = {s["id"]: SessionRow.from_json(s) for s in sessions}
        self._set_positions(scheduler)
        self._changed()

    def update(self, session: Mapping[str, Any]) -> None:
        """One session as the API gives it (``GET sessions/{id}``)."""
        row = SessionRow.from_json(session)
        row.queue_position = self._positions.get(row.id) if row.phase == "queued" else None
        self.rows[row.id] = row
        self._changed()

    def apply_event(self, event: Mapping[str, Any]) -> bool:
        """The status and kernel states of an event; False for a session not known yet."""
        row = self.rows.get(str(event.get("session_id")))
        if row is None or event.get("type") != "session":
            return False
        row.status = event["status"]
        row.status_info = event.get("status_info")
        row.kernels = dict(event.get("kernels") or row.kernels)
        if row.phase != "queued":
            row.queue_position = row.why_pending = None
        self._changed()
        return True

    def set_queue(self, scheduler: Mapping[str, Any]) -> None:
        """Queue positions from the scheduler's reply (``GET scheduler``)."""
        self._set_positions(scheduler)
        self._changed()

    def _set_positions(self, scheduler: Mapping[str, Any]) -> None:
        self._positions = queue_positions(scheduler)
        for row in self.rows.values():
            row.queue_position = self._positions.get(row.id) if row.phase == "queued" else None

    @property
    def pending(self) -> bool:
        return any(row.phase == "queued" for row in self.rows.values())

    def visible(self, all_states: bool = False) -> list[SessionRow]:
        """Oldest first; ended sessions only with ``all_states``."""
        rows = sorted(self.rows.values(), key=lambda r: r.created_at)
        return rows if all_states else [r for r in rows if not r.ended]


class LiveSessions:
    """Feeds a :class:`SessionsModel` from the server's event stream until cancelled.

    Each event updates the row at once, then the session is re-read for what
    events do not carry (why it is pending, services, result) and, while
    anything is pending, the queue positions. Nothing is polled.
    """

    def __init__(self, remote: RemoteManager, model: SessionsModel) -> None:
        self.remote = remote
        self.model = model
        #: Set once the event stream is being read and the first listing is loaded.
        self.ready = asyncio.Event()

    async def run(self) -> None:
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def listen() -> None:
            async for event in self.remote.events():
                events.put_nowait(event)

        listener = asyncio.ensure_future(listen())
        try:
            await self._reload()
            self.ready.set()
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait(
                    {getter, listener}, return_when=asyncio.FIRST_COMPLETED
                )
                if getter not in done:
                    getter.cancel()
                    listener.result()  # the stream failed: raise why
                    return
                await self._on_event(getter.result())
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    async def _reload(self) -> None:
        """The full listing; live sessions re-read for their services' proxy URLs."""
        listing = [session_to_json(s) for s in await self.remote.list()]
        for i, session in enumerate(listing):
            if session["status"] not in _TERMINAL:
                with contextlib.suppress(NotFound):
                    listing[i] = await self.remote.get_json(session["id"])
        self.model.load(listing, await self.remote.scheduler())

    async def _on_event(self, event: dict[str, Any]) -> None:
        self.model.apply_event(event)
        with contextlib.suppress(NotFound):  # gone meanwhile (another owner's, or removed)
            self.model.update(await self.remote.get_json(str(event["session_id"])))
        if self.model.pending:
            self.model.set_queue(await self.remote.scheduler())


# --- the launcher's logic -----------------------------------------------------------------------


def build_request(
    *,
    name: str = "",
    image: str = "",
    type: str = SessionType.INTERACTIVE.value,
    cluster_size: int = 1,
    cluster_mode: str = ClusterMode.SINGLE_NODE.value,
    cpu: str = "",
    mem: str = "",
    startup_command: str = "",
) -> dict[str, Any]:
    """A session request from the launcher's fields; empty text fields are left out."""
    request: dict[str, Any] = {
        "type": type,
        "cluster_size": cluster_size,
        "cluster_mode": cluster_mode,
    }
    for key, value in (("name", name), ("image", image), ("startup_command", startup_command)):
        if value.strip():
            request[key] = value.strip()
    resources = {slot: v.strip() for slot, v in (("cpu", cpu), ("mem", mem)) if v.strip()}
    if resources:
        request["resources"] = resources
    return request


def check_request(request: Mapping[str, Any], template: Template | None = None) -> str | None:
    """What is wrong with ``request`` over ``template`` (the server's own rules), or None."""
    try:
        validate_partial(request)
        parse_spec(merge(template.spec, request) if template is not None else request)
    except (SpecError, ResourceError) as exc:
        return str(exc)
    return None


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
        self.type = w.Dropdown(
            options=[t.value for t in SessionType if t is not SessionType.SYSTEM],
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
    """One session: its state, kernels and service-port links, and a terminate button."""

    def __init__(self, row: SessionRow, remote: RemoteManager, runner: Runner) -> None:
        self.remote, self.runner = remote, runner
        self.info = w.HTML()
        self.terminate = w.Button(description="Terminate", button_style="danger")
        self.message = w.HTML()
        self.terminate.on_click(lambda _button: self.end())
        super().__init__([self.info, w.HBox([self.terminate, self.message])])
        self.row = row
        self.update(row)

    def update(self, row: SessionRow) -> None:
        self.row = row
        state = row.status if not row.ended else row.outcome
        if row.why_pending:
            state += f" — #{row.queue_position or '?'} in the queue: {row.why_pending}"
        self.info.value = (
            f"<b>{html.escape(row.label)}</b> {html.escape(row.type)} · "
            f"{html.escape(state)}<br>kernels: {html.escape(kernels_summary(row.kernels))} · "
            f"{html.escape(row.resources)} each<br>services: {_services_html(row)}"
        )
        self.terminate.disabled = row.ended
        self.terminate.description = "Cancel" if row.phase == "queued" else "Terminate"

    def end(self) -> concurrent.futures.Future[Any]:
        """Cancel (pending) or terminate the session."""
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
            row.outcome if row.ended else row.status,
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
    ) -> None:
        self.remote, self.runner = remote, runner
        self.all_states, self.only = all_states, only
        self.model = SessionsModel()
        self.live = LiveSessions(remote, self.model)
        self.table = w.HTML()
        self.cards: dict[str, SessionCard] = {}
        self.card_box = w.VBox()
        self.status = w.HTML()
        parts = [self.card_box, self.status]
        super().__init__(parts if only else [self.table, *parts])
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
            self.table.value = _table_html(rows)
            for row in rows:
                card = self.cards.get(row.id)
                if card is None:
                    self.cards[row.id] = SessionCard(row, self.remote, self.runner)
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

    def close(self) -> None:
        """Stop the live updates and remove the view."""
        self._feed.cancel()
        super().close()
