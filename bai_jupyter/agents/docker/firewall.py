"""The host firewall: kernels reach this host only at the ports the manager allows.

Containers reach every host service bound to 0.0.0.0 through their bridges'
gateways. A chain of the host's INPUT (:data:`FIREWALL_CHAIN`) rejects new
connections from the egress bridge and every session bridge (``bai+``) except
to the allowed ports. Several managers on one host share it: each adds its own
allow rules, tagged with a comment, and removes them on close; the last one out
removes the chain. Needs iptables and root.
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
from collections.abc import Iterator
from pathlib import Path

from .networks import BRIDGE_PREFIX

__all__ = ["FIREWALL_CHAIN", "HostFirewall", "firewall_install", "firewall_remove"]

#: The host's INPUT chain jumps here for traffic from kernels' bridges.
FIREWALL_CHAIN = "BAI-JUPYTER-INPUT"

_FIREWALL_LOCK = Path(tempfile.gettempdir()) / "bai-jupyter-firewall.lock"
_FIREWALL_TAG = re.compile(r"bai-jupyter:(\d+):")
#: Rules at the end of the chain, shared by every manager of this host.
_FIREWALL_TAIL = (
    ("-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"),
    ("-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"),
    ("-j", "REJECT"),
)


def _iptables(*args: str, check: bool = True) -> int:
    """One iptables command (waiting for the xtables lock); its exit status."""
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, stderr=done.stderr)
    return done.returncode


@contextlib.contextmanager
def _firewall_locked() -> Iterator[None]:
    """One manager of this host at a time edits the chain (iptables -w locks one command)."""
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
    for line in _rules(FIREWALL_CHAIN):
        found = _FIREWALL_TAG.search(line)
        if found is None:
            continue
        if tag in line or not _pid_alive(int(found.group(1))):
            _iptables("-D", *shlex.split(line)[1:], check=False)
        else:
            others = True
    return others


def firewall_install(tag: str, egress: str, ports: list[int]) -> None:
    """Kernels' bridges (``egress`` and ``bai+``) reach the host only at allowed ports.

    Each manager's rules carry its ``tag`` (a comment): a marker rule that matches
    nothing (so that its presence keeps the chain) and one RETURN per allowed port."""
    chain = FIREWALL_CHAIN
    with _firewall_locked():
        if _iptables("-L", chain, "-n", check=False) != 0:
            _iptables("-N", chain)
        for rule in _FIREWALL_TAIL:
            if _iptables("-C", chain, *rule, check=False) != 0:
                _iptables("-A", chain, *rule)
        _drop_stale(tag)
        comment = ("-m", "comment", "--comment", tag)
        _iptables("-I", chain, "1", "-s", "255.255.255.255/32", *comment, "-j", "RETURN")
        for port in ports:
            _iptables("-I", chain, "1", "-p", "tcp", "--dport", str(port), *comment, "-j", "RETURN")
        for iface in (egress, f"{BRIDGE_PREFIX}+"):
            jump = ("-i", iface, "-j", chain)
            if _iptables("-C", "INPUT", *jump, check=False) != 0:
                _iptables("-I", "INPUT", "1", *jump)


def firewall_remove(tag: str) -> None:
    """Delete ``tag``'s rules; the last manager out removes the chain and its jumps."""
    with _firewall_locked():
        if _drop_stale(tag):
            return
        for line in _rules("INPUT"):
            if line.endswith(f"-j {FIREWALL_CHAIN}"):
                _iptables("-D", *shlex.split(line)[1:], check=False)
        _iptables("-F", FIREWALL_CHAIN, check=False)
        _iptables("-X", FIREWALL_CHAIN, check=False)


class HostFirewall:
    """One agent's allow rules in the shared chain (a comment tells them apart)."""

    def __init__(self, owner: object) -> None:
        self.tag = f"bai-jupyter:{os.getpid()}:{id(owner):x}"
        self.on = False

    async def allow(self, egress: str, ports: list[int]) -> str | None:
        """Install the chain and these allow rules; the reason it could not, else None."""
        error = await asyncio.to_thread(self._apply, egress, ports)
        self.on = self.on or error is None
        return error

    def _apply(self, egress: str, ports: list[int]) -> str | None:
        if os.geteuid() != 0:
            return "not running as root"
        if shutil.which("iptables") is None:
            return "iptables is not installed"
        try:
            firewall_install(self.tag, egress, ports)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or ""
            return f"iptables failed: {exc} {detail}".strip()
        return None

    async def remove(self) -> None:
        """Take this agent's rules out (the chain goes with the last manager's)."""
        if self.on:
            await asyncio.to_thread(firewall_remove, self.tag)
            self.on = False
