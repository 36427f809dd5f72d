"""What a kernel's container may use: exactly its booked slots, and few capabilities."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ...kernel_plan import KernelPlan
from ...resources import parse_amount
from ..base import AgentError

__all__ = ["KEPT_CAPABILITIES", "kernel_limits"]

#: The only Linux capabilities a kernel keeps (all others are dropped): what sshd
#: needs (privilege separation: SETUID, SETGID, SYS_CHROOT, AUDIT_WRITE; KILL,
#: NET_BIND_SERVICE) and what ordinary code run as the container's root needs to manage
#: its own files (CHOWN, DAC_OVERRIDE, FOWNER, FSETID). Dropped from Docker's default
#: set: MKNOD, NET_RAW (raw sockets, spoofing), SETPCAP, SETFCAP.
KEPT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETUID",
    "SETGID",
    "SYS_CHROOT",
    "AUDIT_WRITE",
    "NET_BIND_SERVICE",
)


def kernel_limits(plan: KernelPlan, pids_limit: int) -> dict[str, Any]:
    """The engine's limits, exactly the slots the scheduler booked for the kernel.

    Docker reads a zero or absent CPU or memory limit as "unlimited": a kernel
    without both is refused rather than run uncapped while booked as using nothing.
    """
    try:
        nano = int(parse_amount("cpu", plan.slots.get("cpu", 0)) * Decimal(10**9))
        mem = int(parse_amount("mem", plan.slots.get("mem", 0)))
    except ValueError as exc:
        raise AgentError(f"kernel {plan.hostname}: {exc}") from exc
    if nano <= 0 or mem <= 0:
        raise AgentError(
            f"kernel {plan.hostname}: slots {plan.slots} lack a cpu or mem amount; "
            "Docker would run it without a limit"
        )
    # Memory and memory+swap equal: no swap.
    return {"pids_limit": pids_limit, "nano_cpus": nano, "mem_limit": mem, "memswap_limit": mem}
