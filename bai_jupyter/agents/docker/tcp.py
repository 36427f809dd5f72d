"""A Docker engine over ``tcp://`` (TLS or not): connections that notice a dead peer.

A machine that dies without closing its connections (power lost, a crash behind a
cut link) leaves this side's sockets open, and a peer that boots again knows
nothing of them: a kept connection of the pool then fails the next request sent on
it (``RemoteDisconnected``, a reset), and the event stream, a read with no
timeout, waits forever. So every connection of the transport mounted here sends
TCP keep-alives (a dead or rebooted peer is noticed on an idle stream within
:data:`KEEPALIVE_IDLE` + :data:`KEEPALIVE_COUNT` × :data:`KEEPALIVE_INTERVAL`
seconds), connects within the client's timeout even when the request itself has
none (the event stream), and a request cut on a kept connection before any answer
is sent once more, on a fresh one, after the pool's kept connections are dropped
(they lead to the same dead peer). The unix socket needs none of this (the
kernel closes both ends); ``ssh://`` has its own (``ssh``).
"""

from __future__ import annotations

import socket
from typing import Any

import requests.adapters
import requests.exceptions
from urllib3.connection import HTTPConnection
from urllib3.exceptions import ProtocolError

__all__ = ["KEEPALIVE_IDLE", "KeptAlive", "keep_alive"]

#: Seconds a connection is idle before the first keep-alive probe.
KEEPALIVE_IDLE = 10
#: Seconds between probes, and unanswered probes before the connection is dead.
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3

_Adapter: Any = requests.adapters.HTTPAdapter


def _keepalive_options() -> list[tuple[int, int, int]]:
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),  # Linux
        ("TCP_KEEPALIVE", KEEPALIVE_IDLE),  # macOS
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def _resendable(request: Any) -> bool:
    """A body sent once more must be the same: none, or bytes (not a consumed stream)."""
    return request.body is None or isinstance(request.body, (bytes, str))


class KeptAlive(_Adapter):  # type: ignore[misc]
    """``requests``' adapter with keep-alives, a connect timeout, and one more try."""

    def __init__(self, connect_timeout: float, pool_maxsize: int) -> None:
        self.connect_timeout = connect_timeout
        super().__init__(pool_maxsize=pool_maxsize)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        options = [*HTTPConnection.default_socket_options, *_keepalive_options()]
        super().init_poolmanager(*args, socket_options=options, **kwargs)

    def send(self, request: Any, stream: bool = False, timeout: Any = None, **kwargs: Any) -> Any:
        """Sent; once more on a fresh connection when a kept one was cut before answering."""
        if timeout is None:  # a stream's read may wait forever; its connect may not
            timeout = (self.connect_timeout, None)
        try:
            return super().send(request, stream=stream, timeout=timeout, **kwargs)
        except requests.exceptions.ConnectionError as exc:
            cut = bool(exc.args) and isinstance(exc.args[0], ProtocolError)
            if not cut or not _resendable(request):
                raise
        self.poolmanager.clear()  # the other kept connections lead to the same dead peer
        return super().send(request, stream=stream, timeout=timeout, **kwargs)


def keep_alive(api: Any, connect_timeout: float, pool_maxsize: int) -> None:
    """Mount :class:`KeptAlive` for ``http://`` and ``https://`` on an SDK ``APIClient``."""
    for prefix in ("http://", "https://"):
        old = api.adapters.get(prefix)
        api.mount(prefix, KeptAlive(connect_timeout, pool_maxsize))
        if old is not None:
            old.close()
