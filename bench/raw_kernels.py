"""The baseline of the start-up benches: a session's containers started by hand.

A bai session of size N is RUNNING once main1's ipykernel listens and every
other kernel's sshd does. :func:`start_raw` starts the same image with the same
CPU, memory and pids limits through the Docker SDK (what ``docker run`` does),
main1 running ipykernel on a connection file and the others sshd with a given
host key, all at once on a user-defined bridge network (made for the sample
when N > 1, as a session's own bridge is; a shared one for N = 1, as bai's
egress bridge is), and times it until the same ports accept a connection from
this host. What is left between the two is bai-jupyter's own cost.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import docker.errors

from bai_jupyter.resources import parse_amount
from bai_jupyter.runtime.protocol import KERNEL_PORT_BASES, SSH_PORT, kernel_ports

#: Label of every raw container and network, valued with the bench run's id.
#: Where a raw main1 listens (bai picks a base per session; any one costs the same).
KERNEL_PORTS = kernel_ports(KERNEL_PORT_BASES[0])
RAW_LABEL = "bai-jupyter-bench.raw"
#: How long a raw kernel may take to listen.
READY_TIMEOUT = 60.0


def connection_file(ip: str = "0.0.0.0") -> dict[str, Any]:
    """An ipykernel connection file on the first of bai's in-container port bases."""
    return {
        **{f"{channel}_port": port for channel, port in KERNEL_PORTS.items()},
        "ip": ip,
        "key": secrets.token_hex(32),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
    }


def host_key(folder: Path) -> Path:
    """An ed25519 host key for the raw sshd (bai makes one per session on the host too)."""
    key = folder / "ssh_host_ed25519_key"
    if not key.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
            check=True,
            capture_output=True,
        )
    return key


def limits(slots: dict[str, str]) -> dict[str, Any]:
    """The limits bai puts on a kernel of these slots (agents/docker/containers.py)."""
    nano = int(parse_amount("cpu", slots["cpu"]) * Decimal(10**9))
    mem = int(parse_amount("mem", slots["mem"]))
    return {"nano_cpus": nano, "mem_limit": mem, "memswap_limit": mem, "pids_limit": 4096}


def wait_listening(ip: str, port: int, deadline: float) -> None:
    """Until ``ip:port`` accepts a TCP connection (what bai's ready check amounts to)."""
    while True:
        try:
            socket.create_connection((ip, port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {ip}:{port}") from None
            time.sleep(0.005)


@dataclass
class RawStart:
    """One timed raw start: seconds to ready, and what to remove afterwards."""

    seconds: float
    containers: list[str]
    network: str | None


class RawKernels:
    """Starts and removes raw clusters on one engine for one bench run."""

    def __init__(self, client: Any, image: str, run_id: str, root: Path) -> None:
        self.client = client
        self.image = image
        self.run_id = run_id
        self.root = root
        self.key = host_key(root / "ssh")
        #: The shared bridge size-1 clusters use (as bai's egress bridge), made on first use.
        self.shared = f"bai-bench-raw-{run_id}"
        self._shared_made = False
        self._shared_lock = threading.Lock()  # starts run in threads

    def _network(self, name: str) -> None:
        self.client.api.create_network(
            name, driver="bridge", labels={RAW_LABEL: self.run_id}, check_duplicate=True
        )

    def _run(self, name: str, network: str, main: bool, slots: dict[str, str]) -> tuple[str, str]:
        """Create and start one container; its id and address on ``network``."""
        if main:
            folder = self.root / "conn" / uuid.uuid4().hex
            folder.mkdir(parents=True)
            (folder / "kernel.json").write_text(json.dumps(connection_file()))
            command = ["python3", "-m", "ipykernel_launcher", "-f", "/conn/kernel.json"]
            volumes = {str(folder): {"bind": "/conn", "mode": "rw"}}
        else:
            command = [
                "sh",
                "-c",
                f"mkdir -p /run/sshd && exec /usr/sbin/sshd -D -p {SSH_PORT} -h /keys/host",
            ]
            volumes = {str(self.key): {"bind": "/keys/host", "mode": "ro"}}
        container = self.client.containers.run(
            self.image,
            command,
            name=name,
            hostname=name.rsplit("-", 1)[-1],
            detach=True,
            init=True,
            network=network,
            volumes=volumes,
            labels={RAW_LABEL: self.run_id},
            **limits(slots),
        )
        info = self.client.api.inspect_container(container.id)
        return str(container.id), str(info["NetworkSettings"]["Networks"][network]["IPAddress"])

    def start(self, size: int, slots: dict[str, str]) -> RawStart:
        """main1 and ``size - 1`` others at once, timed until each one's port accepts."""
        tag = uuid.uuid4().hex[:8]
        network: str | None = None
        hosts = ["main1", *(f"sub{i}" for i in range(1, size))]
        deadline = time.monotonic() + READY_TIMEOUT
        started = time.perf_counter()
        if size == 1:
            with self._shared_lock:
                if not self._shared_made:
                    self._network(self.shared)
                    self._shared_made = True
            where = self.shared
        else:
            network = where = f"bai-bench-raw-{tag}"
            self._network(network)
        with ThreadPoolExecutor(size) as pool:
            futures = [
                pool.submit(self._run, f"bai-bench-{tag}-{h}", where, h == "main1", slots)
                for h in hosts
            ]
            made = [f.result() for f in futures]
            ports = [KERNEL_PORTS["hb"]] + [SSH_PORT] * (size - 1)
            waits = [
                pool.submit(wait_listening, ip, port, deadline)
                for (_, ip), port in zip(made, ports)
            ]
            for w in waits:
                w.result()
        seconds = time.perf_counter() - started
        return RawStart(seconds, [cid for cid, _ in made], network)

    def remove(self, start: RawStart) -> None:
        for cid in start.containers:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.client.api.remove_container(cid, force=True)
        if start.network is not None:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.client.api.remove_network(start.network)

    def sweep(self) -> int:
        """Remove whatever of this run is left (the shared bridge too); the number of
        leftovers removed (the shared bridge is no leftover)."""
        api, removed = self.client.api, 0
        for container in api.containers(all=True, filters={"label": f"{RAW_LABEL}={self.run_id}"}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                api.remove_container(container["Id"], force=True)
                removed += 1
        for network in api.networks(filters={"label": f"{RAW_LABEL}={self.run_id}"}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                api.remove_network(network["Id"])
                removed += network["Name"] != self.shared
        shutil.rmtree(self.root / "conn", ignore_errors=True)
        return removed
