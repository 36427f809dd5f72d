"""What the commands that call a running server share: where it is, and how a refusal reads.

Sessions and endpoints live in the server (or manager service) that runs the
session manager, so these commands talk to it over HTTP, never to a manager of
their own: ``--url`` and ``--token``, else ``BAI_JUPYTER_URL`` and
``BAI_JUPYTER_TOKEN``, else the newest Jupyter server running on this machine
(as ``%bai`` finds it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from traitlets import Bool, Unicode

from ..client import RemoteManager, find_manager
from ..errors import BaiError, Unavailable
from .base import ALIASES, FLAGS, BaiCommand


def remote_options(cls: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The aliases and flags of a :class:`RemoteCommand` subclass named ``cls``."""
    aliases = {
        **ALIASES,
        "url": (f"{cls}.url", "The server's base URL (default: BAI_JUPYTER_URL, …)."),
        "token": (f"{cls}.token", "Its API token (default: BAI_JUPYTER_TOKEN, …)."),
    }
    flags = {**FLAGS, "json": ({cls: {"as_json": True}}, "Print the API's JSON.")}
    return aliases, flags


def read_json(path: str) -> Any:
    """A JSON file's value (``-``: standard input)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return json.loads(text)


class RemoteCommand(BaiCommand):
    """A command that calls the REST API of a running server."""

    url = Unicode("", config=True, help="The server's base URL.")
    token = Unicode("", config=True, help="Its API token.")
    as_json = Bool(False, config=True, help="Print the API's JSON instead of a summary.")

    _client: RemoteManager | None = None

    def client(self) -> RemoteManager:
        if self._client is None:
            if self.url:
                self._client = RemoteManager(self.url, self.token)
            else:
                try:
                    self._client = find_manager()
                except Unavailable as exc:
                    self.usage_error(f"{exc.message}; or give --url and --token")
                if self.token:
                    self._client.token = self.token
        return self._client

    def call(self, work: Callable[[RemoteManager], Coroutine[Any, Any, Any]]) -> Any:
        """Run API calls; a refusal is one line on stderr and exit status 1."""
        client = self.client()
        try:
            return asyncio.run(work(client))
        except BaiError as exc:
            print(f"{self.name}: {exc.code}: {exc.message}", file=sys.stderr)
            raise SystemExit(1) from None
        except (OSError, ValueError) as exc:  # a file argument
            print(f"{self.name}: {exc}", file=sys.stderr)
            raise SystemExit(1) from None

    def print_json(self, value: Any) -> None:
        print(json.dumps(value, indent=2))

    def show(self, view: Any) -> None:
        """Print what the API answered: its JSON with ``--json``, else :meth:`text` of it."""
        if self.as_json:
            self.print_json(view)
        else:
            print(self.text(view))

    def text(self, view: Any) -> str:
        """What a person reads of an answer (a subclass's; :meth:`show` prints it)."""
        raise NotImplementedError
