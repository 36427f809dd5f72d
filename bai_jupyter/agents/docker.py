"""Kernels as Docker containers, one private bridge network per session.

Layout of a session ``S`` on one engine:

* network ``bai-<S[:12]>``: bridge, ``internal`` (no route out), labelled with
  the session; every kernel joins it under its hostname as alias, so ``main1``,
  ``sub1`` … resolve through Docker's DNS and nothing outside the session can
  reach a sub kernel;
* the main kernel is created on the shared bridge ``bai-jupyter-egress`` first
  (Docker publishes no port from an internal network) with its Jupyter and
  service ports published on ``127.0.0.1``, then joins the session network;
  inter-container traffic on that bridge is off, so the main kernels of two
  sessions cannot talk to each other through it;
* each container gets ``/home/config/bootstrap.json``: on a local engine a private
  host file bind-mounted read-only (removed with the session), on a remote one
  copied in by ``put_archive`` before start; the rest of ``/home/config`` stays
  writable (ipykernel rewrites its connection file there); the runtime is
  mounted read-only at ``/opt/bai-runtime`` (copied in too on a remote engine).

The docker SDK is blocking: every call runs in a worker thread
(``asyncio.to_thread``); engine events are read by one background thread and
handed to the event loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import json
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import docker.errors
from docker.client import DockerClient
from docker.types.services import Mount as _SDKMount
from jupyter_core.paths import jupyter_runtime_dir

from ..kernel_plan import LABEL_KERNEL, LABEL_ROOT, LABEL_SESSION, KernelPlan
from ..model import ExecResult, KernelRole
from ..resources import ResourceSlot, parse_amount
from ..runtime.protocol import (
    CONFIG_DIR,
    DEFAULT_IMAGE,
    KERNEL_PORTS,
    RUNTIME_MOUNT,
    TASK_TIMEOUT_LINE,
    WORK_DIR,
)
from .base import (
    RUNTIME_DIR,
    AgentBackend,
    AgentError,
    KernelEvent,
    KernelEventKind,
    KernelStarted,
    LiveKernel,
    kernel_packages,
)

log = logging.getLogger(__name__)

#: The SDK has no type hints: we hold its objects as ``Any`` at this one boundary
#: (calling its unannotated functions directly is an error under mypy --strict).
_SDKClient: Any = DockerClient
#: A bind mount (``docker.types.Mount``; unannotated, hence ``Any``).
BindMount: Any = _SDKMount

T = TypeVar("T")

#: The bai_jupyter package, read-only, on every kernel's PYTHONPATH (``%bai`` in main1).
PACKAGE_ROOT = "/opt/bai-jupyter"


#: The shared, non-internal bridge on which main kernels publish their ports.
EGRESS_NETWORK = "bai-jupyter-egress"

#: The only Linux capabilities a kernel keeps (all others are dropped): what sshd
#: needs (privilege separation: SETUID, SETGID, SYS_CHROOT, AUDIT_WRITE; KILL,
#: NET_BIND_SERVICE) and what ordinary code run as the container's root needs to manage
#: its own files (CHOWN, DAC_OVERRIDE, FOWNER, FSETID). Dropped from Docker's default
#: set: MKNOD, NET_RAW (raw sockets, spoofing), SETPCAP, SETFCAP.
KEPT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETUID",
    "SETGID",
    "SYS_CHROOT",
    "AUDIT_WRITE",
    "NET_BIND_SERVICE",
)
#: The host's INPUT chain jumps here for traffic from kernels' bridges (see allow_host_ports).
FIREWALL_CHAIN = "BAI-JUPYTER-INPUT"
#: Session bridges get interface names with this prefix (15 characters at most), so one
#: rule (``-i bai+``) covers every session network this engine makes.
BRIDGE_PREFIX = "bai"
_EVENT_ACTIONS = ("oom", "die", "destroy", "disconnect")
#: Concurrent engine calls (one per kernel while a big session starts) reuse connections.
_POOL_SIZE = 32
#: How long die/destroy events of a session we removed are marked ``requested``.
_REQUESTED_FOR = 120.0


def _iptables(*args: str, check: bool = True) -> int:
    """One iptables command (waiting for the xtables lock); its exit status."""
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, stderr=done.stderr)
    return done.returncode


_FIREWALL_LOCK = Path(tempfile.gettempdir()) / "bai-jupyter-firewall.lock"
_FIREWALL_TAG = re.compile(r"bai-jupyter:(\d+):")
#: Rules at the end of the chain, shared by every manager of this host.
_FIREWALL_TAIL = (
    ("-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"),
    ("-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"),
    ("-j", "REJECT"),
)


@contextlib.contextmanager
def _firewall_locked() -> Iterator[None]:
    """One manager of this host at a time edits the chain (iptables -w locks one command)."""
    with _FIREWALL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _rules(chain: str) -> list[str]:
    listing = subprocess.run(
        ["iptables", "-w", "-S", chain], capture_output=True, text=True, check=False
    ).stdout
    return [line for line in listing.splitlines() if line.startswith("-A ")]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _drop_stale(tag: str) -> bool:
    """Delete ``tag``'s rules and those of dead processes; whether any manager's remain."""
    others = False
    for line in _rules(FIREWALL_CHAIN):
        found = _FIREWALL_TAG.search(line)
        if found is None:
            continue
        if tag in line or not _pid_alive(int(found.group(1))):
            _iptables("-D", *shlex.split(line)[1:], check=False)
        else:
            others = True
    return others


def firewall_install(tag: str, egress: str, ports: list[int]) -> None:
    """Kernels' bridges (``egress`` and ``bai+``) reach the host only at allowed ports.

    Each manager's rules carry its ``tag`` (a comment): a marker rule that matches
    nothing (so that its presence keeps the chain) and one RETURN per allowed port."""
    chain = FIREWALL_CHAIN
    with _firewall_locked():
        if _iptables("-L", chain, "-n", check=False) != 0:
            _iptables("-N", chain)
        for rule in _FIREWALL_TAIL:
            if _iptables("-C", chain, *rule, check=False) != 0:
                _iptables("-A", chain, *rule)
        _drop_stale(tag)
        comment = ("-m", "comment", "--comment", tag)
        _iptables("-I", chain, "1", "-s", "255.255.255.255/32", *comment, "-j", "RETURN")
        for port in ports:
            _iptables("-I", chain, "1", "-p", "tcp", "--dport", str(port), *comment, "-j", "RETURN")
        for iface in (egress, f"{BRIDGE_PREFIX}+"):
            jump = ("-i", iface, "-j", chain)
            if _iptables("-C", "INPUT", *jump, check=False) != 0:
                _iptables("-I", "INPUT", "1", *jump)


def firewall_remove(tag: str) -> None:
    """Delete ``tag``'s rules; the last manager out removes the chain and its jumps."""
    with _firewall_locked():
        if _drop_stale(tag):
            return
        for line in _rules("INPUT"):
            if line.endswith(f"-j {FIREWALL_CHAIN}"):
                _iptables("-D", *shlex.split(line)[1:], check=False)
        _iptables("-F", FIREWALL_CHAIN, check=False)
        _iptables("-X", FIREWALL_CHAIN, check=False)


def _network_name(session_id: str) -> str:
    return f"bai-{session_id[:12]}"


def _container_name(session_id: str, hostname: str) -> str:
    return f"bai-{session_id[:12]}-{hostname}"


def _unix_socket(endpoint: str | None) -> str | None:
    """The socket path of a local engine URL (``None`` for tcp/ssh engines)."""
    url = endpoint or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    for scheme in ("unix://", "http+unix://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return None


def _new_client(endpoint: str | None, timeout: float) -> Any:
    """A blocking SDK client; its constructor already asks the engine's API version.

    A local socket is probed first: the SDK leaks its socket when the connect
    fails (a ResourceWarning on every try while the engine is down)."""
    path = _unix_socket(endpoint)
    if path is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout)
            probe.connect(path)
    if endpoint is None:
        return _SDKClient.from_env(timeout=timeout, max_pool_size=_POOL_SIZE)
    return _SDKClient(base_url=endpoint, timeout=timeout, max_pool_size=_POOL_SIZE)


def _explain(exc: BaseException) -> str:
    """The engine's own words for an SDK error (not the HTTP wrapper text)."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


def _parse_service_port(spec: str) -> tuple[str, int]:
    """``name:proto:port`` → (name, port)."""
    parts = spec.split(":")
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        raise AgentError(
            f"bad service port {spec!r}: expected 'name:proto:port', e.g. 'web:http:8080'"
        )
    port = int(parts[2])
    if not 0 < port < 65536 or port in KERNEL_PORTS.values():
        raise AgentError(f"bad service port {spec!r}: port must be 1–65535 and not 2300–2304")
    return parts[0], port


def _bootstrap_tar(bootstrap: dict[str, Any], runtime_dir: Path | None) -> bytes:
    """``home/config/bootstrap.json`` (0600), an empty ``home/work/``, and, when the
    engine cannot see our files (remote), the runtime itself under ``opt/bai-runtime``."""
    buf = io.BytesIO()
    now = time.time()

    def add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, now
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        add_dir(tar, "home/config", 0o755)
        add_file(tar, "home/config/bootstrap.json", json.dumps(bootstrap).encode(), 0o600)
        add_dir(tar, "home/work", 0o755)
        if runtime_dir is not None:
            add_dir(tar, RUNTIME_MOUNT.lstrip("/"), 0o555)
            for path in sorted(runtime_dir.rglob("*")):
                if "__pycache__" in path.parts:
                    continue
                name = f"{RUNTIME_MOUNT.lstrip('/')}/{path.relative_to(runtime_dir).as_posix()}"
                if path.is_dir():
                    add_dir(tar, name, 0o555)
                else:
                    add_file(tar, name, path.read_bytes(), 0o444)
    return buf.getvalue()


class DockerAgent(AgentBackend):
    """One Docker engine (local socket or remote endpoint) as an agent."""

    backend = "docker"
    ssh = True

    def __init__(
        self,
        agent_id: str,
        resource_group: str = "default",
        endpoint: str | None = None,
        capacity: ResourceSlot | None = None,
        reserve: ResourceSlot | None = None,
        pids_limit: int = 4096,
        runtime_dir: Path | None = None,
        publish_ports: bool | None = None,
        disk_limit: str = "",
        firewall: bool = True,
    ) -> None:
        """``endpoint``: ``None`` for the environment's engine (``DOCKER_HOST`` or the
        local socket), else a base URL such as ``unix:///var/run/docker.sock`` or
        ``tcp://host:2376``. ``capacity``: ``None`` means the engine's CPUs and
        memory minus ``reserve`` (default 512 MiB of memory for the host itself).
        ``disk_limit``: size of each kernel's writable layer ('' = none) where the storage
        driver supports it. ``firewall``: block kernels from the host (local engine, root)."""
        super().__init__(agent_id, resource_group)
        self.endpoint = endpoint
        self.pids_limit = pids_limit
        self.reserve = reserve if reserve is not None else ResourceSlot({"mem": "512m"})
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else RUNTIME_DIR
        url = endpoint or os.environ.get("DOCKER_HOST") or "unix://"
        #: Whether the engine sees this machine's files (binds of our paths work).
        self.local = url.startswith(("unix://", "http+unix://", "npipe://"))
        #: Where the bootstrap files of a local engine's kernels live until destroy.
        self.bootstrap_root = Path(jupyter_runtime_dir()) / "bai_jupyter" / "bootstrap"
        #: Publish main1's ports on 127.0.0.1, or reach them at its bridge address. A
        #: Linux host routes to its own bridges, which spares the engine's per-port
        #: proxy process (~60 ms per start, a hop on every message); elsewhere publish.
        self.publish = (
            publish_ports
            if publish_ports is not None
            else not (self.local and sys.platform.startswith("linux"))
        )
        self.disk_limit = disk_limit
        #: Whether the engine accepted ``storage_opt`` (``None``: not tried yet).
        self._disk_limit_works: bool | None = None
        self._disk_lock = asyncio.Lock()
        self.firewall = firewall and self.local and sys.platform.startswith("linux")
        #: This agent's own allow rules in the firewall chain (a comment tells them apart).
        self._firewall_tag = f"bai-jupyter:{os.getpid()}:{id(self):x}"
        self._firewall_on = False
        self._capacity = capacity
        self._client: Any = None
        self._client_lock = asyncio.Lock()
        self._session_locks: dict[str, asyncio.Lock] = {}
        #: Sessions we are removing (id → monotonic start), read by the watcher thread.
        self._removing: dict[str, float] = {}
        #: The shared egress bridge is known to exist (checked again after a failed start).
        self._egress_ready = False
        self._egress_lock = asyncio.Lock()
        # Event watcher (a thread); see events().
        self._queue: asyncio.Queue[KernelEvent | None] | None = None
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: Any = None
        self._closed = False

    # -- engine access -------------------------------------------------------------

    def _new_client(self, timeout: float = 60) -> Any:
        """A blocking SDK client (its constructor already asks the engine's version)."""
        return _new_client(self.endpoint, timeout)

    async def _api(self) -> Any:
        """The low-level client, created on first use (in a thread: it talks to the engine)."""
        if self._closed:
            raise AgentError(f"agent {self.id} is closed")
        async with self._client_lock:
            if self._client is None:
                try:
                    self._client = await asyncio.to_thread(self._new_client)
                except (docker.errors.DockerException, OSError) as exc:
                    raise AgentError(
                        f"agent {self.id}: no Docker engine answers at "
                        f"{self.endpoint or 'the default socket'}: {_explain(exc)}"
                    ) from exc
        return self._client.api

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one blocking SDK call in a thread; engine errors become :class:`AgentError`."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except docker.errors.DockerException as exc:
            raise AgentError(f"{what}: {_explain(exc)}") from exc

    @classmethod
    async def engine_answers(cls, endpoint: str | None = None, timeout: float = 3) -> bool:
        """Whether a Docker engine answers a ping at ``endpoint`` within ``timeout``
        seconds (the manager's choice between the docker and local backends)."""

        def ping() -> bool:
            try:
                client = _new_client(endpoint, timeout)
            except Exception:
                return False
            try:
                return bool(client.ping())
            except Exception:
                return False
            finally:
                client.close()

        try:
            return await asyncio.wait_for(asyncio.to_thread(ping), timeout + 1)
        except asyncio.TimeoutError:
            return False

    async def capacity(self) -> ResourceSlot:
        if self._capacity is None:
            api = await self._api()
            info = await self._call(f"agent {self.id}: docker info", api.info)
            engine = ResourceSlot({"cpu": int(info["NCPU"]), "mem": int(info["MemTotal"])})
            # A reserve larger than the node leaves nothing, not a negative amount.
            kept = {
                slot: min(amount, engine.get_amount(slot)) for slot, amount in self.reserve.items()
            }
            self._capacity = engine - ResourceSlot(kept)
        return self._capacity

    async def has_image(self, image: str) -> bool:
        api = await self._api()
        try:
            await asyncio.to_thread(api.inspect_image, image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.DockerException as exc:
            raise AgentError(f"agent {self.id}: looking up image {image}: {_explain(exc)}") from exc
        return True

    # -- sessions ------------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        """Start and destroy of one session never interleave (no half-removed leftovers)."""
        return self._session_locks.setdefault(session_id, asyncio.Lock())

    async def _ensure_network(
        self, api: Any, name: str, labels: dict[str, str], internal: bool, options: dict[str, str]
    ) -> None:
        """Create a bridge network unless one of that exact name exists (idempotent)."""

        def ensure() -> None:
            if any(n["Name"] == name for n in api.networks(names=[name])):
                return
            try:
                api.create_network(
                    name,
                    driver="bridge",
                    internal=internal,
                    labels=labels,
                    options=options or None,
                    check_duplicate=True,
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: created meanwhile by a concurrent call
                    raise

        await self._call(f"cannot create network {name}", ensure)

    async def _ensure_egress(self, api: Any) -> None:
        """The shared bridge main1 kernels reach out through (kernels can't talk on it)."""
        # One at a time: the engine's duplicate check is racy, and concurrent starts
        # on a fresh engine made several networks of that name ("ambiguous" ever after).
        async with self._egress_lock:
            if not self._egress_ready:
                await self._ensure_network(
                    api,
                    EGRESS_NETWORK,
                    {LABEL_ROOT: "1"},
                    internal=False,
                    options={"com.docker.network.bridge.enable_icc": "false"},
                )
                self._egress_ready = True

    async def host_address(self) -> str | None:
        """The egress bridge's gateway, on an engine of this host (a remote one: ``None``)."""
        if not self.local:
            return None
        api = await self._api()
        await self._ensure_egress(api)
        info = await self._call(
            f"cannot inspect network {EGRESS_NETWORK}", api.inspect_network, EGRESS_NETWORK
        )
        configs = (info.get("IPAM") or {}).get("Config") or []
        gateway = configs[0].get("Gateway") if configs else None
        return str(gateway) if gateway else None

    @property
    def shares_host_files(self) -> bool:
        return self.local

    def private_paths(self) -> list[str]:
        """Bootstrap files (session keys), the runtime, and the engine's own socket."""
        paths = [str(self.bootstrap_root), str(self.runtime_dir)]
        socket_path = _unix_socket(self.endpoint or os.environ.get("DOCKER_HOST"))
        paths.append(socket_path or "/var/run/docker.sock")
        return paths

    async def allow_host_ports(self, ports: list[int]) -> None:
        """Block this engine's kernels from the host except ``ports`` (kernel access).

        Containers reach every host service bound to 0.0.0.0 through their bridges'
        gateways. A chain of the host's INPUT (:data:`FIREWALL_CHAIN`) rejects new
        connections from the egress bridge and every session bridge (``bai+``) except
        to the allowed ports; several managers on one host share it, each adding its own
        allow rules (tagged) and removing them on close. Needs iptables and root; else
        a warning says the host is reachable from kernels."""
        if not self.firewall:
            return
        api = await self._api()
        await self._ensure_egress(api)
        info = await self._call(
            f"cannot inspect network {EGRESS_NETWORK}", api.inspect_network, EGRESS_NETWORK
        )
        options = info.get("Options") or {}
        egress = options.get("com.docker.network.bridge.name") or f"br-{info['Id'][:12]}"
        error = await asyncio.to_thread(self._firewall_apply, egress, sorted(set(ports)))
        if error:
            log.warning(
                "agent %s: no host firewall (%s): kernels can reach every host service "
                "listening on 0.0.0.0",
                self.id,
                error,
            )
        else:
            self._firewall_on = True

    def _firewall_apply(self, egress: str, ports: list[int]) -> str | None:
        """Install the chain and this agent's allow rules; the reason it could not, else None."""
        if os.geteuid() != 0:
            return "not running as root"
        if shutil.which("iptables") is None:
            return "iptables is not installed"
        try:
            firewall_install(self._firewall_tag, egress, ports)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or ""
            return f"iptables failed: {exc} {detail}".strip()
        return None

    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        """Create every kernel's container, then start main1, then the rest; on any failure
        remove what exists of the session here and raise :class:`AgentError`."""
        api = await self._api()
        async with self._lock(session_id):
            try:
                return await self._start(api, session_id, plans)
            except BaseException as exc:
                # Cancelled or failed: nothing of the session may stay behind.
                try:
                    await asyncio.shield(self._remove_session(api, session_id))
                except Exception as cleanup:  # report the first failure, not this one
                    log.warning("agent %s: clean-up of %s failed: %s", self.id, session_id, cleanup)
                self._egress_ready = False
                if isinstance(exc, AgentError) or not isinstance(exc, Exception):
                    raise
                raise AgentError(f"cannot start session {session_id}: {exc}") from exc

    async def _start(
        self, api: Any, session_id: str, plans: list[KernelPlan]
    ) -> list[KernelStarted]:
        # A session of one kernel has nobody to talk to privately: no session network.
        net = EGRESS_NETWORK if len(plans) == 1 else _network_name(session_id)
        net_ready: asyncio.Future[None] | None = None
        if net != EGRESS_NETWORK:
            # Made while main1 is created on the egress bridge; sub kernels wait for it.
            labels = {LABEL_ROOT: "1", LABEL_SESSION: session_id}
            bridge = {"com.docker.network.bridge.name": f"{BRIDGE_PREFIX}{session_id[:12]}"}
            net_ready = asyncio.ensure_future(
                self._ensure_network(api, net, labels, internal=True, options=bridge)
            )
        if net == EGRESS_NETWORK or any(map(self._is_main, plans)):
            await self._ensure_egress(api)
        try:
            created = await self._gather(
                [self._create(api, session_id, net, plan, net_ready) for plan in plans]
            )
        finally:
            if net_ready is not None:  # settle it, so that a clean-up sees the network
                await asyncio.gather(net_ready, return_exceptions=True)
        # main1 first: its ipykernel boots while the engine starts the others (the engine
        # starts a session's containers largely one after another, whatever we send at once).
        for first in (True, False):
            await self._gather(
                [
                    self._call(f"cannot start kernel {h}", api.start, cid)
                    for plan, (cid, h) in zip(plans, created)
                    if (plan.role is KernelRole.MAIN) is first
                ]
            )
        return list(
            await self._gather(
                [self._started(api, plan, cid) for plan, (cid, _) in zip(plans, created)]
            )
        )

    @staticmethod
    async def _gather(aws: Iterable[Awaitable[T]]) -> list[T]:
        """Run all; wait for all (even when cancelled), then raise the first error.

        Nothing may still be creating a container while clean-up lists them."""
        tasks = [asyncio.ensure_future(aw) for aw in aws]
        if not tasks:
            return []
        try:
            results = await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        except asyncio.CancelledError:
            # An engine call in a thread cannot be stopped: let those in flight land,
            # so that the clean-up which follows sees every container they made.
            await asyncio.wait(tasks)
            raise
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r for r in results if not isinstance(r, BaseException)]

    @staticmethod
    def _is_main(plan: KernelPlan) -> bool:
        """The kernel that publishes ports: the interactive (or service) main kernel."""
        return plan.role is KernelRole.MAIN and (
            plan.bootstrap.get("mode") == "kernel" or bool(plan.bootstrap.get("service_ports"))
        )

    def _limits(self, plan: KernelPlan) -> dict[str, Any]:
        """The engine's limits, exactly the slots the scheduler booked for the kernel.

        Docker reads a zero or absent CPU or memory limit as "unlimited": a kernel
        without both is refused rather than run uncapped while booked as using nothing.
        """
        limits: dict[str, Any] = {"pids_limit": self.pids_limit}
        try:
            nano = int(parse_amount("cpu", plan.slots.get("cpu", 0)) * Decimal(10**9))
            mem = int(parse_amount("mem", plan.slots.get("mem", 0)))
        except ValueError as exc:
            raise AgentError(f"kernel {plan.hostname}: {exc}") from exc
        if nano <= 0 or mem <= 0:
            raise AgentError(
                f"kernel {plan.hostname}: slots {plan.slots} lack a cpu or mem amount; "
                "Docker would run it without a limit"
            )
        limits["nano_cpus"] = nano
        limits["mem_limit"] = limits["memswap_limit"] = mem  # equal: no swap
        return limits

    async def _create(
        self,
        api: Any,
        session_id: str,
        net: str,
        plan: KernelPlan,
        net_ready: asyncio.Future[None] | None = None,
    ) -> tuple[str, str]:
        """Create (not start) one kernel's container with its bootstrap files in place."""
        bootstrap = dict(plan.bootstrap)
        publish: dict[int, tuple[str]] = {}
        if self._is_main(plan):
            if bootstrap.get("mode") == "kernel":
                bootstrap["connection"] = {
                    **(bootstrap.get("connection") or {}),
                    "ip": "0.0.0.0",
                    **{f"{name}_port": port for name, port in KERNEL_PORTS.items()},
                }
                publish.update({port: ("127.0.0.1",) for port in KERNEL_PORTS.values()})
            for spec in bootstrap.get("service_ports") or []:
                publish[_parse_service_port(spec)[1]] = ("127.0.0.1",)

        # Bind mounts of paths that must exist (the engine would create missing ones as root).
        mounts = [
            BindMount(m.target, m.source, type="bind", read_only=m.read_only) for m in plan.mounts
        ]
        command = ["python3", RUNTIME_MOUNT]
        if plan.work_dir:  # the notebook's folder, under its mount
            command += ["--work-dir", plan.work_dir]
        if self.local:
            command += ["--python-path", PACKAGE_ROOT]
            await asyncio.to_thread(self._check_sources, [Path(m.source) for m in plan.mounts])
            mounts.append(
                BindMount(RUNTIME_MOUNT, str(self.runtime_dir), type="bind", read_only=True)
            )
            mounts += [
                BindMount(f"{PACKAGE_ROOT}/{d.name}", str(d), type="bind", read_only=True)
                for d in kernel_packages()
            ]
            boot = await asyncio.to_thread(
                self._write_bootstrap, session_id, plan.hostname, bootstrap
            )
            mounts.append(
                BindMount(f"{CONFIG_DIR}/bootstrap.json", str(boot), type="bind", read_only=True)
            )
        first_net = EGRESS_NETWORK if publish else net
        disk = await self._disk_option(api, plan.image)

        def host_config(disk: str) -> Any:
            return api.create_host_config(
                mounts=mounts,
                init=True,
                port_bindings=(publish or None) if self.publish else None,
                network_mode=first_net,
                cap_drop=["ALL"],
                cap_add=list(KEPT_CAPABILITIES),
                security_opt=["no-new-privileges"],
                storage_opt={"size": disk} if disk else None,
                **self._limits(plan),
            )

        # No alias on the shared bridge: "main1" must resolve only inside its session.
        endpoint = api.create_endpoint_config(
            aliases=None if first_net == EGRESS_NETWORK else [plan.hostname]
        )
        what = f"cannot create kernel {plan.hostname} of session {session_id}"
        if first_net == net and net_ready is not None:
            await net_ready

        def create(disk: str) -> Any:
            return api.create_container(
                plan.image,
                command=command,
                name=_container_name(session_id, plan.hostname),
                hostname=plan.hostname,
                labels=plan.labels,
                environment=plan.env,
                working_dir=plan.work_dir or WORK_DIR,
                ports=list(publish) or None,
                host_config=host_config(disk),
                networking_config=api.create_networking_config({first_net: endpoint}),
            )

        try:
            created = await asyncio.to_thread(create, disk)
        except docker.errors.ImageNotFound as exc:
            hint = (
                "build it with `bai-jupyter image build`"
                if plan.image == DEFAULT_IMAGE
                else "pull or build it on this engine first (no registry is asked at start)"
            )
            raise AgentError(f"image {plan.image} not found on agent {self.id}: {hint}") from exc
        except docker.errors.DockerException as exc:
            raise AgentError(f"{what}: {_explain(exc)}") from exc
        cid = str(created["Id"])
        if first_net != net:
            if net_ready is not None:
                await net_ready
            await self._call(
                f"{what}: cannot join {net}",
                api.connect_container_to_network,
                cid,
                net,
                aliases=[plan.hostname],
            )
        if not self.local:  # a remote engine cannot see our files: copy them in
            archive = await asyncio.to_thread(_bootstrap_tar, bootstrap, self.runtime_dir)
            await self._call(
                f"{what}: cannot write {plan.hostname}'s bootstrap",
                api.put_archive,
                cid,
                "/",
                archive,
            )
        return cid, plan.hostname

    async def _disk_option(self, api: Any, image: str) -> str:
        """``disk_limit`` where the storage driver takes a size, else '' (warned once).

        Probed once with a throwaway, unlabelled container: a refused kernel container
        would still send a ``destroy`` event the manager reads as the kernel's death."""
        if not self.disk_limit:
            return ""
        async with self._disk_lock:
            if self._disk_limit_works is None:

                def probe() -> str | None:
                    config = api.create_host_config(storage_opt={"size": self.disk_limit})
                    try:
                        made = api.create_container(image, command=["true"], host_config=config)
                    except docker.errors.ImageNotFound:
                        return ""  # the kernel's own create says so; probe again later
                    except docker.errors.APIError as exc:
                        return _explain(exc)
                    api.remove_container(made["Id"], force=True)
                    return None

                error = await self._call("cannot probe kernel_disk_limit", probe)
                if error:
                    log.warning(
                        "agent %s: kernel_disk_limit %s not applied (the storage driver "
                        "cannot limit a container's size here): %s",
                        self.id,
                        self.disk_limit,
                        error,
                    )
                if error != "":
                    self._disk_limit_works = error is None
        return self.disk_limit if self._disk_limit_works else ""

    def _write_bootstrap(self, session_id: str, hostname: str, bootstrap: dict[str, Any]) -> Path:
        """The runtime's instructions in a private host file, bind-mounted read-only.

        A bind costs nothing at start, where copying a tar in takes ~35 ms; the
        rest of ``/home/config`` stays writable inside the container."""
        folder = self.bootstrap_root / session_id
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = folder / f"{hostname}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(bootstrap, file)
        return path

    @staticmethod
    def _check_sources(paths: list[Path]) -> None:
        """Every mount source exists: none is created here (the manager makes data folders)."""
        for path in paths:
            if not path.exists():
                raise AgentError(f"cannot mount {path}: no such host path")

    async def _started(self, api: Any, plan: KernelPlan, cid: str) -> KernelStarted:
        """Read back the host ports the engine picked for a started kernel."""
        if not self._is_main(plan):
            return KernelStarted(kernel_id=plan.kernel_id, container_id=cid)
        info = await self._call(
            f"cannot inspect kernel {plan.hostname}", api.inspect_container, cid
        )
        published: dict[str, Any] = info["NetworkSettings"]["Ports"] or {}
        address = info["NetworkSettings"]["Networks"][EGRESS_NETWORK]["IPAddress"]

        def host_port(port: int) -> int:
            if not self.publish:
                return port  # reached at the container's own address
            bindings = published.get(f"{port}/tcp") or []
            for binding in bindings:
                if binding.get("HostPort"):
                    return int(binding["HostPort"])
            raise AgentError(f"kernel {plan.hostname}: port {port} was not published")

        ports: dict[str, int] = {}
        if plan.bootstrap.get("mode") == "kernel":
            ports.update({name: host_port(port) for name, port in KERNEL_PORTS.items()})
        for spec in plan.bootstrap.get("service_ports") or []:
            name, port = _parse_service_port(spec)
            ports[f"service:{name}"] = host_port(port)
        host = "127.0.0.1" if self.publish else address
        return KernelStarted(kernel_id=plan.kernel_id, container_id=cid, host=host, ports=ports)

    def late_port(self, port: int) -> int | None:
        """Reached at main1's own address: any port works. Published: Docker cannot add one."""
        return None if self.publish else port

    async def destroy_session(self, session_id: str) -> None:
        api = await self._api()
        async with self._lock(session_id):
            await self._remove_session(api, session_id)
        self._session_locks.pop(session_id, None)

    async def _remove_session(self, api: Any, session_id: str) -> None:
        """Force-remove the session's containers (concurrently), then its networks.

        Their die/destroy events then carry ``detail={"requested": True}``, so the
        manager can tell its own removal from a kill from outside."""
        now = time.monotonic()
        for old in [sid for sid, at in self._removing.items() if now - at > _REQUESTED_FOR]:
            self._removing.pop(old, None)
        self._removing[session_id] = now
        label = f"{LABEL_SESSION}={session_id}"
        containers = await self._call(
            "cannot list kernels", api.containers, all=True, filters={"label": label}
        )

        def remove(cid: str) -> None:
            try:
                api.remove_container(cid, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "already in progress" not in _explain(exc):
                    raise  # else another caller is removing it: the same outcome

        def remove_network(nid: str) -> None:
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_network(nid)

        await self._gather(
            [
                self._call(f"cannot remove container {c['Id'][:12]}", remove, c["Id"])
                for c in containers
            ]
        )
        networks = await self._call("cannot list networks", api.networks, filters={"label": label})
        await self._gather(
            [
                self._call(f"cannot remove network {n['Name']}", remove_network, n["Id"])
                for n in networks
            ]
        )
        # The bootstrap files (they hold the session's keys) go with the kernels.
        await asyncio.to_thread(shutil.rmtree, self.bootstrap_root / session_id, True)

    # -- single kernels ------------------------------------------------------------

    async def _container_id(self, api: Any, kernel_id: str) -> str:
        found = await self._call(
            "cannot list kernels",
            api.containers,
            all=True,
            filters={"label": f"{LABEL_KERNEL}={kernel_id}"},
        )
        if not found:
            raise AgentError(f"no kernel {kernel_id} on agent {self.id}")
        return str(found[0]["Id"])

    async def logs(self, kernel_id: str) -> str:
        api = await self._api()
        cid = await self._container_id(api, kernel_id)
        raw = await self._call(
            f"cannot read logs of kernel {kernel_id}", api.logs, cid, stdout=True, stderr=True
        )
        return bytes(raw).decode(errors="replace")

    async def exec(self, kernel_id: str, command: list[str], timeout: float = 60) -> ExecResult:
        """Run ``command`` in the kernel; exit code 124 means it ran past ``timeout``.

        The time limit is enforced inside (coreutils ``timeout`` when the image has
        it, so the process really ends) and outside (we stop waiting and raise)."""
        api = await self._api()
        cid = await self._container_id(api, kernel_id)
        wrapped = [
            "sh",
            "-c",
            'if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 "$0" "$@"; '
            'else exec "$@"; fi',
            f"{timeout:g}",
            *command,
        ]
        what = f"cannot exec in kernel {kernel_id}"

        def run() -> tuple[int, bytes]:
            exec_id = api.exec_create(cid, wrapped, stdout=True, stderr=True)["Id"]
            output = api.exec_start(exec_id)
            return int(api.exec_inspect(exec_id)["ExitCode"]), bytes(output)

        try:
            exit_code, output = await asyncio.wait_for(self._call(what, run), timeout + 10)
        except asyncio.TimeoutError as exc:
            raise AgentError(f"{what}: {command[0]} did not end within {timeout:g}s") from exc
        return ExecResult(exit_code=exit_code, output=output.decode(errors="replace"))

    async def signal(self, kernel_id: str, signum: int) -> None:
        api = await self._api()
        cid = await self._container_id(api, kernel_id)
        await self._call(f"cannot signal kernel {kernel_id}", api.kill, cid, signal=signum)

    async def live_kernels(self) -> list[LiveKernel]:
        """Every container with our labels, running or not, with its exit code.

        States come from inspecting each container: the list endpoint's view lags
        behind a ``die`` event for a moment, inspect does not."""
        api = await self._api()
        found = await self._call(
            "cannot list kernels", api.containers, all=True, filters={"label": LABEL_ROOT}
        )
        ours = [
            c["Id"] for c in found if {LABEL_SESSION, LABEL_KERNEL} <= set(c.get("Labels") or {})
        ]

        def inspect(cid: str) -> dict[str, Any] | None:
            try:
                info: dict[str, Any] = api.inspect_container(cid)
            except docker.errors.NotFound:
                return None  # removed meanwhile
            return info

        infos = await self._gather(
            [self._call(f"cannot inspect {cid[:12]}", inspect, cid) for cid in ours]
        )
        kernels: list[LiveKernel] = []
        for info in infos:
            if info is None:
                continue
            labels, state = info["Config"]["Labels"], info["State"]
            running = bool(state["Running"])
            kernels.append(
                LiveKernel(
                    session_id=labels[LABEL_SESSION],
                    kernel_id=labels[LABEL_KERNEL],
                    container_id=info["Id"],
                    running=running,
                    exit_code=None if running else int(state["ExitCode"]),
                    labels=dict(labels),
                )
            )
        return kernels

    # -- events --------------------------------------------------------------------

    def events(self) -> AsyncIterator[KernelEvent]:
        """Kernel events from the moment of this call (one consumer; ends at close()).

        Must be called from the event loop that consumes them. The watcher thread asks
        the engine for events ``since`` this moment, so none is lost while it connects,
        and reconnects (from the last event seen) if the engine goes away."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            if self._closed:
                self._queue.put_nowait(None)
                return self._iterate(self._queue)
            loop = asyncio.get_running_loop()
            self._watcher = threading.Thread(
                target=self._watch,
                args=(loop, self._queue, time.time()),
                name=f"bai-docker-events-{self.id}",
                daemon=True,
            )
            self._watcher.start()
        return self._iterate(self._queue)

    @staticmethod
    async def _iterate(queue: asyncio.Queue[KernelEvent | None]) -> AsyncIterator[KernelEvent]:
        while True:
            event = await queue.get()
            if event is None:
                queue.put_nowait(None)  # later iterators end too
                return
            yield event

    def _watch(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[KernelEvent | None],
        since: float,
    ) -> None:
        """Thread: read the engine's event stream and post translated events to ``loop``."""
        client: Any = None
        last_nano = int(since * 1e9)
        delay = 0.0  # after a failure: 1, 2, 4 … 10 s between tries; one warning per outage
        while not self._stopping.is_set():
            try:
                if client is None:
                    client = self._new_client(timeout=10)
                stream = client.api.events(
                    decode=True,
                    since=f"{last_nano / 1e9:.9f}",
                    # Network events carry no container labels: no label filter here;
                    # _translate drops what is not a kernel of ours.
                    filters={"type": ["container", "network"], "event": list(_EVENT_ACTIONS)},
                )
                with self._stream_lock:
                    if self._stopping.is_set():
                        stream.close()
                        break
                    self._stream = stream
                if delay:
                    log.info("agent %s: docker event stream back", self.id)
                delay = 0.0
                for raw in stream:
                    nano = int(raw.get("timeNano") or 0)
                    if nano and nano < last_nano:
                        continue  # replayed after a reconnect
                    last_nano = max(last_nano, nano)
                    event = self._translate(client, raw)
                    if event is not None:
                        try:
                            loop.call_soon_threadsafe(queue.put_nowait, event)
                        except RuntimeError:  # the loop is closed: nobody listens any more
                            return
            except Exception as exc:  # engine gone or restarting: retry below
                if not self._stopping.is_set() and not delay:
                    log.warning("agent %s: docker event stream failed: %s", self.id, exc)
                delay = min(max(delay * 2, 1.0), 10.0)
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close()
                    client = None
            finally:
                with self._stream_lock:
                    self._stream = None
            self._stopping.wait(delay or 0.1)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _translate(self, client: Any, raw: dict[str, Any]) -> KernelEvent | None:
        """An engine event → our event (in the watcher thread: may inspect the container)."""
        actor = raw.get("Actor") or {}
        attrs: dict[str, str] = actor.get("Attributes") or {}
        action = str(raw.get("Action") or raw.get("status") or "")
        if raw.get("Type") == "network":
            return self._network_event(client, attrs) if action == "disconnect" else None
        if LABEL_ROOT not in attrs:
            return None  # not a kernel of ours
        session_id, kernel_id = attrs.get(LABEL_SESSION), attrs.get(LABEL_KERNEL)
        if not session_id or not kernel_id:
            return None
        detail: dict[str, Any] = {}
        if session_id in self._removing:
            detail["requested"] = True
        if action == "oom":
            # Any process of the container: a child's OOM leaves the kernel running.
            return KernelEvent(KernelEventKind.OOM_KILLED, session_id, kernel_id)
        if action == "destroy":
            return KernelEvent(KernelEventKind.GONE, session_id, kernel_id, detail=detail)
        if action != "die":
            return None
        with contextlib.suppress(Exception):  # removed meanwhile: no verdict, a plain death
            if client.api.inspect_container(actor.get("ID"))["State"].get("OOMKilled"):
                detail["oom_killed"] = True
        code = int(attrs.get("exitCode", "-1"))
        if code == 124:
            try:
                tail = bytes(client.api.logs(actor.get("ID"), stdout=True, stderr=True, tail=20))
            except Exception:
                tail = b""
            if TASK_TIMEOUT_LINE.encode() in tail:
                detail["task_timeout"] = True
        return KernelEvent(
            KernelEventKind.EXITED, session_id, kernel_id, exit_code=code, detail=detail
        )

    def _network_event(self, client: Any, attrs: dict[str, str]) -> KernelEvent | None:
        """A running kernel cut from its session's network (or main1 from the egress bridge).

        A stopping or removed container is disconnected too: only a running one counts."""
        network = attrs.get("name", "")
        if not network.startswith("bai-"):
            return None
        try:
            info = client.api.inspect_container(attrs.get("container"))
        except Exception:
            return None  # gone: its die/destroy events tell the story
        labels: dict[str, str] = info.get("Config", {}).get("Labels") or {}
        session_id, kernel_id = labels.get(LABEL_SESSION), labels.get(LABEL_KERNEL)
        if not session_id or not kernel_id or not info.get("State", {}).get("Running"):
            return None
        if session_id in self._removing:
            return None
        if network not in (_network_name(session_id), EGRESS_NETWORK):
            return None
        return KernelEvent(
            KernelEventKind.NETWORK_LOST, session_id, kernel_id, detail={"network": network}
        )

    async def close(self) -> None:
        """Stop the watcher thread and drop the client; containers keep running."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        with self._stream_lock:
            if self._stream is not None:
                with contextlib.suppress(Exception):
                    self._stream.close()
        if self._watcher is not None:
            await asyncio.to_thread(self._watcher.join, 5)
        if self._queue is not None:
            self._queue.put_nowait(None)
        if self._firewall_on:
            await asyncio.to_thread(firewall_remove, self._firewall_tag)
            self._firewall_on = False
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None
