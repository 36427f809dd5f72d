"""The engine's event stream, read by a thread and turned into :class:`KernelEvent` s.

The SDK's stream blocks, so one thread per agent reads it and hands each event
to the event loop with ``call_soon_threadsafe``. It asks for events ``since``
the moment watching began, so none is lost while it connects, and reconnects
(from the last event seen) when the engine goes away, or when told to
(:meth:`EventWatcher.renew`: the engine answers again after a silence, and the
stream's connection may lead to a machine that died since; ``tcp://`` engines'
keep-alives notice that too, later). A kernel that exits while its engine refuses
connections was stopped with the engine (``detail["agent_stopped"]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import requests.exceptions

from ...kernel_plan import LABEL_KERNEL, LABEL_ROOT, LABEL_SESSION
from ...loops import Backoff
from ..base import KernelEvent, KernelEventKind, task_timed_out
from .engine import Engine
from .networks import EGRESS_NETWORK, network_name

__all__ = ["EventWatcher", "Removals"]

_EVENT_ACTIONS = ("oom", "die", "destroy", "disconnect")
#: How long die/destroy events of a session we removed are marked ``requested``.
_REQUESTED_FOR = 120.0


class Removals:
    """Sessions the agent removes (read by the watcher thread): their kernels' deaths
    are the agent's own doing, not a kill from outside."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def mark(self, session_id: str) -> None:
        now = time.monotonic()
        for old in [sid for sid, at in self._since.items() if now - at > _REQUESTED_FOR]:
            self._since.pop(old, None)
        self._since[session_id] = now

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._since


class EventWatcher(threading.Thread):
    """Reads one engine's events from ``since`` and posts ours to ``report`` on ``loop``."""

    def __init__(
        self,
        engine: Engine,
        removals: Removals,
        loop: asyncio.AbstractEventLoop,
        report: Callable[[KernelEvent], None],
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        super().__init__(name=f"bai-docker-events-{engine.agent_id}", daemon=True)
        self.engine = engine
        self.removals = removals
        self.loop = loop
        self.report = report
        self.log = log
        self.since = time.time()
        self._stopping = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: Any = None
        #: Set by :meth:`renew`: the next stream on a new client.
        self._renew = threading.Event()

    def stop(self) -> None:
        """End the thread soon: close the stream it blocks on (join it to wait)."""
        self._stopping.set()
        with self._stream_lock:
            if self._stream is not None:
                with contextlib.suppress(Exception):
                    self._stream.close()

    def renew(self) -> None:
        """Reopen the stream on a new client (from the last event seen)."""
        self._renew.set()
        with self._stream_lock:
            if self._stream is not None:
                with contextlib.suppress(Exception):
                    self._stream.close()

    def run(self) -> None:
        agent_id = self.engine.agent_id
        client: Any = None
        last_nano = int(self.since * 1e9)
        backoff = Backoff(1.0, 10.0)  # 1, 2, 4 … 10 s between tries; one warning per outage
        while not self._stopping.is_set():
            stream: Any = None
            renewing = self._renew.is_set()
            self._renew.clear()
            if renewing and client is not None:
                with contextlib.suppress(Exception):
                    client.close()
                client = None
            try:
                if client is None:
                    client = self.engine.new_client(timeout=10)
                stream = client.api.events(
                    decode=True,
                    since=f"{last_nano / 1e9:.9f}",
                    # Network events carry no container labels: no label filter here;
                    # _translate drops what is not a kernel of ours.
                    filters={"type": ["container", "network"], "event": list(_EVENT_ACTIONS)},
                )
                with self._stream_lock:
                    if self._stopping.is_set():
                        break  # closed below
                    self._stream = stream
                if backoff.failures or renewing:
                    self.log.info("agent %s: docker event stream back", agent_id)
                backoff.reset()
                for raw in stream:
                    nano = int(raw.get("timeNano") or 0)
                    if nano and nano < last_nano:
                        continue  # replayed after a reconnect
                    last_nano = max(last_nano, nano)
                    event = self._translate(client, raw)
                    if event is not None:
                        try:
                            self.loop.call_soon_threadsafe(self.report, event)
                        except RuntimeError:  # the loop is closed: nobody listens any more
                            self._stopping.set()
                            break
                if self._renew.is_set():
                    continue  # closed by renew(): at once, a new client above
                if not self._stopping.is_set():
                    # The engine went away: a fresh client next (the SDK leaks the socket
                    # of a failed connect, and this client's next connect would fail).
                    raise ConnectionError("the engine ended its event stream")
            except Exception as exc:  # engine gone or restarting: retry below
                if not self._stopping.is_set() and not backoff.failures:
                    self.log.warning("agent %s: docker event stream failed: %s", agent_id, exc)
                backoff.failed()
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close()
                    client = None
            finally:
                with self._stream_lock:
                    self._stream = None
                if stream is not None:  # a broken stream holds its socket until closed
                    _close(stream)
            self._stopping.wait(backoff.delay or 0.1)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _translate(self, client: Any, raw: dict[str, Any]) -> KernelEvent | None:
        """An engine event → our event (in this thread: may inspect the container)."""
        actor = raw.get("Actor") or {}
        attrs: dict[str, str] = actor.get("Attributes") or {}
        action = str(raw.get("Action") or raw.get("status") or "")
        if raw.get("Type") == "network":
            return self._network_event(client, attrs) if action == "disconnect" else None
        if LABEL_ROOT not in attrs:
            return None  # not a kernel of ours
        session_id, kernel_id = attrs.get(LABEL_SESSION), attrs.get(LABEL_KERNEL)
        if not session_id or not kernel_id:
            return None
        detail: dict[str, Any] = {}
        if session_id in self.removals:
            detail["requested"] = True
        cid = str(actor.get("ID") or "")
        if action == "oom":
            # Any process of the container: a child's OOM leaves the kernel running.
            return KernelEvent(KernelEventKind.OOM_KILLED, session_id, kernel_id, container_id=cid)
        if action == "destroy":
            gone = KernelEventKind.GONE
            return KernelEvent(gone, session_id, kernel_id, detail=detail, container_id=cid)
        if action != "die":
            return None
        try:
            if client.api.inspect_container(actor.get("ID"))["State"].get("OOMKilled"):
                detail["oom_killed"] = True
        except requests.exceptions.ConnectionError:
            # The engine no longer takes connections: it is stopping, and stops its
            # containers first (a clean dockerd stop). The agent's end, not the kernel's.
            detail["agent_stopped"] = True
        except Exception:  # removed meanwhile: no verdict, a plain death
            pass
        code = int(attrs.get("exitCode", "-1"))

        def tail(lines: int) -> bytes:
            try:
                return bytes(client.api.logs(actor.get("ID"), stdout=True, stderr=True, tail=lines))
            except Exception:
                return b""

        if task_timed_out(code, tail):
            detail["task_timeout"] = True
        return KernelEvent(
            KernelEventKind.EXITED, session_id, kernel_id, code, detail, container_id=cid
        )

    def _network_event(self, client: Any, attrs: dict[str, str]) -> KernelEvent | None:
        """A running kernel cut from its session's network (or main1 from the egress bridge).

        A stopping or removed container is disconnected too: only a running one counts."""
        network = attrs.get("name", "")
        if not network.startswith("bai-"):
            return None
        try:
            info = client.api.inspect_container(attrs.get("container"))
        except Exception:
            return None  # gone: its die/destroy events tell the story
        labels: dict[str, str] = info.get("Config", {}).get("Labels") or {}
        session_id, kernel_id = labels.get(LABEL_SESSION), labels.get(LABEL_KERNEL)
        if not session_id or not kernel_id or not info.get("State", {}).get("Running"):
            return None
        if session_id in self.removals:
            return None
        if network not in (network_name(session_id), EGRESS_NETWORK):
            return None
        detail = {"network": network}
        cid = str(info.get("Id") or "")
        return KernelEvent(KernelEventKind.NETWORK_LOST, session_id, kernel_id, None, detail, cid)


def _close(stream: Any) -> None:
    """Close an event stream and its HTTP response (in the thread that read it).

    The SDK's ``close()`` shuts the socket down, but the response's reader keeps its
    file descriptor until the response is closed too: left to the garbage collector,
    that is an unclosed socket (a ResourceWarning) at some random later time."""
    with contextlib.suppress(Exception):
        stream.close()
    response = getattr(stream, "_response", None)
    if response is not None:
        with contextlib.suppress(Exception):
            response.close()
