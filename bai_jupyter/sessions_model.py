"""What the session views show, kept current from the API and its event stream.

The model layer under the widgets (``widgets.py``) and the magics' tables: plain
Python, no ipywidgets, so it also runs in a kernel image that has only IPython
and can be tested without a browser. :class:`SessionsModel` is updated from API
replies and event dicts; :class:`LiveSessions` feeds it from the server's event
stream (no polling).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .client import RemoteManager
from .errors import Forbidden, NotFound, Unavailable
from .loops import Backoff
from .model import NOT_ENDED, STARTING, TERMINAL, ClusterMode, SessionType, Status
from .request import SpecError, Template, merge, parse_spec, validate_partial
from .resources import ResourceError, ResourceSlot
from .wire import session_to_json

__all__ = [
    "LiveSessions",
    "Runner",
    "SessionRow",
    "SessionsModel",
    "build_request",
    "check_request",
    "kernels_summary",
    "load_rows",
    "pulling_text",
    "queue_positions",
    "why_pending",
]

T = TypeVar("T")
_STARTING = {s.value for s in STARTING}
_TERMINAL = {s.value for s in TERMINAL}


class Runner(Protocol):
    """Where widgets run coroutines: an event loop that is not the kernel's own."""

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]: ...


# --- the model ----------------------------------------------------------------------------------


def why_pending(session: Mapping[str, Any]) -> str | None:
    """The API's ``pending_reason`` while the session is pending (None otherwise, or if the
    scheduler has not said why yet)."""
    if session.get("status") != Status.PENDING.value:
        return None
    reason = session.get("pending_reason")
    return str(reason) if reason else None


#: How each phase of an agent's image fetch reads (``status_data["pulling"]``).
_PULL_PHASES = {
    "waiting": "waiting",
    "pulling": "pulling",
    "copying": "copying",
    "loading": "loading into the engine",
    "done": "done",
}


def pulling_text(session: Mapping[str, Any]) -> str | None:
    """While PULLING: each agent's fetch of the image, e.g. ``node2: copying from node1
    43%``; ``loading`` once every byte is sent and the engine adds the layers."""
    if session.get("status") != Status.PULLING.value:
        return None
    record = (session.get("status_data") or {}).get("pulling") or {}
    parts = []
    for agent, entry in (record.get("agents") or {}).items():
        phase = str(entry.get("phase") or "")
        text = f"{agent}: {_PULL_PHASES.get(phase, phase or 'fetching')}"
        if phase in ("pulling", "copying") and entry.get("from") not in (None, "registry"):
            text += f" from {entry['from']}"
        if phase in ("pulling", "copying") and "progress" in entry:
            text += f" {int(100 * float(entry['progress']))}%"
        parts.append(text)
    return f"image {record.get('image', '?')}: " + ", ".join(parts) if parts else None


def queue_positions(groups: Mapping[str, Any]) -> dict[str, int]:
    """Session id → position in its resource group's pending queue (1 = next).

    ``groups``: the API's queue view, resource group → ``{"queue": [...]}``."""
    positions: dict[str, int] = {}
    for group in groups.values():
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


def resources_text(amounts: Mapping[str, Any] | None) -> str:
    """Per-kernel slots for people; none asked for means no limits are set on the kernel."""
    slots = ResourceSlot(amounts or {})
    return slots.describe() if slots else "no limits"


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
    pulling: str | None = None
    services: list[dict[str, Any]] = field(default_factory=list)
    #: The API's session JSON the row was made from (what ``%bai status --text`` prints).
    data: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

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
            resources=resources_text(spec.get("resources")),
            image=spec.get("image"),
            result=str(data.get("result", "UNDEFINED")),
            exit_code=data.get("exit_code"),
            created_at=float(data.get("created_at", 0)),
            why_pending=why_pending(data),
            pulling=pulling_text(data),
            services=list(data.get("services") or []),
            data=dict(data),
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

    def load(self, sessions: list[dict[str, Any]], groups: Mapping[str, Any]) -> None:
        """Replace everything with a full listing and the queue view (resource groups)."""
        self.rows = {s["id"]: SessionRow.from_json(s) for s in sessions}
        self._set_positions(groups)
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
        if row.status != Status.PULLING.value:
            row.pulling = None
        self._changed()
        return True

    def set_queue(self, groups: Mapping[str, Any]) -> None:
        """Queue positions from the queue view (the API's ``resource_groups``)."""
        self._set_positions(groups)
        self._changed()

    def _set_positions(self, groups: Mapping[str, Any]) -> None:
        self._positions = queue_positions(groups)
        for row in self.rows.values():
            row.queue_position = self._positions.get(row.id) if row.phase == "queued" else None

    @property
    def pending(self) -> bool:
        return any(row.phase == "queued" for row in self.rows.values())

    def visible(self, all_states: bool = False) -> list[SessionRow]:
        """Oldest first; ended sessions only with ``all_states``."""
        rows = sorted(self.rows.values(), key=lambda r: r.created_at)
        return rows if all_states else [r for r in rows if not r.ended]


#: Reopenings in a row of a cut event stream before the live view stops (about 14 s).
_TRIES = 5


class LiveSessions:
    """Feeds a :class:`SessionsModel` from the server's event stream until cancelled.

    Each event updates the row at once, then the session is re-read for what
    events do not carry (why it is pending, services, result) and, while
    anything is pending, the queue positions. Nothing is polled. A stream that is
    cut (its manager replica went, the server restarts) is reopened after its last
    event (``since``): the store replays what happened meanwhile; it stops only once
    ``_TRIES`` reopenings in a row failed.
    """

    def __init__(self, remote: RemoteManager, model: SessionsModel) -> None:
        self.remote = remote
        self.model = model

    async def run(self) -> None:
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def listen() -> None:
            since: int | None = None
            backoff = Backoff(0.5, 4.0)
            while True:
                try:
                    async for event in self.remote.events(since):
                        backoff.reset()
                        if isinstance(event.get("seq"), int):
                            since = event["seq"]
                        events.put_nowait(event)
                    return  # the server closed the stream: it stops
                except Unavailable:
                    if backoff.failures >= _TRIES:
                        raise
                    await asyncio.sleep(backoff.failed())

        listener = asyncio.ensure_future(listen())
        getter: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(events.get())
        try:
            await self._reload()
            while True:
                either: set[asyncio.Future[Any]] = {getter, listener}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    listener.result()  # the stream failed: raise why
                    return  # the server closed the stream
                await self._on_event(getter.result())
                getter = asyncio.ensure_future(events.get())
        finally:
            listener.cancel()
            getter.cancel()
            await asyncio.gather(listener, getter, return_exceptions=True)

    async def _reload(self) -> None:
        """The full listing; live sessions re-read for their services' proxy URLs."""
        listing = [session_to_json(s) for s in await self.remote.list_sessions()]
        for i, session in enumerate(listing):
            if session["status"] not in _TERMINAL:
                with contextlib.suppress(NotFound, Forbidden):  # Forbidden: as listed
                    listing[i] = await self.remote.get_json(session["id"])
        self.model.load(listing, await self.remote.queue())

    async def _read(self, session_id: str) -> dict[str, Any] | None:
        """A session in full; as the listing shows it where the caller may list it but not
        read it alone (a kernel's token: its own session only); None when it is gone."""
        try:
            return await self.remote.get_json(session_id)
        except NotFound:
            return None  # gone meanwhile (another owner's, or removed)
        except Forbidden:
            listed = [s for s in await self.remote.list_sessions() if s.id == session_id]
            return session_to_json(listed[0]) if listed else None

    async def _on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "reset":  # what was missed is gone from the store
            await self._reload()
            return
        self.model.apply_event(event)
        # Unavailable: the server went with the stream; the replay after it is back reads.
        with contextlib.suppress(Unavailable):
            if (session := await self._read(str(event["session_id"]))) is not None:
                self.model.update(session)
            if self.model.pending:
                self.model.set_queue(await self.remote.queue())


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


async def load_rows(remote: RemoteManager, all_states: bool) -> list[SessionRow]:
    """The sessions view as rows, with queue positions (``all_states``: ended ones too)."""
    statuses = None if all_states else list(NOT_ENDED)
    sessions, groups = await asyncio.gather(remote.list_sessions(statuses), remote.queue())
    positions = queue_positions(groups)
    rows = [SessionRow.from_json(session_to_json(s)) for s in sessions]
    for row in rows:
        row.queue_position = positions.get(row.id) if row.phase == "queued" else None
    return rows
