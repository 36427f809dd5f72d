"""A system session's main1: an sshd that serves SFTP (and rsync) over the data folders only.

sshd runs in the foreground under the supervisor with a config of its own: one
login (``SFTP_USER``, root's uid inside the container, so files land as a
compute session's kernels write them), public keys only, chrooted to the work
directory where the session's data folders are mounted, ``internal-sftp``
forced (no shell, no commands, no TTY), and no forwarding of any kind. sshd's
own ``internal-sftp`` needs no binary in the chroot.

rsync cannot run in that chroot (its binary and libraries are not there), so a
second login, ``RSYNC_USER`` (same key, same uid), runs one fixed command: rsync's
daemon over SSH (``rsync host::module`` with ``-e ssh``), which chroots itself to
the work directory once loaded (``use chroot``: symlinks there cannot lead out)
and serves one module, ``RSYNC_MODULE``. The client's command is never run and
the daemon runs no command of its own; an image without rsync says so instead.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from .config import Bootstrap, write_file
from .processes import RuntimeFailure, Supervisor, exit_code
from .protocol import READY, RSYNC_MODULE, RSYNC_USER, WORK_DIR, say

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    import argparse

    from .ssh import SetUp

#: How long sshd may take to listen before the runtime gives up.
READY_TIMEOUT = 10.0
#: Login shells tried for the SFTP user, in order (sshd refuses a user without one).
_NO_LOGIN = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


def sshd_config_text(
    port: int, host_key: Path, authorized_keys: Path, user: str, root: str, rsync: Path
) -> str:
    """sshd_config for SFTP only: keys only, chrooted, internal-sftp forced, no forwarding;
    the rsync login runs ``rsync`` (see :func:`rsync_login_text`) and nothing else."""
    return (
        f"Port {port}\n"
        f"HostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized_keys}\n"
        f"AllowUsers {user} {RSYNC_USER}\n"
        "PidFile none\n"
        "UsePAM no\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitEmptyPasswords no\n"
        "PermitRootLogin prohibit-password\n"
        "StrictModes yes\n"
        f"ChrootDirectory {root}\n"
        "ForceCommand internal-sftp -d /\n"
        "Subsystem sftp internal-sftp\n"
        "DisableForwarding yes\n"
        "AllowTcpForwarding no\n"
        "AllowStreamLocalForwarding no\n"
        "AllowAgentForwarding no\n"
        "X11Forwarding no\n"
        "PermitTunnel no\n"
        "GatewayPorts no\n"
        "PermitTTY no\n"
        "PermitUserRC no\n"
        "PermitUserEnvironment no\n"
        "LogLevel VERBOSE\n"
        f"Match User {RSYNC_USER}\n"
        "    ChrootDirectory none\n"
        f"    ForceCommand {rsync}\n"
    )


def rsyncd_config_text(root: str) -> str:
    """rsyncd.conf: one writable module, the work directory, chrooted by rsync itself."""
    return (
        "use chroot = yes\n"
        "numeric ids = yes\n"
        "reverse lookup = no\n"
        "uid = 0\n"
        "gid = 0\n"
        "log file = /dev/null\n"
        f"[{RSYNC_MODULE}]\n"
        f"    path = {root}\n"
        "    read only = no\n"
        "    comment = the session's data folders\n"
    )


def rsync_login_text(config: Path) -> str:
    """The rsync login's forced command: rsync's daemon on that config, or why not."""
    return (
        "#!/bin/sh\n"
        "if ! command -v rsync >/dev/null 2>&1; then\n"
        '    echo "bai-jupyter: the image of this system session has no rsync: use sftp, '
        'or start the session on an image with rsync installed" >&2\n'
        "    exit 1\n"
        "fi\n"
        f"exec rsync --server --daemon --config={config} .\n"
    )


def passwd_line(user: str, home: str, shell: str | None = None) -> str:
    """A login as root's uid under another name; by default with a shell that logs nobody
    in (the rsync login needs ``/bin/sh``: sshd runs its forced command with it)."""
    shell = shell or next((s for s in _NO_LOGIN if Path(s).exists()), "/bin/false")
    return f"{user}:x:0:0:bai-jupyter sftp:{home}:{shell}\n"


def add_user(
    user: str, home: str, passwd: Path = Path("/etc/passwd"), shell: str | None = None
) -> None:
    """Add the login to ``passwd`` unless it is there (a container's own file)."""
    lines = passwd.read_text(encoding="utf-8").splitlines(keepends=True) if passwd.exists() else []
    if any(line.split(":", 1)[0] == user for line in lines):
        return
    text = "".join(lines)
    if text and not text.endswith("\n"):
        text += "\n"
    write_file(passwd, text + passwd_line(user, home, shell), 0o644)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def run_sftp(sup: Supervisor, boot: Bootstrap, args: argparse.Namespace, set_up: SetUp) -> int:
    """Serve SFTP on the bootstrap's port until told to stop; sshd's exit ends the kernel."""
    set_up()  # the image's services (a one-kernel session has no SSH between kernels)
    cfg = boot.sftp or {}
    port, user = int(cfg["port"]), str(cfg["user"])
    root = WORK_DIR
    conf = Path(args.config_dir) / "sftp"
    conf.mkdir(mode=0o700, parents=True, exist_ok=True)
    host_key = conf / "host_ed25519_key"
    keys = conf / "authorized_keys"
    config = conf / "sshd_config"
    rsyncd, rsync = conf / "rsyncd.conf", conf / "rsync-login"
    write_file(host_key, str(cfg["host_private_key"]).strip() + "\n", 0o600)
    write_file(keys, str(cfg["authorized_keys"]).strip() + "\n", 0o600)
    write_file(config, sshd_config_text(port, host_key, keys, user, root, rsync), 0o600)
    write_file(rsyncd, rsyncd_config_text(root), 0o600)
    write_file(rsync, rsync_login_text(rsyncd), 0o700)
    # sshd refuses a chroot that anyone but root may write to.
    Path(root).mkdir(parents=True, exist_ok=True)
    Path(root).chmod(0o755)
    add_user(user, root)
    add_user(RSYNC_USER, root, shell="/bin/sh")
    run_dir = Path(args.sshd_run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)  # privilege separation directory
    run_dir.chmod(0o755)
    try:
        proc = sup.spawn([args.sshd, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL)
    except OSError as e:
        raise RuntimeFailure(f"cannot start sshd ({args.sshd}): {e.strerror or e}") from e
    deadline = time.monotonic() + READY_TIMEOUT
    while not _listening(port):
        sup.reap()
        if proc.returncode is not None:
            raise RuntimeFailure(f"sshd exited with code {proc.returncode} before listening")
        if time.monotonic() >= deadline:
            sup.stop(proc, grace=0)
            raise RuntimeFailure(f"sshd did not listen on port {port} within {READY_TIMEOUT:g} s")
        time.sleep(0.02)
    say(f"sftp listening on port {port} (user {user}, chroot {root})")
    say(READY)
    while True:
        signals = sup.take_signals()
        if signal.SIGTERM in signals or signal.SIGINT in signals:
            sup.stop(proc)
            say("sftp stopped")
            return 0
        if proc.returncode is not None:
            say(f"sshd exited with code {proc.returncode}")
            return exit_code(proc.returncode)
        sup.wait(None)
