"""What an agent does for the manager: start, watch, inspect and remove kernels.

Agents never touch the store: the manager decides, writes the decision, then
asks the agent to act, and turns the agent's :class:`KernelEvent` reports into
state changes. The rules every backend shares live here, once: capacity, the
connection file of main1's ipykernel, the port keys of service ports, what a
task time-out looks like, and the end of the event stream on close.
"""

from __future__ import annotations

import abc
import asyncio
import importlib.util
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from traitlets import Unicode, default
from traitlets.config import LoggingConfigurable
from traitlets.traitlets import MetaHasTraits

from ..kernel_plan import KernelPlan
from ..model import ExecResult
from ..resources import ResourceSlot
from ..runtime.protocol import (
    CHANNEL_PORT_KEYS,
    CHANNELS,
    EXIT_TIMEOUT,
    TASK_TIMEOUT_LINE,
    ServicePort,
)
from .capped import EXEC_OUTPUT_LIMIT, LOG_BYTES_LIMIT
from .traits import HostPath, OptionalSlots, Slots

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
    #: ``{"oom_killed": True}`` when the kernel died of its memory limit,
    #: ``{"agent_stopped": True}`` when it was stopped with its agent (a clean engine stop).
    detail: dict[str, Any] = field(default_factory=dict)
    #: The container it happened to, where the agent knows it: a kernel started again
    #: (a new leader's take-over) is not the one an event about its old container means.
    container_id: str = ""


@dataclass(frozen=True)
class KernelStarted:
    """Where a started kernel can be reached from the manager's side."""

    kernel_id: str
    container_id: str
    #: Host-side address of the kernel's Jupyter ports / service ports, if any.
    host: str = "127.0.0.1"
    ports: dict[str, int] = field(default_factory=dict)
    #: Ports published for people rather than for the manager: name → (host, port), e.g.
    #: a system session's ``sftp``.
    published: dict[str, tuple[str, int]] = field(default_factory=dict)


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


def kernel_connection(
    connection: Mapping[str, Any] | None, ip: str, ports: Mapping[str, int]
) -> dict[str, Any]:
    """The connection file main1's ipykernel starts with: the plan's key and signature
    scheme, and the address and channel ports it listens on where this backend runs it."""
    return {
        **(connection or {}),
        "ip": ip,
        **{key: ports[channel] for channel, key in zip(CHANNELS, CHANNEL_PORT_KEYS)},
    }


def declared_services(bootstrap: Mapping[str, Any]) -> list[ServicePort]:
    """main1's service ports, from its plan's bootstrap (the request checked them already)."""
    try:
        return [ServicePort.parse(str(spec)) for spec in bootstrap.get("service_ports") or []]
    except ValueError as exc:
        raise AgentError(f"bad service port: {exc}") from exc


#: How many of an ended kernel's last log lines are searched for the task-timeout line.
TAIL_LINES = 20


def task_timed_out(exit_code: int, log_tail: Callable[[int], bytes]) -> bool:
    """Whether the runtime ended a batch task for its ``batch_timeout``: exit 124 *and* its
    line among the log's last ``TAIL_LINES`` (a command's own 124 is a plain failure).

    ``log_tail(n)`` reads the last ``n`` lines; it is called only for an exit of 124."""
    return exit_code == EXIT_TIMEOUT and TASK_TIMEOUT_LINE.encode() in log_tail(TAIL_LINES)


class _AgentMeta(MetaHasTraits, abc.ABCMeta):
    """Traits and abstract methods on one class."""


class AgentBackend(LoggingConfigurable, metaclass=_AgentMeta):
    """One node that runs kernels; its options are traits (``c.<BackendClass>.<trait>``).

    A backend is found by its name in the entry-point group ``bai_jupyter.agents``;
    each entry of ``c.BaiSessionManager.agents`` sets traits over the class config.
    """

    #: Its name in the entry-point group ``bai_jupyter.agents``.
    backend: ClassVar[str] = ""
    #: Whether this agent's kernels run sshd and reach each other (clusters get SSH keys).
    ssh: ClassVar[bool] = False
    #: Whether it runs system sessions: an SFTP server in main1, its port published.
    sftp: ClassVar[bool] = False
    #: Where ``backend = "auto"`` tries it, lowest first; ``None``: only when named.
    auto_rank: ClassVar[int | None] = None
    #: Why it cannot run kernels when :meth:`available` says no (for the log and errors).
    unavailable_reason: ClassVar[str] = "it cannot run kernels here"

    id = Unicode(
        config=True,
        help="The agent's id, unique among the manager's agents; default: the backend's "
        "name (an entry of BaiSessionManager.agents without one: '<backend>-<n>').",
    )
    resource_group = Unicode(
        "default", config=True, help="The resource group whose sessions this agent runs."
    )
    slots = OptionalSlots(
        config=True,
        help="What kernels may use on this agent in all, {slot: amount} (e.g. {'cpu': 8, "
        "'mem': '32g'}); default: what the machine has, less `reserve`.",
    )
    reserve = Slots(
        {"mem": "512m"},
        config=True,
        help="What kernels leave to the machine itself when `slots` is not set (each slot "
        "clamped at zero: a reserve larger than the machine leaves nothing).",
    )
    runtime_dir = HostPath(
        RUNTIME_DIR,
        config=True,
        help="The in-kernel runtime directory, run as `python3 <dir>` in every kernel; "
        "default: the one of this package.",
    )

    def __init__(self, agent_id: str | None = None, **kwargs: Any) -> None:
        """``agent_id``: the :attr:`id`, positionally (``LocalAgent("local-a", root=…)``)."""
        if agent_id is not None:
            kwargs["id"] = agent_id
        super().__init__(**kwargs)
        #: Set once closed: nothing more is started or watched.
        self.closed = False
        self._machine: ResourceSlot | None = None
        self._events: asyncio.Queue[KernelEvent | None] = asyncio.Queue()

    @default("id")
    def _default_id(self) -> str:
        return self.backend

    # --- choice and capacity -------------------------------------------------------------------

    async def available(self) -> bool:
        """Whether this agent can run kernels here now (``backend = "auto"`` asks in turn)."""
        return True

    async def reconnect(self) -> None:
        """Trust nothing kept from before: the agent answers again after a silence, and its
        machine may have died meanwhile without closing a connection (a backend with kept
        connections or streams makes them anew)."""

    def announce(self, why: str) -> None:
        """Say in the log that this agent runs the kernels, and ``why`` it was chosen."""
        self.log.info("bai-jupyter: kernels run by the %s backend (%s)", self.backend, why)

    async def capacity(self) -> ResourceSlot:
        """What kernels may use here in all: ``slots`` when set, else the machine's less
        ``reserve``, each slot clamped at zero."""
        if self.slots is not None:
            return self.slots
        if self._machine is None:
            self._machine = await self.machine_slots()
        zero = Decimal(0)
        return ResourceSlot(
            {
                slot: max(amount - self.reserve.get_amount(slot), zero)
                for slot, amount in self._machine.items()
            }
        )

    @abc.abstractmethod
    async def machine_slots(self) -> ResourceSlot:
        """Everything the machine (or engine) has; asked once."""

    # --- the host ------------------------------------------------------------------------------

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

    def use_scope(self, scope: str) -> None:
        """The store this agent's kernels belong to (told once, before any start): a backend
        keeps what it shares on a host (the Docker egress bridge) apart per store."""
        return None

    async def allow_host_ports(self, listeners: list[tuple[str, int]]) -> None:
        """Let this agent's kernels reach these (address, port) of the host and no other."""
        return None  # backends without a host boundary (local processes): nothing to do

    def late_port(self, port: int) -> int | None:
        """Where this host reaches ``port`` of a running main kernel that was not declared at
        start (``None``: it cannot, e.g. the engine published only the declared ports)."""
        return None

    async def has_image(self, image: str) -> bool:
        """Whether ``image`` is here to start kernels from (backends that run none: always)."""
        return True

    # --- kernels -------------------------------------------------------------------------------

    @abc.abstractmethod
    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        """Start the session's kernels placed here, concurrently; all or nothing."""

    @abc.abstractmethod
    async def destroy_session(self, session_id: str) -> None:
        """Remove every kernel and resource of the session here; idempotent."""

    @abc.abstractmethod
    async def logs(
        self, kernel_id: str, tail: int | None = None, limit: int = LOG_BYTES_LIMIT
    ) -> str:
        """The kernel's output so far (stdout and stderr): its last ``tail`` lines (all:
        ``None``), of which the last ``limit`` bytes, after :data:`.capped.DROPPED_MARK`
        when that cut it. Read as a stream: memory stays within ``limit``."""

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
    async def exec(
        self,
        kernel_id: str,
        command: list[str],
        timeout: float = 60,
        limit: int = EXEC_OUTPUT_LIMIT,
    ) -> ExecResult:
        """Run a command in a running kernel and collect its output as it comes, keeping
        the last ``limit`` bytes (``ExecResult.dropped`` counts the rest)."""

    @abc.abstractmethod
    async def signal(self, kernel_id: str, signum: int) -> None:
        """Send a signal to the kernel's runtime (it forwards INT/HUP to the ipykernel)."""

    @abc.abstractmethod
    async def live_kernels(self) -> list[LiveKernel]:
        """Every kernel of ours this agent has, running or not."""

    async def cpu_seconds(self, session_id: str) -> float | None:
        """CPU time the session's kernels here have used so far, in seconds (for the
        utilization rule); ``None`` where this backend cannot tell."""
        return None

    # --- events and closing --------------------------------------------------------------------

    def events(self) -> AsyncIterator[KernelEvent]:
        """Kernel exits, OOM kills and lost networks as they happen, until :meth:`close`.

        Call it from the event loop that consumes them (one consumer)."""
        if not self.closed:
            self._watch_events()
        return self._next_events()

    def _watch_events(self) -> None:
        """Start reporting, for a backend whose reports need starting (a watcher thread)."""

    def _report(self, event: KernelEvent) -> None:
        """Hand an event to :meth:`events` (in the loop's thread)."""
        self._events.put_nowait(event)

    async def _next_events(self) -> AsyncIterator[KernelEvent]:
        while (event := await self._events.get()) is not None:
            yield event
        self._events.put_nowait(None)  # later iterators end too

    async def close(self) -> None:
        """Stop watching and let go of what the agent holds; kernels keep running.

        Every :meth:`events` iterator ends."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._release()
        finally:
            self._events.put_nowait(None)

    async def _release(self) -> None:
        """Let go of this backend's own threads, tasks and clients (on close, once)."""
