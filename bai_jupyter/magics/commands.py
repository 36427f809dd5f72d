"""The ``%bai`` magics themselves: parse a command line, call, show (the I/O side)."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from importlib.util import find_spec
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..client import RemoteManager
from ..endpoints.text import endpoint_text, endpoints_table
from ..errors import BaiError, InvalidRequest, Unavailable
from ..request import SpecError
from ..sessions_model import SessionRow, load_rows
from ..text import (
    cluster_text,
    counts_text,
    env_cluster_text,
    format_table,
    ports_text,
    runs_in_containers,
    service_url,
    sessions_table,
)
from ..usage_text import usage_text
from ..wire import session_to_json
from .connect import _LOOP, NoManager, find_manager, own_session
from .ipython import argument, display, magic_arguments, parse_argstring, pretty
from .on_hosts import run_on_hosts
from .run import RunResult, batch_request, follow, progress_line, split_command

__all__ = ["BaiMagics", "command_help", "overview"]


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
        except Unavailable as exc:
            raise NoManager(exc.message) from None
        except (BaiError, SpecError) as exc:
            print(f"bai: {getattr(exc, 'message', exc)}", file=sys.stderr)
            return None

    # Each command's parser comes from its magic_arguments decorators; its help is its doc.

    @magic_arguments("bai status")
    @argument("session", nargs="?", help="a session id or name to show in full")
    @argument("--text", action="store_true", help="plain text even where widgets can be shown")
    def _status(self, line: str) -> None:
        """A session in full (hosts, roles, resources, state, idle rules, service ports, a
        system session's sftp line): SESSION, else this kernel's inside a bai session;
        elsewhere your sessions and the queue."""
        args = parse_argstring(self._status, line)
        session_id = own_session()
        try:
            remote = find_manager()
        except Unavailable as exc:
            if session_id is None or args.session:
                raise
            print(f"{env_cluster_text()}\n(no manager: {exc.message})")
            return
        if args.session:
            session_id = _LOOP.run(remote.get_json(args.session))["id"]
        if _widgets_shown(self.shell) and not args.text:
            from ..widgets import Launcher, SessionsView, live_view

            if session_id is not None:
                agents = _LOOP.run(remote.agents())
                view = SessionsView(remote, _LOOP, all_states=True, only=session_id, agents=agents)
                display(live_view(view))
                _show_usage(remote, session_id, widget=True)
            else:
                display(Launcher(remote, _LOOP, _LOOP.run(remote.list_templates())))
                display(live_view(SessionsView(remote, _LOOP)))
            return
        if session_id is not None:
            session = _LOOP.run(remote.get_json(session_id))
            containers = runs_in_containers(session, _LOOP.run(remote.agents()))
            print(cluster_text(remote, session, containers))
            _show_usage(remote, session_id, widget=False, status=session["status"])
            return
        rows = _LOOP.run(load_rows(remote, all_states=False))
        print(f"{counts_text(rows)}\n{sessions_table(rows)}")

    @magic_arguments("bai sessions")
    @argument("--all-states", action="store_true", help="also ended sessions")
    @argument("--text", action="store_true", help="plain text even where widgets can be shown")
    def _sessions(self, line: str) -> None:
        """Your sessions: state, queue position and why pending, per-kernel states."""
        args = parse_argstring(self._sessions, line)
        remote = find_manager()
        if _widgets_shown(self.shell) and not args.text:
            from ..widgets import SessionsView, live_view

            display(live_view(SessionsView(remote, _LOOP, all_states=args.all_states)))
            return
        print(sessions_table(_LOOP.run(load_rows(remote, args.all_states))))

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
            raise InvalidRequest(
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
            _LOOP.run(remote.add_service_port(key, spec))
        session = _LOOP.run(remote.get_json(key))
        print(ports_text(remote, session))

    @magic_arguments("bai logs")
    @argument("session", nargs="?", help="session id or name (default: this kernel's)")
    @argument("--kernel", default="main1", help="which kernel: main1, sub1 … (default main1)")
    @argument("--tail", type=int, help="how many of the last lines (default: the server's)")
    def _logs(self, line: str) -> None:
        """A kernel's last lines of output, kept after the session has ended."""
        args = parse_argstring(self._logs, line)
        key = _session_arg(args.session, "logs")
        remote = find_manager()
        print(_LOOP.run(remote.logs(key, args.kernel, args.tail)), end="")

    @magic_arguments("bai cancel")
    @argument("session", help="session id or name")
    def _cancel(self, line: str) -> None:
        """Cancel a pending session or terminate a running one."""
        args = parse_argstring(self._cancel, line)
        remote = find_manager()
        ended = _LOOP.run(remote.destroy(args.session))
        info = f" ({ended.status_info})" if ended.status_info else ""
        print(f"session {ended.id} {ended.status.value}{info}")

    @magic_arguments("bai endpoints")
    @argument("name", nargs="?", help="one endpoint: its replicas, load and scaling decisions")
    def _endpoints(self, line: str) -> None:
        """Your inference endpoints: state and replicas (see docs/endpoints.md)."""
        args = parse_argstring(self._endpoints, line)
        remote = find_manager()
        if args.name is None:
            print(endpoints_table(_LOOP.run(remote.list_endpoints())))
            return
        view = _LOOP.run(remote.get_endpoint(args.name))
        print(endpoint_text(view, service_url(remote, view["url"])))

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


COMMANDS = (
    "status", "sessions", "run", "exec", "ports", "logs", "cancel", "endpoints", "templates"
)  # fmt: skip


def _show_usage(remote: RemoteManager, session_id: str, widget: bool, status: str = "") -> None:
    """A session's usage per kernel under its status: a live widget, else read once (for
    a running session; a read takes a second when nobody follows it live)."""
    if widget:
        from ..usage_widget import UsageWidget

        display(UsageWidget(remote, _LOOP, session_id))
    elif status in {"RUNNING", "RESTARTING"}:
        try:
            print(f"\n{usage_text(_LOOP.run(remote.usage(session_id)))}")
        except BaiError as exc:
            print(f"\nusage: {exc.message}")


def _session_arg(given: str | None, command: str) -> str:
    key = given or own_session()
    if key is None:
        raise UsageError(f"%bai {command}: give a session id or name (this kernel is in none)")
    return key


def command_help(command: str) -> str:
    """One command's usage and help, as a person reads it in a notebook.

    IPython's magic_arguments writes the usage as a reST literal block (``::`` lines,
    indented) under the parser's prog, and the docstrings are reST; drop those markers
    (a literal or a role reads as its text) and name the cell magic ``%%bai exec`` as
    it is typed.
    """
    doc = str(getattr(BaiMagics, f"_{command}").__doc__)
    lines = [line for line in doc.strip().splitlines() if line.strip() != "::"]
    text = textwrap.dedent("\n".join(lines)).strip()
    text = re.sub(r"(?::[a-z]+:)?`{1,2}~?([^`]+?)`{1,2}", r"\1", text)
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
