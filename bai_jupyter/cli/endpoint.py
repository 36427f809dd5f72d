"""``bai-jupyter endpoint …``: inference endpoints, through the REST API of a running server.

An endpoint lives in the server (or manager service) that runs the session
manager: its replicas are tended and its route served there. So these commands
talk to that server over HTTP (never to a manager of their own): ``--url`` and
``--token``, else ``BAI_JUPYTER_URL`` and ``BAI_JUPYTER_TOKEN``, else the newest
Jupyter server running on this machine (as ``%bai`` finds it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urljoin

from traitlets import Bool, Unicode

from ..client import RemoteManager, find_manager
from ..endpoints.text import endpoint_text, endpoints_table
from ..errors import BaiError, Unavailable
from .base import ALIASES, FLAGS, BaiCommand, subcommand

_ALIASES = {
    **ALIASES,
    "url": ("EndpointCommand.url", "The server's base URL (default: BAI_JUPYTER_URL, …)."),
    "token": ("EndpointCommand.token", "Its API token (default: BAI_JUPYTER_TOKEN, …)."),
}
_JSON_FLAGS = {
    **FLAGS,
    "json": ({"EndpointCommand": {"as_json": True}}, "Print the API's JSON."),
}


def _read_json(path: str) -> Any:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return json.loads(text)


class EndpointCommand(BaiCommand):
    """What the endpoint commands share: where the server is, and how to call it."""

    aliases = _ALIASES
    flags = _JSON_FLAGS
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
        """Run one API call; a refusal is one line on stderr and exit status 1."""
        client = self.client()
        try:
            return asyncio.run(work(client))
        except BaiError as exc:
            print(f"{self.name}: {exc.code}: {exc.message}", file=sys.stderr)
            raise SystemExit(1) from None
        except (OSError, ValueError) as exc:  # a file argument
            print(f"{self.name}: {exc}", file=sys.stderr)
            raise SystemExit(1) from None

    def show(self, view: dict[str, Any]) -> None:
        if self.as_json:
            print(json.dumps(view, indent=2))
        else:
            print(endpoint_text(view, urljoin(self.client().url, view["url"])))


class EndpointCreateApp(EndpointCommand):
    name = "bai-jupyter endpoint create"
    description = (
        "Create an endpoint from a JSON file ('-': stdin): {name, replica, service, "
        "health_path, health_interval, scaling}. See docs/endpoints.md."
    )
    usage = "bai-jupyter endpoint create FILE.json [--url URL --token TOKEN] [--json]"
    arguments: ClassVar[tuple[str, ...]] = ("FILE.json",)

    def run(self) -> int:
        body = self.extra_args[0]
        self.show(self.call(lambda api: api.create_endpoint(_read_json(body))))
        return 0


class EndpointListApp(EndpointCommand):
    name = "bai-jupyter endpoint list"
    description = "Your endpoints (--all: everyone's, for an admin)."
    usage = "bai-jupyter endpoint list [--all] [--url URL --token TOKEN] [--json]"
    everyone = Bool(False, config=True, help="Everyone's endpoints (admins).")
    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **_JSON_FLAGS,
        "all": ({"EndpointListApp": {"everyone": True}}, everyone.help),
    }

    def run(self) -> int:
        found = self.call(lambda api: api.list_endpoints(self.everyone))
        if self.as_json:
            print(json.dumps(found, indent=2))
            return 0
        if not found:
            print("no endpoints: make one with `bai-jupyter endpoint create FILE.json`")
            return 0
        print(endpoints_table(found))
        return 0


class EndpointShowApp(EndpointCommand):
    name = "bai-jupyter endpoint show"
    description = "An endpoint: its replicas, load and latest scaling decisions."
    usage = "bai-jupyter endpoint show NAME [--url URL --token TOKEN] [--json]"
    arguments: ClassVar[tuple[str, ...]] = ("NAME",)

    def run(self) -> int:
        name = self.extra_args[0]
        self.show(self.call(lambda api: api.get_endpoint(name)))
        return 0


class EndpointUpdateApp(EndpointCommand):
    name = "bai-jupyter endpoint update"
    description = (
        "Change an endpoint from a JSON file ('-': stdin) of the fields to change; "
        "`scaling` merges key by key; a new `replica` rolls out replica by replica."
    )
    usage = "bai-jupyter endpoint update NAME FILE.json [--url URL --token TOKEN] [--json]"
    arguments: ClassVar[tuple[str, ...]] = ("NAME", "FILE.json")

    def run(self) -> int:
        name, body = self.extra_args
        self.show(self.call(lambda api: api.update_endpoint(name, _read_json(body))))
        return 0


class EndpointDeleteApp(EndpointCommand):
    name = "bai-jupyter endpoint delete"
    description = "Delete an endpoint; its replicas end (endpoint-deleted)."
    usage = "bai-jupyter endpoint delete NAME [--url URL --token TOKEN]"
    arguments: ClassVar[tuple[str, ...]] = ("NAME",)

    def run(self) -> int:
        name = self.extra_args[0]
        self.call(lambda api: api.delete_endpoint(name))
        print(f"deleted endpoint {name}; its replicas are ending")
        return 0


class EndpointApp(BaiCommand):
    """``bai-jupyter endpoint ACTION``."""

    name = "bai-jupyter endpoint"
    description = (
        "Inference endpoints: /bai/endpoints/NAME/ routes to the model server of its "
        "replica sessions, scaled on load. See docs/endpoints.md."
    )
    usage = "bai-jupyter endpoint {create,list,show,update,delete} [options]"
    subcommands = {  # noqa: RUF012 (traitlets' own class attribute)
        "create": subcommand(EndpointCreateApp, "create an endpoint from a JSON file"),
        "list": subcommand(EndpointListApp, "your endpoints"),
        "show": subcommand(EndpointShowApp, "an endpoint's replicas, load and decisions"),
        "update": subcommand(EndpointUpdateApp, "change an endpoint (a new replica rolls out)"),
        "delete": subcommand(EndpointDeleteApp, "delete an endpoint"),
    }
