"""Sessions, kernels and agents, and the one lifecycle table they follow.

The states and their table (``status``), what a user asks for (``spec``), the
rule reading a key as an id or a name (``keys``), the
records the store keeps (``records``), why a pending session waits (``pending``) and
what a change says to those who follow it (``events``) each have a module; every name
is here too.
"""

from __future__ import annotations

from .events import session_event
from .keys import ID_KEY_RE, ID_LENGTH, MAX_REASON, REASON_RE, is_id_key, reason_problem
from .pending import name_sessions, pending_reason
from .records import (
    Agent,
    ExecResult,
    HistoryEntry,
    Kernel,
    KernelRole,
    Session,
    SessionResult,
    new_id,
)
from .spec import (
    MAIN_ROLE,
    SUB_ROLE,
    ClusterMode,
    RoleSpec,
    SessionSpec,
    SessionType,
    cluster_hostnames,
)
from .status import (
    ACTIVE,
    DIED,
    NOT_ENDED,
    OCCUPYING,
    STARTING,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    Status,
    check_transition,
    ended_on_purpose,
)
from .status_data import StatusData

__all__ = [
    "ACTIVE",
    "DIED",
    "ID_KEY_RE",
    "ID_LENGTH",
    "MAIN_ROLE",
    "MAX_REASON",
    "NOT_ENDED",
    "OCCUPYING",
    "REASON_RE",
    "STARTING",
    "SUB_ROLE",
    "TERMINAL",
    "TRANSITIONS",
    "Agent",
    "ClusterMode",
    "ExecResult",
    "HistoryEntry",
    "IllegalTransition",
    "Kernel",
    "KernelRole",
    "RoleSpec",
    "Session",
    "SessionResult",
    "SessionSpec",
    "SessionType",
    "Status",
    "StatusData",
    "check_transition",
    "cluster_hostnames",
    "ended_on_purpose",
    "is_id_key",
    "name_sessions",
    "new_id",
    "pending_reason",
    "reason_problem",
    "session_event",
]
