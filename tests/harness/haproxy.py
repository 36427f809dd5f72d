"""Several ``bai-jupyter manager`` replicas on one store, behind a real HAProxy, under a Hub.

The HA set-up the guide describes (docs/jupyterhub.md, "HA and scale"): the
sample Hub (``harness.hub.start_hub``) whose manager service is an external
one (its URL is HAProxy's, an API token, no command), N replicas started by the
test as its own processes (so it can ``kill -9`` one and start it again on the
same port), each with the environment the Hub gives a managed service and one
shared cookie secret (OAuth works whichever replica a browser reaches).
HAProxy from Debian (``scripts/_env.sh`` installs it) balances round-robin,
keeps a browser on one replica (a cookie), checks each replica's health every
0.5 s and keeps event streams open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

from conftest import skip_or_fail
from tornado.iostream import IOStream, StreamClosedError
from tornado.tcpclient import TCPClient

from harness.hub import (
    REPO,
    SERVICE,
    Hub,
    _die_with_parent,
    start_hub,
    terminate,
    write_manager_config,
)
from harness.server import free_port

PREFIX = f"/services/{SERVICE}/"
#: The route HAProxy's health check asks for: 200 once the replica serves, 503 before.
HEALTH = f"{PREFIX}health"
#: The header HAProxy adds to every reply: the name of the replica that gave it.
REPLICA_HEADER = "X-Bai-Replica"


def haproxy_config(port: int, replicas: dict[str, int]) -> str:
    """An HAProxy config for ``replicas`` (name → port) on 127.0.0.1, listening on ``port``:
    the one the guide shows, with this run's ports."""
    servers = "\n".join(
        f"    server {name} 127.0.0.1:{at} check cookie {name}" for name, at in replicas.items()
    )
    return f"""\
global
    maxconn 4096

defaults
    mode http
    option httplog
    timeout connect 2s
    timeout client 60s
    timeout server 120s
    # event streams (text/event-stream) stay open for hours
    timeout tunnel 24h
    timeout client-fin 5s
    # a request that finds a replica gone is sent to another (nothing of it was sent yet)
    retries 3
    option redispatch 1

frontend bai_manager
    bind 127.0.0.1:{port}
    default_backend bai_replicas

backend bai_replicas
    balance roundrobin
    option httpchk GET {HEALTH}
    # any answer but a 5xx: the replica serves (without credentials the API answers 403)
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
    # a browser stays on one replica (the Hub's OAuth keeps a sign-in's state in the
    # process that began it); token clients carry no such cookie and are balanced
    cookie bai_replica insert indirect nocache httponly
    http-response set-header {REPLICA_HEADER} %s
{servers}
"""


@dataclass
class HAProxy:
    """A running HAProxy in the foreground (``-db``), owned by the test."""

    port: int
    config: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def start_haproxy(state: Path, port: int, replicas: dict[str, int]) -> HAProxy:
    """HAProxy with :func:`haproxy_config`; skip (fail under CI) when it is not installed."""
    binary = shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if Path(p).exists()), None
    )
    if binary is None:
        skip_or_fail("no haproxy (./scripts/test installs Debian's: apt-get install -y haproxy)")
    config = state / "haproxy.cfg"
    config.write_text(haproxy_config(port, replicas))
    check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, f"HAProxy refuses {config}:\n{check.stdout}{check.stderr}"
    with (state / "haproxy.log").open("wb") as log:
        proc = subprocess.Popen(
            [binary, "-db", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    return HAProxy(port, config, proc)


@dataclass
class Replica:
    """One ``bai-jupyter manager`` process: its name (``replica_name``), port, process."""

    name: str
    port: int
    config: Path
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its own service URL (past HAProxy and the Hub's proxy)."""
        return f"http://127.0.0.1:{self.port}{PREFIX}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bai_jupyter.cli", "manager", "--config", str(self.config)],
                env=self.env,
                cwd=self.config.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind (the lease is not released)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)

    def tail(self, chars: int = 4000) -> str:
        """The end of its log, without HAProxy's health checks (two a second)."""
        if not self.log.exists():
            return ""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if HEALTH not in line)[-chars:]

    def get(self, path: str, token: str, timeout: float = 5) -> Any:
        """GET ``bai/api/v1/<path>`` of this replica itself (blocking: a probe)."""
        request = Request(f"{self.url}bai/api/v1/{path}")
        request.add_header("Authorization", f"token {token}")
        with urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())


def wait_serving(replica: Replica, timeout: float = 90) -> None:
    """Until ``replica`` answers on its own port (its manager has started)."""
    deadline = time.monotonic() + timeout
    while True:
        assert replica.alive, f"{replica.name} exited:\n{replica.tail()}"
        with contextlib.suppress(OSError, URLError):
            try:
                urlopen(f"http://127.0.0.1:{replica.port}{HEALTH}", timeout=2).close()
                return
            except HTTPError as exc:
                if exc.code < 500:
                    return
        assert time.monotonic() < deadline, f"{replica.name} did not start:\n{replica.tail()}"
        time.sleep(0.1)


@dataclass
class HaHub:
    """The Hub, HAProxy and the replicas: what the HA tests and bench/takeover.py drive."""

    hub: Hub
    haproxy: HAProxy
    replicas: list[Replica] = field(default_factory=list)

    def tail(self) -> str:
        parts = [self.hub.tail(3000)]
        parts += [f"--- {r.name}:\n{r.tail(3000)}" for r in self.replicas]
        return "\n".join(parts)

    def replica(self, name: str) -> Replica:
        (found,) = [r for r in self.replicas if r.name == name]
        return found

    def leader(self, user: str = "carol") -> Replica | None:
        """The replica that leads the store now, as a living replica's ``/scheduler`` says
        (None while none does, or none answers)."""
        for replica in self.replicas:
            if not replica.alive:
                continue
            with contextlib.suppress(OSError, HTTPError, URLError, ValueError):
                leader = (replica.get("scheduler", self.hub.tokens[user]).get("leader")) or {}
                name = leader.get("replica")
                if name and self.replica(name).alive:
                    return self.replica(name)
        return None

    def wait_leader(self, timeout: float = 60, user: str = "carol") -> Replica:
        deadline = time.monotonic() + timeout
        while (found := self.leader(user)) is None:
            assert time.monotonic() < deadline, f"no replica leads the store:\n{self.tail()}"
            time.sleep(0.1)
        return found

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self.hub.stop()
        self.haproxy.stop()


def start_ha_hub(state: Path, store_url: str, manager_config: str = "", count: int = 2) -> HaHub:
    """The sample Hub whose service is ``count`` replicas on ``store_url`` behind HAProxy."""
    state.mkdir(parents=True, exist_ok=True)
    names = {f"ha-{i}": free_port() for i in range(1, count + 1)}
    proxy = start_haproxy(state, free_port(), names)
    token = secrets.token_hex(32)
    secret = state / "manager_cookie_secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    shared = write_manager_config(
        state,
        manager_config + f"c.ManagerService.cookie_secret_file = {str(secret)!r}\n",
        name="bai_manager_replicas.py",  # not the Hub's own (start_hub writes that one)
    )
    hub_port, api_port = free_port(), free_port()
    # The sample's service entry, made external: the Hub starts nothing; its URL (from
    # BAI_MANAGER_PORT) is HAProxy's, and users' servers reach the service there too.
    hub_config = (
        "_service = c.JupyterHub.services[0]\n"
        "_service.pop('command', None)\n"
        "_service.pop('environment', None)\n"
        f"_service['api_token'] = {token!r}\n"
    )
    service_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BAI_MANAGER_STORE_URL": store_url,
        "JUPYTERHUB_SERVICE_NAME": SERVICE,
        "JUPYTERHUB_API_TOKEN": token,
        "JUPYTERHUB_CLIENT_ID": f"service-{SERVICE}",
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{api_port}/hub/api",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
        "JUPYTERHUB_OAUTH_CALLBACK_URL": f"{PREFIX}oauth_callback",
        "JUPYTERHUB_PUBLIC_URL": f"http://127.0.0.1:{hub_port}{PREFIX}",
    }
    service_env.pop("BAI_JUPYTER_URL", None)
    replicas = []
    for name, port in names.items():
        config = state / f"{name}_config.py"
        config.write_text(
            f"load_subconfig({str(shared)!r})\n"
            f"c.BaiSessionManager.replica_name = {name!r}\n"
            f"c.ManagerService.port = {port}\n"
        )
        replica = Replica(name, port, config, service_env, state / f"{name}.log")
        replica.start()
        replicas.append(replica)
    try:
        for replica in replicas:
            wait_serving(replica)
        hub = start_hub(
            state,
            store_url,
            hub_config=hub_config,
            env={
                "BAI_HUB_PORT": str(hub_port),
                "BAI_HUB_API_PORT": str(api_port),
                "BAI_MANAGER_PORT": str(proxy.port),
                "BAI_MANAGER_CONFIG": str(shared),
            },
        )
    except BaseException:
        for replica in replicas:
            replica.stop()
        proxy.stop()
        raise
    return HaHub(hub, proxy, replicas)


@contextlib.contextmanager
def running_ha_hub(
    state: Path, store_url: str, manager_config: str = "", count: int = 2
) -> Iterator[HaHub]:
    ha = start_ha_hub(state, store_url, manager_config, count)
    try:
        yield ha
    finally:
        ha.stop()


class RawEvents:
    """One ``events`` stream read by hand, as a browser's EventSource does: the replica that
    serves it (HAProxy's header), each frame's ``id``, and a ``Last-Event-ID`` to resume."""

    def __init__(self, url: str, token: str, last_event_id: int | None = None) -> None:
        self.url, self.token, self.last_event_id = url, token, last_event_id
        self.replica = ""
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._stream: IOStream | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> RawEvents:
        url = urlsplit(self.url)
        secure = url.scheme == "https"
        self._stream = await TCPClient().connect(
            url.hostname or "127.0.0.1",
            url.port or 80,
            ssl_options=ssl.create_default_context() if secure else None,
        )
        lines = [
            f"GET {url.path}{'?' + url.query if url.query else ''} HTTP/1.0",
            f"Host: {url.netloc}",
            f"Authorization: token {self.token}",
            "Accept: text/event-stream",
        ]
        if self.last_event_id is not None:
            lines.append(f"Last-Event-ID: {self.last_event_id}")
        await self._stream.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = (await self._stream.read_until(b"\r\n\r\n")).decode("latin-1")
        status = head.split("\r\n", 1)[0]
        assert " 200 " in status, f"{self.url}: {head}"
        for line in head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == REPLICA_HEADER.lower():
                self.replica = value.strip()
        self._task = asyncio.ensure_future(self._pump())
        return self

    async def _pump(self) -> None:
        assert self._stream is not None
        buffer = b""
        try:
            while True:
                buffer += await self._stream.read_bytes(65536, partial=True)
                buffer = buffer.replace(b"\r\n", b"\n")
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    fields = [line.partition(b":")[::2] for line in frame.split(b"\n")]
                    data = b"\n".join(v.strip() for k, v in fields if k == b"data")
                    ids = [v.strip() for k, v in fields if k == b"id"]
                    if data:
                        if ids:
                            self.last_event_id = int(ids[-1])
                        self.events.put_nowait(json.loads(data))
        except StreamClosedError:
            self.events.put_nowait(None)  # cut: the caller resumes with last_event_id

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        if self._task is not None:
            self._task.cancel()
