"""Kernelspecs whose kernels run as ``main1`` of a bai-jupyter session.

A kernelspec names the ``bai`` provisioner and carries its settings in
``metadata.kernel_provisioner.config``; the values are checked here, at install
time, with the same rules as a session request, so a bad one never reaches a
user's launcher.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager

from .model import ClusterMode
from .resources import ResourceError, ResourceSlot
from .templates import SpecError, parse_spec

__all__ = [
    "InstalledKernelspec",
    "KernelspecError",
    "default_display_name",
    "fit_warning",
    "install",
    "installed",
    "kernelspec_json",
]

PROVISIONER = "bai"
#: What main1's runtime runs (informational: the provisioner never runs it here).
ARGV = ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
INTERRUPT_MODES = ("signal", "message")
#: Provisioner settings that are not fields of a session request.
_PROVISIONER_ONLY = ("template", "launch_timeout", "session")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$", re.IGNORECASE)


class KernelspecError(ValueError):
    """A bad kernelspec setting; the message says which and what to fix."""


@dataclass(frozen=True)
class InstalledKernelspec:
    name: str
    display_name: str
    path: str
    config: dict[str, Any]


def default_display_name(cluster_size: int | None) -> str:
    size = cluster_size or 1
    return "Python 3 (bai)" if size == 1 else f"Python 3 (bai cluster ×{size})"


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
    request = {k: v for k, v in config.items() if k not in _PROVISIONER_ONLY}
    try:
        parse_spec({"type": "interactive", **request})
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
    request = {k: v for k, v in config.items() if k not in _PROVISIONER_ONLY}
    spec = parse_spec({"type": "interactive", **request})
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
