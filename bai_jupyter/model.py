"""Sessions, kernels and agents, and the one lifecycle table they follow."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .resources import ResourceSlot
from .runtime.protocol import ServicePort


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
    Status.PREPARING: frozenset({Status.PULLING, Status.PREPARED, *_ENDING}),
    Status.PULLING: frozenset({Status.PREPARED, *_ENDING}),
    Status.PREPARED: frozenset({Status.CREATING, *_ENDING}),
    Status.CREATING: frozenset({Status.RUNNING, *_ENDING}),
    Status.RUNNING: frozenset({Status.RESTARTING, Status.TERMINATING, Status.ERROR}),
    Status.RESTARTING: frozenset({Status.RUNNING, Status.TERMINATING, Status.ERROR}),
    Status.TERMINATING: frozenset({Status.TERMINATED, Status.ERROR}),
    Status.TERMINATED: frozenset(),
    Status.CANCELLED: frozenset(),
    # An errored session is still cleaned up (containers removed) and ends TERMINATED.
    Status.ERROR: frozenset({Status.TERMINATING, Status.TERMINATED}),
}

TERMINAL = frozenset({Status.TERMINATED, Status.CANCELLED, Status.ERROR})
OCCUPYING = frozenset({*STARTING, Status.RUNNING, Status.RESTARTING, Status.TERMINATING})
#: Order of progress, used to derive a session's status from its kernels'.
_PROGRESS = [Status.PENDING, *STARTING, Status.RUNNING]


class IllegalTransition(RuntimeError):
    """A state change the lifecycle table does not allow."""

    def __init__(self, what: str, old: Status, new: Status) -> None:
        super().__init__(f"{what}: illegal transition {old.value} → {new.value}")
        self.old, self.new = old, new


def check_transition(what: str, old: Status, new: Status) -> None:
    """Raise :class:`IllegalTransition` unless ``old → new`` is in the table."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(what, old, new)


def derive_session_status(kernel_statuses: Iterable[Status]) -> Status:
    """A session's status from its kernels': the worst or least advanced wins."""
    statuses = set(kernel_statuses)
    if not statuses:
        return Status.PENDING
    if len(statuses) == 1:
        return next(iter(statuses))
    for dominant in (Status.ERROR, Status.TERMINATING, Status.RESTARTING):
        if dominant in statuses:
            return dominant
    if statuses <= {Status.TERMINATED, Status.CANCELLED}:
        return Status.TERMINATED
    if statuses & {Status.TERMINATED, Status.CANCELLED}:
        return Status.TERMINATING  # some kernels are gone, the rest still must go
    return min(statuses, key=_PROGRESS.index)


class SessionType(str, Enum):
    INTERACTIVE = "interactive"
    BATCH = "batch"
    INFERENCE = "inference"
    SYSTEM = "system"


class ClusterMode(str, Enum):
    SINGLE_NODE = "single-node"
    MULTI_NODE = "multi-node"


class SessionResult(str, Enum):
    UNDEFINED = "UNDEFINED"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


class KernelRole(str, Enum):
    MAIN = "main"
    SUB = "sub"


def new_id() -> str:
    """A session or kernel id: uuid4 hex."""
    return uuid.uuid4().hex


#: The role of main1 (the one kernel that runs the notebook's kernel or the batch task).
MAIN_ROLE = "main"
#: The role of the other kernels of a session that names no roles.
SUB_ROLE = "sub"


@dataclass
class RoleSpec:
    """Kernels of one role of a cluster session: hostnames ``<name>1`` … ``<name><replicas>``.

    ``None`` fields take the session's own (its ``image``, ``resources``); ``env`` is
    added over the session's, ``mounts`` beside the session's.
    """

    name: str
    replicas: int = 1
    image: str | None = None
    resources: ResourceSlot = field(default_factory=ResourceSlot)
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "replicas": self.replicas,
            "image": self.image,
            "resources": self.resources.to_json(),
            "env": dict(self.env),
            "mounts": list(self.mounts),
        }


@dataclass
class SessionSpec:
    """What a user asks for; every field is also a template field.

    ``resources`` are per kernel. With ``roles`` the kernels differ by role (image,
    resources, env, mounts); without, every kernel gets the same and the others than
    main1 are ``sub1`` … (the role ``sub``).
    """

    image: str | None = None
    name: str | None = None
    type: SessionType = SessionType.INTERACTIVE
    resources: ResourceSlot = field(default_factory=ResourceSlot)
    cluster_size: int = 1
    cluster_mode: ClusterMode = ClusterMode.SINGLE_NODE
    resource_group: str = "default"
    priority: int = 10
    depends_on: list[str] = field(default_factory=list)
    starts_at: float | None = None
    startup_command: str | None = None
    batch_timeout: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    #: ``name:proto:port`` each (the request's JSON form); :attr:`services` parses them.
    service_ports: list[str] = field(default_factory=list)
    #: The cluster's roles (``main`` and others); empty: main1 and ``sub`` kernels.
    roles: list[RoleSpec] = field(default_factory=list)

    @property
    def services(self) -> list[ServicePort]:
        """The declared service ports of main1, parsed."""
        return [ServicePort.parse(spec) for spec in self.service_ports]

    def cluster_roles(self) -> list[RoleSpec]:
        """Every role in kernel order, main first (its fields filled from the session's)."""
        named = {role.name: role for role in self.roles}
        main = named.pop(MAIN_ROLE, RoleSpec(MAIN_ROLE))
        others = list(named.values()) if self.roles else []
        if not self.roles and self.cluster_size > 1:
            others = [RoleSpec(SUB_ROLE, self.cluster_size - 1)]
        return [self._filled(main), *(self._filled(role) for role in others)]

    def _filled(self, role: RoleSpec) -> RoleSpec:
        return RoleSpec(
            role.name,
            role.replicas,
            role.image or self.image,
            self.resources.updated(role.resources) if role.resources else self.resources,
            {**self.env, **role.env},
            [*self.mounts, *(m for m in role.mounts if m not in self.mounts)],
        )

    def kernel_shapes(self) -> list[tuple[str, RoleSpec]]:
        """Each kernel's hostname and role, in order (``main1``, ``worker1`` …)."""
        return [
            (f"{role.name}{i}", role)
            for role in self.cluster_roles()
            for i in range(1, role.replicas + 1)
        ]

    def kernel_slots(self) -> list[ResourceSlot]:
        """Each kernel's resource slots, in order."""
        return [role.resources for _, role in self.kernel_shapes()]

    @property
    def uniform(self) -> bool:
        """Whether every kernel asks for the same slots (the scheduler's fast path)."""
        return not self.roles or all(
            self.resources.updated(role.resources) == self.resources for role in self.roles
        )

    @property
    def total_resources(self) -> ResourceSlot:
        """What the whole session occupies: the sum of its kernels' slots."""
        if self.uniform:
            return self.resources * self.cluster_size
        total = ResourceSlot()
        for slots in self.kernel_slots():
            total = total + slots
        return total

    @property
    def images(self) -> list[str]:
        """Every image its kernels run (the session's first)."""
        found = [role.image for role in self.cluster_roles() if role.image]
        return list(dict.fromkeys([*([self.image] if self.image else []), *found]))

    def replicas_text(self) -> str:
        """``main:1,worker:3`` (Backend.AI's ``BACKENDAI_CLUSTER_REPLICAS``)."""
        return ",".join(f"{role.name}:{role.replicas}" for role in self.cluster_roles())


@dataclass
class HistoryEntry:
    status: Status
    at: float
    info: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "at": self.at, "info": self.info}


def cluster_hostnames(size: int) -> list[str]:
    """``main1``, ``sub1`` … ``sub{size-1}`` (a session that names no roles)."""
    return [host for host, _ in SessionSpec(cluster_size=size).kernel_shapes()]


@dataclass
class Kernel:
    """One container (or process) of a session."""

    id: str
    session_id: str
    role: KernelRole
    cluster_idx: int
    hostname: str
    slots: ResourceSlot
    status: Status = Status.PENDING
    status_info: str | None = None
    agent_id: str | None = None
    container_id: str | None = None
    #: Where it can be reached once started: host, ports, Jupyter connection info.
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def role_name(self) -> str:
        """Its role (``main``, ``sub``, or a role the request named): its hostname's stem."""
        return self.hostname.rstrip("0123456789")

    def set_status(self, new: Status, info: str | None = None) -> None:
        check_transition(f"kernel {self.hostname} of {self.session_id}", self.status, new)
        self.status, self.status_info = new, info


@dataclass
class Session:
    """A unit of computation a user asked for, with its kernels and its history."""

    id: str
    owner: str
    spec: SessionSpec
    created_at: float
    status: Status = Status.PENDING
    status_info: str | None = None
    status_data: dict[str, Any] = field(default_factory=dict)
    status_history: list[HistoryEntry] = field(default_factory=list)
    result: SessionResult = SessionResult.UNDEFINED
    exit_code: int | None = None
    kernels: list[Kernel] = field(default_factory=list)
    #: Front ends' facts about the session (e.g. the Jupyter kernel id behind it).
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls, spec: SessionSpec, owner: str, now: float, session_id: str | None = None
    ) -> Session:
        """A new PENDING session with its kernels; the main kernel's id is the session's."""
        sid = session_id or new_id()
        kernels = [
            Kernel(
                id=sid if idx == 0 else new_id(),
                session_id=sid,
                role=KernelRole.MAIN if idx == 0 else KernelRole.SUB,
                cluster_idx=idx + 1 if idx == 0 else idx,
                hostname=host,
                slots=role.resources,
            )
            for idx, (host, role) in enumerate(spec.kernel_shapes())
        ]
        return cls(
            id=sid,
            owner=owner,
            spec=spec,
            created_at=now,
            kernels=kernels,
            status_history=[HistoryEntry(Status.PENDING, now)],
        )

    @property
    def name(self) -> str | None:
        return self.spec.name

    def service_address(self, service: ServicePort) -> tuple[str, int] | None:
        """Where main1's ``service`` is reached (host, port), once its kernel started."""
        main = next((k for k in self.kernels if k.role is KernelRole.MAIN), None)
        if main is None:
            return None
        port = main.info.get("ports", {}).get(service.port_key)
        host = main.info.get("host")
        return (str(host), int(port)) if host and port else None

    @property
    def scheduler_data(self) -> dict[str, Any]:
        """The scheduler's why-pending record (``status_data["scheduler"]``)."""
        data: dict[str, Any] = self.status_data.get("scheduler", {})
        return data

    def set_status(
        self,
        new: Status,
        now: float,
        info: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Move to ``new`` (validated), recording why and when."""
        check_transition(f"session {self.id}", self.status, new)
        self.status, self.status_info = new, info
        if data is not None:
            self.status_data = dict(data)
        self.status_history.append(HistoryEntry(new, now, info))

    def sync_status(self, now: float) -> Status:
        """Derive the session status from its kernels' and record a change."""
        derived = derive_session_status(k.status for k in self.kernels)
        if derived != self.status:
            self.set_status(derived, now, self.status_info)
        return self.status

    def finish(self, exit_code: int | None) -> None:
        """Record a batch result: exit code 0 → SUCCESS, anything else → FAILURE."""
        self.exit_code = exit_code
        self.result = SessionResult.SUCCESS if exit_code == 0 else SessionResult.FAILURE

    @property
    def occupied(self) -> ResourceSlot:
        """Slots this session holds on agents right now."""
        return self.spec.resources * sum(1 for k in self.kernels if k.status.occupies)


@dataclass
class Agent:
    """A node that runs kernels, with its capacity and what is reserved on it."""

    id: str
    capacity: ResourceSlot
    occupied: ResourceSlot = field(default_factory=ResourceSlot)
    resource_group: str = "default"
    backend: str = "local"
    address: str | None = None
    schedulable: bool = True

    @property
    def free(self) -> ResourceSlot:
        return self.capacity - self.occupied


@dataclass(frozen=True)
class ExecResult:
    """What a command run in a kernel gave: its exit code and its output (stdout + stderr)."""

    exit_code: int
    output: str
