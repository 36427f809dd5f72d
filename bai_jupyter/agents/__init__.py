"""Agents: the nodes that run kernels (``docker`` containers or ``local`` processes).

The Docker backend is imported on first use only, so the package (and the local
backend) works where the docker SDK is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import ExecResult
from .base import (
    AgentBackend,
    AgentError,
    KernelEvent,
    KernelEventKind,
    KernelStarted,
    LiveKernel,
)

if TYPE_CHECKING:
    from .docker import DockerAgent

__all__ = [
    "AgentBackend",
    "AgentError",
    "DockerAgent",
    "ExecResult",
    "KernelEvent",
    "KernelEventKind",
    "KernelStarted",
    "LiveKernel",
]


def __getattr__(name: str) -> Any:
    if name == "DockerAgent":
        from .docker import DockerAgent

        return DockerAgent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
