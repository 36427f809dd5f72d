"""Kernelspecs whose kernels run as ``main1`` of a bai-jupyter session.

A kernelspec names the ``bai`` provisioner and carries its settings in
``metadata.kernel_provisioner.config``; the values are checked here, at install
time, with the same rules as a session request, so a bad one never reaches a
user's launcher.

Installed with no resources of their own, a kernelspec asks for a share of the
machine's agents (:func:`derive_resources`), so the queue and the limits are what a
user meets first; its display name says the size and the resources, and its
launcher card shows the bai logo.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager

from .model import ClusterMode
from .request import SpecError, parse_spec
from .request.kernel_launch import launch_request
from .resources import Amount, ResourceError, ResourceSlot
from .scheduler.config import MIN_RESOURCES

__all__ = [
    "InstalledKernelspec",
    "KernelspecError",
    "biggest",
    "default_display_name",
    "derive_resources",
    "fit_warning",
    "install",
    "installed",
    "kernelspec_json",
]

PROVISIONER = "bai"
#: What main1's runtime runs (informational: the provisioner never runs it here).
ARGV = ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
INTERRUPT_MODES = ("signal", "message")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$", re.IGNORECASE)
#: The launcher card's icons, copied into every bai kernelspec's directory.
LOGO_DIR = Path(__file__).parent / "kernelspec_logo"
LOGO_FILES = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")
#: The share of one agent a derived session asks for, all its kernels together: two
#: such sessions run side by side and a third queues.
MACHINE_SHARE = Decimal("0.5")
_GIB = Decimal(1024**3)
_MIB = Decimal(1024**2)


class KernelspecError(ValueError):
    """A bad kernelspec setting; the message says which and what to fix."""


@dataclass(frozen=True)
class InstalledKernelspec:
    name: str
    display_name: str
    path: str
    config: dict[str, Any]


def _floor(amount: Decimal, step: Decimal) -> Decimal:
    return (amount / step).to_integral_value(ROUND_FLOOR) * step


def _round_cpu(cpu: Decimal) -> Decimal:
    """Down to a number a person would pick: halves from 1 up, tenths, then hundredths."""
    step = Decimal("0.5") if cpu >= 1 else Decimal("0.1") if cpu >= Decimal("0.1") else None
    return _floor(cpu, step or Decimal("0.01")).normalize()


def _round_mem(mem: Decimal) -> Decimal:
    """Down to quarters of a GiB from 1 GiB up, else to 64 MiB (whole bytes below that)."""
    step = _GIB / 4 if mem >= _GIB else 64 * _MIB if mem >= 64 * _MIB else Decimal(1)
    return _floor(mem, step)


def derive_resources(
    capacity: ResourceSlot,
    cluster_size: int = 1,
    share: Decimal = MACHINE_SHARE,
    min_resources: ResourceSlot = MIN_RESOURCES,
) -> ResourceSlot:
    """Per-kernel ``cpu`` and ``mem`` for a session of ``cluster_size`` kernels that asks
    for ``share`` of an agent of ``capacity``, rounded down to plain numbers and never
    below ``min_resources``. All kernels together always fit in ``capacity`` (the
    scheduler's single-node rule): KernelspecError when even the minimum cannot."""
    if cluster_size < 1:
        raise KernelspecError(f"cluster_size: must be at least 1, got {cluster_size}")
    if not Decimal(0) < share <= 1:
        raise KernelspecError(f"share: must be in (0, 1], got {share}")
    derived: dict[str, Decimal] = {}
    for slot, rounding in (("cpu", _round_cpu), ("mem", _round_mem)):
        have = capacity.get_amount(slot)
        least = min_resources.get_amount(slot)
        amount = max(rounding(have * share / cluster_size), least)
        if amount * cluster_size > have:  # the share rounded up to the minimum: use it all
            amount = max(rounding(have / cluster_size), least)
        if amount * cluster_size > have:
            raise KernelspecError(
                f"resources.{slot}: {cluster_size} kernel(s) of at least "
                f"{ResourceSlot({slot: least}).describe()} do not fit this machine's "
                f"agent ({capacity.describe()}); give --cpu and --mem, or a smaller "
                "--cluster-size"
            )
        derived[slot] = amount
    return ResourceSlot(derived)


def biggest(capacities: Mapping[str, ResourceSlot]) -> ResourceSlot:
    """The agent with the most CPUs (then memory): the one a derived request is a share of."""
    if not capacities:
        raise KernelspecError("resources: no agent on this machine to derive them from")
    return max(capacities.values(), key=lambda c: (c.get_amount("cpu"), c.get_amount("mem")))


def _describe_amount(slot: str, amount: Decimal) -> str:
    if slot == "mem":
        gib = amount / _GIB
        if gib >= 1:
            return f"{gib.quantize(Decimal('0.01')).normalize():f} GiB"
        return f"{(amount / _MIB).quantize(Decimal('1')):f} MiB"
    return f"{amount.normalize():f} {'GPU' if slot == 'cuda.device' else 'CPU'}"


def default_display_name(
    cluster_size: int | None, resources: Mapping[str, Amount] | None = None
) -> str:
    """The launcher's name: ``Python 3 · bai cluster ×3 · 1 CPU · 2 GiB``, so the card
    says what a click asks for (resources left out are not named)."""
    size = cluster_size or 1
    parts = ["Python 3", "bai" if size == 1 else f"bai cluster ×{size}"]
    slots = ResourceSlot(resources or {})
    parts += [_describe_amount(slot, amount) for slot, amount in slots.items()]
    return " · ".join(parts)


def kernelspec_json(
    display_name: str,
    config: dict[str, Any],
    interrupt_mode: str = "signal",
) -> dict[str, Any]:
    """The ``kernel.json`` of a bai kernelspec, after checking ``config`` like a request."""
    if interrupt_mode not in INTERRUPT_MODES:
        raise KernelspecError(
            f"interrupt_mode: must be one of {', '.join(INTERRUPT_MODES)}, got {interrupt_mode!r}"
        )
    if not display_name.strip():
        raise KernelspecError("display_name: must not be empty")
    try:
        parse_spec(launch_request(config))
    except (SpecError, ResourceError) as exc:
        raise KernelspecError(str(exc)) from exc
    timeout = config.get("launch_timeout")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise KernelspecError(f"launch_timeout: must be a positive number, got {timeout!r}")
    return {
        "argv": ARGV,
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": interrupt_mode,
        "metadata": {"kernel_provisioner": {"provisioner_name": PROVISIONER, "config": config}},
    }


def fit_warning(config: dict[str, Any], capacities: Mapping[str, ResourceSlot]) -> str | None:
    """Why a kernelspec's request cannot run on the agents of ``capacities``; ``None`` if it can.

    A launch that cannot fit waits in the queue until its ``launch_timeout``: say so at
    install, with what would fit. Templates and attached sessions are the server's to judge.
    """
    if config.get("template") or config.get("session") or not capacities:
        return None
    spec = parse_spec(launch_request(config))
    single = spec.cluster_mode is ClusterMode.SINGLE_NODE
    need = spec.total_resources if single else spec.resources
    if any(need.fits_in(capacity) for capacity in capacities.values()):
        return None
    agent, biggest = max(
        capacities.items(), key=lambda item: (item[1].get_amount("cpu"), item[1].get_amount("mem"))
    )
    what = (
        f"its {spec.cluster_size} kernel(s) on one agent need {need.describe()}"
        if single
        else f"each kernel needs {need.describe()}"
    )
    return (
        f"this request cannot run on the agents this machine has now: {what}, but the "
        f"biggest agent ({agent}) has {biggest.describe()}. A launch would wait in the queue "
        f"until launch_timeout and fail. What fits: at most {biggest.describe()} "
        f"{'for all kernels together' if single else 'per kernel'}."
    )


def install(
    name: str,
    spec: dict[str, Any],
    user: bool = False,
    prefix: str | None = None,
) -> str:
    """Install ``spec`` as kernelspec ``name`` (replacing one of that name); its directory."""
    if not _NAME_RE.match(name):
        raise KernelspecError(
            f"name: {name!r} is not a kernelspec name: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        for logo in LOGO_FILES:
            shutil.copyfile(LOGO_DIR / logo, Path(tmp) / logo)
        # Jupyter copies the folder with its modes: a temporary folder's 0700 (and a 077
        # umask's files) would hide a --sys-prefix kernelspec from every other user.
        for path in Path(tmp).iterdir():
            path.chmod(0o644)
        Path(tmp).chmod(0o755)
        return str(KernelSpecManager().install_kernel_spec(tmp, name, user=user, prefix=prefix))


def installed() -> list[InstalledKernelspec]:
    """Every kernelspec Jupyter finds that runs on the bai provisioner, by name."""
    found = []
    for name, entry in sorted(KernelSpecManager().get_all_specs().items()):
        spec = entry.get("spec") or {}
        provisioner = (spec.get("metadata") or {}).get("kernel_provisioner") or {}
        if provisioner.get("provisioner_name") != PROVISIONER:
            continue
        found.append(
            InstalledKernelspec(
                name=name,
                display_name=str(spec.get("display_name", name)),
                path=str(entry.get("resource_dir", "")),
                config=dict(provisioner.get("config") or {}),
            )
        )
    return found
