"""The runtime that runs first in every kernel of a session (Backend.AI's kernel-runner).

It reads ``<config-dir>/bootstrap.json`` (built by ``bai_jupyter.cluster.bootstrap``),
writes ``environ.txt`` and ``resource.txt``, sets up passwordless SSH between the
session's kernels, starts the image's service ports, and then, by ``mode``:

* ``kernel``: supervises an ipykernel child (SIGINT interrupts it, SIGHUP restarts
  it on the same ports, SIGTERM stops it and exits 0);
* ``batch``: runs ``startup_command`` and exits with its code (124 on timeout);
* ``wait``: idles until SIGTERM/SIGINT (sub kernels, service-only sessions).

Constraints that shape the code: stdlib only and Python >= 3.9 (it runs under the
image's own ``python3``); it may be PID 1 (so it reaps orphans and forwards
signals itself); and it sits on the critical path of every session start (no
heavy imports, nothing waits that need not). Every message is one
``bai-runtime: …`` line on stderr so agents can grep container logs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from typing import IO, Any

PREFIX = "bai-runtime: "
MODES = ("kernel", "batch", "wait")
#: Seconds between SIGTERM and SIGKILL when stopping a child.
GRACE = 2.0
#: Seconds the runtime outlives an exited ipykernel, for a SIGHUP: Jupyter restarts a
#: kernel by asking it to shut down first, and only then (via the manager) sends SIGHUP.
RESTART_GRACE = 5.0
#: How long sshd may take to listen before the runtime gives up.
SSHD_READY_TIMEOUT = 5.0
#: Exit codes: bad bootstrap file, task timeout (like coreutils ``timeout``), failure.
EXIT_BAD_BOOTSTRAP = 2
EXIT_TIMEOUT = 124
EXIT_FAILURE = 1
#: Besides ``BACKENDAI_*``: the names distributed frameworks read.
EXTRA_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
#: Not copied into ``~/.ssh/environment`` (sshd and the login set them per session).
SSH_ENV_SKIP = frozenset(
    {"HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "MAIL"}
)
_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SERVICE_RE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*):(http|tcp|preopen):(\d{1,5})$")
_CONNECTION_PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


class BootstrapError(Exception):
    """The bootstrap file is missing or malformed (exit 2: a manager bug, not the user's)."""


class RuntimeFailure(Exception):
    """Preparing the kernel failed (exit 1); the message says what."""


#: Printed once SSH, config files and services are set up: the kernel is usable.
READY = "ready"


def say(message: str) -> None:
    """One flushed, prefixed line on stderr (container logs interleave many writers)."""
    sys.stderr.write(PREFIX + " ".join(message.split()) + "\n")
    sys.stderr.flush()


# --- bootstrap ------------------------------------------------------------------------------


class Bootstrap:
    """The validated contents of ``bootstrap.json``; optional keys get harmless defaults."""

    def __init__(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise BootstrapError("top level must be a JSON object")
        mode = data.get("mode")
        if mode not in MODES:
            raise BootstrapError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode: str = mode
        self.hostname: str = _opt_str(data, "hostname") or ""
        hosts = data.get("hosts") or ([self.hostname] if self.hostname else [])
        if not isinstance(hosts, list) or not all(
            isinstance(h, str) and _HOST_RE.match(h) for h in hosts
        ):
            raise BootstrapError(f"hosts must be a list of host names, not {hosts!r}")
        self.hosts: list[str] = hosts
        resources = data.get("resources") or {}
        if not isinstance(resources, dict) or not all(
            isinstance(v, (str, int, float)) for v in resources.values()
        ):
            raise BootstrapError("resources must be an object of slot: amount")
        self.resources: dict[str, Any] = resources
        self.startup_command: str | None = _opt_str(data, "startup_command")
        if mode == "batch" and not (self.startup_command or "").strip():
            raise BootstrapError("batch mode needs a non-empty startup_command")
        timeout = data.get("batch_timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
        ):
            raise BootstrapError(f"batch_timeout must be seconds >= 0 or null, not {timeout!r}")
        self.batch_timeout: float | None = timeout or None
        ports = data.get("service_ports") or []
        if not isinstance(ports, list) or not all(
            isinstance(p, str) and _SERVICE_RE.match(p) for p in ports
        ):
            raise BootstrapError(f"service_ports must be 'name:proto:port' strings, not {ports!r}")
        self.service_ports: list[str] = ports
        self.connection: dict[str, Any] | None = _opt_dict(data, "connection")
        if mode == "kernel":
            conn = self.connection
            if conn is None:
                raise BootstrapError("kernel mode needs the Jupyter connection info")
            bad = [k for k in _CONNECTION_PORTS if not _is_port(conn.get(k))]
            if bad:
                raise BootstrapError(f"connection needs integer ports: {', '.join(bad)}")
            if not isinstance(conn.get("key"), str):
                raise BootstrapError("connection needs a string key")
        self.ssh: dict[str, Any] | None = _opt_dict(data, "ssh")
        if self.ssh is not None:
            keys = ("private_key", "public_key", "host_private_key", "host_public_key")
            if not _is_port(self.ssh.get("port")) or not all(
                isinstance(self.ssh.get(k), str) and self.ssh[k].strip() for k in keys
            ):
                raise BootstrapError(f"ssh needs an integer port and {', '.join(keys)}")
            if len(self.ssh["host_public_key"].split()) < 2:
                raise BootstrapError("ssh.host_public_key must be 'TYPE BASE64 [COMMENT]'")

    @classmethod
    def load(cls, path: Path) -> Bootstrap:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise BootstrapError(f"cannot read {path}: {e.strerror or e}") from e
        try:
            data = json.loads(text)
        except ValueError as e:
            raise BootstrapError(f"{path} is not valid JSON: {e}") from e
        try:
            return cls(data)
        except BootstrapError as e:
            raise BootstrapError(f"{path}: {e}") from e


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise BootstrapError(f"{key} must be a string or null, not {value!r}")
    return value


def _opt_dict(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise BootstrapError(f"{key} must be an object or null, not {value!r}")
    return value


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


# --- files ----------------------------------------------------------------------------------


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` with ``mode`` from the first byte (private keys never sit world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), mode)  # O_CREAT's mode is ignored for an existing file
        f.write(text)


def environ_text(env: dict[str, str]) -> str:
    """``environ.txt``: the cluster variables, sorted ``KEY=VALUE`` lines (Backend.AI's format)."""
    lines = sorted(
        f"{k}={v}" for k, v in env.items() if k.startswith("BACKENDAI_") or k in EXTRA_ENV
    )
    return "".join(line + "\n" for line in lines)


def resource_text(resources: dict[str, Any]) -> str:
    """``resource.txt``: one ``slot=amount`` line per slot, sorted."""
    return "".join(f"{slot}={resources[slot]}\n" for slot in sorted(resources))


# --- SSH ------------------------------------------------------------------------------------


def ssh_config_text(port: int) -> str:
    """Client config: every host on the session port, our key, known hosts only, quiet."""
    return (
        "Host *\n"
        f"    Port {port}\n"
        "    IdentityFile ~/.ssh/id_ed25519\n"
        "    IdentitiesOnly yes\n"
        "    StrictHostKeyChecking yes\n"
        "    UserKnownHostsFile ~/.ssh/known_hosts\n"
        "    CheckHostIP no\n"
        "    LogLevel ERROR\n"
    )


def known_hosts_text(hosts: list[str], host_public_key: str, port: int) -> str:
    """Every kernel shares the session's host key, so one line per host pins them all."""
    key = " ".join(host_public_key.split()[:2])
    return "".join(f"[{h}]:{port},{h} {key}\n" for h in hosts)


def ssh_environment_text(env: dict[str, str]) -> str:
    """``~/.ssh/environment``: ``ssh sub1 cmd`` sees the kernel's PATH and cluster variables."""
    return "".join(
        f"{k}={v}\n"
        for k, v in sorted(env.items())
        if k not in SSH_ENV_SKIP and not k.startswith("SSH_") and "\n" not in v and "=" not in k
    )


def _key_text(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"  # OpenSSH rejects keys without it


def install_ssh(
    ssh: dict[str, Any],
    hosts: list[str],
    config_dir: Path,
    home: Path,
    etc_ssh: Path = Path("/etc/ssh"),
    env: dict[str, str] | None = None,
) -> Path:
    """Write the session's keys for the user in ``home`` and for sshd; return the host key path.

    Paths are parameters so tests can aim at a temporary directory; in a container
    ``home`` is root's home and ``etc_ssh`` is ``/etc/ssh``.
    """
    port: int = ssh["port"]
    private, public = _key_text(ssh["private_key"]), _key_text(ssh["public_key"])
    cfg_ssh = config_dir / "ssh"
    cfg_ssh.mkdir(parents=True, exist_ok=True)
    write_file(cfg_ssh / "id_ed25519", private, 0o600)
    write_file(cfg_ssh / "id_ed25519.pub", public)

    dot_ssh = home / ".ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True)
    dot_ssh.chmod(0o700)  # sshd's StrictModes refuses keys under a group/world-writable dir
    write_file(dot_ssh / "id_ed25519", private, 0o600)
    write_file(dot_ssh / "id_ed25519.pub", public)
    write_file(dot_ssh / "authorized_keys", public, 0o600)
    write_file(dot_ssh / "config", ssh_config_text(port), 0o600)
    write_file(dot_ssh / "known_hosts", known_hosts_text(hosts, ssh["host_public_key"], port))
    write_file(dot_ssh / "environment", ssh_environment_text(env or {}), 0o600)

    etc_ssh.mkdir(parents=True, exist_ok=True)
    host_key = etc_ssh / "ssh_host_ed25519_key"
    write_file(host_key, _key_text(ssh["host_private_key"]), 0o600)
    write_file(etc_ssh / "ssh_host_ed25519_key.pub", _key_text(ssh["host_public_key"]))
    return host_key


class SSHD:
    """The sshd daemon: started early, checked late, so the kernel need not wait for it."""

    def __init__(
        self, port: int, host_key: Path, sshd: str, run_dir: Path, log_file: Path | None
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)  # privilege separation directory
        run_dir.chmod(0o755)
        self.port = port
        argv = [
            sshd,
            "-p",
            str(port),
            "-h",
            str(host_key),
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "PermitRootLogin=prohibit-password",
            "-o",
            "UsePAM=no",
            "-o",
            "PermitUserEnvironment=yes",
        ]
        if log_file is not None:
            argv += ["-E", str(log_file)]
        try:
            # It daemonizes: this child exits once config and keys are loaded.
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as e:
            raise RuntimeFailure(f"cannot start sshd ({sshd}): {e.strerror or e}") from e

    def wait_ready(self, timeout: float = SSHD_READY_TIMEOUT) -> None:
        """Raise unless sshd's launcher exited 0 and the port accepts connections."""
        import socket  # only SSH-enabled kernels pay for it

        deadline = time.monotonic() + timeout
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise RuntimeFailure(f"sshd did not start within {timeout:g} s") from None
        if self.proc.returncode != 0:
            detail = out.decode(errors="replace").strip() or "no output"
            raise RuntimeFailure(f"sshd failed to start (exit {self.proc.returncode}): {detail}")
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise RuntimeFailure(
                        f"sshd is not listening on port {self.port}: {e.strerror or e}"
                    ) from None
                time.sleep(0.01)
        say(f"sshd listening on port {self.port}")


# --- processes ------------------------------------------------------------------------------


def exit_code(returncode: int) -> int:
    """A shell-style exit code: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    """Signal the child's whole process group (it and whatever it spawned), like Jupyter."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)


class Supervisor:
    """One loop for signals and child exits, without threads, so it also works as PID 1.

    Signal handlers only record the signal; ``signal.set_wakeup_fd`` wakes the
    ``select`` in :meth:`wait`, so no signal or child exit is missed between checks.
    As PID 1 it reaps every orphan (``waitpid(-1)``) and hands our children's
    statuses to their ``Popen`` objects.
    """

    def __init__(self) -> None:
        self.reap_all = os.getpid() == 1
        self.children: dict[int, subprocess.Popen[Any]] = {}
        self._signals: list[int] = []
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    def take_signals(self) -> list[int]:
        signals, self._signals = self._signals, []
        return signals

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a child in its own session: signals reach it only through us."""
        proc: subprocess.Popen[Any] = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.children[proc.pid] = proc
        return proc

    def reap(self) -> None:
        if not self.reap_all:
            for proc in list(self.children.values()):
                proc.poll()
            return
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.get(pid)
            if child is not None and child.returncode is None:
                child.returncode = os.waitstatus_to_exitcode(status)

    def _sleep(self, timeout: float | None) -> None:
        """Sleep until the wake-up pipe has bytes (a signal came) or ``timeout`` passes."""
        select.select([self._wake_r], [], [], timeout)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 512):
                pass

    def wait(self, timeout: float | None) -> None:
        """Block until a signal arrives, a child exits, or ``timeout`` seconds pass."""
        self.reap()
        if not self._signals:
            self._sleep(timeout)
        self.reap()

    def stop(self, proc: subprocess.Popen[Any], grace: float = GRACE) -> None:
        """SIGTERM the child's group, SIGKILL after ``grace``; signals meanwhile stay queued."""
        signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        killed = False
        while True:
            self.reap()
            if proc.returncode is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0 and not killed:
                signal_group(proc, signal.SIGKILL)
                killed = True
            # Signals queue in self._signals; only the wake-up bytes are drained here.
            self._sleep(None if killed else left)
        # Stragglers in the group may hold the kernel's inherited sockets: end them too.
        signal_group(proc, signal.SIGKILL)

    def terminate_all(self) -> None:
        """SIGTERM whatever is still running (services); used on the way out, no waiting."""
        for proc in self.children.values():
            if proc.returncode is None:
                signal_group(proc, signal.SIGTERM)


# --- service ports --------------------------------------------------------------------------


_stdout_lock = threading.Lock()


def _pump(name: str, stream: IO[bytes]) -> None:
    """Copy a service's output to our stdout, each line prefixed with ``[name]``."""
    prefix = f"[{name}] ".encode()
    out = sys.stdout.buffer
    for line in iter(stream.readline, b""):
        with _stdout_lock:
            out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            out.flush()
    stream.close()


def _fill(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def start_services(
    sup: Supervisor, service_ports: list[str], defs_dir: Path, work_dir: Path, python: str
) -> list[threading.Thread]:
    """Start every declared service that has a Backend.AI service definition in the image.

    A definition is ``{"command": [...], "env": {...}}`` where ``${ports[0]}`` stands for
    the port and ``${runtime_path}`` for the image's Python (Backend.AI's placeholders).
    Services without one are the user's to start; a broken one is reported and
    skipped rather than failing the whole session.
    """
    pumps: list[threading.Thread] = []
    for spec in service_ports:
        match = _SERVICE_RE.match(spec)
        if match is None:
            continue
        name, _proto, port = match.groups()
        path = defs_dir / f"{name}.json"
        if not path.is_file():
            continue
        try:
            definition = json.loads(path.read_text(encoding="utf-8"))
            command = definition["command"]
            extra = definition.get("env") or {}
            if not (
                isinstance(command, list)
                and command
                and all(isinstance(c, str) for c in command)
                and isinstance(extra, dict)
                and all(isinstance(v, str) for v in extra.values())
            ):
                raise ValueError("needs a command list of strings and an env of strings")
        except (OSError, ValueError, KeyError, TypeError) as e:
            say(f"service {name}: bad definition {path}: {e}")
            continue
        values = {"${ports[0]}": port, "${runtime_path}": python}
        env = dict(os.environ)
        env.update({k: _fill(v, values) for k, v in extra.items()})
        argv = [_fill(c, values) for c in command]
        try:
            proc = sup.spawn(
                argv,
                cwd=str(work_dir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as e:
            say(f"service {name}: cannot start {argv[0]}: {e.strerror or e}")
            continue
        assert proc.stdout is not None
        pump = threading.Thread(target=_pump, args=(name, proc.stdout), daemon=True)
        pump.start()
        pumps.append(pump)
        say(f"service {name} started on port {port} (pid {proc.pid})")
    return pumps


# --- modes ----------------------------------------------------------------------------------


def run_kernel(
    sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, sshd: SSHD | None
) -> int:
    """Supervise an ipykernel: INT interrupts, HUP restarts on the same ports, TERM ends."""
    connection = dict(boot.connection or {})
    connection["ip"] = args.kernel_ip
    kernel_file = Path(args.config_dir) / "kernel.json"
    argv = [args.python, "-m", "ipykernel_launcher", "-f", str(kernel_file)]

    def start() -> subprocess.Popen[Any]:
        # Rewritten each time: ipykernel rewrites it at start, so it must stay writable.
        write_file(kernel_file, json.dumps(connection, indent=2) + "\n", 0o600)
        try:
            return sup.spawn(argv, cwd=args.work_dir, stdin=subprocess.DEVNULL)
        except OSError as e:
            raise RuntimeFailure(f"cannot start the kernel ({args.python}): {e}") from e

    kernel = start()
    say(f"kernel started (pid {kernel.pid})")
    if sshd is not None:
        try:
            sshd.wait_ready()
        except RuntimeFailure:
            sup.stop(kernel, grace=0)
            raise
    say(READY)
    exited_at: float | None = None
    while True:
        for signum in sup.take_signals():
            if signum == signal.SIGINT:
                signal_group(kernel, signal.SIGINT)
                say("interrupt sent to the kernel")
            elif signum == signal.SIGHUP:
                sup.stop(kernel)
                kernel, exited_at = start(), None
                say(f"kernel restarted (pid {kernel.pid})")
            elif signum == signal.SIGTERM:
                sup.stop(kernel)
                say("kernel stopped")
                return 0
        if kernel.returncode is not None:
            if exited_at is None:
                say(f"kernel exited with code {kernel.returncode}")
                exited_at = time.monotonic()
            left = exited_at + RESTART_GRACE - time.monotonic()
            if left <= 0:
                return exit_code(kernel.returncode)
            sup.wait(left)
            continue
        sup.wait(None)


def run_batch(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, sshd: SSHD | None) -> int:
    """Run the batch command; its exit code is the session's result."""
    if sshd is not None:
        sshd.wait_ready()  # the command may ssh right away; a dead sshd must stop it first
    say(READY)
    command = boot.startup_command or ""
    try:
        child = sup.spawn(["/bin/sh", "-c", command], cwd=args.work_dir, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise RuntimeFailure(f"cannot start the batch command: {e}") from e
    say(f"batch command started (pid {child.pid})")
    timeout = boot.batch_timeout
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        for signum in sup.take_signals():
            if signum == signal.SIGTERM:
                sup.stop(child)
                say("batch command terminated")
                return 128 + signal.SIGTERM
            signal_group(child, signum)  # INT/HUP: the command decides
        if child.returncode is not None:
            say(f"batch command exited with code {child.returncode}")
            return exit_code(child.returncode)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            say(f"task-timeout after {timeout:g} s")
            sup.stop(child)
            return EXIT_TIMEOUT
        sup.wait(left)


def run_wait(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, sshd: SSHD | None) -> int:
    """Idle (reaping orphans) until told to stop: sub kernels only host sshd and services."""
    if sshd is not None:
        sshd.wait_ready()
    say(READY)
    while True:
        signals = sup.take_signals()
        if signal.SIGTERM in signals or signal.SIGINT in signals:
            return 0
        sup.wait(None)


RUNNERS = {"kernel": run_kernel, "batch": run_batch, "wait": run_wait}


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bai-runtime", description="Prepare a bai-jupyter kernel and run it."
    )
    p.add_argument("--config-dir", default="/home/config", help="where config files go")
    p.add_argument("--work-dir", default="/home/work", help="working directory of the kernel")
    p.add_argument("--bootstrap", help="bootstrap file (default: CONFIG_DIR/bootstrap.json)")
    p.add_argument("--no-ssh", action="store_true", help="skip SSH even if the bootstrap has it")
    p.add_argument(
        "--kernel-ip", default="0.0.0.0", help="address the ipykernel binds (local: 127.0.0.1)"
    )
    p.add_argument("--python", default=sys.executable, help="interpreter that runs ipykernel")
    p.add_argument(
        "--python-path",
        action="append",
        default=[],
        help="directory put on the kernel's PYTHONPATH, after the image's own (repeatable)",
    )
    p.add_argument(
        "--service-defs",
        default="/etc/backend.ai/service-defs",
        help="directory of Backend.AI service definitions",
    )
    p.add_argument("--ssh-home", default=None, help="home to install SSH keys in (default: ~)")
    p.add_argument("--ssh-etc", default="/etc/ssh", help="where sshd's host key goes")
    p.add_argument("--sshd", default="/usr/sbin/sshd", help="sshd binary (absolute path)")
    p.add_argument("--sshd-run-dir", default="/run/sshd", help="sshd privilege separation dir")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the runtime; returns the process exit code."""
    args = parse_args(argv)
    sup = Supervisor()  # handlers first: a signal during set-up must not orphan children
    config_dir, work_dir = Path(args.config_dir), Path(args.work_dir)
    try:
        boot = Bootstrap.load(Path(args.bootstrap or config_dir / "bootstrap.json"))
    except BootstrapError as e:
        say(f"bad bootstrap: {e}")
        return EXIT_BAD_BOOTSTRAP
    pumps: list[threading.Thread] = []
    try:
        config_dir.mkdir(parents=True, exist_ok=True)
        work_dir.mkdir(parents=True, exist_ok=True)
        if args.python_path:  # e.g. bai_jupyter for %bai, after whatever the image set
            paths = [os.environ.get("PYTHONPATH", ""), *args.python_path]
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env = dict(os.environ)
        write_file(config_dir / "environ.txt", environ_text(env))
        write_file(config_dir / "resource.txt", resource_text(boot.resources))
        sshd = None
        if boot.ssh is not None and not args.no_ssh:
            home = Path(args.ssh_home) if args.ssh_home else Path.home()
            host_key = install_ssh(boot.ssh, boot.hosts, config_dir, home, Path(args.ssh_etc), env)
            sshd = SSHD(
                boot.ssh["port"],
                host_key,
                args.sshd,
                Path(args.sshd_run_dir),
                config_dir / "ssh" / "sshd.log",
            )
        pumps = start_services(
            sup, boot.service_ports, Path(args.service_defs), work_dir, args.python
        )
        return RUNNERS[boot.mode](sup, boot, args, sshd)
    except RuntimeFailure as e:
        say(str(e))
        return EXIT_FAILURE
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        say(f"set-up failed{where}: {e.strerror or e}")
        return EXIT_FAILURE
    finally:
        sup.terminate_all()
        deadline = time.monotonic() + 0.5  # let services' last lines reach the log
        for pump in pumps:
            pump.join(max(0.0, deadline - time.monotonic()))
