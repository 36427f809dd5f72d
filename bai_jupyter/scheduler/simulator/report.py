"""What a simulation reports: each session's fate and the metrics, as JSON or a table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model import SessionResult, Status, StatusData
from ..config import SchedulerConfig

#: The metrics in words, for ``--help`` (kept next to the types that carry them).
METRICS_HELP = """\
metrics:
  wait                     scheduled_at - submit_at; mean_wait and p95_wait (nearest
                           rank) over the sessions that were scheduled, 0 when none
  makespan                 length of the window [first submit_at, end]; end is the
                           last finish, or `until` if a session still runs then
  utilization              per slot: integral of occupied dt / (capacity x window)
  dominant_share           per owner: time-average over the window of the owner's
                           dominant share (max over slots of occupied / capacity)
  dominant_share_at_until  per owner: that share at the instant `until` (0 included);
                           DRF equalizes this one
  ratios are rounded to 4 decimals"""


@dataclass(frozen=True)
class SessionRow:
    """How one submitted session fared."""

    id: str
    owner: str
    status: Status
    result: SessionResult
    status_info: str | None
    submit_at: float
    scheduled_at: float | None
    finished_at: float | None
    agents: list[str]
    status_data: StatusData

    @property
    def wait(self) -> float | None:
        return None if self.scheduled_at is None else self.scheduled_at - self.submit_at

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": self.id,
            "status": self.status.value,
            "result": self.result.value,
            "status_info": self.status_info,
            "submit_at": _num(self.submit_at),
            "scheduled_at": _num(self.scheduled_at),
            "finished_at": _num(self.finished_at),
            "wait": _num(self.wait),
            "agents": list(self.agents),
        }
        if self.status in (Status.PENDING, Status.CANCELLED):
            row["status_data"] = self.status_data
        return row


@dataclass(frozen=True)
class Metrics:
    """Figures over the measured window (see :data:`METRICS_HELP`)."""

    makespan: float
    mean_wait: float
    p95_wait: float
    utilization: dict[str, float]
    dominant_share: dict[str, float]
    dominant_share_at_until: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "makespan": _num(self.makespan),
            "mean_wait": _num(self.mean_wait),
            "p95_wait": _num(self.p95_wait),
            "utilization": {k: _num(v) for k, v in self.utilization.items()},
            "dominant_share": {k: _num(v) for k, v in self.dominant_share.items()},
            "dominant_share_at_until": {
                k: _num(v) for k, v in self.dominant_share_at_until.items()
            },
        }


@dataclass(frozen=True)
class SimulationResult:
    """Every submitted session in trace order, and the metrics."""

    sessions: list[SessionRow]
    metrics: Metrics
    until: float
    window: tuple[float, float]
    config: SchedulerConfig

    def to_json(self) -> dict[str, Any]:
        return {
            "sessions": [row.to_json() for row in self.sessions],
            "metrics": self.metrics.to_json(),
        }


def _num(value: float | None) -> int | float | None:
    """JSON numbers as a person wrote them: ``100`` rather than ``100.0``."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


def _time(value: float | None) -> str:
    if value is None:
        return "-"
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _info(row: SessionRow) -> str:
    if row.status is Status.PENDING:
        retries = row.status_data.get("scheduler", {}).get("retries", 0)
        return f"waiting, {retries} {'try' if retries == 1 else 'tries'}" if retries else "waiting"
    parts = [row.result.value] if row.result is not SessionResult.UNDEFINED else []
    if row.status_info:
        parts.append(row.status_info)
    return " ".join(parts) or "-"


def _shares(shares: Mapping[str, float]) -> str:
    return ", ".join(f"{owner} {share:.4f}" for owner, share in shares.items()) or "-"


def format_table(result: SimulationResult) -> str:
    """A fixed-width table of the sessions, why some wait or were cancelled, and the metrics."""
    headers = (
        "ID",
        "OWNER",
        "STATUS",
        "RESULT/INFO",
        "SUBMIT",
        "START",
        "FINISH",
        "WAIT",
        "AGENTS",
    )
    numeric = {4, 5, 6, 7}
    rows = [
        (
            row.id,
            row.owner,
            row.status.value,
            _info(row),
            _time(row.submit_at),
            _time(row.scheduled_at),
            _time(row.finished_at),
            _time(row.wait),
            ",".join(row.agents) or "-",
        )
        for row in result.sessions
    ]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [line(headers), *(line(r) for r in rows)]
    notes = [
        f"  {row.id}: {msg}"
        for row in result.sessions
        if row.status in (Status.PENDING, Status.CANCELLED)
        and (msg := row.status_data.get("scheduler", {}).get("msg"))
    ]
    if notes:
        out += ["", "why waiting or cancelled:", *notes]
    m, config = result.metrics, result.config
    options = ", ".join(f"{k}={v}" for k, v in _config_options(config).items())
    counts: dict[str, int] = {}
    for row in result.sessions:
        counts[row.status.value] = counts.get(row.status.value, 0) + 1
    start, end = result.window
    out += [
        "",
        f"scheduler        {config.sequencer} / {config.selector}"
        + (f" ({options})" if options else ""),
        f"sessions         {len(result.sessions)}"
        + (f" ({', '.join(f'{n} {s}' for s, n in counts.items())})" if counts else ""),
        f"makespan         {_time(m.makespan)} "
        f"(window {_time(start)} to {_time(end)}, until {_time(result.until)})",
        f"wait             mean {_time(m.mean_wait)}, p95 {_time(m.p95_wait)}",
        "utilization      " + (", ".join(f"{s} {u:.2%}" for s, u in m.utilization.items()) or "-"),
        f"dominant share   {_shares(m.dominant_share)} (time-average over the window)",
        f"                 {_shares(m.dominant_share_at_until)} (at until)",
    ]
    return "\n".join(out)


def _config_options(config: SchedulerConfig) -> dict[str, Any]:
    """The options in effect, plugin ones and common limits, for the summary line."""
    shown: dict[str, Any] = dict(config.options)
    if config.pending_timeout is not None:
        shown["pending_timeout"] = config.pending_timeout
    policy = config.default_policy
    if policy.max_concurrent_sessions is not None:
        shown["max_concurrent_sessions"] = policy.max_concurrent_sessions
    if policy.max_resources is not None:
        shown["max_resources"] = policy.max_resources.describe()
    return shown
