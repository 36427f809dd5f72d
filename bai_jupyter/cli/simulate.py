"""``bai-jupyter simulate``: replay a trace with the production scheduler, print what happened."""

from __future__ import annotations

import json
import sys

from traitlets import Bool, Dict, Unicode

from ..scheduler.simulator import (
    METRICS_HELP,
    Overrides,
    TraceError,
    format_table,
    load_trace,
    simulate,
)
from .base import ALIASES, FLAGS, BaiCommand

_DESCRIPTION = f"""\
Replay a trace of session requests against virtual agents with the production
scheduler under a simulated clock, and report each session's fate, waits,
utilization and fair-share figures. A pass runs at every submit and finish
(finishes first, then submits, then one pass per instant). Flags override the
trace's "scheduler" section; options merge key by key, the flag winning.
Exit status 2 and one line on stderr for a malformed trace.

{METRICS_HELP}"""


class SimulateApp(BaiCommand):
    """``bai-jupyter simulate TRACE.json``."""

    name = "bai-jupyter simulate"
    description = _DESCRIPTION
    usage = (
        "bai-jupyter simulate TRACE.json [--sequencer S] [--selector A] "
        "[--option KEY=VALUE]... [--json]"
    )
    examples = """\
bai-jupyter simulate examples/traces/head_of_line.json
bai-jupyter simulate examples/traces/head_of_line.json --option num_retries_to_skip=2
bai-jupyter simulate examples/traces/drf.json --sequencer drf --json
"""
    arguments = ("TRACE.json",)  # the trace to replay ('-' for stdin)

    sequencer = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Session sequencer (overrides the trace's), e.g. drf.",
    )
    selector = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Agent selector (overrides the trace's), e.g. dispersed.",
    )
    options = Dict(
        config=True,
        help="Scheduler options, merged over the trace's key by key: "
        "--option KEY=VALUE, repeatable, e.g. --option num_retries_to_skip=2.",
    )
    as_json = Bool(False, config=True, help="Print the result as JSON instead of a table.")

    aliases = {  # noqa: RUF012 (traitlets' own class attribute)
        **ALIASES,
        "sequencer": "SimulateApp.sequencer",
        "selector": "SimulateApp.selector",
        "option": "SimulateApp.options",
    }
    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **FLAGS,
        "json": ({"SimulateApp": {"as_json": True}}, as_json.help),
    }

    def adapt_argv(self, argv: list[str]) -> list[str]:
        """``--option KEY=VALUE`` as it always was: KEY trimmed, a missing ``=`` a usage error
        that says so (traitlets would report "expected a dict, not the list")."""
        adapted: list[str] = []
        rest = iter(argv)
        for arg in rest:
            if arg == "--":
                adapted += [arg, *rest]
                break
            if arg != "--option" and not arg.startswith("--option="):
                adapted.append(arg)
                continue
            text = arg.partition("=")[2] if arg != "--option" else next(rest, None)
            if text is None:  # nothing after it: traitlets says "expected one argument"
                adapted.append(arg)
                continue
            key, sep, value = text.partition("=")
            if not sep or not key.strip():
                self.usage_error(f"argument --option: expected KEY=VALUE, got {text!r}")
            adapted.append(f"--option={key.strip()}={value}")
        return adapted

    def run(self) -> int:
        overrides = Overrides(self.sequencer, self.selector, dict(self.options))
        try:
            result = simulate(load_trace(self.extra_args[0]), overrides)
        except TraceError as exc:
            print(f"{self.name}: error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(result.to_json(), indent=2) if self.as_json else format_table(result))
        return 0
