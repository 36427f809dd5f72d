"""``%bai status``'s live usage widget: one session's usage per kernel, kept current
from the server's ``usage`` events (the event stream with ``?usage=1``).

Each widget holds an event stream, so a kernel keeps at most :data:`MAX_LIVE` of
them following; older ones stop and say so (a cleared output does not close a widget).
"""

from __future__ import annotations

import html

import ipywidgets as w  # type: ignore[import-untyped]  # ships no type information

from .client import RemoteManager
from .errors import BaiError, Conflict
from .sessions_model import Runner
from .usage_text import usage_html

__all__ = ["MAX_LIVE", "UsageWidget"]

#: Usage widgets of this kernel that follow the server at once.
MAX_LIVE = 3
_LIVE: list[UsageWidget] = []
_ENDING = {"TERMINATING", "TERMINATED", "CANCELLED", "ERROR"}


class UsageWidget(w.HTML):  # type: ignore[misc]  # HTML is untyped (Any)
    """A running session's usage table, live until its session stops running."""

    def __init__(self, remote: RemoteManager, runner: Runner, session_id: str) -> None:
        super().__init__(value="<i>usage: reading…</i>")
        self.remote, self.session_id = remote, session_id
        self._feed = runner.submit(self._follow())
        _LIVE.append(self)
        while len(_LIVE) > MAX_LIVE:
            _LIVE.pop(0).stop("a newer view took over")

    async def _follow(self) -> None:
        try:
            try:
                self.value = usage_html(await self.remote.usage(self.session_id))
            except Conflict:  # not running yet: its usage events come once it runs
                self.value = "<i>usage: shown once the session runs</i>"
            async for event in self.remote.events(usage=True):
                if event.get("session_id") != self.session_id:
                    continue
                if event["type"] == "usage":
                    self.value = usage_html(event)
                elif event.get("status") in _ENDING:
                    self.value += f"<br><i>the session is {html.escape(str(event['status']))}</i>"
                    return
        except BaiError as exc:
            self.value = f"<i>usage: {html.escape(exc.message)}</i>"

    @property
    def updating(self) -> bool:
        """Whether it still follows the server."""
        return not self._feed.done()

    def stop(self, reason: str) -> None:
        """Stop following (and close the event stream), saying why."""
        self._feed.cancel()
        self.value += f"<br><i>usage updates stopped: {html.escape(reason)}</i>"

    def close(self) -> None:
        self._feed.cancel()
        if self in _LIVE:
            _LIVE.remove(self)
        super().close()
