"""``bai-jupyter endpoint …``: inference endpoints, through the REST API of a running server
(see :mod:`.remote` for how the server is found)."""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urljoin

from traitlets import Bool

from ..endpoints.text import endpoint_text, endpoints_table
from .base import BaiCommand, subcommand
from .remote import RemoteCommand, read_json, remote_options

_ALIASES, _JSON_FLAGS = remote_options("EndpointCommand")


class EndpointCommand(RemoteCommand):
    """What the endpoint commands share: the server's options and how an endpoint prints."""

    aliases = _ALIASES
    flags = _JSON_FLAGS

    def text(self, view: dict[str, Any]) -> str:
        return endpoint_text(view, urljoin(self.client().url, view["url"]))


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
        self.show(self.call(lambda api: api.create_endpoint(read_json(body))))
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
            self.print_json(found)
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
        self.show(self.call(lambda api: api.update_endpoint(name, read_json(body))))
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
