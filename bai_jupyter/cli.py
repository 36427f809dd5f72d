"""``bai-jupyter``: the command line. Parsing and printing only; the work lives elsewhere.

Each subcommand is one :class:`Subcommand` in :data:`SUBCOMMANDS` (how to add
its arguments, and the function that runs it), so a new one (``image``,
``kernelspec`` …) is one entry and one function.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import __version__, image
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

SUBCOMMANDS: dict[str, Subcommand] = {
    "image": Subcommand(
        help="build or inspect the default kernel image",
        description=image.IMAGE_DESCRIPTION,
        configure=image.configure_cli,
        run=image.run_cli,
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
