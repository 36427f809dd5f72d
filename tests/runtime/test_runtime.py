"""The in-container runtime (bai_jupyter/runtime), run as a native process on the host.

Each test starts ``python <runtime dir> --config-dir … --work-dir …`` like the local
backend does, with SSH and sshd paths aimed at temporary directories; real sshd
and containers are covered by the Docker tests.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import bai_jupyter.runtime
from bai_jupyter.runtime import config, hosts, processes, ssh

if TYPE_CHECKING:
    from jupyter_client.blocking.client import BlockingKernelClient

RUNTIME_DIR = Path(bai_jupyter.runtime.__file__).parent
HOST_KEY_PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyHostKey bai-jupyter-host\n"
USER_KEY_PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIUserKeyUserKey bai-session\n"
USER_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nuser\n-----END OPENSSH PRIVATE KEY-----"
HOST_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nhost\n-----END OPENSSH PRIVATE KEY-----\n"
SSH: dict[str, Any] = {
    "port": 2200,
    "private_key": USER_KEY,  # no final newline: the runtime adds it
    "public_key": USER_KEY_PUB,
    "host_private_key": HOST_KEY,
    "host_public_key": HOST_KEY_PUB,
}
CLUSTER_ENV = {
    "BACKENDAI_SESSION_ID": "s1",
    "BACKENDAI_CLUSTER_HOST": "main1",
    "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
    "MASTER_ADDR": "main1",
    "MASTER_PORT": "12345",
    "WORLD_SIZE": "2",
    "RANK": "0",
}


# --- helpers --------------------------------------------------------------------------------


def bootstrap(mode: str, **fields: Any) -> dict[str, Any]:
    """What ``cluster.bootstrap`` writes, with test-sized defaults."""
    data: dict[str, Any] = {
        "mode": mode,
        "hostname": "main1",
        "hosts": ["main1", "sub1"],
        "resources": {"cpu": "2", "mem": "1073741824"},
        "startup_command": None,
        "batch_timeout": None,
        "service_ports": [],
        "connection": None,
        "ssh": None,
    }
    data.update(fields)
    return data


class Runtime:
    """One runtime process with its directories and logs."""

    def __init__(
        self,
        tmp: Path,
        boot: dict[str, Any] | str | None,
        *extra: str,
        env: dict[str, str] | None = None,
        ssh: bool = False,
        module: bool = False,
        wrap: tuple[str, ...] = (),
    ) -> None:
        self.config = tmp / "config"
        self.work = tmp / "work"
        self.config.mkdir(exist_ok=True)
        if boot is not None:
            text = boot if isinstance(boot, str) else json.dumps(boot)
            (self.config / "bootstrap.json").write_text(text)
        self.out_path, self.err_path = tmp / "out.log", tmp / "err.log"
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("BACKENDAI_") and k not in config.EXTRA_ENV
        }
        entry = ["-m", "bai_jupyter.runtime"] if module else [str(RUNTIME_DIR)]
        argv = [sys.executable, *entry, "--config-dir", str(self.config)]
        argv += ["--work-dir", str(self.work), "--kernel-ip", "127.0.0.1"]
        argv += ["--service-defs", str(tmp / "service-defs")]
        if not ssh:
            argv.append("--no-ssh")
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*wrap, *argv, *extra],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env={**base, **CLUSTER_ENV, **(env or {})},
                cwd=tmp,
            )

    @property
    def out(self) -> str:
        return self.out_path.read_text()

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def wait(self, timeout: float = 20) -> int:
        return self.proc.wait(timeout)

    def wait_for(self, what: str, log: str = "err", timeout: float = 20) -> None:
        """Poll a log until it contains ``what`` (the runtime says each step on stderr)."""
        deadline = time.monotonic() + timeout
        while what not in (self.err if log == "err" else self.out):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {what!r}; exit {self.proc.poll()}; stderr:\n{self.err}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def runtimes() -> Iterator[list[Runtime]]:
    """Runtimes a test started; whatever is left running is stopped afterwards."""
    started: list[Runtime] = []
    yield started
    for rt in started:
        rt.kill()


@pytest.fixture
def start(tmp_path: Path, runtimes: list[Runtime]) -> Callable[..., Runtime]:
    def start(boot: dict[str, Any] | str | None, *extra: str, **kwargs: Any) -> Runtime:
        rt = Runtime(tmp_path, boot, *extra, **kwargs)
        runtimes.append(rt)
        return rt

    return start


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- the package itself ---------------------------------------------------------------------


def test_runtime_is_stdlib_only_and_python39_syntax() -> None:
    """It runs under the image's python3 (>= 3.9) where none of our dependencies exist."""
    for path in RUNTIME_DIR.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path), feature_version=(3, 9))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "__future__", (path, name)


def test_package_entry_point_runs_too(start: Callable[..., Runtime]) -> None:
    rt = start(bootstrap("batch", startup_command="echo ok"), module=True)
    assert rt.wait() == 0
    assert rt.out == "ok\n"


# --- bootstrap, config files ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot read"),
        ("{not json", "not valid JSON"),
        ("[]", "JSON object"),
        (json.dumps({"mode": "fly"}), "mode must be"),
        (json.dumps(bootstrap("kernel")), "connection info"),
        (json.dumps(bootstrap("batch")), "startup_command"),
        (json.dumps(bootstrap("batch", startup_command="x", batch_timeout="1")), "batch_timeout"),
        (json.dumps(bootstrap("wait", service_ports=["web:ftp:80"])), "service_ports"),
        (json.dumps(bootstrap("wait", hosts=["main1", "a b"])), "hosts"),
        (json.dumps(bootstrap("wait", ssh={"port": 2200})), "ssh needs"),
    ],
)
def test_bad_bootstrap_exits_2_with_one_line(
    start: Callable[..., Runtime], content: str | None, why: str
) -> None:
    rt = start(content)
    assert rt.wait() == 2
    lines = rt.err.splitlines()
    assert len(lines) == 1, rt.err
    assert lines[0].startswith("bai-runtime: bad bootstrap: ")
    assert why in lines[0]


def test_bootstrap_option_overrides_the_path(start: Callable[..., Runtime], tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps(bootstrap("batch", startup_command="exit 0")))
    rt = start(None, "--bootstrap", str(other))
    assert rt.wait() == 0, rt.err


def test_environ_and_resource_files(start: Callable[..., Runtime]) -> None:
    rt = start(bootstrap("batch", startup_command="true"), env={"UNRELATED": "x"})
    assert rt.wait() == 0, rt.err
    assert (rt.config / "environ.txt").read_text() == (
        "BACKENDAI_CLUSTER_HOST=main1\n"
        "BACKENDAI_CLUSTER_HOSTS=main1,sub1\n"
        "BACKENDAI_SESSION_ID=s1\n"
        "MASTER_ADDR=main1\n"
        "MASTER_PORT=12345\n"
        "RANK=0\n"
        "WORLD_SIZE=2\n"
    )
    assert (rt.config / "resource.txt").read_text() == "cpu=2\nmem=1073741824\n"


LOCAL_LINES = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


@pytest.mark.parametrize("egress_first", [True, False])
def test_the_task_sees_its_hostname_only_at_its_session_network_address(
    start: Callable[..., Runtime], tmp_path: Path, egress_first: bool
) -> None:
    """Docker lists the hostname once per network, in either order; the runtime rewrites
    the file in place (Docker bind-mounts it) before the task starts."""
    name = socket.gethostname()
    lines = [f"172.30.0.2\t{name}\n", f"10.0.1.4\t{name}\n"]
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(LOCAL_LINES + "".join(lines if egress_first else lines[::-1]))
    inode = hosts_file.stat().st_ino
    rt = start(
        bootstrap("batch", startup_command=f"cat {hosts_file}"),
        *("--egress-subnet", "172.30.0.0/16", "--hosts-file", str(hosts_file)),
    )
    assert rt.wait() == 0, rt.err
    assert rt.out == hosts_file.read_text() == LOCAL_LINES + f"10.0.1.4\t{name}\n"
    assert hosts_file.stat().st_ino == inode
    assert f"{name} resolves to 10.0.1.4 (its session network)" in rt.err


def test_the_hostname_keeps_an_egress_address_that_is_its_only_one() -> None:
    """A kernel on the egress bridge alone (a session of one kernel) keeps its line, other
    names on an egress line stay, and egress addresses of either family go."""
    alone = LOCAL_LINES + "172.30.0.2\tmain1\n"
    assert hosts.without_egress(alone, "main1", ["172.30.0.0/16"]) == alone
    both = LOCAL_LINES + "172.30.0.2\tMain1 other\nfd00::2\tmain1\n10.0.1.4\tmain1\n"
    subnets = ["172.30.0.0/16", "fd00::/64"]
    assert hosts.without_egress(both, "main1", subnets) == (
        LOCAL_LINES + "172.30.0.2\tother\n10.0.1.4\tmain1\n"
    )


# --- batch ----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
def test_batch_exit_code_propagates(start: Callable[..., Runtime], code: int) -> None:
    rt = start(bootstrap("batch", startup_command=f"echo hello; pwd; exit {code}"))
    assert rt.wait() == code
    assert rt.out == f"hello\n{rt.work}\n"
    assert f"bai-runtime: batch command exited with code {code}" in rt.err


def test_batch_killed_by_signal_exits_128_plus_n(start: Callable[..., Runtime]) -> None:
    rt = start(bootstrap("batch", startup_command="kill -9 $$"))
    assert rt.wait() == 137


def test_batch_timeout(start: Callable[..., Runtime]) -> None:
    rt = start(bootstrap("batch", startup_command="sleep 30", batch_timeout=0.5))
    t0 = time.monotonic()
    assert rt.wait() == 124
    assert time.monotonic() - t0 < 5
    assert "bai-runtime: task-timeout after 0.5 s\n" in rt.err


def test_batch_timeout_kills_a_command_that_ignores_sigterm(
    start: Callable[..., Runtime],
) -> None:
    rt = start(bootstrap("batch", startup_command="trap '' TERM; sleep 30", batch_timeout=0.2))
    t0 = time.monotonic()
    assert rt.wait() == 124
    assert 0.2 + processes.GRACE - 0.1 < time.monotonic() - t0 < 8
    assert "task-timeout after 0.2 s" in rt.err


def test_batch_sigterm_terminates_command_and_exits_143(start: Callable[..., Runtime]) -> None:
    rt = start(bootstrap("batch", startup_command="touch started; exec sleep 30"))
    marker = rt.work / "started"
    deadline = time.monotonic() + 10
    while not marker.exists():
        assert time.monotonic() < deadline, rt.err
        time.sleep(0.02)
    rt.proc.send_signal(signal.SIGTERM)
    assert rt.wait(5) == 143


def _can_be_pid1() -> bool:
    try:
        probe = [*PID1, sys.executable, "-c", "import os, sys; sys.exit(os.getpid())"]
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 1
    except (OSError, subprocess.SubprocessError):
        return False


PID1 = ("unshare", "--fork", "--pid", "--mount-proc", "--kill-child")


def test_as_pid1_it_reaps_orphans_and_keeps_exit_codes(start: Callable[..., Runtime]) -> None:
    """In a container the runtime is PID 1: orphans are reparented to it and must be reaped."""
    if not _can_be_pid1():
        pytest.skip("cannot start a process as PID 1 here (unshare needs privileges)")
    command = (
        "(sleep 0.1 &); sleep 0.6; "
        "echo zombies=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == \"Z\"' | wc -l); exit 3"
    )
    rt = start(bootstrap("batch", startup_command=command), wrap=PID1)
    assert rt.wait() == 3, rt.err
    assert rt.out == "zombies=0\n"


# --- wait -----------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_wait_mode_exits_0_on_term_or_int(start: Callable[..., Runtime], signum: int) -> None:
    rt = start(bootstrap("wait"))
    rt.wait_for("bai-runtime: ready")
    rt.proc.send_signal(signal.SIGHUP)  # ignored
    time.sleep(0.1)
    assert rt.proc.poll() is None
    rt.proc.send_signal(signum)
    assert rt.wait(5) == 0


# --- service ports --------------------------------------------------------------------------


def test_services_with_a_definition_start_with_prefixed_output(
    start: Callable[..., Runtime], tmp_path: Path
) -> None:
    defs = tmp_path / "service-defs"
    defs.mkdir()
    code = "import os, sys; print('argv', sys.argv[1]); print('env', os.environ['SVC_PORT'])"
    (defs / "echo.json").write_text(
        json.dumps(
            {
                "command": ["${runtime_path}", "-c", code, "${ports[0]}"],
                "env": {"SVC_PORT": "${ports[0]}"},
            }
        )
    )
    (defs / "broken.json").write_text("{")
    ports = ["echo:http:8080", "broken:tcp:9000", "userapp:http:8888"]
    rt = start(bootstrap("wait", service_ports=ports))
    rt.wait_for("[echo] env 8080", log="out")
    rt.proc.send_signal(signal.SIGTERM)
    assert rt.wait(5) == 0
    assert "[echo] argv 8080\n" in rt.out
    assert "service echo started on port 8080" in rt.err
    assert "service broken: bad definition" in rt.err
    assert "userapp" not in rt.err  # no definition: the user starts it


# --- SSH ------------------------------------------------------------------------------------


def test_install_ssh_writes_keys_config_and_known_hosts(tmp_path: Path) -> None:
    home, etc, config = tmp_path / "root", tmp_path / "etc-ssh", tmp_path / "config"
    env = {"PATH": "/opt/conda/bin:/usr/bin", "BACKENDAI_CLUSTER_HOST": "main1", "HOME": "/x"}
    host_key = ssh.install_ssh(SSH, ["main1", "sub1", "sub2"], config, home, etc, env)

    dot = home / ".ssh"
    assert mode_of(dot) == 0o700
    assert (dot / "id_ed25519").read_text() == USER_KEY + "\n"
    assert mode_of(dot / "id_ed25519") == 0o600
    assert (dot / "id_ed25519.pub").read_text() == USER_KEY_PUB
    assert (dot / "authorized_keys").read_text() == USER_KEY_PUB
    assert mode_of(dot / "authorized_keys") == 0o600
    config_text = (dot / "config").read_text()
    assert config_text.startswith("Host *\n")
    for line in (
        "Port 2200",
        "IdentityFile ~/.ssh/id_ed25519",
        "StrictHostKeyChecking yes",
        "UserKnownHostsFile ~/.ssh/known_hosts",
        "LogLevel ERROR",
    ):
        assert f"    {line}\n" in config_text
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyHostKey"
    assert (dot / "known_hosts").read_text() == (
        f"[main1]:2200,main1 {key}\n[sub1]:2200,sub1 {key}\n[sub2]:2200,sub2 {key}\n"
    )
    environment = (dot / "environment").read_text()
    assert "PATH=/opt/conda/bin:/usr/bin\n" in environment
    assert "BACKENDAI_CLUSTER_HOST=main1\n" in environment
    assert "HOME=" not in environment

    assert host_key == etc / "ssh_host_ed25519_key"
    assert host_key.read_text() == HOST_KEY
    assert mode_of(host_key) == 0o600
    assert (etc / "ssh_host_ed25519_key.pub").read_text() == HOST_KEY_PUB
    assert (config / "ssh" / "id_ed25519").read_text() == USER_KEY + "\n"
    assert mode_of(config / "ssh" / "id_ed25519") == 0o600
    assert (config / "ssh" / "id_ed25519.pub").read_text() == USER_KEY_PUB


def test_install_ssh_tightens_existing_files(tmp_path: Path) -> None:
    dot = tmp_path / "home" / ".ssh"
    dot.mkdir(parents=True, mode=0o777)
    (dot / "id_ed25519").write_text("old")
    (dot / "id_ed25519").chmod(0o644)
    ssh.install_ssh(SSH, ["main1"], tmp_path / "c", tmp_path / "home", tmp_path / "etc")
    assert mode_of(dot) == 0o700
    assert mode_of(dot / "id_ed25519") == 0o600
    assert (dot / "id_ed25519").read_text() == USER_KEY + "\n"


def ssh_options(tmp_path: Path, sshd: str) -> list[str]:
    return [
        *("--ssh-home", str(tmp_path / "home"), "--ssh-etc", str(tmp_path / "etc-ssh")),
        *("--sshd", sshd, "--sshd-run-dir", str(tmp_path / "run-sshd")),
    ]


def test_sshd_that_fails_to_start_fails_the_runtime(
    start: Callable[..., Runtime], tmp_path: Path
) -> None:
    fake = tmp_path / "sshd"
    fake.write_text("#!/bin/sh\necho 'sshd: no hostkeys available -- exiting.' >&2\nexit 1\n")
    fake.chmod(0o755)
    rt = start(bootstrap("wait", ssh=SSH), *ssh_options(tmp_path, str(fake)), ssh=True)
    assert rt.wait() == 1
    assert (
        "bai-runtime: sshd failed to start (exit 1): sshd: no hostkeys available -- exiting.\n"
        in rt.err
    )


def test_missing_sshd_fails_the_runtime(start: Callable[..., Runtime], tmp_path: Path) -> None:
    rt = start(
        bootstrap("batch", startup_command="touch ran", ssh=SSH),
        *ssh_options(tmp_path, str(tmp_path / "no-such-sshd")),
        ssh=True,
    )
    assert rt.wait() == 1
    assert "bai-runtime: cannot start sshd" in rt.err
    assert not (rt.work / "ran").exists()


FAKE_SSHD = """\
import json, os, socket, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_SSHD_ARGS"], "w") as f:
    json.dump(args, f)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(args[args.index("-p") + 1])))
s.listen()
if os.fork():
    os._exit(0)  # daemonize like sshd: the launcher exits, the daemon listens
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
with open(os.environ["FAKE_SSHD_PID"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"""


def test_sshd_is_started_and_checked(start: Callable[..., Runtime], tmp_path: Path) -> None:
    fake = tmp_path / "sshd"
    fake.write_text(f"#!{sys.executable}\n{FAKE_SSHD}")
    fake.chmod(0o755)
    (port,) = free_ports(1)
    args_file, pid_file = tmp_path / "sshd-args.json", tmp_path / "sshd.pid"
    rt = start(
        bootstrap("wait", ssh={**SSH, "port": port}),
        *ssh_options(tmp_path, str(fake)),
        ssh=True,
        env={"FAKE_SSHD_ARGS": str(args_file), "FAKE_SSHD_PID": str(pid_file)},
    )
    try:
        rt.wait_for("bai-runtime: ready")
        assert f"bai-runtime: sshd listening on port {port}\n" in rt.err
        args = json.loads(args_file.read_text())
        assert args[:4] == ["-p", str(port), "-h", str(tmp_path / "etc-ssh/ssh_host_ed25519_key")]
        for option in ("PasswordAuthentication=no", "PermitRootLogin=prohibit-password"):
            assert option in args
        assert "UsePAM=no" in args
        assert (tmp_path / "run-sshd").is_dir()
        known = (tmp_path / "home/.ssh/known_hosts").read_text()
        assert known.startswith(f"[main1]:{port},main1 ssh-ed25519 ")
        rt.proc.send_signal(signal.SIGTERM)
        assert rt.wait(5) == 0
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


REAL_SSH_SCRIPT = """\
set -e
mount --bind "$T/root" /root
mount --bind "$T/etc-ssh" /etc/ssh
mount --bind "$T/hosts" /etc/hosts
export HOME=/root
"$PY" "$RUNTIME" --config-dir "$T/config" --work-dir "$T/work" 2>"$T/err.log" &
pid=$!
for _ in $(seq 200); do grep -q -e ready -e failed "$T/err.log" && break; sleep 0.05; done
ssh -o BatchMode=yes sub1 'echo "$BACKENDAI_CLUSTER_HOST"' </dev/null
ssh -o BatchMode=yes main1 true </dev/null
kill -TERM $pid
wait $pid
"""


@pytest.mark.slow
def test_real_sshd_gives_passwordless_ssh_between_hosts(tmp_path: Path) -> None:
    """The real sshd and ssh client with what the runtime writes, no prompt at all.

    Runs in private PID and mount namespaces with /root, /etc/ssh and /etc/hosts
    replaced, so the host's own SSH set-up is never touched.
    """
    tools = ("/usr/sbin/sshd", "ssh", "ssh-keygen", "unshare")
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools) or not _can_be_pid1():
        pytest.skip("needs root, unshare, openssh-server and openssh-client")
    for name in ("user", "host"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)],
            check=True,
        )
    ssh = {
        "port": free_ports(1)[0],
        "private_key": (tmp_path / "user").read_text(),
        "public_key": (tmp_path / "user.pub").read_text(),
        "host_private_key": (tmp_path / "host").read_text(),
        "host_public_key": (tmp_path / "host.pub").read_text(),
    }
    for d in ("root", "config", "work", "etc-ssh"):
        (tmp_path / d).mkdir()
    shutil.copy("/etc/ssh/sshd_config", tmp_path / "etc-ssh")  # sshd needs a config file
    (tmp_path / "config/bootstrap.json").write_text(json.dumps(bootstrap("wait", ssh=ssh)))
    hosts = Path("/etc/hosts").read_text() + "\n127.0.0.1 main1 sub1\n"
    (tmp_path / "hosts").write_text(hosts)
    # /root is replaced inside: the runtime and its interpreter must live elsewhere.
    pythons = [str(Path(sys.executable).resolve()), "/usr/bin/python3"]
    python = next((p for p in pythons if not p.startswith("/root/") and Path(p).exists()), None)
    if python is None:
        pytest.skip("no python3 outside /root")
    shutil.copytree(RUNTIME_DIR, tmp_path / "runtime", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, **CLUSTER_ENV, "T": str(tmp_path), "PY": python}
    env["RUNTIME"] = str(tmp_path / "runtime")
    result = subprocess.run(
        ["unshare", "--mount", *PID1[1:], "sh", "-c", REAL_SSH_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = (tmp_path / "err.log").read_text() if (tmp_path / "err.log").exists() else ""
    assert result.returncode == 0, f"{result.stdout}{result.stderr}{err}"
    assert result.stdout == "main1\n"
    assert f"bai-runtime: sshd listening on port {ssh['port']}" in err


# --- kernel ---------------------------------------------------------------------------------

HAVE_KERNEL = all(importlib.util.find_spec(m) for m in ("jupyter_client", "ipykernel"))
kernel_test = pytest.mark.skipif(
    not HAVE_KERNEL, reason="needs ipykernel and jupyter_client (the dev/lab extras)"
)


class Kernel:
    """A kernel-mode runtime and a client connected to its ipykernel."""

    def __init__(self, rt: Runtime, connection: dict[str, Any]) -> None:
        self.rt = rt
        self.connection = connection
        self.client = self.connect()

    def connect(self) -> BlockingKernelClient:
        from jupyter_client.blocking.client import BlockingKernelClient

        client = BlockingKernelClient()
        client.load_connection_info(self.connection)  # type: ignore[arg-type]
        client.start_channels()
        client.wait_for_ready(timeout=60)
        return client

    def run(self, code: str, **kwargs: Any) -> dict[str, Any]:
        """Execute ``code``; the reply's content, with the text printed as ``stdout``."""
        printed: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])

        reply = self.client.execute_interactive(code, timeout=30, output_hook=hook, **kwargs)
        content: dict[str, Any] = reply["content"]
        content["stdout"] = "".join(printed)
        return content

    def pid(self) -> int:
        return int(self.run("import os; print(os.getpid())")["stdout"])


@pytest.fixture
def kernel(start: Callable[..., Runtime]) -> Iterator[Kernel]:
    ports = free_ports(5)
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    connection: dict[str, Any] = {
        **dict(zip(names, ports)),
        "ip": "10.0.0.1",  # the runtime replaces it (--kernel-ip)
        "key": "secret-key",
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "kernel_name": "",
    }
    rt = start(bootstrap("kernel", connection=connection))
    k = Kernel(rt, {**connection, "ip": "127.0.0.1"})
    yield k
    k.client.stop_channels()


@pytest.mark.slow
@kernel_test
def test_kernel_executes_code_in_the_work_dir(kernel: Kernel) -> None:
    content = kernel.run("import os; print(os.getcwd(), 6 * 7)")
    assert content["status"] == "ok"
    assert content["stdout"] == f"{kernel.rt.work} 42\n"
    written = json.loads((kernel.rt.config / "kernel.json").read_text())
    assert written["ip"] == "127.0.0.1"
    assert written["shell_port"] == kernel.connection["shell_port"]
    assert os.access(kernel.rt.config / "kernel.json", os.W_OK)


@pytest.mark.slow
@kernel_test
def test_sigint_interrupts_the_running_cell(kernel: Kernel) -> None:
    msg_id = kernel.client.execute("import time; time.sleep(30)")
    deadline = time.monotonic() + 10
    while True:  # wait until the cell is running
        msg = kernel.client.get_iopub_msg(timeout=10)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            break
        assert time.monotonic() < deadline
    time.sleep(0.3)
    t0 = time.monotonic()
    kernel.rt.proc.send_signal(signal.SIGINT)
    reply = kernel.client.get_shell_msg(timeout=5)
    while reply["parent_header"].get("msg_id") != msg_id:  # wait_for_ready may leave extras
        reply = kernel.client.get_shell_msg(timeout=5)
    assert time.monotonic() - t0 < 2
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # ipykernel aborts requests that arrive just after an error (stop_on_error): retry.
    for _ in range(20):
        content = kernel.run("print('still here')")
        if content["status"] != "aborted":
            break
        time.sleep(0.1)
    assert content["stdout"] == "still here\n"
    assert kernel.rt.proc.poll() is None


@pytest.mark.slow
@kernel_test
def test_sighup_restarts_a_fresh_kernel_on_the_same_ports(kernel: Kernel) -> None:
    assert kernel.run("x = 41")["status"] == "ok"
    old_pid = kernel.pid()
    kernel.rt.proc.send_signal(signal.SIGHUP)
    kernel.rt.wait_for("bai-runtime: kernel restarted")
    kernel.client.stop_channels()
    kernel.client = kernel.connect()
    assert kernel.pid() != old_pid
    content = kernel.run("x")
    assert content["status"] == "error"
    assert content["ename"] == "NameError"
    written = json.loads((kernel.rt.config / "kernel.json").read_text())
    assert {k: written[k] for k in ("shell_port", "iopub_port", "hb_port")} == {
        k: kernel.connection[k] for k in ("shell_port", "iopub_port", "hb_port")
    }
    assert kernel.rt.proc.poll() is None


@pytest.mark.slow
@kernel_test
def test_sigterm_stops_the_kernel_and_exits_0(kernel: Kernel) -> None:
    pid = kernel.pid()
    kernel.rt.proc.send_signal(signal.SIGTERM)
    assert kernel.rt.wait(10) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
@kernel_test
def test_kernel_exit_code_is_the_runtime_exit_code(kernel: Kernel) -> None:
    kernel.client.execute("import os; os._exit(7)")
    assert kernel.rt.wait(20) == 7
    assert "bai-runtime: kernel exited with code 7" in kernel.rt.err


@pytest.mark.slow
@kernel_test
def test_a_kernel_that_dies_at_start_never_says_ready(
    start: Callable[..., Runtime], tmp_path: Path
) -> None:
    """Ready only once the ipykernel listens: one that dies first fails the runtime, with
    its own words on stderr (so the session fails to start and says why)."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "ipykernel_launcher.py").write_text("raise SystemExit('no driver here')\n")
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    connection = {**dict(zip(names, free_ports(5))), "key": "k", "transport": "tcp"}
    rt = start(bootstrap("kernel", connection=connection), env={"PYTHONPATH": str(broken)})
    assert rt.wait() == 1, rt.err
    assert "no driver here\n" in rt.err
    assert "bai-runtime: kernel exited with code 1 before it listened\n" in rt.err
    assert "bai-runtime: ready" not in rt.err


@pytest.mark.slow
@kernel_test
def test_the_ready_line_comes_once_the_kernel_listens(kernel: Kernel) -> None:
    """Ready is said as soon as main1's ipykernel listens (its heartbeat port), no sooner."""
    kernel.rt.wait_for("bai-runtime: ready", timeout=20)
    with socket.create_connection(("127.0.0.1", kernel.connection["hb_port"]), timeout=5):
        pass
    assert kernel.run("print(6 * 7)")["stdout"] == "42\n"
