"""``bai-jupyter session …``: sessions of every type, through the REST API of a running server.

The request is the API's own JSON (``docs/api.md``), so whatever a session can be
(interactive, batch, inference, system; roles, mounts, idle rules) the command line
can ask for. ``session sftp`` writes a system session's key and host key to files
a person hands to ``sftp``/``scp``; the private key is never printed.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

from traitlets import Bool, Float, Int, Unicode

from ..client import RemoteManager
from ..model import TERMINAL, SessionType, Status
from ..runtime.protocol import RSYNC_MODULE, RSYNC_USER
from ..sessions_model import load_rows
from ..text import cluster_text, runs_in_containers, sessions_table
from .base import BaiCommand, subcommand
from .remote import RemoteCommand, read_json, remote_options

_ALIASES, _JSON_FLAGS = remote_options("SessionCommand")


class SessionCommand(RemoteCommand):
    """What the session commands share: the server's options and how a session prints."""

    aliases = _ALIASES
    flags = _JSON_FLAGS

    def text(self, view: dict[str, Any]) -> str:
        # An image is worth naming only where kernels run in containers (not local).
        agents = self.call(lambda client: client.agents())
        return cluster_text(self.client(), view, runs_in_containers(view, agents))


class SessionCreateApp(SessionCommand):
    name = "bai-jupyter session create"
    description = (
        "Create a session from a JSON file of the API's request ('-': stdin), e.g. "
        '{"type": "batch", "startup_command": "python3 train.py", "cluster_size": 2}. '
        "It queues; --wait waits until it runs (a batch session: until it ends, and the "
        "exit status says whether it succeeded). See docs/api.md."
    )
    usage = (
        "bai-jupyter session create FILE.json [--template T] [--wait [--timeout S]] "
        "[--url URL --token TOKEN] [--json]"
    )
    arguments: ClassVar[tuple[str, ...]] = ("FILE.json",)
    template = Unicode("", config=True, help="A template whose fields the file overrides.")
    wait = Bool(False, config=True, help="Wait until it runs (batch: until it ends).")
    timeout = Float(600.0, config=True, help="How long --wait waits (seconds).")
    aliases = {  # noqa: RUF012 (traitlets' own class attribute)
        **_ALIASES,
        "template": ("SessionCreateApp.template", template.help),
        "timeout": ("SessionCreateApp.timeout", timeout.help),
    }
    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **_JSON_FLAGS,
        "wait": ({"SessionCreateApp": {"wait": True}}, wait.help),
    }

    def run(self) -> int:
        body = self.extra_args[0]

        async def create(api: RemoteManager) -> dict[str, Any]:
            session = await api.create(read_json(body), template=self.template or None)
            if self.wait:  # a batch session to its result, the others until they serve
                until = [] if session.spec.type is SessionType.BATCH else [Status.RUNNING]
                await api.wait_for(session.id, until, self.timeout)
            return await api.get_json(session.id)

        view = self.call(create)
        self.show(view)
        ended = view["status"] in {s.value for s in TERMINAL}
        return 1 if self.wait and ended and view.get("result") != "SUCCESS" else 0


class SessionListApp(SessionCommand):
    name = "bai-jupyter session list"
    description = "Your live sessions: state, queue position, why pending, kernels."
    usage = "bai-jupyter session list [--all-states] [--url URL --token TOKEN] [--json]"
    all_states = Bool(False, config=True, help="Ended sessions too.")
    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **_JSON_FLAGS,
        "all-states": ({"SessionListApp": {"all_states": True}}, all_states.help),
    }

    def run(self) -> int:
        rows = self.call(lambda api: load_rows(api, self.all_states))
        if self.as_json:
            self.print_json([dataclasses.asdict(row) for row in rows])
        else:
            print(sessions_table(rows))
        return 0


class SessionShowApp(SessionCommand):
    name = "bai-jupyter session show"
    description = "A session in full: state, why pending, idle rules, kernels, service ports."
    usage = "bai-jupyter session show SESSION [--url URL --token TOKEN] [--json]"
    arguments: ClassVar[tuple[str, ...]] = ("SESSION",)

    def run(self) -> int:
        key = self.extra_args[0]
        self.show(self.call(lambda api: api.get_json(key)))
        return 0


class SessionLogsApp(SessionCommand):
    name = "bai-jupyter session logs"
    description = "A kernel's last lines of output, kept after the session has ended."
    usage = "bai-jupyter session logs SESSION [--kernel main1] [--tail N] [--url URL --token TOKEN]"
    arguments: ClassVar[tuple[str, ...]] = ("SESSION",)
    kernel = Unicode("main1", config=True, help="Which kernel: main1, sub1, worker2 …")
    tail = Int(
        None,
        allow_none=True,
        config=True,
        help="How many of the last lines (default: the server's log_tail).",
    )
    aliases = {  # noqa: RUF012 (traitlets' own class attribute)
        **_ALIASES,
        "kernel": ("SessionLogsApp.kernel", kernel.help),
        "tail": ("SessionLogsApp.tail", tail.help),
    }

    def run(self) -> int:
        key = self.extra_args[0]
        print(self.call(lambda api: api.logs(key, self.kernel, self.tail)), end="")
        return 0


class SessionDeleteApp(SessionCommand):
    name = "bai-jupyter session delete"
    description = "Cancel a pending session or terminate a running one."
    usage = "bai-jupyter session delete SESSION [--url URL --token TOKEN] [--json]"
    arguments: ClassVar[tuple[str, ...]] = ("SESSION",)

    def run(self) -> int:
        key = self.extra_args[0]
        ended = self.call(lambda api: api.destroy(key))
        info = f" ({ended.status_info})" if ended.status_info else ""
        print(f"session {ended.id} {ended.status.value}{info}")
        return 0


class SessionSftpApp(SessionCommand):
    name = "bai-jupyter session sftp"
    description = (
        "Write a running system session's SFTP key and host key to files (mode 600) in "
        "--dir, and print the sftp and rsync commands that use them. Only the owner gets "
        "the key; a session made with ssh_public_key has none to hand out (use your own key)."
    )
    usage = "bai-jupyter session sftp SESSION [--dir DIR] [--url URL --token TOKEN]"
    arguments: ClassVar[tuple[str, ...]] = ("SESSION",)
    dir = Unicode(".", config=True, help="Where to write SESSION.key and SESSION.known_hosts.")
    aliases = {  # noqa: RUF012 (traitlets' own class attribute)
        **_ALIASES,
        "dir": ("SessionSftpApp.dir", dir.help),
    }

    def run(self) -> int:
        key = self.extra_args[0]
        view = self.call(lambda api: api.get_json(key, connection=True))
        sftp = view.get("sftp")
        if not sftp:
            print(
                f"{self.name}: session {key} serves no SFTP (a running system session does)",
                file=sys.stderr,
            )
            return 1
        base = Path(self.dir) / (view.get("name") or view["id"][:8])
        hosts = base.with_suffix(".known_hosts")
        _write_private(hosts, sftp["known_hosts"] + "\n")
        options = f"-o UserKnownHostsFile={hosts}"
        if sftp.get("private_key"):
            key_file = base.with_suffix(".key")
            _write_private(key_file, sftp["private_key"])
            options += f" -i {key_file}"
        print(f"sftp -P {sftp['port']} {options} {sftp['user']}@{sftp['host']}")
        print(
            f"rsync -a -e 'ssh -p {sftp['port']} {options}' LOCAL_DIR/ "
            f"{RSYNC_USER}@{sftp['host']}::{RSYNC_MODULE}/FOLDER/"
        )
        return 0


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (ssh refuses a key others can read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)


class SessionApp(BaiCommand):
    """``bai-jupyter session ACTION``."""

    name = "bai-jupyter session"
    description = (
        "Sessions of every type (interactive, batch, inference, system) on a running "
        "server: create from the API's JSON, list, show, logs, delete, and a system "
        "session's SFTP login."
    )
    usage = "bai-jupyter session {create,list,show,logs,delete,sftp} [options]"
    subcommands = {  # noqa: RUF012 (traitlets' own class attribute)
        "create": subcommand(SessionCreateApp, "create a session from a JSON request"),
        "list": subcommand(SessionListApp, "your sessions and the queue"),
        "show": subcommand(SessionShowApp, "one session in full"),
        "logs": subcommand(SessionLogsApp, "a kernel's output"),
        "delete": subcommand(SessionDeleteApp, "cancel or terminate a session"),
        "sftp": subcommand(SessionSftpApp, "a system session's SFTP key files and command"),
    }
