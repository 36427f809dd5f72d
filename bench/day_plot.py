"""The plot of ``bench/day.py``, as an SVG written by hand (no plotting library needed).

Left: the share of users whose mean wait is at most x (simulated seconds, log scale),
the simulator's and each replay's. Right: each pass's time over the replay's wall time.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

from day_trace import per_user

COLOURS = ["#444444", "#1f77b4", "#d62728", "#2ca02c"]
W, H, PAD = 460, 320, 50


def _panel(x0: int, title: str, xlabel: str, ylabel: str) -> list[str]:
    title, xlabel, ylabel = escape(title), escape(xlabel), escape(ylabel)
    return [
        f'<rect x="{x0 + PAD}" y="{PAD}" width="{W - 2 * PAD}" height="{H - 2 * PAD}" '
        'fill="none" stroke="#999"/>',
        f'<text x="{x0 + W / 2}" y="{PAD - 18}" text-anchor="middle" font-size="14">{title}</text>',
        f'<text x="{x0 + W / 2}" y="{H - 10}" text-anchor="middle" font-size="12">{xlabel}</text>',
        f'<text x="{x0 + 14}" y="{H / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 {x0 + 14} {H / 2})">{ylabel}</text>',
    ]


def _wait_cdf(series: list[tuple[str, dict[str, float]]], owners: dict[str, str]) -> list[str]:
    out = _panel(
        0, "users' mean wait (CDF)", "simulated seconds, log scale (under 1 s: at 1 s)", "users"
    )
    lo, hi = 0.0, 5.0  # 1 s .. 100,000 s

    def x(v: float) -> float:
        frac = (min(max(math.log10(max(v, 1.0)), lo), hi) - lo) / (hi - lo)
        return PAD + frac * (W - 2 * PAD)

    def y(f: float) -> float:
        return H - PAD - f * (H - 2 * PAD)

    for decade in range(6):
        out.append(
            f'<text x="{x(10.0**decade)}" y="{H - PAD + 14}" font-size="10" '
            f'text-anchor="middle">1e{decade}</text>'
        )
    for frac in (0.0, 0.5, 1.0):
        out.append(
            f'<text x="{PAD - 4}" y="{y(frac) + 4}" font-size="10" text-anchor="end">'
            f"{frac:.1f}</text>"
        )
    for i, (name, waits) in enumerate(series):
        users = sorted(per_user([owners[k] for k in waits], list(waits.values())).values())
        points = " ".join(f"{x(v):.1f},{y((j + 1) / len(users)):.1f}" for j, v in enumerate(users))
        colour = COLOURS[i % len(COLOURS)]
        out.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
        )
        out.append(
            f'<text x="{W - PAD - 4}" y="{y(0.05) - 14 * i}" font-size="11" '
            f'text-anchor="end" fill="{colour}">{name}</text>'
        )
    return out


def _passes(series: list[tuple[str, list[tuple[float, float, int]]]]) -> list[str]:
    out = _panel(W, "scheduling passes", "wall seconds of the replay", "pass time (ms)")
    span = max((p[0] for _, ps in series for p in ps), default=1.0) or 1.0
    top = max((p[1] for _, ps in series for p in ps), default=0.001) * 1e3 or 1.0
    out.append(
        f'<text x="{W + PAD - 4}" y="{PAD + 4}" font-size="10" text-anchor="end">{top:.0f}</text>'
    )
    out.append(
        f'<text x="{W + W - PAD}" y="{H - PAD + 14}" font-size="10" '
        f'text-anchor="end">{span:.0f}</text>'
    )
    for i, (name, passes) in enumerate(series, start=1):
        colour = COLOURS[i % len(COLOURS)]
        for at, seconds, _ in passes:
            cx = W + PAD + at / span * (W - 2 * PAD)
            cy = H - PAD - seconds * 1e3 / top * (H - 2 * PAD)
            out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="1.2" fill="{colour}"/>')
        out.append(
            f'<text x="{W + W - PAD - 4}" y="{PAD + 14 * i}" font-size="11" '
            f'text-anchor="end" fill="{colour}">{name}</text>'
        )
    return out


def write_svg(
    path: Path,
    trace: dict[str, Any],
    sim: dict[str, float],
    runs: list[tuple[str, dict[str, float], list[tuple[float, float, int]]]],
) -> None:
    """Both panels side by side into ``path``."""
    owners = {s["id"]: s["owner"] for s in trace["sessions"]}
    body = [
        *_wait_cdf([("simulator", sim), *((name, waits) for name, waits, _ in runs)], owners),
        *_passes([(name, passes) for name, _, passes in runs]),
    ]
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" '
        f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
        + "\n".join(body)
        + "</svg>\n",
        encoding="utf-8",
    )
