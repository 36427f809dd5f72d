"""A kernel's own hostname resolves to its session-network address, and to nothing else.

Docker writes one ``/etc/hosts`` line naming the container's hostname for every
network the container is on, in an order that changes from start to start (the
engine joins a container's networks in no fixed order). ``main1`` of a cluster is
on two: the shared egress bridge and its session network (a bridge, or a Swarm
overlay); ``gethostbyname("main1")`` inside it then gave either address, and the
egress one is unreachable from the sub kernels, so whatever binds to or advertises
its own name (Gloo, MPI, a Dask scheduler) failed at random. Reordering is not
enough (``getent hosts`` and ``hostname -i`` list every line), so the runtime takes
its hostname off the egress addresses, which the agent names (``--egress-subnet``),
before anything else runs. The file is a bind mount: it is rewritten in place.
"""

from __future__ import annotations

from .protocol import say

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from pathlib import Path


def without_egress(text: str, hostname: str, subnets: list[str]) -> str:
    """``text`` (an ``/etc/hosts``) with ``hostname`` taken off every address in ``subnets``,
    provided it keeps another address; lines that name nothing else go."""
    import ipaddress  # only where there is something to do: not on every kernel's start

    networks = [ipaddress.ip_network(s, strict=False) for s in subnets]
    name = hostname.lower()

    def egress(address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return False
        return any(ip.version == n.version and ip in n for n in networks)

    lines = text.splitlines(keepends=True)
    parsed = [line.split("#")[0].split() for line in lines]
    own = [fields[0] for fields in parsed if len(fields) > 1 and name in map(str.lower, fields[1:])]
    if all(egress(address) for address in own):
        return text  # nothing else to resolve to (or nothing of ours): leave it
    kept = []
    for line, fields in zip(lines, parsed):
        if len(fields) > 1 and egress(fields[0]) and name in map(str.lower, fields[1:]):
            names = [n for n in fields[1:] if n.lower() != name]
            if not names:
                continue
            line = "\t".join([fields[0], *names]) + "\n"
        kept.append(line)
    return "".join(kept)


def pin_own_name(hosts: Path, hostname: str, subnets: list[str]) -> str | None:
    """Rewrite ``hosts`` (in place: Docker bind-mounts it) as :func:`without_egress` says;
    the addresses left for ``hostname``, or ``None`` when nothing changed."""
    with hosts.open("r+", encoding="utf-8") as f:
        text = f.read()
        fixed = without_egress(text, hostname, subnets)
        if fixed == text:
            return None
        f.seek(0)
        f.write(fixed)
        f.truncate()
    left = [
        fields[0]
        for fields in (line.split("#")[0].split() for line in fixed.splitlines())
        if len(fields) > 1 and hostname.lower() in map(str.lower, fields[1:])
    ]
    return " ".join(left)


def resolve_own_name_inside(hosts: Path, subnets: list[str]) -> None:
    """:func:`pin_own_name` for this machine's hostname, saying what it did (a failure is
    said, not fatal: the kernel still works for everything but its own name)."""
    import socket  # only kernels that have an egress bridge pay for it

    hostname = socket.gethostname()
    try:
        left = pin_own_name(hosts, hostname, subnets)
    except (OSError, ValueError) as e:
        say(f"cannot make {hostname} resolve to its session network: {e}")
        return
    if left:
        say(f"{hostname} resolves to {left} (its session network)")
