"""The lifecycle of sessions and kernels: their states and the one table of moves."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """Lifecycle state of a session or of one of its kernels (docs/architecture.md)."""

    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        """No transition leaves this state except clean-up of an ERROR."""
        return self in TERMINAL

    @property
    def occupies(self) -> bool:
        """Whether a kernel in this state holds its reserved slots on an agent."""
        return self in OCCUPYING


#: Placed, kernels not yet running.
STARTING = (Status.SCHEDULED, Status.PREPARING, Status.PULLING, Status.PREPARED, Status.CREATING)
_ENDING = {Status.TERMINATING, Status.ERROR, Status.CANCELLED}

#: The lifecycle: state → the states it may move to. Anything else is a bug and raises.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.SCHEDULED, Status.CANCELLED, Status.ERROR}),
    Status.SCHEDULED: frozenset({Status.PREPARING, *_ENDING}),
    # Back to SCHEDULED: a new leader starts again what a dead one left half-started.
    Status.PREPARING: frozenset({Status.PULLING, Status.PREPARED, Status.SCHEDULED, *_ENDING}),
    Status.PULLING: frozenset({Status.PREPARED, Status.SCHEDULED, *_ENDING}),
    Status.PREPARED: frozenset({Status.CREATING, Status.SCHEDULED, *_ENDING}),
    Status.CREATING: frozenset({Status.RUNNING, Status.SCHEDULED, *_ENDING}),
    Status.RUNNING: frozenset({Status.RESTARTING, Status.TERMINATING, Status.ERROR}),
    Status.RESTARTING: frozenset({Status.RUNNING, Status.TERMINATING, Status.ERROR}),
    Status.TERMINATING: frozenset({Status.TERMINATED, Status.ERROR}),
    Status.TERMINATED: frozenset(),
    Status.CANCELLED: frozenset(),
    # An errored session is still cleaned up (containers removed) and ends TERMINATED.
    Status.ERROR: frozenset({Status.TERMINATING, Status.TERMINATED}),
}

#: Ended: nothing runs and nothing more happens but the clean-up of an ERROR.
TERMINAL = frozenset({Status.TERMINATED, Status.CANCELLED, Status.ERROR})
#: Not ended (every state but the TERMINAL ones), in lifecycle order.
NOT_ENDED = tuple(s for s in Status if s not in TERMINAL)
#: Its kernels run: code can be executed, services reached (a kernel may be restarting).
ACTIVE = frozenset({Status.RUNNING, Status.RESTARTING})
OCCUPYING = frozenset({*STARTING, *ACTIVE, Status.TERMINATING})

#: Reasons (``status_info``) of a session that died or never ran, rather than one someone
#: ended: a Jupyter kernel on such a session may restart (on a new session).
DIED = frozenset(
    {
        "kernel-died",
        "oom-killed",
        "kernel-lost",
        "agent-lost",
        "network-disconnected",
        "hang-timeout",
        "start-interrupted",
        "failed-to-start",
    }
)


def ended_on_purpose(status: Status, info: str | None) -> bool:
    """Ended by someone (its owner, an admin, their idle or lifetime rules, a kernel's
    own clean exit), not by a death: its Jupyter kernel ends too and does not restart."""
    return status in (Status.TERMINATED, Status.CANCELLED) and info not in DIED


class IllegalTransition(RuntimeError):
    """A state change the lifecycle table does not allow."""

    def __init__(self, what: str, old: Status, new: Status) -> None:
        super().__init__(f"{what}: illegal transition {old.value} → {new.value}")
        self.old, self.new = old, new


def check_transition(what: str, old: Status, new: Status) -> None:
    """Raise :class:`IllegalTransition` unless ``old → new`` is in the table."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(what, old, new)
