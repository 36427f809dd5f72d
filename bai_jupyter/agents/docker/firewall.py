"""The host firewall: kernels reach only their own manager's listener; only that manager's
user, root and a session's owner reach kernels.

Two chains, shared by every manager of this host, each manager's rules tagged with a
comment of its own (pid, store, agent; a session's rules add ``:s:<session>``), so that
one manager's start and stop never add or remove another's:

* :data:`FIREWALL_CHAIN` (from INPUT, for traffic from the egress bridge and the
  session bridges ``bai+``): new connections are rejected except, per running session,
  from its main1's address to its own manager's kernel-access listener (address and
  port). Kernels of several deployments share the egress bridge; their addresses tell
  them apart, so one deployment's kernels cannot open another's listener.
* :data:`OUTPUT_CHAIN` (from OUTPUT, for traffic to those bridges): new connections
  from a local process are rejected unless it runs as root (the engine and its port
  proxy), as a manager's user, or as the local user named like a session's owner, to
  that session's main1 (a Hub user's own server); so other local users (a JupyterHub
  user's terminal) cannot reach kernels' ports.

A session's rules are added when its main1 has started (its address is known then) and
removed with it; a manager started again adds those of its running kernels. The last
manager out of a chain removes it. Needs iptables and root.
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


def _drop_stale(tag: str) -> set[str]:
    """Delete ``tag``'s rules and those of dead processes; the chains where other managers'
    remain (one of an older release has rules in the INPUT chain only)."""
    others: set[str] = set()
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
                others.add(chain)
    return others


def firewall_install(tag: str, egress: str, uid: int) -> None:
    """The chains, their jumps from the kernels' bridges (``egress`` and ``bai+``), and this
    manager's own rules: a marker (matches nothing; keeps the chain) and its user ``uid``
    reaching kernels. Its sessions' earlier rules go (:func:`firewall_let` adds them)."""
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
        own = ("-m", "owner", "--uid-owner", str(uid))
        _iptables("-I", OUTPUT_CHAIN, "1", *own, *comment, "-j", "RETURN")
        for chain, (hook, direction) in _HOOKS.items():
            for iface in (egress, f"{BRIDGE_PREFIX}+"):
                jump = (direction, iface, "-j", chain)
                if _iptables("-C", hook, *jump, check=False) != 0:
                    _iptables("-I", hook, "1", *jump)


def firewall_let(
    tag: str,
    session: str,
    egress: str,
    address: str,
    listeners: Sequence[tuple[str, int]],
    uid: int | None,
) -> None:
    """A session's main1 at ``address`` on ``egress`` reaches the ``listeners`` (address,
    port); local user ``uid`` (its owner; None: nobody more) may connect to it."""
    comment = ("-m", "comment", "--comment", f"{tag}:s:{session[:12]}")
    source = ("-i", egress, "-s", f"{address}/32")
    rules: list[tuple[str, ...]] = [
        (FIREWALL_CHAIN, *source, "-d", f"{host}/32", "-p", "tcp", "--dport", str(port))
        for host, port in listeners
    ]
    if uid is not None:
        owner = ("-m", "owner", "--uid-owner", str(uid))
        rules.append((OUTPUT_CHAIN, "-o", egress, "-d", f"{address}/32", *owner))
    with _firewall_locked():
        for chain, *rule in rules:
            if _iptables("-C", chain, *rule, *comment, "-j", "RETURN", check=False) != 0:
                _iptables("-I", chain, "1", *rule, *comment, "-j", "RETURN")


def firewall_forget(tag: str, session: str) -> None:
    """Delete the rules :func:`firewall_let` added for ``session``."""
    with _firewall_locked():
        for chain in _HOOKS:
            for line in _rules(chain):
                comment = _COMMENT.search(line)
                if comment is not None and comment.group(1) == f"{tag}:s:{session[:12]}":
                    _iptables("-D", *shlex.split(line)[1:], check=False)


def firewall_remove(tag: str) -> None:
    """Delete ``tag``'s rules; the last manager out of a chain removes it and its jumps."""
    with _firewall_locked():
        others = _drop_stale(tag)
        for chain, (hook, _) in _HOOKS.items():
            if chain in others:
                continue
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
        #: The (address, port) of this manager's listeners the kernels reach.
        self.listeners: list[tuple[str, int]] = []

    def name(self, deployment: str) -> None:
        """Put the deployment (store id) in the tag, so a reader of the chains knows whose."""
        if not self.on and deployment:
            self.tag = f"bai-jupyter:{os.getpid()}:{deployment[:12]}:{self._owner}"

    async def allow(self, egress: str, listeners: Sequence[tuple[str, int]]) -> str | None:
        """Install the chains and this manager's rules (sessions' rules are added again by
        :meth:`let`); the reason it could not, else None."""
        self.listeners = sorted(set(listeners))
        error = await asyncio.to_thread(self._apply, egress)
        self.on = self.on or error is None
        return error

    def _apply(self, egress: str) -> str | None:
        if os.geteuid() != 0:
            return "not running as root"
        if shutil.which("iptables") is None:
            return "iptables is not installed"
        try:
            firewall_install(self.tag, egress, os.getuid())
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or ""
            return f"iptables failed: {exc} {detail}".strip()
        return None

    async def let(self, session: str, egress: str, address: str, uid: int | None) -> None:
        """A session's main1 at ``address`` reaches the listeners, and local user ``uid``
        (its owner, or None) reaches it; nothing while the firewall is off."""
        if self.on:
            await asyncio.to_thread(
                firewall_let, self.tag, session, egress, address, self.listeners, uid
            )

    async def forget(self, session: str) -> None:
        """Take out what :meth:`let` added for ``session``."""
        if self.on:
            await asyncio.to_thread(firewall_forget, self.tag, session)

    async def remove(self) -> None:
        """Take this agent's rules out (the chains go with the last manager's)."""
        if self.on:
            await asyncio.to_thread(firewall_remove, self.tag)
            self.on = False
