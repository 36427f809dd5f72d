"""A Docker engine reached over SSH (``ssh://user@host[:port]``), as the Docker CLI reaches one.

The Docker SDK's own transport (paramiko, the ``ssh`` extra): one SSH connection
per client and, per HTTP connection, one channel running ``docker system
dial-stdio`` on the engine's machine, which relays it to that machine's engine.
Host keys come from ``~/.ssh/known_hosts`` only (an unknown host is refused, never
trusted on first use); the login key from the SSH agent, ``~/.ssh/id_*`` or
``IdentityFile`` in ``~/.ssh/config`` (which may also give the host's
``HostName``, ``Port``, ``User`` and ``ProxyCommand``).

Added to the SDK's transport: timeouts while connecting (a machine that is off
must not hold a worker thread for the minutes TCP takes to give up), keep-alives,
a new SSH connection once the old one died (the SDK would go on with the dead one,
and an agent that came back would stay unreachable), SSH failures raised as
connection errors (what the engine's callers expect of an engine that is gone),
and at most :data:`CHANNELS` HTTP connections at once: sshd refuses more sessions
per connection than its ``MaxSessions`` (10 by default), so a call waits for a
free one instead of failing. A request that changes nothing (GET, HEAD), cut on a
kept channel whose far end went away, is sent again on a fresh channel, as urllib3
does for a stale kept connection.
"""

from __future__ import annotations

import threading
from typing import Any

import requests.exceptions
from docker.transport.sshconn import SSHConnectionPool, SSHHTTPAdapter
from paramiko.ssh_exception import AuthenticationException, BadHostKeyException, SSHException
from urllib3.exceptions import ProtocolError

__all__ = ["SSHAdapter", "explain_ssh"]

#: The SDK's class is unannotated: subclassed through ``Any`` (see ``engine``).
_Adapter: Any = SSHHTTPAdapter
_Pool: Any = SSHConnectionPool
#: Seconds between keep-alive messages: a dead peer is noticed, idle NATs stay open.
KEEPALIVE = 15
#: HTTP connections (SSH channels, each a ``dial-stdio`` on the engine's machine) at once.
CHANNELS = 8
#: Tries of one request when a channel is refused or cut (see ``SSHAdapter.send``).
_TRIES = 3
#: The engine API's methods that change nothing: sent again after a cut channel.
_SAFE = frozenset({"GET", "HEAD"})


class SSHAdapter(_Adapter):  # type: ignore[misc]
    """The SDK's SSH adapter with the additions above."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        self._connect_timeout = timeout
        self._reconnecting = threading.Lock()
        self._pool: Any = None
        super().__init__(endpoint, timeout, max_pool_size=CHANNELS)

    def _create_paramiko_client(self, base_url: str) -> None:
        super()._create_paramiko_client(base_url)
        wait = self._connect_timeout
        self.ssh_params.update(timeout=wait, banner_timeout=wait, auth_timeout=wait)

    def _connect(self) -> None:
        super()._connect()
        transport = self.ssh_client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE)

    def get_connection(self, url: str, proxies: Any = None) -> Any:
        """One pool for every request (the SDK keeps one per URL, each holding idle
        channels), made again on a new SSH connection once the old one died."""
        with self._reconnecting:
            if not self._alive():
                self._drop_pool()  # its channels belong to the dead connection
                self.ssh_client.close()
                try:
                    self._connect()
                except (SSHException, OSError) as exc:
                    raise requests.exceptions.ConnectionError(str(exc)) from exc
            if self._pool is None:
                self._pool = _Pool(
                    ssh_client=self.ssh_client,
                    timeout=self.timeout,
                    maxsize=CHANNELS,
                    host=self.ssh_host,
                )
                self._pool.block = True  # a call past CHANNELS waits for a free one
            return self._pool

    def _drop_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        with self._reconnecting:
            self._drop_pool()
        super().close()

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Send on a channel of a live connection. Asked for once more on a new channel:
        a channel refused by a connection that just died (nothing was sent on it), and a
        request that changes nothing cut on a kept channel whose far end is gone (its
        ``dial-stdio`` or the whole connection ended meanwhile; the kept ones are dropped)."""
        for attempt in range(1, _TRIES + 1):
            try:
                return super().send(request, *args, **kwargs)
            except SSHException as exc:
                if attempt == _TRIES or self._alive():
                    raise requests.exceptions.ConnectionError(str(exc)) from exc
            except requests.exceptions.ConnectionError as exc:
                cut = bool(exc.args) and isinstance(exc.args[0], ProtocolError)
                if attempt == _TRIES or not cut or request.method not in _SAFE:
                    raise
                with self._reconnecting:
                    self._drop_pool()
        raise AssertionError("unreachable")

    def _alive(self) -> bool:
        transport = self.ssh_client.get_transport()
        return transport is not None and bool(transport.is_active())


def explain_ssh(endpoint: str, exc: BaseException) -> str:
    """What failed while connecting to ``endpoint``, and what the operator does about it."""
    if isinstance(exc, BadHostKeyException):
        return (
            f"{exc}: the host key of {endpoint} changed; if that is expected, replace its "
            "line in ~/.ssh/known_hosts of the user the manager runs as"
        )
    if isinstance(exc, AuthenticationException):
        return (
            f"{exc}: no key of the user the manager runs as was accepted by {endpoint}; "
            "give it one (the SSH agent, ~/.ssh/id_*, or IdentityFile in ~/.ssh/config) "
            "whose public key is in that login's ~/.ssh/authorized_keys"
        )
    if isinstance(exc, SSHException) and "known_hosts" in str(exc):
        return (
            f"{exc}: add the host key of {endpoint} to ~/.ssh/known_hosts of the user the "
            "manager runs as (ssh-keyscan, after checking its fingerprint); unknown hosts "
            "are refused"
        )
    return str(exc)
