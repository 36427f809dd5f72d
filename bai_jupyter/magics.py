"""``%bai``: drive sessions from a notebook (``%load_ext bai_jupyter``).

The magics talk to the session manager of a Jupyter server over its REST API
(:class:`~bai_jupyter.client.RemoteManager`): ``BAI_JUPYTER_URL`` and
``BAI_JUPYTER_TOKEN`` when set (the server extension gives every kernel it starts
them), else
the Jupyter server this kernel was started by, from its runtime file. Inside a
bai kernel they know their own session from ``BACKENDAI_SESSION_ID``.

Magics are synchronous, but an ipykernel already runs an event loop on the
main thread, so every coroutine runs on a private loop in a daemon thread
(:class:`LoopThread`); the main thread only waits and prints, which keeps
Ctrl-C (a KeyboardInterrupt in the main thread) working everywhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import queue
import re
import shlex
import shutil
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from IPython import display as _display
from IPython.core import magic_arguments as _margs
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from .client import RemoteManager
from .errors import BaiError, InvalidRequest, Unavailable
from .model import Status
from .request import SpecError, validate_partial
from .runtime.protocol import PREFIX as RUNTIME_PREFIX
from .sessions_model import SessionRow, kernels_summary, queue_positions, resources_text
from .wire import session_to_json

__all__ = [
    "BaiMagics",
    "LoopThread",
    "RunResult",
    "find_manager",
    "format_table",
    "load_ipython_extension",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
#: Seconds between reads of a running batch session's log (the API has no log stream).
LOG_INTERVAL = 1.0
#: Seconds between re-reads of a pending session when no event says anything changed.
QUEUE_INTERVAL = 5.0


# --- IPython's untyped helpers, typed -----------------------------------------------------------

_arguments: Any = _margs
_displays: Any = _display


def magic_arguments(name: str) -> Callable[[F], F]:
    """IPython's decorator that builds the command's parser (and help) from its arguments."""
    decorator: Callable[[F], F] = _arguments.magic_arguments(name)
    return decorator


def argument(*flags: str, **options: Any) -> Callable[[F], F]:
    """One ``argparse`` argument of a command."""
    decorator: Callable[[F], F] = _arguments.argument(*flags, **options)
    return decorator


def parse_argstring(command: Callable[..., Any], line: str) -> Any:
    """The parsed options of ``line``; a UsageError (one line) when they are wrong."""
    return _arguments.parse_argstring(command, line)


def display(obj: Any, display_id: bool = False) -> Any:
    """Show ``obj`` in the front end; with ``display_id`` a handle to update it in place."""
    return _displays.display(obj, display_id=display_id)


def pretty(text: str) -> Any:
    """Plain text for ``display`` (shown as is, not as a quoted string)."""
    return _displays.Pretty(text)


# --- running coroutines from synchronous magics -------------------------------------------------


class LoopThread:
    """A private asyncio event loop in a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="bai-jupyter-magics", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop; the future can be waited on from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end; Ctrl-C cancels it and is raised here."""
        future = self.submit(coro)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """The items of an async iterator, one by one, to the calling thread.

        Leaving early (Ctrl-C, ``break``) cancels the producer and waits until
        its clean-up (``finally`` blocks) has run.
        """
        inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        ended = threading.Event()
        tasks: list[asyncio.Task[None]] = []

        async def pump() -> None:
            try:
                async for item in items:
                    inbox.put(("item", item))
                inbox.put(("end", None))
            except Exception as exc:
                inbox.put(("error", exc))

        def start() -> None:  # on the loop; a task cancelled before its first step still ends
            task = asyncio.ensure_future(pump())
            task.add_done_callback(lambda _task: ended.set())
            tasks.append(task)

        loop = self.loop
        loop.call_soon_threadsafe(start)
        try:
            while True:
                kind, value = inbox.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            loop.call_soon_threadsafe(lambda: tasks[0].cancel())
            ended.wait()


_LOOP = LoopThread()


# --- finding the manager ------------------------------------------------------------------------


def _running_server() -> dict[str, Any] | None:
    """The Jupyter server that started this kernel, else the newest one running here."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    servers: list[dict[str, Any]] = [
        s for s in list_running_servers() if s.get("url") and not s.get("sock")
    ]
    parent = os.environ.get("JPY_PARENT_PID", "")
    for server in servers:
        if str(server.get("pid")) == parent:
            return server
    runtime = Path(jupyter_runtime_dir())

    def started(server: dict[str, Any]) -> float:
        info = runtime / f"jpserver-{server.get('pid')}.json"
        return info.stat().st_mtime if info.exists() else 0.0

    newest: dict[str, Any] | None = max(servers, key=started, default=None)
    return newest


def find_manager() -> RemoteManager:
    """The manager at ``BAI_JUPYTER_URL``, else that of the running Jupyter server."""
    if os.environ.get("BAI_JUPYTER_URL"):
        return RemoteManager.from_env()
    server = _running_server()
    if server is not None:
        return RemoteManager(str(server["url"]), str(server.get("token") or ""))
    raise Unavailable(
        "no bai-jupyter server found: set BAI_JUPYTER_URL to the URL of a Jupyter server "
        "running the bai_jupyter extension (and BAI_JUPYTER_TOKEN to its token), or start "
        "one on this machine (jupyter lab)"
    )


def own_session() -> str | None:
    """This kernel's session id when it runs inside a bai session."""
    return os.environ.get("BACKENDAI_SESSION_ID") or None


# --- plain-text output --------------------------------------------------------------------------


def format_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(wd) for c, wd in zip(cells, widths)).rstrip()

    return "\n".join(line(r) for r in [headers, *rows])


def sessions_table(rows: list[SessionRow]) -> str:
    """The sessions view as text: state, queue position, why pending, kernel states."""
    if not rows:
        return "no sessions"
    return format_table(
        ("SESSION", "TYPE", "STATUS", "QUEUE", "KERNELS", "RESOURCES", "WHY PENDING"),
        [
            (
                r.label,
                r.type,
                r.outcome if r.ended else r.status,
                str(r.queue_position or ""),
                kernels_summary(r.kernels),
                r.resources,
                r.why_pending or "",
            )
            for r in rows
        ],
    )


def service_url(remote: RemoteManager, path: str | None) -> str:
    """A service's proxy URL for a person to open (the API gives a server path).

    In a kernel, ``BAI_JUPYTER_URL`` is the kernel-access listener, which no browser
    reaches: the server gives kernels its public URL as ``BAI_JUPYTER_PUBLIC_URL``.
    """
    if not path:
        return "(tcp: not proxied)"
    base = os.environ.get("BAI_JUPYTER_PUBLIC_URL") or remote.url
    if path.startswith("/"):  # the server's absolute path (its base_url included)
        return urlunsplit(urlsplit(base)._replace(path=path, query="", fragment=""))
    return base.rstrip("/") + "/" + path


def ports_text(remote: RemoteManager, session: Mapping[str, Any]) -> str:
    services = session.get("services") or []
    if not services:
        return f"session {session['id'][:8]} has no service ports"
    return format_table(
        ("SERVICE", "PROTOCOL", "PORT", "URL"),
        [
            (s["name"], s["protocol"], str(s["port"]), service_url(remote, s.get("url")))
            for s in services
        ],
    )


def cluster_text(remote: RemoteManager, session: Mapping[str, Any]) -> str:
    """One session in full: state, each kernel with role and resources, service ports."""
    row = SessionRow.from_json(session)
    spec = session.get("spec") or {}
    head = (
        f"session {row.id} {('(' + row.name + ') ') if row.name else ''}· {row.type} · "
        f"{row.outcome if row.ended else row.status} · {spec.get('cluster_mode')} · "
        f"image {row.image}"
    )
    if row.why_pending:
        head += f"\nqueued #{row.queue_position or '?'}: {row.why_pending}"
    kernels = format_table(
        ("HOST", "ROLE", "STATUS", "RESOURCES"),
        [
            (k["hostname"], k["role"], k["status"], resources_text(k["slots"]))
            for k in session.get("kernels") or []
        ],
    )
    return f"{head}\n\n{kernels}\n\n{ports_text(remote, session)}"


def env_cluster_text() -> str:
    """What this kernel knows of its cluster without the manager."""
    env = os.environ
    return (
        f"session {env.get('BACKENDAI_SESSION_ID')} · this kernel: "
        f"{env.get('BACKENDAI_CLUSTER_HOST')} · hosts: {env.get('BACKENDAI_CLUSTER_HOSTS')} · "
        f"{env.get('BACKENDAI_CLUSTER_MODE')}"
    )


# --- batch runs ---------------------------------------------------------------------------------


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
        else:
            marks.append(f"▶ {phase} ({row.status})")
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
                row.queue_position = queue_positions(await remote.scheduler()).get(row.id)
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


# --- %%bai exec ---------------------------------------------------------------------------------


def exec_argv(host: str, here: str, python: bool, cwd: str) -> list[str]:
    """The command that runs a cell read from stdin on ``host`` (SSH unless it is this one)."""
    if host == here:
        if python:
            return [sys.executable, "-u", "-"]
        return [shutil.which("bash") or "/bin/sh", "-s"]
    remote = "python3 -u -" if python else "bash -s"
    script = f"cd {shlex.quote(cwd)} 2>/dev/null; exec {remote}"
    return ["ssh", "-T", "-o", "BatchMode=yes", host, script]


async def run_on_hosts(
    hosts: list[str], code: str, here: str, python: bool
) -> AsyncIterator[tuple[str, str, Any]]:
    """``(host, "stdout"|"stderr", line)`` as each host prints, then ``(host, "exit", code)``.

    All hosts run at once; leaving early kills whatever still runs.
    """
    inbox: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
    procs: dict[str, asyncio.subprocess.Process] = {}

    async def pipe(host: str, name: str, stream: asyncio.StreamReader) -> None:
        # Chunks, not readline(): that raises on a line over the reader's 64 KiB limit.
        rest = b""
        while chunk := await stream.read(65536):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                inbox.put_nowait((host, name, line.decode(errors="replace")))
        if rest:
            inbox.put_nowait((host, name, rest.decode(errors="replace")))

    async def one(host: str) -> None:
        # The exit is queued whatever happens, or the consumer would wait for it forever.
        status = 1
        try:
            status = await run(host)
        except Exception as exc:  # shown as that host's error line
            inbox.put_nowait((host, "stderr", f"{type(exc).__name__}: {exc}"))
        finally:
            inbox.put_nowait((host, "exit", status))

    async def run(host: str) -> int:
        try:
            proc = await asyncio.create_subprocess_exec(
                *exec_argv(host, here, python, str(Path.cwd())),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        except OSError as exc:
            inbox.put_nowait((host, "stderr", str(exc)))
            return 127
        procs[host] = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(code.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        await asyncio.gather(pipe(host, "stdout", proc.stdout), pipe(host, "stderr", proc.stderr))
        return await proc.wait()

    tasks = [asyncio.ensure_future(one(host)) for host in hosts]
    try:
        left = len(hosts)
        while left:
            item = await inbox.get()
            left -= item[1] == "exit"
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await asyncio.gather(*tasks, return_exceptions=True)


# --- the magics ---------------------------------------------------------------------------------

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
        raise InvalidRequest(str(exc)) from None
    return request


def _widgets_shown(shell: Any) -> bool:
    """Whether output goes to a front end that can show widgets (a kernel, not a terminal)
    and ipywidgets is there (a kernel image need not have it)."""
    return getattr(shell, "kernel", None) is not None and find_spec("ipywidgets") is not None


@magics_class
class BaiMagics(Magics):
    """``%bai COMMAND …`` and ``%%bai exec``."""

    @line_cell_magic
    def bai(self, line: str, cell: str | None = None) -> Any:
        words = line.split(None, 1)
        if not words or words[0] in ("-h", "--help", "help"):
            print(overview())
            return None
        command, rest = words[0], (words[1] if len(words) > 1 else "")
        handler = getattr(self, f"_{command}", None)
        if command not in COMMANDS or handler is None:
            raise UsageError(f"%bai: unknown command {command!r} (commands: {', '.join(COMMANDS)})")
        options = split_command(rest)[0] if command == "run" else rest
        if re.search(r"(?:^|\s)(?:-h|--help)(?:\s|$)", options):
            print(command_help(command))
            return None
        if (cell is not None) != (command == "exec"):
            raise UsageError(
                "only exec is a cell magic: %%bai exec …"
                if cell is not None
                else "exec runs a cell: write %%bai exec [--hosts …] on the first line of the cell"
            )
        try:
            return handler(rest) if cell is None else handler(rest, cell)
        except (BaiError, SpecError) as exc:
            print(f"bai: {getattr(exc, 'message', exc)}", file=sys.stderr)
            return None

    # Each command's parser comes from its magic_arguments decorators; its help is its doc.

    @magic_arguments("bai status")
    @argument("--text", action="store_true", help="plain text even where widgets can be shown")
    def _status(self, line: str) -> None:
        """This kernel's cluster (hosts, roles, resources, state, service ports) inside a
        bai session; elsewhere your sessions and the queue."""
        args = parse_argstring(self._status, line)
        session_id = own_session()
        try:
            remote = find_manager()
        except Unavailable as exc:
            if session_id is None:
                raise
            print(f"{env_cluster_text()}\n(no manager: {exc.message})")
            return
        if _widgets_shown(self.shell) and not args.text:
            from .widgets import Launcher, SessionsView, live_view

            if session_id is not None:
                display(live_view(SessionsView(remote, _LOOP, all_states=True, only=session_id)))
            else:
                display(Launcher(remote, _LOOP, _LOOP.run(remote.list_templates())))
                display(live_view(SessionsView(remote, _LOOP)))
            return
        if session_id is not None:
            session = _LOOP.run(remote.get_json(session_id))
            print(cluster_text(remote, session))
            return
        rows = _LOOP.run(_load_rows(remote, all_states=False))
        pending = sum(r.phase == "queued" for r in rows)
        print(f"{len(rows)} live session(s), {pending} pending\n{sessions_table(rows)}")

    @magic_arguments("bai sessions")
    @argument("--all-states", action="store_true", help="also ended sessions")
    @argument("--text", action="store_true", help="plain text even where widgets can be shown")
    def _sessions(self, line: str) -> None:
        """Your sessions: state, queue position and why pending, per-kernel states."""
        args = parse_argstring(self._sessions, line)
        remote = find_manager()
        if _widgets_shown(self.shell) and not args.text:
            from .widgets import SessionsView, live_view

            display(live_view(SessionsView(remote, _LOOP, all_states=args.all_states)))
            return
        print(sessions_table(_LOOP.run(_load_rows(remote, args.all_states))))

    @magic_arguments("bai run")
    @argument("--image", metavar="I", help="kernel image (default: the server's)")
    @argument("--name", metavar="NAME", help="session name")
    @argument("--cluster-size", type=int, metavar="N", help="number of kernels: main1, sub1 …")
    @argument("--cpu", metavar="C", help="CPU cores per kernel, e.g. 2 or 0.5")
    @argument("--mem", metavar="M", help="memory per kernel, e.g. 4g")
    @argument("--template", metavar="T", help="template whose fields the options override")
    @argument("--depends-on", action="append", metavar="ID", help="wait for this session")
    @argument("--env", action="append", metavar="KEY=VALUE", help="environment variable")
    @argument("--detach", action="store_true", help="return once queued, do not follow")
    def _run(self, line: str) -> RunResult | None:
        """Run COMMAND (everything after --) as a batch session in main1: shows the phases
        queued → starting → running → result and the log live, and returns the result and
        exit code. Ctrl-C (interrupt the kernel) cancels the session."""
        options, command = split_command(line)
        args = parse_argstring(self._run, options)
        if not command:
            raise UsageError(
                "%bai run: give the command after --, e.g. %bai run -- python train.py"
            )
        for item in args.env or []:
            if "=" not in item:
                raise UsageError(f"%bai run: --env {item!r}: write KEY=VALUE")
        request = batch_request(args, command)
        remote = find_manager()
        session = _LOOP.run(remote.create(request, template=args.template))
        if args.detach:
            print(f"session {session.id} queued")
            return RunResult(session.id, session.status.value, session.result.value, None)
        return self._follow(remote, SessionRow.from_json(session_to_json(session)))

    def _follow(self, remote: RemoteManager, queued: SessionRow) -> RunResult:
        """Show the phases (one line, updated in place) and the log until the session ends."""
        row = queued
        handle = display(pretty(progress_line(row)), display_id=True)
        try:
            for kind, value in _LOOP.iterate(follow(remote, row.id)):
                if kind == "log":
                    print(value, end="", flush=True)
                else:
                    row = value
                    handle.update(pretty(progress_line(row)))
        except KeyboardInterrupt:
            ended = _LOOP.run(remote.destroy(row.id))
            print(f"\ninterrupted: session {row.id} {ended.status.value}", file=sys.stderr)
            return RunResult(row.id, ended.status.value, ended.result.value, ended.exit_code)
        return RunResult(row.id, row.status, row.result, row.exit_code)

    @magic_arguments("bai exec")
    @argument("--hosts", help="comma-separated kernels, e.g. sub1,sub2 (default: all)")
    @argument("--all", action="store_true", help="every kernel of the session (the default)")
    @argument("--python", action="store_true", help="run the cell as Python, not shell")
    def _exec(self, line: str, cell: str) -> None:
        """%%bai exec: run the cell on kernels of this cluster at once (SSH from this
        kernel; its own part runs here), output labelled per host, failures per host."""
        args = parse_argstring(self._exec, line)
        if own_session() is None:
            raise Unavailable(
                "%%bai exec needs a cluster session: run it in a notebook whose kernel is a "
                "bai session (BACKENDAI_SESSION_ID is not set here)"
            )
        if args.hosts and args.all:
            raise UsageError("%%bai exec: give --hosts or --all, not both")
        everyone = [h for h in os.environ.get("BACKENDAI_CLUSTER_HOSTS", "").split(",") if h]
        here = os.environ.get("BACKENDAI_CLUSTER_HOST", "main1")
        hosts = everyone or [here]
        if args.hosts:
            hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
            unknown = [h for h in hosts if h not in everyone]
            if unknown:
                known = ", ".join(everyone)
                raise InvalidRequest(
                    f"no kernel {', '.join(unknown)} in this session (kernels: {known})"
                )
        failed: dict[str, int] = {}
        for host, kind, value in _LOOP.iterate(run_on_hosts(hosts, cell, here, args.python)):
            if kind == "exit":
                if value:
                    failed[host] = value
                continue
            print(f"[{host}] {value}", file=sys.stderr if kind == "stderr" else sys.stdout)
        for host, code in failed.items():
            print(f"[{host}] exit code {code}", file=sys.stderr)

    @magic_arguments("bai ports")
    @argument(
        "words",
        nargs="*",
        metavar="[add NAME:PROTO:PORT] [SESSION]",
        help="session id or name (default: this kernel's); 'add NAME:PROTO:PORT' first "
        "declares a port main1 serves now (e.g. add web:http:8080), so it is proxied",
    )
    def _ports(self, line: str) -> None:
        """Service ports of a session, with the URLs they are proxied at; ``add`` declares
        one on a running session (where the backend reaches main1 at its own address)."""
        words: list[str] = parse_argstring(self._ports, line).words
        spec = None
        if words[:1] == ["add"]:
            if len(words) not in (2, 3):
                raise UsageError("usage: %bai ports add NAME:PROTO:PORT [SESSION]")
            spec, words = words[1], words[2:]
        if len(words) > 1:
            raise UsageError(f"%bai ports: one session at most, got {' '.join(words)}")
        key = _session_arg(words[0] if words else None, "ports")
        remote = find_manager()
        if spec is not None:
            session = _LOOP.run(remote.add_service_port(key, spec))
        else:
            session = _LOOP.run(remote.get_json(key))
        print(ports_text(remote, session))

    @magic_arguments("bai logs")
    @argument("session", nargs="?", help="session id or name (default: this kernel's)")
    @argument("--kernel", default="main1", help="which kernel: main1, sub1 … (default main1)")
    def _logs(self, line: str) -> None:
        """A kernel's output, kept after the session has ended."""
        args = parse_argstring(self._logs, line)
        key = _session_arg(args.session, "logs")
        remote = find_manager()
        print(_LOOP.run(remote.logs(key, args.kernel)), end="")

    @magic_arguments("bai cancel")
    @argument("session", help="session id or name")
    def _cancel(self, line: str) -> None:
        """Cancel a pending session or terminate a running one."""
        args = parse_argstring(self._cancel, line)
        remote = find_manager()
        ended = _LOOP.run(remote.destroy(args.session))
        info = f" ({ended.status_info})" if ended.status_info else ""
        print(f"session {ended.id} {ended.status.value}{info}")

    @magic_arguments("bai templates")
    def _templates(self, line: str) -> None:
        """Session templates you can use (--template): yours and the shared ones."""
        parse_argstring(self._templates, line)
        remote = find_manager()
        templates = _LOOP.run(remote.list_templates())
        if not templates:
            print("no templates")
            return
        print(
            format_table(
                ("TEMPLATE", "OWNER", "FIELDS", "DESCRIPTION"),
                [
                    (
                        t.name,
                        t.owner or "shared",
                        json.dumps(t.spec, separators=(",", ":"), sort_keys=True),
                        t.description,
                    )
                    for t in templates
                ],
            )
        )


COMMANDS = ("status", "sessions", "run", "exec", "ports", "logs", "cancel", "templates")


def _session_arg(given: str | None, command: str) -> str:
    key = given or own_session()
    if key is None:
        raise UsageError(f"%bai {command}: give a session id or name (this kernel is in none)")
    return key


async def _load_rows(remote: RemoteManager, all_states: bool) -> list[SessionRow]:
    statuses = None if all_states else [s for s in Status if not s.is_terminal]
    sessions, scheduler = await asyncio.gather(remote.list_sessions(statuses), remote.scheduler())
    positions = queue_positions(scheduler)
    rows = [SessionRow.from_json(session_to_json(s)) for s in sessions]
    for row in rows:
        row.queue_position = positions.get(row.id) if row.phase == "queued" else None
    return rows


def command_help(command: str) -> str:
    """One command's usage and help, as a person reads it in a notebook.

    IPython's magic_arguments writes the usage as a reST literal block (``::`` lines,
    indented) under the parser's prog; drop those markers and name the cell magic
    ``%%bai exec`` as it is typed.
    """
    doc = str(getattr(BaiMagics, f"_{command}").__doc__)
    lines = [line for line in doc.strip().splitlines() if line.strip() != "::"]
    text = textwrap.dedent("\n".join(lines)).strip()
    text = re.sub(r"\n{3,}", "\n\n", text)
    if command == "exec":
        text = re.sub(r"(?<!%)%bai exec", "%%bai exec", text)
    return text


def overview() -> str:
    """``%bai -h``: every command's usage and help."""
    parts = ["%bai COMMAND [options]; %bai COMMAND -h for one command."]
    parts += [command_help(c) for c in COMMANDS]
    parts.append(
        "The manager: BAI_JUPYTER_URL and BAI_JUPYTER_TOKEN, else the Jupyter server "
        "that started this kernel. See docs/magics.md."
    )
    return "\n\n".join(parts)


BaiMagics.bai.__doc__ = overview()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext bai_jupyter``."""
    ipython.register_magics(BaiMagics)
