"""The host firewall: kernels reach only their own manager's listener; only that manager's
user (and root) reaches kernels.

Two chains, shared by every manager of this host, each manager's rules tagged with a
comment of its own (pid, store, agent) so that one manager's start and stop never add
or remove another's:

* :data:`FIREWALL_CHAIN` (from INPUT, for traffic from kernels' bridges, ``bai+`` and
  the legacy shared egress bridge): new connections are rejected except, per manager,
  from its own egress bridge to its kernel-access listener's address and port. Each
  deployment (store) has its own egress bridge, so one deployment's kernels cannot open
  another's listener.
* :data:`OUTPUT_CHAIN` (from OUTPUT, for traffic to those bridges): new connections
  from a local process are rejected unless it runs as root (the engine and its port
  proxy) or, per manager, as the manager's user towards its own egress bridge; so other
  local users (a JupyterHub user's terminal) cannot reach kernels' ports.

The last manager out removes both chains. Needs iptables and root.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from .networks import BRIDGE_PREFIX

__all__ = ["FIREWALL_CHAIN", "OUTPUT_CHAIN", "HostFirewall", "firewall_install", "firewall_remove"]

#: The host's INPUT chain jumps here for traffic from kernels' bridges.
FIREWALL_CHAIN = "BAI-JUPYTER-INPUT"
#: The host's OUTPUT chain jumps here for traffic to kernels' bridges.
OUTPUT_CHAIN = "BAI-JUPYTER-OUTPUT"

_FIREWALL_LOCK = Path(tempfile.gettempdir()) / "bai-jupyter-firewall.lock"
_FIREWALL_TAG = re.compile(r"bai-jupyter:(\d+):")
_COMMENT = re.compile(r'--comment "?([^" ]+)')
_REJECT = (
    ("-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"),
    ("-j", "REJECT"),
)
_ESTABLISHED = ("-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN")
#: Rules at the end of each chain, shared by every manager of this host.
_TAILS: dict[str, tuple[tuple[str, ...], ...]] = {
    FIREWALL_CHAIN: (_ESTABLISHED, *_REJECT),
    # Root: dockerd and its userland proxy. Packets of no socket (the kernel's own
    # resets and ICMP) pass; every other local user's new connection is rejected.
    OUTPUT_CHAIN: (
        _ESTABLISHED,
        ("-m", "owner", "--uid-owner", "0", "-j", "RETURN"),
        *(("-m", "owner", "--socket-exists", *rule) for rule in _REJECT),
    ),
}
#: The built-in chain and direction each of ours hangs from.
_HOOKS = {FIREWALL_CHAIN: ("INPUT", "-i"), OUTPUT_CHAIN: ("OUTPUT", "-o")}


def _iptables(*args: str, check: bool = True) -> int:
    """One iptables command (waiting for the xtables lock); its exit status."""
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, stderr=done.stderr)
    return done.returncode


@contextlib.contextmanager
def _firewall_locked() -> Iterator[None]:
    """One manager of this host at a time edits the chains (iptables -w locks one command)."""
    with _FIREWALL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _rules(chain: str) -> list[str]:
    listing = subprocess.run(
        ["iptables", "-w", "-S", chain], capture_output=True, text=True, check=False
    ).stdout
    return [line for line in listing.splitlines() if line.startswith("-A ")]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _drop_stale(tag: str) -> bool:
    """Delete ``tag``'s rules and those of dead processes; whether any manager's remain."""
    others = False
    for chain in _HOOKS:
        for line in _rules(chain):
            found = _FIREWALL_TAG.search(line)
            if found is None:
                continue
            comment = _COMMENT.search(line)
            mine = comment is not None and comment.group(1).split(":s:")[0] == tag
            if mine or not _pid_alive(int(found.group(1))):
                _iptables("-D", *shlex.split(line)[1:], check=False)
            else:
                others = True
    return others


def firewall_install(
    tag: str, egress: str, listeners: Sequence[tuple[str, int]], uid: int, legacy: str = ""
) -> None:
    """This manager's rules: its kernels (on bridge ``egress``) reach its ``listeners``
    (address, port), and only user ``uid`` (and root) opens connections to them.

    ``legacy``: the interface of a shared egress bridge not named ``bai…`` to hook too."""
    comment = ("-m", "comment", "--comment", tag)
    with _firewall_locked():
        for chain, tail in _TAILS.items():
            if _iptables("-L", chain, "-n", check=False) != 0:
                _iptables("-N", chain)
            for rule in tail:
                if _iptables("-C", chain, *rule, check=False) != 0:
                    _iptables("-A", chain, *rule)
        _drop_stale(tag)
        _iptables("-I", FIREWALL_CHAIN, "1", "-s", "255.255.255.255/32", *comment, "-j", "RETURN")
        for address, port in listeners:
            allow = ("-i", egress, "-d", f"{address}/32", "-p", "tcp", "--dport", str(port))
            _iptables("-I", FIREWALL_CHAIN, "1", *allow, *comment, "-j", "RETURN")
        own = ("-o", egress, "-m", "owner", "--uid-owner", str(uid))
        _iptables("-I", OUTPUT_CHAIN, "1", *own, *comment, "-j", "RETURN")
        for chain, (hook, direction) in _HOOKS.items():
            for iface in {f"{BRIDGE_PREFIX}+", legacy} - {""}:
                jump = (direction, iface, "-j", chain)
                if _iptables("-C", hook, *jump, check=False) != 0:
                    _iptables("-I", hook, "1", *jump)


def firewall_let_user(tag: str, session: str, egress: str, address: str, uid: int) -> None:
    """User ``uid`` may open connections to ``address`` (a session's main1) on ``egress``."""
    comment = ("-m", "comment", "--comment", f"{tag}:s:{session[:12]}")
    rule = ("-o", egress, "-d", f"{address}/32", "-m", "owner", "--uid-owner", str(uid))
    with _firewall_locked():
        if _iptables("-C", OUTPUT_CHAIN, *rule, *comment, "-j", "RETURN", check=False) != 0:
            _iptables("-I", OUTPUT_CHAIN, "1", *rule, *comment, "-j", "RETURN")


def firewall_forget(tag: str, session: str) -> None:
    """Delete the rules :func:`firewall_let_user` added for ``session``."""
    with _firewall_locked():
        for line in _rules(OUTPUT_CHAIN):
            comment = _COMMENT.search(line)
            if comment is not None and comment.group(1) == f"{tag}:s:{session[:12]}":
                _iptables("-D", *shlex.split(line)[1:], check=False)


def firewall_remove(tag: str) -> None:
    """Delete ``tag``'s rules; the last manager out removes the chains and their jumps."""
    with _firewall_locked():
        if _drop_stale(tag):
            return
        for chain, (hook, _) in _HOOKS.items():
            for line in _rules(hook):
                if line.endswith(f"-j {chain}"):
                    _iptables("-D", *shlex.split(line)[1:], check=False)
            _iptables("-F", chain, check=False)
            _iptables("-X", chain, check=False)


class HostFirewall:
    """One agent's rules in the shared chains (a comment tells them apart)."""

    def __init__(self, owner: object) -> None:
        self._owner = f"{id(owner):x}"
        self.tag = f"bai-jupyter:{os.getpid()}:{self._owner}"
        self.on = False

    def name(self, deployment: str) -> None:
        """Put the deployment (store id) in the tag, so a reader of the chains knows whose."""
        if not self.on and deployment:
            self.tag = f"bai-jupyter:{os.getpid()}:{deployment[:12]}:{self._owner}"

    async def allow(
        self, egress: str, listeners: Sequence[tuple[str, int]], legacy: str = ""
    ) -> str | None:
        """Install the chains and these rules; the reason it could not, else None."""
        error = await asyncio.to_thread(self._apply, egress, listeners, legacy)
        self.on = self.on or error is None
        return error

    def _apply(self, egress: str, listeners: Sequence[tuple[str, int]], legacy: str) -> str | None:
        if os.geteuid() != 0:
            return "not running as root"
        if shutil.which("iptables") is None:
            return "iptables is not installed"
        try:
            firewall_install(self.tag, egress, listeners, os.getuid(), legacy)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or ""
            return f"iptables failed: {exc} {detail}".strip()
        return None

    async def let_user(self, session: str, egress: str, address: str, uid: int) -> None:
        """Let local user ``uid`` (a session's owner) reach that session's main1 at
        ``address``; nothing while the firewall is off."""
        if self.on:
            await asyncio.to_thread(firewall_let_user, self.tag, session, egress, address, uid)

    async def forget(self, session: str) -> None:
        """Take out what :meth:`let_user` added for ``session``."""
        if self.on:
            await asyncio.to_thread(firewall_forget, self.tag, session)

    async def remove(self) -> None:
        """Take this agent's rules out (the chains go with the last manager's)."""
        if self.on:
            await asyncio.to_thread(firewall_remove, self.tag)
            self.on = False
