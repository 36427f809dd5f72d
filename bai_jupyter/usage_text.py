"""A session's usage per kernel (CPU, memory, network) as ``%bai status`` shows it: a
text table, and the HTML its widget (``usage_widget.py``) shows.

The numbers are the API's ``usage`` event (docs/api.md, Usage events).
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping
from typing import Any

from .text import format_table

__all__ = ["usage_html", "usage_rows", "usage_text"]


def _bytes(amount: float) -> str:
    """``512 MiB``, ``1.5 GiB``, ``820 B``: binary units, three figures."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return (
                f"{amount:.0f} {unit}" if unit == "B" or amount >= 100 else f"{amount:.3g} {unit}"
            )
        amount /= 1024
    return f"{amount:.3g} TiB"  # pragma: no cover (the loop returns)


def usage_rows(usage: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per kernel: host, CPU (% of its slots), memory (used of limit), network (↓ ↑ per s);
    ``–`` where the agent did not say (a first reading has no rates)."""
    rows = []
    for k in usage.get("kernels") or []:
        cpu = "–"
        if k.get("cpu_percent") is not None:
            cpu = f"{k['cpu_percent']:.0f} % of {k['cpu_slots']:g} cpu"
        mem = "–"
        if k.get("mem_bytes") is not None:
            limit = k.get("mem_limit")
            mem = _bytes(k["mem_bytes"]) + (f" of {_bytes(limit)}" if limit else "")
        net = "–"
        if k.get("net_rx_rate") is not None and k.get("net_tx_rate") is not None:
            net = f"↓ {_bytes(k['net_rx_rate'])}/s ↑ {_bytes(k['net_tx_rate'])}/s"
        rows.append((str(k["kernel"]), cpu, mem, net))
    return rows


def usage_text(usage: Mapping[str, Any]) -> str:
    """The usage table with a heading that says when it was read."""
    rows = usage_rows(usage)
    if not rows:
        return "usage: none read (the agent gives none)"
    when = time.strftime("%H:%M:%S", time.localtime(usage.get("at") or time.time()))
    table = format_table(("HOST", "CPU", "MEMORY", "NETWORK"), rows)
    # Indented under its heading: the kernels' own table above starts lines with hosts.
    return f"usage at {when}:\n" + "\n".join(f"  {line}" for line in table.splitlines())


def usage_html(usage: Mapping[str, Any]) -> str:
    rows = usage_rows(usage)
    if not rows:
        return "<i>usage: none read yet</i>"
    cells = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    head = "".join(f"<th>{h}</th>" for h in ("host", "CPU", "memory", "network"))
    every = usage.get("interval")
    when = time.strftime("%H:%M:%S", time.localtime(usage.get("at") or time.time()))
    note = f"live, every {every:g} s · {when}" if every else f"at {when}"
    return f"<b>usage</b> <small>({note})</small><table><tr>{head}</tr>{cells}</table>"
