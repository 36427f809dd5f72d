"""Checks a pending session must pass before the pass looks for room for it.

A predicate returns None when the session may go on, or a :class:`Verdict`
that says why not, and whether the session can never go on (then it is
cancelled with ``cancel`` as its ``status_info``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from ..model import Session, SessionResult, Status
from ..resources import format_amount
from .config import OwnerPolicy
from .context import PassContext


@dataclass(frozen=True)
class Verdict:
    name: str
    msg: str
    cancel: str | None = None  # status_info when the session must be cancelled

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "msg": self.msg}


Predicate = Callable[[Session, PassContext], "Verdict | None"]


def _when(ts: float) -> str:
    if ts < 1e9:  # a simulated clock, not a date
        return f"t={ts:g}"
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):  # beyond year 9999: an old, unbounded record
        return f"t={ts:g}"


def pending_timeout(session: Session, ctx: PassContext) -> Verdict | None:
    limit = ctx.config.pending_timeout
    if limit is not None and ctx.now - session.created_at >= limit:
        return Verdict(
            "pending_timeout", f"still pending after {limit:g} s", cancel="pending-timeout"
        )
    return None


def dependencies(session: Session, ctx: PassContext) -> Verdict | None:
    waiting: list[str] = []
    for dep in session.spec.depends_on:
        state = ctx.snapshot.dependency_states.get(dep)
        if state is None:
            return Verdict(
                "dependencies", f"depends on unknown session {dep}", cancel="dependency-failed"
            )
        status, result = state
        if status is Status.TERMINATED and result is SessionResult.SUCCESS:
            continue
        if status.is_terminal:
            how = status.value if status is not Status.TERMINATED else f"with {result.value}"
            return Verdict(
                "dependencies", f"dependency {dep} ended {how}", cancel="dependency-failed"
            )
        waiting.append(f"{dep} ({status.value})")
    if waiting:
        return Verdict("dependencies", f"waiting for {', '.join(waiting)} to succeed")
    return None


def starts_at(session: Session, ctx: PassContext) -> Verdict | None:
    when = session.spec.starts_at
    if when is not None and ctx.now < when:
        return Verdict("starts_at", f"starts at {_when(when)}")
    return None


def _by(policy: OwnerPolicy) -> str:
    return f", {policy.source}" if policy.source else ""


def concurrency(session: Session, ctx: PassContext) -> Verdict | None:
    policy = ctx.config.policy(session.owner)
    limit = policy.max_concurrent_sessions
    running = ctx.snapshot.owner_sessions.get(session.owner, 0)
    if limit is not None and running >= limit:
        return Verdict(
            "concurrency",
            f"{session.owner} already has {running} active sessions (limit {limit}{_by(policy)})",
        )
    return None


def owner_resources(session: Session, ctx: PassContext) -> Verdict | None:
    policy = ctx.config.policy(session.owner)
    limit = policy.max_resources
    if limit is None:
        return None
    held = ctx.snapshot.owner_occupied.get(session.owner)
    wanted = session.spec.total_resources if held is None else held + session.spec.total_resources
    # Only the slots the limit names are limited (``cpu=8`` does not forbid memory).
    over = {slot: pair for slot, pair in wanted.shortfall(limit).items() if slot in limit}
    if over:
        return Verdict(
            "owner_resources",
            f"{session.owner} would hold "
            + ", ".join(
                f"{slot}={format_amount(slot, need)} "
                f"(limit {format_amount(slot, have)}{_by(policy)})"
                for slot, (need, have) in over.items()
            ),
        )
    return None


#: Cancelling checks first: a session that must go is not counted as waiting.
PREDICATES: tuple[Predicate, ...] = (
    pending_timeout,
    dependencies,
    starts_at,
    concurrency,
    owner_resources,
)
