"""What an agent does for the manager: start, watch, inspect and remove kernels.

Agents never touch the store: the manager decides, writes the decision, then
asks the agent to act, and turns the agent's :class:`KernelEvent` reports into
state changes.
"""

from __future__ import annotations

import abc
import asyncio
import importlib.util
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ..kernel_plan import KernelPlan
from ..model import ExecResult
from ..resources import ResourceSlot

#: This package, mounted read-only into kernels that can see this host's files.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: The pure-Python packages ``%bai``'s widgets need in the kernel (mounted beside the package,
#: after the image's own on PYTHONPATH, so any image renders them; ipywidgets 8 carries its
#: own shim for the ipykernel < 6.18 of Debian's images).
WIDGET_PACKAGES = ("ipywidgets", "comm")


def kernel_packages() -> list[Path]:
    """The package directories mounted read-only into every local-engine kernel."""
    found = [PACKAGE_DIR]
    for name in WIDGET_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:  # both are dependencies; absent only if broken
            found.append(Path(spec.origin).resolve().parent)
    return found


#: The in-kernel runtime directory (stdlib only), run as ``python3 <dir>`` in every kernel.
RUNTIME_DIR = PACKAGE_DIR / "runtime"


class AgentError(RuntimeError):
    """An agent could not do what it was asked; the message says what and why."""


class KernelEventKind(str, Enum):
    EXITED = "exited"  # the kernel's main process ended by itself (exit_code set)
    #: A process in the kernel was killed for memory; the kernel may live on (a child
    #: process's OOM). The kernel's own death by OOM is ``EXITED`` + ``oom_killed``.
    OOM_KILLED = "oom-killed"
    #: The kernel was cut from its session's network (``detail["network"]``).
    NETWORK_LOST = "network-lost"
    GONE = "gone"  # the kernel was removed or killed from outside


@dataclass(frozen=True)
class KernelEvent:
    """Something happened to a kernel that the manager did not ask for."""

    kind: KernelEventKind
    session_id: str
    kernel_id: str
    exit_code: int | None = None
    #: Extra facts: ``{"task_timeout": True}`` when a batch hit its time limit,
    #: ``{"requested": True}`` when the agent itself was removing the kernel,
    #: ``{"oom_killed": True}`` when the kernel died of its memory limit.
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelStarted:
    """Where a started kernel can be reached from the manager's side."""

    kernel_id: str
    container_id: str
    #: Host-side address of the kernel's Jupyter ports / service ports, if any.
    host: str = "127.0.0.1"
    ports: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveKernel:
    """A kernel the agent has right now (for reconciliation after a restart)."""

    session_id: str
    kernel_id: str
    container_id: str
    running: bool
    #: Set once the kernel's main process has ended.
    exit_code: int | None = None
    #: The plan's labels (session, kernel, the store that owns it).
    labels: dict[str, str] = field(default_factory=dict)


class AgentBackend(abc.ABC):
    """One node that runs kernels."""

    #: ``docker`` or ``local``.
    backend: str = ""
    #: Whether this agent's kernels run sshd and reach each other (clusters get SSH keys).
    ssh: bool = False

    def __init__(self, agent_id: str, resource_group: str = "default") -> None:
        self.id = agent_id
        self.resource_group = resource_group

    @abc.abstractmethod
    async def capacity(self) -> ResourceSlot:
        """What kernels may use on this node in all."""

    async def host_address(self) -> str | None:
        """The address this agent's kernels reach the manager's host at; ``None``: they cannot.

        Front ends listen there so that code in a kernel (``%bai``) can call home.
        """
        return None

    @property
    def shares_host_files(self) -> bool:
        """Whether this agent's kernels can bind this host's paths (a remote engine cannot)."""
        return True

    def private_paths(self) -> list[str]:
        """Host paths of this agent's own (kernel dirs, bootstrap files, engine socket).

        The manager's mount policy never lets a session mount them or anything holding them."""
        return []

    async def allow_host_ports(self, ports: list[int]) -> None:
        """Let this agent's kernels reach these ports of the host (and no other)."""
        return None  # backends without a host boundary (local processes): nothing to do

    def late_port(self, port: int) -> int | None:
        """Where this host reaches ``port`` of a running main kernel that was not declared at
        start (``None``: it cannot, e.g. the engine published only the declared ports)."""
        return None

    async def has_image(self, image: str) -> bool:
        """Whether ``image`` is here to start kernels from (backends that run none: always)."""
        return True

    @abc.abstractmethod
    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        """Start the session's kernels placed here, concurrently; all or nothing."""

    @abc.abstractmethod
    async def destroy_session(self, session_id: str) -> None:
        """Remove every kernel and resource of the session here; idempotent."""

    @abc.abstractmethod
    async def logs(self, kernel_id: str) -> str:
        """The kernel's output so far (stdout and stderr)."""

    async def wait_for_output(self, kernel_id: str, text: str, timeout: float) -> bool:
        """Wait until the kernel's output contains ``text``; False once it ended without.

        This default polls :meth:`logs`; an agent that can follow output overrides it.
        """
        deadline = asyncio.get_running_loop().time() + timeout
        polls = 0
        while asyncio.get_running_loop().time() < deadline:
            if text in await self.logs(kernel_id):
                return True
            polls += 1
            if polls % 50 == 0:  # about every second: did it end on the way?
                ended = [k for k in await self.live_kernels() if k.kernel_id == kernel_id]
                if ended and not ended[0].running:
                    return text in await self.logs(kernel_id)
            await asyncio.sleep(0.02)
        return False

    @abc.abstractmethod
    async def exec(self, kernel_id: str, command: list[str], timeout: float = 60) -> ExecResult:
        """Run a command in a running kernel and collect its output."""

    @abc.abstractmethod
    async def signal(self, kernel_id: str, signum: int) -> None:
        """Send a signal to the kernel's runtime (it forwards INT/HUP to the ipykernel)."""

    @abc.abstractmethod
    async def live_kernels(self) -> list[LiveKernel]:
        """Every kernel of ours this agent has, running or not."""

    @abc.abstractmethod
    def events(self) -> AsyncIterator[KernelEvent]:
        """Kernel exits and OOM kills as they happen, until :meth:`close`."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop watching; kernels keep running."""
