"""The runtime that runs first in every kernel of a session (Backend.AI's kernel-runner).

It reads ``<config-dir>/bootstrap.json`` (built by ``bai_jupyter.kernel_plan.bootstrap``),
writes ``environ.txt`` and ``resource.txt``, sets up passwordless SSH between the
session's kernels, starts the image's service ports, and then, by ``mode``:

* ``kernel``: supervises an ipykernel child (SIGINT interrupts it, SIGHUP restarts
  it on the same ports, SIGTERM stops it and exits 0);
* ``batch``: runs ``startup_command`` and exits with its code (124 on timeout);
* ``wait``: idles until SIGTERM/SIGINT (sub kernels, service-only sessions).
* ``sftp``: serves SFTP over the data folders (a system session's main1; ``sftp.py``).

Constraints that shape the code: stdlib only and Python >= 3.9 (it runs under the
image's own ``python3``); it may be PID 1 (so it reaps orphans and forwards
signals itself); and it sits on the critical path of every session start (no
heavy imports, nothing waits that need not). Every message is one
``bai-runtime: …`` line on stderr so agents can grep container logs.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from .config import Bootstrap, BootstrapError, environ_text, resource_text, write_file
from .hosts import resolve_own_name_inside
from .modes import RUNNERS
from .processes import RuntimeFailure, Supervisor
from .protocol import CONFIG_DIR, WORK_DIR, say
from .services import start_services
from .ssh import SSHD, install_ssh

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    pass

#: Exit codes: bad bootstrap file, task timeout (like coreutils ``timeout``), failure.
EXIT_BAD_BOOTSTRAP = 2
EXIT_FAILURE = 1


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bai-runtime", description="Prepare a bai-jupyter kernel and run it."
    )
    p.add_argument("--config-dir", default=CONFIG_DIR, help="where config files go")
    p.add_argument("--work-dir", default=WORK_DIR, help="working directory of the kernel")
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
    p.add_argument(
        "--egress-subnet",
        action="append",
        default=[],
        help="a subnet of the shared egress bridge: this kernel's hostname is taken off its "
        "addresses there in the hosts file, so it resolves to the session network (repeatable)",
    )
    p.add_argument(
        "--hosts-file", default="/etc/hosts", help="the hosts file --egress-subnet fixes"
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
    if args.egress_subnet:  # before anything here (or the user's code) resolves the name
        resolve_own_name_inside(Path(args.hosts_file), args.egress_subnet)

    def set_up() -> SSHD | None:
        """SSH between the kernels and the image's services; the runner calls it when it
        suits (the kernel mode only once its ipykernel is booting: the long pole)."""
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
        pumps.extend(
            start_services(sup, boot.service_ports, Path(args.service_defs), work_dir, args.python)
        )
        return sshd

    try:
        config_dir.mkdir(parents=True, exist_ok=True)
        work_dir.mkdir(parents=True, exist_ok=True)
        if args.python_path:  # e.g. bai_jupyter for %bai, after whatever the image set
            paths = [os.environ.get("PYTHONPATH", ""), *args.python_path]
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env = dict(os.environ)
        write_file(config_dir / "environ.txt", environ_text(env))
        write_file(config_dir / "resource.txt", resource_text(boot.resources))
        return RUNNERS[boot.mode](sup, boot, args, set_up)
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
