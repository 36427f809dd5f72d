"""Sessions, kernels and agents as the store keeps them, each state change validated."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..resources import ResourceSlot
from ..runtime.protocol import ServicePort
from .pending import pending_reason
from .spec import SessionSpec
from .status import Status, check_transition
from .status_data import StatusData


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


@dataclass
class HistoryEntry:
    status: Status
    at: float
    info: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "at": self.at, "info": self.info}


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
    status_data: StatusData = field(default_factory=StatusData)
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

    @property
    def main(self) -> Kernel:
        """Its main kernel, ``main1`` (its id is the session's): every session has one."""
        for kernel in self.kernels:
            if kernel.role is KernelRole.MAIN:
                return kernel
        raise LookupError(f"session {self.id} has no main kernel")

    def service_address(self, service: ServicePort) -> tuple[str, int] | None:
        """Where main1's ``service`` is reached (host, port), once its kernel started."""
        if not self.kernels:
            return None
        main = self.main
        port = main.info.get("ports", {}).get(service.port_key)
        host = main.info.get("host")
        return (str(host), int(port)) if host and port else None

    @property
    def scheduler_data(self) -> dict[str, Any]:
        """The scheduler's why-pending record (``status_data["scheduler"]``)."""
        data: dict[str, Any] = self.status_data.get("scheduler", {})
        return data

    @property
    def pending_reason(self) -> str | None:
        """Why it waits (or waited, if cancelled in the queue), in one sentence: the API's
        ``pending_reason`` (:func:`~bai_jupyter.model.pending.pending_reason`)."""
        return pending_reason(self.scheduler_data)

    def set_status(
        self,
        new: Status,
        now: float,
        info: str | None = None,
        data: StatusData | None = None,
    ) -> None:
        """Move to ``new`` (validated), recording why and when."""
        check_transition(f"session {self.id}", self.status, new)
        self.status, self.status_info = new, info
        if data is not None:
            self.status_data = data.copy()
        self.status_history.append(HistoryEntry(new, now, info))

    def finish(self, exit_code: int | None) -> None:
        """Record a batch result: exit code 0 → SUCCESS, anything else → FAILURE."""
        self.exit_code = exit_code
        self.result = SessionResult.SUCCESS if exit_code == 0 else SessionResult.FAILURE


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
    """What a command run in a kernel gave: its exit code and its output (stdout + stderr).

    An output over the manager's ``exec_output_limit`` keeps its last bytes: ``dropped``
    says how many came before them (the end is where a command says why it failed)."""

    exit_code: int
    output: str
    dropped: int = 0

    @property
    def truncated(self) -> bool:
        """Whether the output's head was left out for its size."""
        return self.dropped > 0
