"""``bai-jupyter kernelspec install|list``: kernelspecs whose kernel runs as main1 of a session.

``install`` asks the manager the server would make (``BaiSessionManager`` with
this command as its traitlets parent, so the same ``c.BaiSessionManager.*``
config) which agents there are and what its default resource group's
``min_resources`` is, to derive the resources a request leaves out and to warn
when the request cannot run on the agents.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from traitlets import Bool, Enum, Float, Integer, List, Unicode
from traitlets.config import Configurable

from .. import kernelspecs
from ..client import RemoteManager
from ..errors import BaiError
from ..manager import BaiSessionManager
from ..request import RESERVED_PORTS_TEXT
from ..resources import ResourceSlot, format_amount
from ..scheduler.config import SchedulerConfig, SchedulerConfigError
from ..text import format_table
from .base import ALIASES, FLAGS, BaiCommand, subcommand

#: The options that are provisioner settings as they are (resources and ports are shaped).
_SETTINGS = ("image", "cluster_size", "cluster_mode", "template", "launch_timeout", "session")


def agents_now(parent: Configurable | None = None) -> dict[str, ResourceSlot]:
    """The agents the manager configured under ``parent`` would have now (blocking)."""
    return asyncio.run(BaiSessionManager(parent=parent).agents_now())


def service_agents(url: str, token: str) -> dict[str, ResourceSlot]:
    """The agents of the manager service at ``url`` (a Hub's): their capacities (blocking)."""
    agents = asyncio.run(RemoteManager(url, token).agents())
    return {str(a["id"]): ResourceSlot(a["capacity"]) for a in agents}


def group_minimum(parent: Configurable | None = None, group: str = "default") -> ResourceSlot:
    """The least a kernel of ``group`` may ask for: its ``min_resources``, as the manager
    configured under ``parent`` reads ``resource_groups`` (a derived request below it
    would be refused at launch)."""
    conf: dict[str, Any] = BaiSessionManager(parent=parent).resource_groups.get(group) or {}
    try:
        config = SchedulerConfig.from_group(conf)
    except SchedulerConfigError as exc:
        raise kernelspecs.KernelspecError(f"resource group {group!r}: {exc}") from None
    return config.min_resources


class KernelspecInstallApp(BaiCommand):
    """``bai-jupyter kernelspec install NAME``."""

    name = "bai-jupyter kernelspec install"
    description = (
        "Install (or replace) a kernelspec on the bai provisioner. Settings left out come "
        "from --template, else the manager's defaults; bad values are refused here. "
        "Without --template or --session, a --cpu or --mem left out is derived from "
        "this machine: the session asks for half of one agent, split among its kernels. "
        "The agents and the group's min_resources are the ones the Jupyter server's config "
        "gives (c.BaiSessionManager.agents, backend, resource_groups in "
        "jupyter_server_config.py, or --config FILE); with --manager-url, the agents of "
        "that shared manager service (a JupyterHub's)."
    )
    usage = (
        "bai-jupyter kernelspec install NAME [--display-name T] [--image I] "
        "[--cluster-size N] [--cluster-mode M] [--cpu C] [--mem M] [--template T] "
        "[--service-port NAME:PROTO:PORT]... [--session S] [--launch-timeout S] "
        "[--interrupt-mode signal|message] [--manager-url URL [--manager-token T]] "
        "[--user | --sys-prefix]"
    )
    examples = """\
bai-jupyter kernelspec install py-cluster-3 --cluster-size 3 --cpu 1 --mem 2g
bai-jupyter kernelspec install py-web --service-port web:http:8080
"""
    arguments = ("NAME",)
    exclusive = (("user", "sys-prefix"),)
    classes = [BaiSessionManager]  # noqa: RUF012 (traitlets' own class attribute)

    display_name = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Name shown in JupyterLab (default: the size and the resources).",
    )
    image = Unicode(None, allow_none=True, config=True, help="Kernel image.")
    cluster_size = Integer(None, allow_none=True, config=True, help="Kernels: main1, sub1 ….")
    cluster_mode = Unicode(None, allow_none=True, config=True, help="single-node or multi-node.")
    cpu = Unicode(None, allow_none=True, config=True, help="CPU cores per kernel, e.g. 2 or 0.5.")
    mem = Unicode(None, allow_none=True, config=True, help="Memory per kernel, e.g. 4g.")
    template = Unicode(None, allow_none=True, config=True, help="Session template to start from.")
    service_ports = List(
        Unicode(),
        config=True,
        help="A service port of main1, NAME:PROTO:PORT, proxied at "
        f"/bai/sessions/<id>/proxy/NAME/ (proto http, tcp or preopen; {RESERVED_PORTS_TEXT} "
        "are reserved); repeatable.",
    )
    session = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Attach to this running session instead of creating one.",
    )
    launch_timeout = Float(
        None, allow_none=True, config=True, help="Seconds a launch may wait in the queue."
    )
    interrupt_mode = Enum(
        kernelspecs.INTERRUPT_MODES,
        "signal",
        config=True,
        help="How Jupyter interrupts: a signal through the manager, or a control message.",
    )
    sys_prefix = Bool(
        False,
        config=True,
        help="Install into this Python environment instead of for this user.",
    )
    manager_url = Unicode(
        config=True,
        help="A shared manager service (e.g. a JupyterHub's "
        "http://127.0.0.1:8890/services/bai-jupyter/) whose agents size the resources "
        "left out, instead of the agents this machine's config gives. Default: "
        "BAI_JUPYTER_MANAGER_URL.",
    )
    manager_token = Unicode(
        config=True,
        help="Token for --manager-url (a Hub token with access:services!service=<its "
        "name>). Default: BAI_JUPYTER_MANAGER_TOKEN, else JUPYTERHUB_API_TOKEN.",
    )

    def _manager_url_default(self) -> str:
        return os.environ.get("BAI_JUPYTER_MANAGER_URL", "")

    def _manager_token_default(self) -> str:
        return os.environ.get("BAI_JUPYTER_MANAGER_TOKEN") or os.environ.get(
            "JUPYTERHUB_API_TOKEN", ""
        )

    def agents(self) -> dict[str, ResourceSlot]:
        """The agents that size and check the kernelspec: the service's, else the config's."""
        if self.manager_url:
            return service_agents(self.manager_url, self.manager_token)
        return agents_now(self)

    aliases = {  # noqa: RUF012 (traitlets' own class attribute)
        **ALIASES,
        "display-name": "KernelspecInstallApp.display_name",
        "image": "KernelspecInstallApp.image",
        "cluster-size": "KernelspecInstallApp.cluster_size",
        "cluster-mode": "KernelspecInstallApp.cluster_mode",
        "cpu": "KernelspecInstallApp.cpu",
        "mem": "KernelspecInstallApp.mem",
        "template": "KernelspecInstallApp.template",
        "service-port": "KernelspecInstallApp.service_ports",
        "session": "KernelspecInstallApp.session",
        "launch-timeout": "KernelspecInstallApp.launch_timeout",
        "interrupt-mode": "KernelspecInstallApp.interrupt_mode",
        "manager-url": "KernelspecInstallApp.manager_url",
        "manager-token": "KernelspecInstallApp.manager_token",
    }
    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **FLAGS,
        "user": (
            {"KernelspecInstallApp": {"sys_prefix": False}},
            "Install for this user (the default).",
        ),
        "sys-prefix": ({"KernelspecInstallApp": {"sys_prefix": True}}, sys_prefix.help),
    }

    def _config(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The provisioner's settings given on the command line, and the resources among them."""
        config: dict[str, Any] = {}
        for key in _SETTINGS:
            if getattr(self, key) is not None:
                config[key] = getattr(self, key)
        resources = {slot: getattr(self, slot) for slot in ("cpu", "mem") if getattr(self, slot)}
        if resources:
            config["resources"] = resources
        if self.service_ports:
            config["service_ports"] = list(self.service_ports)
        return config, resources

    def run(self) -> int:
        name = self.extra_args[0]
        config, resources = self._config()
        capacities: dict[str, ResourceSlot] | None = None
        try:
            kernelspecs.kernelspec_json("-", config, self.interrupt_mode)  # checked before probing
            if len(resources) < 2 and self.template is None and self.session is None:
                # A share of this machine's agent for what is left out (see docs/kernels.md).
                capacities = self.agents()
                derived = kernelspecs.derive_resources(
                    kernelspecs.biggest(capacities),
                    self.cluster_size or 1,
                    min_resources=group_minimum(self),
                )
                resources = {
                    **{slot: format_amount(slot, amount) for slot, amount in derived.items()},
                    **resources,
                }
                config["resources"] = resources
            display = self.display_name or kernelspecs.default_display_name(
                self.cluster_size, resources
            )
            spec = kernelspecs.kernelspec_json(display, config, self.interrupt_mode)
            path = kernelspecs.install(
                name,
                spec,
                user=not self.sys_prefix,
                prefix=sys.prefix if self.sys_prefix else None,
            )
        except kernelspecs.KernelspecError as exc:
            print(f"{self.name}: error: {exc}", file=sys.stderr)
            return 2
        except BaiError as exc:  # the agents cannot be made or asked (no engine, no service)
            asked = self.manager_url or "the configured agents"
            print(
                f"{self.name}: error: resources: cannot ask {asked} ({exc}); give --cpu and --mem",
                file=sys.stderr,
            )
            return 2
        print(f"installed kernelspec {name} ({display}) in {path}")
        try:  # advice, not a gate: no engine or no permission is no warning
            warning = kernelspecs.fit_warning(config, capacities or self.agents())
        except Exception:
            warning = None
        if warning:
            print(f"{self.name}: warning: {warning}", file=sys.stderr)
        return 0


class KernelspecListApp(BaiCommand):
    """``bai-jupyter kernelspec list``."""

    name = "bai-jupyter kernelspec list"
    description = "The installed kernelspecs that use the bai provisioner."
    usage = "bai-jupyter kernelspec list [--json]"

    as_json = Bool(False, config=True, help="Print JSON instead of a table.")

    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **FLAGS,
        "json": ({"KernelspecListApp": {"as_json": True}}, as_json.help),
    }

    def run(self) -> int:
        found = kernelspecs.installed()
        if self.as_json:
            print(json.dumps([vars(k) for k in found], indent=2))
            return 0
        if not found:
            print(
                "no kernelspec uses the bai provisioner: "
                "add one with `bai-jupyter kernelspec install`"
            )
            return 0
        rows = [
            (k.name, k.display_name, json.dumps(k.config, sort_keys=True), k.path) for k in found
        ]
        print(format_table(("NAME", "DISPLAY NAME", "SETTINGS", "PATH"), rows))
        return 0


class KernelspecApp(BaiCommand):
    """``bai-jupyter kernelspec ACTION``."""

    name = "bai-jupyter kernelspec"
    description = (
        "Kernelspecs on the bai kernel provisioner: picking one in JupyterLab "
        "(or `jupyter console --kernel NAME`) queues a session and runs the notebook's "
        "kernel in its main1. See docs/kernels.md."
    )
    usage = "bai-jupyter kernelspec {install,list} [options]"
    subcommands = {  # noqa: RUF012 (traitlets' own class attribute)
        "install": subcommand(
            KernelspecInstallApp,
            "install (or replace) a kernelspec whose kernel runs as main1 of a session",
        ),
        "list": subcommand(KernelspecListApp, "the installed kernelspecs that use bai"),
    }
