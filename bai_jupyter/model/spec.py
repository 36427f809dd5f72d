"""What a user asks for: a session's type, image, resources, cluster shape and roles."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..resources import ResourceSlot
from ..runtime.protocol import ServicePort


class SessionType(str, Enum):
    INTERACTIVE = "interactive"
    BATCH = "batch"
    INFERENCE = "inference"
    SYSTEM = "system"


class ClusterMode(str, Enum):
    SINGLE_NODE = "single-node"
    MULTI_NODE = "multi-node"


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
    #: A system session's SFTP login key (OpenSSH public key line); ``None``: a key pair
    #: is made for the session and its private key handed to the owner.
    ssh_public_key: str | None = None

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


def cluster_hostnames(size: int) -> list[str]:
    """``main1``, ``sub1`` … ``sub{size-1}`` (a session that names no roles)."""
    return [host for host, _ in SessionSpec(cluster_size=size).kernel_shapes()]
