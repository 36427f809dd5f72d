"""``%bai run``: a batch session from a command line, followed to its result."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..client import RemoteManager
from ..errors import InvalidRequest
from ..model import Status
from ..request import SpecError, validate_partial
from ..runtime.protocol import PREFIX as RUNTIME_PREFIX
from ..sessions_model import SessionRow, queue_positions

LOG_INTERVAL = 1.0
#: Seconds between re-reads of a pending session when no event says anything changed.
QUEUE_INTERVAL = 5.0


@dataclass(frozen=True)
class RunResult:
    """What ``%bai run`` returns: the session, its result and its exit code."""

    session_id: str
    status: str
    result: str
    exit_code: int | None


def progress_line(row: SessionRow) -> str:
    """The phases queued → starting → running → result, the current one marked."""
    phases = ["queued", "starting", "running", "result"]
    current = phases.index(row.phase)
    marks = []
    for i, phase in enumerate(phases):
        if i < current:
            marks.append(f"✓ {phase}")
        elif i > current:
            marks.append(f"· {phase}")
        elif phase == "queued":
            where = f"#{row.queue_position}" if row.queue_position else "waiting"
            why = f": {row.why_pending}" if row.why_pending else ""
            marks.append(f"▶ queued ({where}{why})")
        elif phase == "result":
            ok = row.result == "SUCCESS"
            marks.append(f"{'✓' if ok else '✗'} result: {row.outcome}")
        elif phase == "starting":
            status = f"{row.status}: {row.pulling}" if row.pulling else row.status
            marks.append(f"▶ starting ({status})")
        elif row.status == Status.RUNNING.value:
            marks.append("▶ running")
        else:  # on its way out (TERMINATING) or back (RESTARTING): not "running (…)"
            word = "ending" if row.status == Status.TERMINATING.value else row.status.lower()
            marks.append(f"▶ {word} ({row.status})")
    return f"session {row.label}: " + " → ".join(marks)


def user_output(text: str) -> str:
    """A kernel's log without the runtime's own lines (set-up, exit code)."""
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(RUNTIME_PREFIX))


async def follow(remote: RemoteManager, session_id: str) -> AsyncIterator[tuple[str, Any]]:
    """``("session", SessionRow)`` on each change, ``("log", text)`` as main1 writes it.

    Ends once the session has ended and its last output is out. The state is
    re-read on every event of this session; the log of a running session is
    read every :data:`LOG_INTERVAL` seconds, since the API has no log stream.
    """
    wake = asyncio.Event()

    async def listen() -> None:
        async for event in remote.events():
            if event.get("session_id") == session_id:
                wake.set()

    listener = asyncio.ensure_future(listen())
    shown, last = 0, None
    try:
        while True:
            row = SessionRow.from_json(await remote.get_json(session_id))
            if row.phase == "queued":
                row.queue_position = queue_positions(await remote.queue()).get(row.id)
            if (row.status, row.queue_position, row.why_pending) != last:
                last = (row.status, row.queue_position, row.why_pending)
                yield "session", row
            if row.phase in ("running", "result"):
                text = await remote.logs(session_id)
                # Whole lines only (a runtime line may be half written), all of it at the end.
                cut = len(text) if row.ended else text.rfind("\n", shown) + 1
                if cut > shown:
                    output = user_output(text[shown:cut])
                    shown = cut
                    if output:
                        yield "log", output
            if row.ended:
                return
            wake.clear()
            pause = QUEUE_INTERVAL if row.phase == "queued" else LOG_INTERVAL
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), pause)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)


_DASHES = re.compile(r"(?:^|\s)--(?:\s|$)")


def split_command(line: str) -> tuple[str, str]:
    """Options and the shell command after the first standalone ``--`` (kept verbatim)."""
    match = _DASHES.search(line)
    if match is None:
        return line, ""
    return line[: match.start()], line[match.end() :].strip()


def batch_request(args: Any, command: str) -> dict[str, Any]:
    """The session request of ``%bai run``; each field checked as the server would."""
    request: dict[str, Any] = {"type": "batch", "startup_command": command}
    if args.image:
        request["image"] = args.image
    if args.name:
        request["name"] = args.name
    if args.cluster_size is not None:
        request["cluster_size"] = args.cluster_size
    resources = {k: v for k, v in (("cpu", args.cpu), ("mem", args.mem)) if v is not None}
    if resources:
        request["resources"] = resources
    if args.depends_on:
        request["depends_on"] = list(args.depends_on)
    if args.env:
        request["env"] = dict(item.split("=", 1) for item in args.env)
    try:
        validate_partial(request)
    except SpecError as exc:
        raise InvalidRequest(str(exc), field=exc.field) from None
    return request
