"""Passwordless SSH between a session's kernels: keys, config, known hosts, and sshd."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .config import write_file
from .processes import RuntimeFailure
from .protocol import say

#: How long sshd may take to listen before the runtime gives up.
SSHD_READY_TIMEOUT = 5.0


#: Not copied into ``~/.ssh/environment`` (sshd and the login set them per session).
SSH_ENV_SKIP = frozenset(
    {"HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "MAIL"}
)

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    #: What a runner calls to set up SSH and the image's services: the sshd to wait for.
    SetUp = Callable[[], "SSHD | None"]


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
