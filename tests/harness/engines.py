"""Several Docker engines as several hosts, on one machine: a real Swarm for multi-node tests.

Each engine (a *node*) runs its own ``dockerd`` in a network namespace of its own
(``nsenter --net`` + ``unshare --uts --mount``, not ``ip netns exec``, which hides
the cgroup mounts), with its own data root, exec root, pidfile, socket, cgroup
parent, hostname and a private ``/etc/docker`` (else all engines share one key and
one engine ID). The nodes' ``eth0`` are joined on a bridge inside a namespace of
its own (in the host's, the default engine's FORWARD DROP policy would drop their
traffic), on a private /24 from the benchmarking range (198.18.0.0/15). A veth from
the host into that namespace, with the /24's first address, lets this host reach
the nodes (the manager reaches main1's published ports, kernels reach the manager
back); the nodes get no default route, so they reach nothing else.

The default engine and the host's own network are left alone (only that veth is
added, and removed again). Data roots are kept under
``/var/lib/bai-jupyter-test-engines/<slot>/`` between runs, so the kernel image is
copied in once (``docker save`` streamed into ``docker load``); the Swarm is formed
afresh every run. A slot is a lock file: two test runs on one machine take
different slots (different namespaces, addresses and data roots).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker.errors
from docker.client import DockerClient

_SDKClient: Any = DockerClient

#: Kept between runs: each node's data root (its image store) per slot.
STATE_ROOT = Path("/var/lib/bai-jupyter-test-engines")
#: Gone at reboot: sockets, exec roots, pidfiles, logs, slot locks.
RUN_ROOT = Path("/run/bai-test-engines")
SLOTS = 4
#: Tags of images a test made on one node only (removed at every bring-up).
TEST_REPO = "bai-test/copied"


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")


def _quiet(*cmd: str) -> None:
    subprocess.run(cmd, capture_output=True, check=False)


@dataclass
class Node:
    """One engine: its namespace, address, directories and process."""

    slot: int
    index: int
    address: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def netns(self) -> str:
        return f"bai-t{self.slot}-{self.name}"

    @property
    def data(self) -> Path:
        return STATE_ROOT / str(self.slot) / self.name

    @property
    def run_dir(self) -> Path:
        return RUN_ROOT / str(self.slot) / self.name

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def exec_root(self) -> Path:
        return self.run_dir / "exec"

    def client(self, timeout: float = 120) -> Any:
        return _SDKClient(base_url=self.endpoint, timeout=timeout)

    def answers(self) -> bool:
        """Whether its API answers a ping (a raw request: the SDK leaks a socket when the
        engine is not there yet)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(str(self.socket))
                sock.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                return sock.recv(64).startswith(b"HTTP/1.0 200")
        except OSError:
            return False

    def start(self, timeout: float = 60, extra: str = "") -> None:
        """Start its dockerd (``extra``: more of its options) and wait until it answers."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        etc = self.data / "etc-docker"
        etc.mkdir(parents=True, exist_ok=True)
        # Stale pidfiles (a crashed engine's, or its containerd's: a zombie keeps the
        # pid alive a moment) make the new one wait or refuse.
        for stale in (self.run_dir / "docker.pid", self.exec_root / "containerd/containerd.pid"):
            stale.unlink(missing_ok=True)
        script = (
            f"mount --bind {etc} /etc/docker && hostname {self.netns} && exec dockerd "
            f"--data-root {self.data / 'data'} --exec-root {self.exec_root} "
            f"--pidfile {self.run_dir / 'docker.pid'} -H {self.endpoint} "
            f"--cgroup-parent {self.netns} --log-level warn {extra}"
        )
        log: IO[bytes]
        with (self.run_dir / "dockerd.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *("nsenter", f"--net=/run/netns/{self.netns}"),
                    *("unshare", "--uts", "--mount", "sh", "-c", script),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.run_dir / "dockerd.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"engine {self.name} did not start:\n{tail}")
            time.sleep(0.1)

    def crash(self) -> None:
        """Kill the engine as its machine dying would: dockerd (SIGKILL), its containerd
        and shims, and its containers' processes."""
        pids: list[int] = []
        with contextlib.suppress(Exception):
            if not self.answers():
                raise OSError("not running")
            client = self.client(timeout=5)
            for container in client.api.containers():
                pids.append(int(client.api.inspect_container(container["Id"])["State"]["Pid"]))
            client.close()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        marker = str(self.exec_root).encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if marker in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    @property
    def link(self) -> tuple[str, str]:
        """The switch's namespace and its end of the node's link."""
        return f"bai-t{self.slot}-switch", f"n{self.index}"

    def die_hard(self) -> None:
        """Its machine dies without a word (power lost): the link is cut first, so no FIN or
        RST of its connections reaches a peer, then every process goes (:meth:`crash`) and
        the namespace's TCP state with them (a rebooted machine remembers no connection;
        else a FIN sent again later would tell the peers). Back with :meth:`boot`."""
        switch, end = self.link
        _run("ip", "-n", switch, "link", "set", end, "down")
        self.crash()
        _run("nsenter", f"--net=/run/netns/{self.netns}", "ss", "-K", "-ta")

    def boot(self, extra: str = "") -> None:
        """After :meth:`die_hard`: the link is back and the engine starts again."""
        switch, end = self.link
        _run("ip", "-n", switch, "link", "set", end, "up")
        self.start(extra=extra)

    def stop(self) -> None:
        """Stop dockerd cleanly (SIGTERM; SIGKILL after 20 s)."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.crash()
        self.proc = None


@dataclass
class Engines:
    """The nodes, the host's address on their /24, and the slot's lock."""

    slot: int
    host_address: str
    nodes: list[Node]
    lock: IO[bytes] | None = None
    #: Engines started beside the Swarm but not in it (an agent that cannot take part).
    outside: list[Node] = field(default_factory=list)
    #: Where the bridge joining the nodes lives.
    switch: str = ""
    host_link: str = ""

    @property
    def every_node(self) -> list[Node]:
        return [*self.nodes, *self.outside]

    def agent(self, node: Node, slots: dict[str, Any], **options: Any) -> dict[str, Any]:
        """A ``BaiSessionManager.agents`` entry: ports published on the node's address,
        kernels calling the manager back at the host's."""
        return {
            "id": node.name,
            "backend": "docker",
            "endpoint": node.endpoint,
            "address": node.address,
            "manager_address": self.host_address,
            "slots": slots,
            **options,
        }

    def agents(self, slots: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
        """One agent entry per node of the Swarm."""
        return [self.agent(node, slots, **options) for node in self.nodes]


def _take_slot() -> tuple[int, IO[bytes]]:
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    for slot in range(SLOTS):
        lock = (RUN_ROOT / f"slot-{slot}.lock").open("wb")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return slot, lock
    raise RuntimeError(f"all {SLOTS} engine slots are taken by other test runs")


def _wipe_network(engines: Engines) -> None:
    """Remove the slot's namespaces and host veth (a crashed run's too)."""
    _quiet("ip", "link", "del", engines.host_link)
    for name in [engines.switch, *(node.netns for node in engines.every_node)]:
        _quiet("ip", "netns", "del", name)


def _kill_stale(engines: Engines) -> None:
    """A crashed run's engines in this slot (we hold its lock: nobody else uses them)."""
    for node in engines.every_node:
        pidfile = node.run_dir / "docker.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        node.crash()


def _make_network(engines: Engines) -> None:
    sw = engines.switch
    _run("ip", "netns", "add", sw)
    _run("ip", "-n", sw, "link", "set", "lo", "up")
    _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
    _run("ip", "-n", sw, "link", "set", "br0", "up")
    # The host's veth: routed (an address on the /24), not bridged in the host.
    _run(
        "ip", "link", "add", engines.host_link, "type", "veth", "peer", "name", "host", "netns", sw
    )
    _run("ip", "-n", sw, "link", "set", "host", "master", "br0", "up")
    _run("ip", "addr", "add", f"{engines.host_address}/24", "dev", engines.host_link)
    _run("ip", "link", "set", engines.host_link, "up")
    for node in engines.every_node:
        ns = node.netns
        _run("ip", "netns", "add", ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        link = f"n{node.index}"
        _run(
            "ip", "-n", sw, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns
        )
        _run("ip", "-n", sw, "link", "set", link, "master", "br0", "up")
        _run("ip", "-n", ns, "addr", "add", f"{node.address}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")


def _clean_engine(node: Node) -> None:
    """What a crashed run left: its containers, and images tagged by a test."""
    client = node.client()
    try:
        for container in client.api.containers(all=True):
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(container["Id"], force=True, v=True)
        for image in client.api.images(name=TEST_REPO):
            for tag in image.get("RepoTags") or []:
                with contextlib.suppress(docker.errors.APIError):
                    client.api.remove_image(tag, noprune=True)
        with contextlib.suppress(docker.errors.APIError):
            client.api.prune_networks()
    finally:
        client.close()


def copy_image(source: Any, target: Any, image: str) -> None:
    """``docker save`` streamed into ``docker load`` (no file in between)."""
    for line in target.api.load_image(source.api.get_image(image, chunk_size=1 << 20)):
        if isinstance(line, dict) and line.get("error"):
            raise RuntimeError(f"loading {image}: {line['error']}")


def commit_payload(client: Any, base: str, megabytes: int, image: str) -> None:
    """Commit ``image`` (``repo:tag``) on ``client``'s engine: ``base`` plus one layer of
    its own, ``megabytes`` of random bytes that no other image holds."""
    repository, tag = image.rsplit(":", 1)
    made = client.api.create_container(
        base,
        command=["sh", "-c", f"head -c {megabytes}M /dev/urandom > /opt/bai-test-payload"],
        network_disabled=True,
    )
    try:
        client.api.start(made["Id"])
        client.api.wait(made["Id"])
        client.api.commit(made["Id"], repository=repository, tag=tag)
    finally:
        client.api.remove_container(made["Id"], force=True)


def ensure_image(node: Node, image: str) -> None:
    """The kernel image on the node, copied from the default engine when it is missing
    or differs."""
    default = _SDKClient.from_env(timeout=300)
    client = node.client(timeout=300)
    try:
        want = default.api.inspect_image(image)["Id"]
        try:
            have = client.api.inspect_image(image)["Id"]
        except docker.errors.ImageNotFound:
            have = None
        if have != want:
            copy_image(default, client, image)
    finally:
        client.close()
        default.close()


def _form_swarm(engines: Engines) -> None:
    first, *rest = engines.nodes
    manager = first.client()
    try:
        manager.api.init_swarm(
            advertise_addr=first.address,
            listen_addr=f"{first.address}:2377",
            force_new_cluster=False,
        )
        token = manager.api.inspect_swarm()["JoinTokens"]["Worker"]
        for node in rest:
            client = node.client()
            try:
                client.api.join_swarm(
                    [f"{first.address}:2377"],
                    token,
                    listen_addr=f"{node.address}:2377",
                    advertise_addr=node.address,
                )
            finally:
                client.close()
        deadline = time.monotonic() + 30
        while True:
            ready = [n for n in manager.api.nodes() if n["Status"]["State"] == "ready"]
            if len(ready) == len(engines.nodes):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Swarm has {len(ready)} ready nodes, not {len(engines.nodes)}"
                )
            time.sleep(0.2)
    finally:
        manager.close()


def _parallel(jobs: list[Any]) -> None:
    """Run ``jobs`` (callables) in threads; raise the first failure once all ended."""
    errors: list[BaseException] = []

    def run(job: Any) -> None:
        try:
            job()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@dataclass
class SSHLogin:
    """An sshd on a node that relays a login to the node's engine, and the client's side."""

    #: The agent's endpoint: ``ssh://root@ADDRESS``.
    endpoint: str
    #: A home directory with ``.ssh/id_ed25519`` and ``.ssh/known_hosts`` for that login.
    home: Path
    #: The listening sshd (as root's shell runs it in the node's namespace).
    proc: subprocess.Popen[bytes]

    def drop_connections(self, strict: bool = True, relays_only: bool = False) -> None:
        """End every connection, as a reboot of the engine's machine would (the listener
        stays): SIGKILL to the listener's descendants. ``strict``: there must be one.
        ``relays_only``: only the ``docker system dial-stdio`` relays (the channels end,
        the SSH connections stay)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry.name))
        todo, found = [self.proc.pid], []
        while todo:
            found += (kids := children.get(todo.pop(), []))
            todo += kids
        if relays_only:
            found = [pid for pid in found if b"dial-stdio" in _cmdline(pid)]
        if strict and not found:
            raise RuntimeError("no SSH connection to drop")
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path`` (no passphrase); its public line."""
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))
    return path.with_suffix(".pub").read_text().strip()


@contextlib.contextmanager
def ssh_login(node: Node, folder: Path) -> Iterator[SSHLogin]:
    """OpenSSH's sshd in ``node``'s network namespace on its address, port 22: one key may
    log in as root, and only to run ``docker system dial-stdio`` against the node's engine
    (a forced command, as docs/multinode.md advises); the client's key and known_hosts
    are under ``SSHLogin.home``."""
    home = folder / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    host_public = _keygen(folder / "host_key", "bai-test-host")
    client_public = _keygen(home / ".ssh" / "id_ed25519", "bai-test-manager")
    dial = f"docker -H {node.endpoint} system dial-stdio"
    (folder / "authorized_keys").write_text(f'command="{dial}",restrict {client_public}\n')
    (home / ".ssh" / "known_hosts").write_text(f"{node.address} {host_public}\n")
    config = folder / "sshd_config"
    config.write_text(
        f"ListenAddress {node.address}:22\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile none\nUsePAM no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nLogLevel VERBOSE\n"
        # bash runs the forced command and, started by sshd as a top-level shell, would
        # read root's ~/.bashrc first (this machine's may run pyenv, which waits on a
        # lock): at level 2 it does not.
        "SetEnv SHLVL=1\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
    log = (folder / "sshd.log").open("wb")
    proc = subprocess.Popen(
        [
            *("nsenter", f"--net=/run/netns/{node.netns}"),
            *("/usr/sbin/sshd", "-D", "-e", "-f", str(config)),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    login = SSHLogin(f"ssh://root@{node.address}", home, proc)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((node.address, 22), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"sshd on {node.name} did not listen: {(folder / 'sshd.log').read_text()}"
                    ) from None
                time.sleep(0.05)
        yield login
    finally:
        login.drop_connections(strict=False)  # a connection's sshd outlives the listener
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@dataclass
class Registry:
    """Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1:5000 in one node's
    network namespace: that node's engine pulls from it over loopback, which Docker
    trusts without TLS. Its storage is kept between runs (under the slot's data roots),
    so an image is pushed once."""

    node: Node
    storage: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    ADDRESS = "127.0.0.1:5000"

    def start(self) -> None:
        self.storage.mkdir(parents=True, exist_ok=True)
        config = self.log.with_name("registry.yml")
        config.write_text(
            "version: 0.1\nlog: {level: warn}\nstorage:\n  delete: {enabled: true}\n"
            f"  filesystem: {{rootdirectory: '{self.storage}'}}\nhttp: {{addr: '{self.ADDRESS}'}}\n"
        )
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *("nsenter", f"--net=/run/netns/{self.node.netns}"),
                    *("docker-registry", "serve", str(config)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the registry did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        """Whether ``/v2/`` answers (asked from inside the node's namespace)."""
        url = f"http://{self.ADDRESS}/v2/"
        code = f"import urllib.request as r; r.urlopen({url!r}, timeout=1)"
        probe = ["nsenter", f"--net=/run/netns/{self.node.netns}", sys.executable, "-c", code]
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0

    def pause(self) -> None:
        """Stop it dead (SIGSTOP): connections are accepted and never answered."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def stop(self) -> None:
        """Kill it (a paused one too): the pulls it was serving fail."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def publish(self, kernel_image: str, source: Any) -> str:
        """The kernel image (from the default engine, ``source``) plus a layer of its own
        (8 MiB of random bytes) as ``127.0.0.1:5000/bai-test/pulled:…``, pushed unless the
        registry has it; the node keeps the kernel image, not that one: a pull of it
        fetches that layer only (quick; long enough to watch over a throttled link)."""
        ensure_image(self.node, kernel_image)
        name = f"{self.ADDRESS}/bai-test/pulled"
        tag = source.api.inspect_image(kernel_image)["Id"].split(":")[1][:12]
        client = self.node.client(timeout=600)
        try:
            with contextlib.suppress(docker.errors.APIError):
                client.api.inspect_distribution(f"{name}:{tag}")
                return f"{name}:{tag}"
            commit_payload(client, kernel_image, 8, f"{name}:{tag}")
            for line in client.api.push(name, tag, stream=True, decode=True):
                if line.get("error"):
                    raise RuntimeError(f"pushing {name}:{tag}: {line['error']}")
            client.api.remove_image(f"{name}:{tag}")
        finally:
            client.close()
        return f"{name}:{tag}"

    def throttle(self, rate: str = "32mbit") -> None:
        """Limit the node's loopback (the registry's only link) to ``rate`` (tc's token
        bucket): a real slow link, so a pull lasts long enough to be watched."""
        _run(
            *("ip", "netns", "exec", self.node.netns, "tc", "qdisc", "replace", "dev", "lo"),
            *("root", "tbf", "rate", rate, "burst", "128kb", "latency", "100ms"),
        )


def running_registry(engines: Engines) -> Registry:
    """A started :class:`Registry` in the namespace of the engine outside the Swarm."""
    node = engines.outside[0]
    registry = Registry(
        node, STATE_ROOT / str(engines.slot) / "registry", node.run_dir / "registry.log"
    )
    registry.start()
    return registry


def missing_tools() -> list[str]:
    """What this harness needs and the machine lacks (it needs root too)."""
    need = ["ip", "nsenter", "unshare", "dockerd", "mount"]
    return [tool for tool in need if shutil.which(tool) is None]


def bring_up(image: str, count: int = 3, outside: int = 0) -> Engines:
    """Start ``count`` engines in a Swarm, each holding ``image``, and ``outside`` more in
    no Swarm (holding no image); tear down on failure."""
    slot, lock = _take_slot()
    prefix = f"198.18.{200 + slot}"
    engines = Engines(
        slot=slot,
        host_address=f"{prefix}.1",
        nodes=[Node(slot, i, f"{prefix}.{10 + i}") for i in range(1, count + 1)],
        outside=[
            Node(slot, i, f"{prefix}.{10 + i}") for i in range(count + 1, count + outside + 1)
        ],
        lock=lock,
        switch=f"bai-t{slot}-switch",
        host_link=f"tsw{slot}h",
    )
    try:
        _kill_stale(engines)
        _wipe_network(engines)
        _make_network(engines)
        for node in engines.every_node:
            # A fresh Swarm every run: a kept one may hold stale members and networks.
            shutil.rmtree(node.data / "data" / "swarm", ignore_errors=True)
        _parallel([node.start for node in engines.every_node])
        _parallel([lambda node=node: _clean_engine(node) for node in engines.every_node])
        _parallel([lambda node=node: ensure_image(node, image) for node in engines.nodes])
        _form_swarm(engines)
    except BaseException:
        tear_down(engines)
        raise
    return engines


def tear_down(engines: Engines) -> None:
    """Leave the Swarm, stop the engines, remove the namespaces and the host's veth; the
    data roots (image stores) stay."""
    for node in engines.every_node:
        if node.proc is None:
            continue
        with contextlib.suppress(Exception):
            client = node.client(timeout=30)
            for container in client.api.containers(all=True):
                client.api.remove_container(container["Id"], force=True, v=True)
            client.api.leave_swarm(force=True)
            client.close()
    _parallel([node.stop for node in engines.every_node])
    _wipe_network(engines)
    if engines.lock is not None:
        engines.lock.close()


@contextlib.contextmanager
def running(image: str, count: int = 3, outside: int = 0) -> Iterator[Engines]:
    engines = bring_up(image, count, outside)
    try:
        yield engines
    finally:
        tear_down(engines)
