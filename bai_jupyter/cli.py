"""``bai-jupyter``: the command line. Parsing and printing only; the work lives elsewhere.

Each subcommand is one :class:`Subcommand` in :data:`SUBCOMMANDS` (how to add
its arguments, and the function that runs it), so a new one (``image``,
``kernelspec`` …) is one entry and one function.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import __version__, image, kernelspecs
from .resources import ResourceSlot, format_amount
from .scheduler.simulator import (
    METRICS_HELP,
    Overrides,
    TraceError,
    format_table,
    load_trace,
    simulate,
)

PROG = "bai-jupyter"


@dataclass(frozen=True)
class Subcommand:
    help: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    epilog: str | None = None


# ---------------------------------------------------------------------------
# simulate


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _configure_simulate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE.json", help="the trace to replay ('-' for stdin)")
    parser.add_argument(
        "--sequencer", metavar="S", help="session sequencer (overrides the trace's), e.g. drf"
    )
    parser.add_argument(
        "--selector", metavar="A", help="agent selector (overrides the trace's), e.g. dispersed"
    )
    parser.add_argument(
        "--option",
        metavar="KEY=VALUE",
        action="append",
        type=_key_value,
        default=[],
        help="scheduler option, merged over the trace's (repeatable), "
        "e.g. --option num_retries_to_skip=2",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the result as JSON instead of a table"
    )


def _run_simulate(args: argparse.Namespace) -> int:
    overrides = Overrides(args.sequencer, args.selector, dict(args.option))
    try:
        result = simulate(load_trace(args.trace), overrides)
    except TraceError as exc:
        print(f"{PROG} simulate: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_table(result))
    return 0


_SIMULATE_DESCRIPTION = """\
Replay a trace of session requests against virtual agents with the production
scheduler under a simulated clock, and report each session's fate, waits,
utilization and fair-share figures. A pass runs at every submit and finish
(finishes first, then submits, then one pass per instant). Flags override the
trace's "scheduler" section; options merge key by key, the flag winning.
Exit status 2 and one line on stderr for a malformed trace."""

# ---------------------------------------------------------------------------
# kernelspec


def _configure_kernelspec(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = actions.add_parser(
        "install",
        help="install (or replace) a kernelspec whose kernel runs as main1 of a session",
        description="Install a kernelspec on the bai provisioner. Settings left out come "
        "from --template, else the manager's defaults; bad values are refused here. "
        "Without --template or --session, a --cpu or --mem left out is derived from "
        "this machine: the session asks for half of one agent, split among its kernels.",
    )
    install.add_argument("name", metavar="NAME", help="kernelspec name, e.g. py-cluster-3")
    install.add_argument("--display-name", metavar="T", help="name shown in JupyterLab")
    install.add_argument("--image", metavar="I", help="kernel image")
    install.add_argument("--cluster-size", metavar="N", type=int, help="kernels: main1, sub1 …")
    install.add_argument("--cluster-mode", metavar="M", help="single-node or multi-node")
    install.add_argument("--cpu", metavar="C", help="CPU cores per kernel, e.g. 2 or 0.5")
    install.add_argument("--mem", metavar="M", help="memory per kernel, e.g. 4g")
    install.add_argument("--template", metavar="T", help="session template to start from")
    install.add_argument(
        "--service-port",
        metavar="NAME:PROTO:PORT",
        action="append",
        dest="service_ports",
        help="a service port of main1, proxied at /bai/sessions/<id>/proxy/NAME/ "
        "(proto http, tcp or preopen; 2200 and 2300-2304 are reserved); repeatable",
    )
    install.add_argument(
        "--session", metavar="S", help="attach to this running session instead of creating one"
    )
    install.add_argument(
        "--launch-timeout", metavar="S", type=float, help="seconds a launch may wait in the queue"
    )
    install.add_argument(
        "--interrupt-mode",
        choices=kernelspecs.INTERRUPT_MODES,
        default="signal",
        help="how Jupyter interrupts: a signal through the manager, or a control message",
    )
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for this user (the default)")
    where.add_argument(
        "--sys-prefix", action="store_true", help="install into this Python environment"
    )
    install.set_defaults(action_run=_run_kernelspec_install)
    listing = actions.add_parser("list", help="the installed kernelspecs that use bai")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(action_run=_run_kernelspec_list)


def _run_kernelspec(args: argparse.Namespace) -> int:
    run: Callable[[argparse.Namespace], int] = args.action_run
    return run(args)


def _run_kernelspec_install(args: argparse.Namespace) -> int:
    config: dict[str, object] = {}
    for key in ("image", "cluster_size", "cluster_mode", "template", "launch_timeout", "session"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    resources = {slot: getattr(args, slot) for slot in ("cpu", "mem") if getattr(args, slot)}
    if resources:
        config["resources"] = resources
    if args.service_ports:
        config["service_ports"] = list(args.service_ports)
    capacities: dict[str, ResourceSlot] | None = None
    try:
        kernelspecs.kernelspec_json("-", config, args.interrupt_mode)  # checked before probing
        if len(resources) < 2 and args.template is None and args.session is None:
            # A share of this machine's agent for what is left out (see docs/kernels.md).
            capacities = _agents_now()
            derived = kernelspecs.derive_resources(
                kernelspecs.biggest(capacities), args.cluster_size or 1
            )
            resources = {
                **{slot: format_amount(slot, amount) for slot, amount in derived.items()},
                **resources,
            }
            config["resources"] = resources
        display = args.display_name or kernelspecs.default_display_name(
            args.cluster_size, resources
        )
        spec = kernelspecs.kernelspec_json(display, config, args.interrupt_mode)
        path = kernelspecs.install(
            args.name,
            spec,
            user=not args.sys_prefix,
            prefix=sys.prefix if args.sys_prefix else None,
        )
    except kernelspecs.KernelspecError as exc:
        print(f"{PROG} kernelspec install: error: {exc}", file=sys.stderr)
        return 2
    print(f"installed kernelspec {args.name} ({display}) in {path}")
    try:  # advice, not a gate: no engine or no permission is no warning
        warning = kernelspecs.fit_warning(config, capacities or _agents_now())
    except Exception:
        warning = None
    if warning:
        print(f"{PROG} kernelspec install: warning: {warning}", file=sys.stderr)
    return 0


def _agents_now() -> dict[str, ResourceSlot]:
    """The agents this machine has now, as the manager would make them (blocking: CLI only)."""
    from .manager import BaiSessionManager

    return asyncio.run(BaiSessionManager().agents_now())


def _run_kernelspec_list(args: argparse.Namespace) -> int:
    found = kernelspecs.installed()
    if args.json:
        print(json.dumps([vars(k) for k in found], indent=2))
        return 0
    if not found:
        print(
            "no kernelspec uses the bai provisioner: add one with `bai-jupyter kernelspec install`"
        )
        return 0
    rows = [("NAME", "DISPLAY NAME", "SETTINGS", "PATH")] + [
        (k.name, k.display_name, json.dumps(k.config, sort_keys=True), k.path) for k in found
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3])
    return 0


# ---------------------------------------------------------------------------

SUBCOMMANDS: dict[str, Subcommand] = {
    "image": Subcommand(
        help="build or inspect the default kernel image",
        description=image.IMAGE_DESCRIPTION,
        configure=image.configure_cli,
        run=image.run_cli,
    ),
    "kernelspec": Subcommand(
        help="install or list kernelspecs whose kernel runs as main1 of a session",
        description="Kernelspecs on the bai kernel provisioner: picking one in JupyterLab "
        "(or `jupyter console --kernel NAME`) queues a session and runs the notebook's "
        "kernel in its main1. See docs/kernels.md.",
        configure=_configure_kernelspec,
        run=_run_kernelspec,
    ),
    "simulate": Subcommand(
        help="replay a session trace under a simulated clock",
        description=_SIMULATE_DESCRIPTION,
        configure=_configure_simulate,
        run=_run_simulate,
        epilog=METRICS_HELP,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Backend.AI-style compute sessions, native in Jupyter."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in SUBCOMMANDS.items():
        sub = commands.add_parser(
            name,
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bai-jupyter`` console script; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors: argparse already printed
        return exc.code if isinstance(exc.code, int) else 2
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except BrokenPipeError:
        # `bai-jupyter simulate big.json | head`: the reader left; that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
