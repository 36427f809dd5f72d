"""Runs of the execute API on main1's ipykernel, through the Jupyter kernel protocol.

One kernel client per session (made on first use from ``kernel.info["connection"]``)
reads the shell, iopub and stdin channels and files every message under the run
it answers. A call waits until its run finishes, asks for input, or
``execute_chunk_timeout`` passes; then it returns what came so far, so a long run
comes back in ``continued`` chunks and nothing is lost between them.

main1's ipykernel may restart under the client (a restart from JupyterLab, through
another server, or the runtime's own): ZeroMQ reconnects quietly, but a request in
flight is lost and so may be the new kernel's first output. Every message says which
kernel process sent it, so a message from another one marks the client stale: its
unfinished runs end as ``KernelRestarted`` and the next run gets a fresh client.
A run with no reply by the end of a chunk asks ``kernel_info`` so that a restart is
seen even when nothing else would come.
"""

from __future__ import annotations

__all__ = ["MODES", "KernelRuns"]

import asyncio
import contextlib
import logging
import queue
import secrets
from dataclasses import dataclass, field
from typing import Any, cast

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.connect import KernelConnectionInfo

from ..errors import Conflict, InvalidRequest, NotFound, Unavailable
from ..model import Session
from ..runtime.protocol import CHANNELS
from .checks import require_running

MODES = ("query", "batch", "continue", "input")
#: The channels a run's messages come on: the first three of the protocol's (shell, iopub,
#: stdin); control and heartbeat carry none of a run's.
_SHELL, _IOPUB, _STDIN = CHANNELS[:3]


#: ``batch`` runs the code as a shell command, its output passed on as it comes (not
#: line by line: progress bars too); its exit status comes back as ``__bai_rc``.
_BATCH = """\
def __bai_batch(command):
    import codecs, os, subprocess, sys
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    with subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        while chunk := os.read(proc.stdout.fileno(), 65536):
            sys.stdout.write(decode(chunk))
            sys.stdout.flush()
    return proc.returncode
__bai_rc = __bai_batch({command!r})
del __bai_batch
"""


@dataclass
class _Run:
    """One execution: what it printed since the last call, and how far it is."""

    run_id: str
    msg_id: str
    batch: bool
    console: list[list[Any]] = field(default_factory=list)
    reply: dict[str, Any] | None = None
    idle: bool = False
    prompt: dict[str, Any] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: When a caller last asked for it (loop time): runs nobody asks for are dropped.
    touched: float = 0.0

    @property
    def finished(self) -> bool:
        return self.reply is not None and self.idle

    def add(self, kind: str, data: Any) -> None:
        last = self.console[-1] if self.console else None
        if kind in ("stdout", "stderr") and last is not None and last[0] == kind:
            last[1] += data  # one item per stretch of a stream, as Backend.AI does
        else:
            self.console.append([kind, data])
        self.changed.set()

    def exit_code(self) -> int | None:
        if self.reply is None:
            return None
        if self.batch:
            rc = self.reply.get("user_expressions", {}).get("rc", {})
            with contextlib.suppress(KeyError, TypeError, ValueError):
                return int(rc["data"]["text/plain"])
        return 0 if self.reply.get("status") == "ok" else 1


class _Connection:
    """A kernel client of one session's main1 and the runs it carries."""

    def __init__(self, connection: dict[str, Any], log: logging.Logger) -> None:
        self.client = AsyncKernelClient()
        self.client.load_connection_info(cast(KernelConnectionInfo, connection))
        self.runs: dict[str, _Run] = {}
        self.by_msg: dict[str, _Run] = {}
        self.log = log
        self.readers: list[asyncio.Task[None]] = []
        #: The ipykernel process it answers to (its messages' ``header.session``).
        self.kernel = ""
        #: A message came from another ipykernel process: main1's kernel restarted.
        self.restarted = False

    async def open(self, timeout: float) -> None:
        """Wait up to ``timeout`` for main1's kernel to answer ``kernel_info`` on shell and iopub.

        Not jupyter_client's ``wait_for_ready``: it gives up ("Kernel died before replying
        to kernel_info") as soon as one heartbeat misses its 1 s, which a live kernel that
        is still booting or busy (a loaded host, a large cluster starting) often does."""
        self.client.start_channels()
        try:
            await self._handshake(timeout)
        except BaseException:
            # Timed out, or the call was cancelled: a client dropped with its sockets open
            # would be collected later, warning of each unclosed socket.
            self.close()
            raise
        for channel in (_SHELL, _IOPUB, _STDIN):
            self.readers.append(asyncio.ensure_future(self._read(channel)))

    async def _handshake(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            msg_id = self.client.kernel_info()
            if await self._kernel_info_reply(msg_id, min(2.0, max(deadline - loop.time(), 0.1))):
                return
            if loop.time() >= deadline:
                raise Unavailable(
                    f"main1's Jupyter kernel did not answer in {timeout:g} s "
                    "(busy, still starting, or gone): try again"
                )

    async def _kernel_info_reply(self, msg_id: str, wait: float) -> bool:
        """Whether the reply to ``msg_id`` came in ``wait`` s and iopub carries the kernel's
        status messages (so the first run's output is not lost to a late subscription)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        while (left := until - loop.time()) > 0:
            try:
                msg = await self.client.shell_channel.get_msg(timeout=left)
            except queue.Empty:
                return False
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                self.kernel = msg["header"].get("session", "")
                break  # older replies (of earlier tries) are skipped
        else:
            return False
        try:
            await self.client.iopub_channel.get_msg(timeout=0.5)
        except queue.Empty:
            return False
        while True:  # drop what iopub said before the first run
            try:
                await self.client.iopub_channel.get_msg(timeout=0)
            except queue.Empty:
                return True

    async def _read(self, channel: str) -> None:
        source = getattr(self.client, f"{channel}_channel")
        while True:
            msg = await source.get_msg()
            if msg["header"].get("session", self.kernel) != self.kernel:
                self._end_runs_cut_by_restart()
                return
            run = self.by_msg.get(msg.get("parent_header", {}).get("msg_id", ""))
            if run is not None:
                self._file(run, channel, msg)

    def _end_runs_cut_by_restart(self) -> None:
        if self.restarted:
            return
        self.restarted = True
        self.log.info("bai-jupyter: main1's kernel restarted under a client of the execute API")
        for run in self.runs.values():
            if run.finished:
                continue
            run.add(
                "error",
                {
                    "ename": "KernelRestarted",
                    "evalue": "main1's Jupyter kernel restarted during this run; "
                    "what it printed after that is lost: run it again",
                    "traceback": [],
                },
            )
            run.reply = run.reply or {"status": "error"}
            run.idle = True

    def _file(self, run: _Run, channel: str, msg: dict[str, Any]) -> None:
        kind, content = msg["header"]["msg_type"], msg["content"]
        if channel == _SHELL and kind == "execute_reply":
            run.reply = content
        elif channel == _STDIN and kind == "input_request":
            run.prompt = {"prompt": content.get("prompt", ""), "password": content.get("password")}
        elif kind == "status":
            run.idle = run.idle or content.get("execution_state") == "idle"
        elif kind == "stream":
            run.add(content.get("name", "stdout"), content.get("text", ""))
        elif kind in ("display_data", "update_display_data", "execute_result"):
            item = {"data": content.get("data", {}), "metadata": content.get("metadata", {})}
            display_id = (content.get("transient") or {}).get("display_id")
            if display_id:
                item["display_id"] = display_id
            if kind == "update_display_data":
                item["update"] = True
            run.add("result" if kind == "execute_result" else "media", item)
        elif kind == "error":
            keys = ("ename", "evalue", "traceback")
            run.add("error", {key: content.get(key) for key in keys})
        elif kind == "clear_output":
            run.add("clear", {"wait": bool(content.get("wait"))})
        run.changed.set()

    def start(self, run_id: str, code: str, batch: bool) -> _Run:
        if batch:
            msg_id = self.client.execute(
                _BATCH.format(command=code),
                silent=False,
                store_history=False,
                user_expressions={"rc": "__bai_rc"},
                allow_stdin=True,
            )
        else:
            msg_id = self.client.execute(code, allow_stdin=True)
        run = _Run(run_id, msg_id, batch, touched=asyncio.get_running_loop().time())
        self.runs[run_id] = run
        self.by_msg[msg_id] = run
        return run

    def forget(self, run: _Run) -> None:
        self.runs.pop(run.run_id, None)
        self.by_msg.pop(run.msg_id, None)

    def drop_abandoned(self, before: float) -> None:
        """Forget runs not asked for since ``before``: their output would pile up forever."""
        for run in [r for r in self.runs.values() if r.touched < before]:
            self.forget(run)

    def close(self) -> None:
        for task in self.readers:
            task.cancel()
        self.client.stop_channels()


class KernelRuns:
    """Execution runs of every session, kept by the extension."""

    def __init__(
        self, chunk_timeout: float, connect_timeout: float, run_ttl: float, log: logging.Logger
    ) -> None:
        self.chunk_timeout = chunk_timeout
        self.connect_timeout = connect_timeout
        self.run_ttl = run_ttl
        self.log = log
        self._connections: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _connection(self, session: Session) -> _Connection:
        async with self._locks.setdefault(session.id, asyncio.Lock()):
            conn = self._connections.get(session.id)
            if conn is None:
                main = session.main
                info = main.info.get("connection")
                if not info:
                    raise InvalidRequest(
                        f"session {session.id} has no Jupyter kernel in main1 "
                        f"(a {session.spec.type.value} session): only interactive sessions execute"
                    )
                conn = _Connection(dict(info), self.log)
                await conn.open(self.connect_timeout)
                self._connections[session.id] = conn
            return conn

    async def step(
        self, session: Session, mode: str, code: str, run_id: str | None
    ) -> dict[str, Any]:
        """One call of the execute API (see the module docs)."""
        require_running(session)
        conn = await self._connection(session)
        if conn.restarted and mode in ("query", "batch"):
            # Its cut runs were handed back ended; a new run needs the new kernel's client.
            self.forget(session.id, "main1's kernel restarted")
            conn = await self._connection(session)
        conn.drop_abandoned(asyncio.get_running_loop().time() - self.run_ttl)
        if mode in ("query", "batch"):
            run_id = run_id or secrets.token_hex(8)
            if run_id in conn.runs:
                raise Conflict(f"run {run_id!r} is still going: continue it or use another run_id")
            run = conn.start(run_id, code, batch=mode == "batch")
        else:
            if run_id is None or run_id not in conn.runs:
                raise NotFound(f"no run {run_id!r} going in session {session.id}")
            run = conn.runs[run_id]
            if mode == "input":
                if run.prompt is None:
                    raise Conflict(f"run {run_id!r} is not waiting for input")
                run.prompt = None
                conn.client.input(code)
        return await self._chunk(conn, run)

    async def _chunk(self, conn: _Connection, run: _Run) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.chunk_timeout
        while not run.finished and run.prompt is None:
            left = deadline - loop.time()
            if left <= 0:
                break
            run.changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(run.changed.wait(), left)
        console, run.console = run.console, []
        run.touched = loop.time()
        reply: dict[str, Any] = {"run_id": run.run_id, "console": console, "exit_code": None}
        if run.finished:
            conn.forget(run)
            reply.update(status="finished", exit_code=run.exit_code())
        elif run.prompt is not None:
            reply.update(status="waiting-input", prompt=run.prompt)
        else:
            reply["status"] = "continued"
            if run.reply is None:
                conn.client.kernel_info()  # answered at once by a restarted kernel
        return reply

    def forget(self, session_id: str, why: str | None = None) -> None:
        """Drop a session's kernel client (it ended, or its kernel restarted)."""
        conn = self._connections.pop(session_id, None)
        self._locks.pop(session_id, None)
        if conn is not None:
            conn.close()
            if why:
                self.log.info("bai-jupyter: runs of %s dropped: %s", session_id, why)

    def close(self) -> None:
        for session_id in list(self._connections):
            self.forget(session_id)
