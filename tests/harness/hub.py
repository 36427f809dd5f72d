"""A real JupyterHub with the bai-jupyter manager as a Hub service, for the Hub tests.

It runs ``examples/jupyterhub/jupyterhub_config.py`` (the sample users get) as
it is, plus a test admin service whose token creates users, starts their
servers and mints their tokens. The manager's store is a fresh PostgreSQL
database; kernels run on the real Docker engine. One Hub serves every test of
a session (starting one takes seconds, each user's server a few more).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

from conftest import skip_or_fail
from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse

from bai_jupyter import kernelspecs
from bai_jupyter.client import RemoteManager
from harness.server import free_port, kernel_cell

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "jupyterhub" / "jupyterhub_config.py"
MANAGER_SAMPLE = SAMPLE.with_name("bai_manager_config.py")
SERVICE = "bai-jupyter"
#: Small enough that a few kernels of two users fit beside the rest of the suite.
KERNEL = {"cpu": "0.25", "mem": "256m"}


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """The Hub (and what it starts) must not outlive a test run killed half-way."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # else the Hub waits 31 s on shutdown
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Hub:
    """A running Hub: its public URL, the admin token, its process and state folder."""

    url: str
    admin_token: str
    proc: subprocess.Popen[bytes]
    state: Path
    tokens: dict[str, str] = field(default_factory=dict)
    store_url: str = ""
    #: The Hub's own API (what its services call), e.g. http://127.0.0.1:8081/hub/api
    api_url: str = ""

    @property
    def log(self) -> Path:
        return self.state / "hub.log"

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """The Hub's REST API as the test admin (blocking: only for set-up)."""
        data = None if body is None else json.dumps(body).encode()
        request = Request(
            f"{self.url}hub/api/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.admin_token}"},
        )
        try:
            with urlopen(request, timeout=30) as reply:
                text = reply.read()
        except HTTPError as exc:
            raise AssertionError(f"{method} {path}: {exc.code} {exc.read()!r}") from None
        return json.loads(text) if text else None

    def service_url(self) -> str:
        return f"{self.url}services/{SERVICE}/"

    def service(self, user: str) -> RemoteManager:
        """The manager service as ``user`` (with their own Hub token)."""
        return RemoteManager(self.service_url(), self.tokens[user])

    def server(self, user: str) -> RemoteManager:
        """``user``'s single-user server's bai API (which forwards to the service)."""
        return RemoteManager(f"{self.url}user/{user}/", self.tokens[user])

    async def fetch(
        self, method: str, path: str, user: str, body: Any = None, **options: Any
    ) -> HTTPResponse:
        """A request to ``path`` under the Hub's public URL with ``user``'s token."""
        data = None if body is None else json.dumps(body).encode()
        if data is None and method in ("POST", "PUT"):
            data = b"{}"
        request = HTTPRequest(
            self.url + path.lstrip("/"),
            method=method,
            body=data,
            headers={"Authorization": f"token {self.tokens[user]}"},
            request_timeout=options.pop("timeout", 120),
            **options,
        )
        return await AsyncHTTPClient().fetch(request, raise_error=False)

    async def run_cell(self, user: str, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Run ``code`` in one of ``user``'s Jupyter kernels over their server's kernel
        WebSocket, as JupyterLab does (no bai API in the path); what it printed."""
        base = f"{self.url}user/{user}/"
        return await kernel_cell(base, self.tokens[user], kernel_id, code, timeout)

    def add_user(self, name: str, admin: bool = False) -> None:
        """Create ``name`` (unless the Hub made them: its admins), start their server, and
        keep a token of theirs."""
        if name not in {u["name"] for u in self.api("GET", "users")}:
            self.api("POST", f"users/{name}", {"admin": admin})
        self.api("POST", f"users/{name}/server")
        deadline = time.monotonic() + 90
        while True:
            model = self.api("GET", f"users/{name}")
            server = (model.get("servers") or {}).get("", {})
            if server.get("ready"):
                break
            assert time.monotonic() < deadline, f"{name}'s server did not start:\n{self.tail()}"
            time.sleep(0.3)
        scopes = [f"access:servers!server={name}/", f"access:services!service={SERVICE}"]
        reply = self.api("POST", f"users/{name}/tokens", {"scopes": scopes, "note": "tests"})
        self.tokens[name] = reply["token"]

    def stop(self) -> None:
        terminate(self.proc)


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, a minute to stop cleanly, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()


def _kernelspecs(share: Path) -> None:
    """The kernelspecs users' servers offer: one kernel, and a cluster of two."""
    for name, size in (("bai-py", 1), ("bai-cluster", 2)):
        folder = share / "kernels" / name
        folder.mkdir(parents=True)
        spec = kernelspecs.kernelspec_json(name, {"resources": KERNEL, "cluster_size": size})
        (folder / "kernel.json").write_text(json.dumps(spec))


def write_manager_config(
    state: Path, manager_config: str = "", name: str = "bai_manager_config.py"
) -> Path:
    """The sample service config as it is (its store URL comes from BAI_MANAGER_STORE_URL),
    then this run's folders and the test's own settings: the file the service reads."""
    state.mkdir(parents=True, exist_ok=True)
    manager_conf = state / name
    manager_conf.write_text(
        f"load_subconfig({str(MANAGER_SAMPLE)!r})\n"
        "c.BaiSessionManager.data_folders_root = "
        + repr(str(state / "folders"))
        + "\n"
        + manager_config
    )
    return manager_conf


def start_hub(
    state: Path,
    store_url: str,
    manager_config: str = "",
    hub_config: str = "",
    env: dict[str, str] | None = None,
) -> Hub:
    """Start the sample Hub with its manager service on ``store_url``; wait until both answer.

    ``hub_config`` is appended to the Hub's config (after the sample's); ``env`` sets or
    replaces the variables the sample reads (its ports, BAI_MANAGER_PORT…).
    """
    state.mkdir(parents=True, exist_ok=True)
    _kernelspecs(state / "share")
    admin_token = secrets.token_hex(16)
    manager_conf = write_manager_config(state, manager_config)
    config = state / "jupyterhub_config.py"
    config.write_text(
        f"load_subconfig({str(SAMPLE)!r})\n"
        # The service and the users' servers run this checkout's code (the Hub passes
        # neither of them its own environment).
        f"c.Spawner.environment['PYTHONPATH'] = {str(REPO)!r}\n"
        "for _service in c.JupyterHub.services:\n"
        "    if 'command' in _service:\n"
        f"        _service.setdefault('environment', {{}})['PYTHONPATH'] = {str(REPO)!r}\n"
        "c.JupyterHub.services.append(\n"
        f'    {{"name": "test-admin", "api_token": {admin_token!r}}}\n'
        ")\n"
        "c.JupyterHub.load_roles.append({\n"
        '    "name": "test-admin", "services": ["test-admin"],\n'
        '    "scopes": ["admin:users", "admin:servers", "admin:groups", "tokens", "read:users",'
        ' "list:users"],\n'
        "})\n" + hub_config
    )
    port = int((env or {}).get("BAI_HUB_PORT") or free_port())
    chp = REPO / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not chp.exists():
        skip_or_fail(f"no JupyterHub proxy at {chp} (./scripts/test installs it)")
    hub_env = {
        **os.environ,
        "BAI_HUB_STATE": str(state),
        "BAI_HUB_PORT": str(port),
        "BAI_HUB_API_PORT": str(free_port()),
        "BAI_PROXY_API_PORT": str(free_port()),
        "BAI_MANAGER_PORT": str(free_port()),
        "BAI_MANAGER_CONFIG": str(manager_conf),
        "BAI_MANAGER_STORE_URL": store_url,
        "BAI_HUB_PUBLIC_URL": f"http://127.0.0.1:{port}/",
        "BAI_HUB_JUPYTER_PATH": str(state / "share"),
        "BAI_HUB_ADMINS": "carol",
        "BAI_PROXY_COMMAND": str(chp),
        "JUPYTER_DATA_DIR": str(state / "data"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        **(env or {}),
    }
    hub_env.pop("BAI_JUPYTER_URL", None)
    with (state / "hub.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config)],
            cwd=state,
            env=hub_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    hub = Hub(f"http://127.0.0.1:{port}/", admin_token, proc, state, store_url=store_url)
    hub.api_url = f"http://127.0.0.1:{hub_env['BAI_HUB_API_PORT']}/hub/api"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"the Hub exited:\n{hub.tail()}"
        with contextlib.suppress(OSError, AssertionError):
            request = Request(f"{hub.service_url()}bai/api/v1/openapi.json")
            request.add_header("Authorization", f"token {admin_token}")
            try:
                urlopen(request, timeout=5).close()
                break
            except HTTPError as exc:
                if exc.code in (401, 403):  # the service answers (the admin is no user)
                    break
        assert time.monotonic() < deadline, f"the Hub or its service did not start:\n{hub.tail()}"
        time.sleep(0.3)
    return hub


@contextlib.contextmanager
def running_hub(state: Path, store_url: str) -> Iterator[Hub]:
    hub = start_hub(state, store_url)
    try:
        yield hub
    finally:
        hub.stop()
