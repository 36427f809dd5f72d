"""One Docker engine through the docker SDK: the client, its errors, and calls in threads.

The SDK is blocking: every call runs in a worker thread of the engine's own pool
(as many as its connection pool: a session's kernels are created and started at
once, and a burst of sessions is not queued behind the event loop's few default
workers, which the Jupyter server needs for itself), and its errors become
:class:`AgentError` in the engine's own words.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import docker.errors
import requests.exceptions
from docker.client import DockerClient
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.tls import TLSConfig as _TLSConfig
from docker.types.services import Mount as _SDKMount
from docker.utils.utils import parse_host as _sdk_parse_host
from docker.utils.utils import version_lt as _version_lt

from ..base import AgentError
from .tcp import keep_alive

__all__ = ["BindMount", "Engine", "engine_answers", "explain", "gather_all", "unix_socket"]

#: The SDK has no type hints: we hold its objects as ``Any`` at this one boundary
#: (calling its unannotated functions directly is an error under mypy --strict).
_SDKClient: Any = DockerClient
_TLS: Any = _TLSConfig
_older: Any = _version_lt
_parse_host: Any = _sdk_parse_host
#: A bind mount (``docker.types.Mount``; unannotated, hence ``Any``).
BindMount: Any = _SDKMount

T = TypeVar("T")

#: Concurrent engine calls (one per kernel while a big session starts) reuse connections.
_POOL_SIZE = 32


def unix_socket(endpoint: str | None) -> str | None:
    """The socket path of a local engine URL (``None`` for tcp/ssh engines)."""
    url = endpoint or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    for scheme in ("unix://", "http+unix://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return None


def sees_our_files(endpoint: str | None) -> bool:
    """Whether the engine runs on this machine (binds of our paths work there)."""
    url = endpoint or os.environ.get("DOCKER_HOST") or "unix://"
    return url.startswith(("unix://", "http+unix://", "npipe://"))


def new_client(endpoint: str | None, timeout: float, tls_dir: str = "") -> Any:
    """A blocking SDK client; its constructor already asks the engine's API version.

    A local socket is probed first: the SDK leaks its socket when the connect
    fails (a ResourceWarning on every try while the engine is down). ``tls_dir``:
    a ``tcp://`` engine verified with ``ca.pem`` and reached with ``cert.pem`` /
    ``key.pem`` from that directory (as ``DOCKER_CERT_PATH`` for the CLI)."""
    path = unix_socket(endpoint)
    if path is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout)
            probe.connect(path)
    if endpoint is None:
        return _SDKClient.from_env(timeout=timeout, max_pool_size=_POOL_SIZE)
    if endpoint.startswith("ssh://"):
        return _ssh_client(endpoint, timeout)
    if tls_dir:
        client = _tls_client(endpoint, timeout, Path(tls_dir))
    else:
        client = _SDKClient(base_url=endpoint, timeout=timeout, max_pool_size=_POOL_SIZE)
    keep_alive(client.api, timeout, _POOL_SIZE)  # a remote machine may die without a word
    return client


#: The base URL the SDK gives an SSH client's requests (its SSH adapter is mounted there).
_SSH_BASE = "http+docker://ssh"


def _ssh_client(endpoint: str, timeout: float) -> Any:
    """A client of an ``ssh://`` engine through :class:`.ssh.SSHAdapter` (which connects).

    The SDK would make its own adapter, with no timeout on connecting: the client is made
    for a placeholder URL (an explicit API version: no request), and the adapter mounted
    where the SDK mounts its own; the API version is then agreed by hand."""
    try:
        from paramiko.ssh_exception import SSHException

        from .ssh import SSHAdapter, explain_ssh
    except ImportError as exc:
        raise docker.errors.DockerException(
            f"{endpoint}: an ssh:// endpoint needs paramiko: pip install 'bai-jupyter[ssh]'"
        ) from exc
    try:  # with its port (22 by default), as the SDK gives its own adapter the URL
        adapter = SSHAdapter(_parse_host(endpoint, False), timeout)
    except (SSHException, OSError) as exc:
        raise docker.errors.DockerException(explain_ssh(endpoint, exc)) from exc

    def made(version: str) -> Any:
        client = _SDKClient(base_url="tcp://127.0.0.1:1", version=version, timeout=timeout)
        client.api.mount(_SSH_BASE, adapter)
        client.api.base_url = _SSH_BASE
        return client

    try:
        server = str(made(DEFAULT_DOCKER_API_VERSION).api.version(api_version=False)["ApiVersion"])
    except BaseException:
        adapter.close()
        raise
    ours = DEFAULT_DOCKER_API_VERSION
    return made(server if _older(server, ours) else ours)


def _tls_client(endpoint: str, timeout: float, certs: Path) -> Any:
    """A client of a ``tcp://`` engine over verified TLS.

    ``requests`` lets ``REQUESTS_CA_BUNDLE`` override a session's own CA file, so
    the client ignores the environment (``trust_env``); the API version is then
    agreed by hand (the SDK's own negotiation would run before that is set)."""
    tls = _TLS(
        client_cert=(str(certs / "cert.pem"), str(certs / "key.pem")),
        ca_cert=str(certs / "ca.pem"),
        verify=True,
    )

    def made(version: str) -> Any:
        client = _SDKClient(
            base_url=endpoint, timeout=timeout, max_pool_size=_POOL_SIZE, tls=tls, version=version
        )
        client.api.trust_env = False
        return client

    probe = made(DEFAULT_DOCKER_API_VERSION)
    try:
        server = str(probe.api.version(api_version=False)["ApiVersion"])
    finally:
        probe.close()
    ours = DEFAULT_DOCKER_API_VERSION
    return made(server if _older(server, ours) else ours)


def explain(exc: BaseException) -> str:
    """The engine's own words for an SDK error (not the HTTP wrapper text)."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


async def engine_answers(
    endpoint: str | None = None, timeout: float = 3, tls_dir: str = ""
) -> bool:
    """Whether a Docker engine answers a ping at ``endpoint`` within ``timeout`` seconds."""

    def ping() -> bool:
        try:
            client = new_client(endpoint, timeout, tls_dir)
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


async def gather_all(aws: Iterable[Awaitable[T]]) -> list[T]:
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


class Engine:
    """The engine of one agent: an SDK client made on first use, and calls in threads."""

    def __init__(self, agent_id: str, endpoint: str | None, tls_dir: str = "") -> None:
        self.agent_id = agent_id
        #: ``None``: the environment's engine (``DOCKER_HOST`` or the local socket).
        self.endpoint = endpoint
        #: Client certificates of a ``tcp://`` engine (see :func:`new_client`).
        self.tls_dir = tls_dir
        self.closed = False
        self._client: Any = None
        self._lock = asyncio.Lock()
        self._threads = ThreadPoolExecutor(_POOL_SIZE, thread_name_prefix=f"bai-docker-{agent_id}")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of the engine's threads (blocking SDK work)."""
        try:
            job = asyncio.get_running_loop().run_in_executor(self._threads, partial(fn, *args))
        except RuntimeError as exc:  # shut down: the agent was closed meanwhile
            raise AgentError(f"agent {self.agent_id} is closed") from exc
        return await job

    def new_client(self, timeout: float = 60) -> Any:
        """A client of its own, for a thread that blocks on the engine (the event stream)."""
        return new_client(self.endpoint, timeout, self.tls_dir)

    async def api(self) -> Any:
        """The low-level client, created on first use (in a thread: it talks to the engine)."""
        if self.closed:
            raise AgentError(f"agent {self.agent_id} is closed")
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.to_thread(self.new_client)
                except (docker.errors.DockerException, OSError) as exc:
                    raise AgentError(
                        f"agent {self.agent_id}: no Docker engine answers at "
                        f"{self.endpoint or 'the default socket'}: {explain(exc)}"
                    ) from exc
        return self._client.api

    async def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one blocking SDK call in a thread; engine errors become :class:`AgentError`.

        A local socket is probed first, as in :func:`new_client`."""
        path = unix_socket(self.endpoint)

        def probed() -> T:
            if path is not None:  # a dead engine: refused here, not by the SDK (which leaks)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.settimeout(5)
                    probe.connect(path)
            return fn(*args, **kwargs)

        try:
            return await self.run(probed)
        except docker.errors.DockerException as exc:
            raise AgentError(f"{what}: {explain(exc)}") from exc
        except (requests.exceptions.RequestException, OSError) as exc:  # the engine is gone
            raise AgentError(f"{what}: the engine does not answer: {exc}") from exc

    async def reconnect(self) -> None:
        """Drop the client and its kept connections; the next call makes a new one.

        After the engine did not answer: its machine may have died without closing our
        connections, which then lead nowhere (see :mod:`.tcp`)."""
        async with self._lock:
            old, self._client = self._client, None
        if old is not None:  # calls in flight on it end on their own connections
            await asyncio.to_thread(old.close)

    async def close(self) -> None:
        """Drop the client; later calls say the agent is closed."""
        self.closed = True
        if self._client is not None:
            await self.run(self._client.close)
            self._client = None
        self._threads.shutdown(wait=False)
