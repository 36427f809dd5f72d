"""A stand-in agent for ``bench/day.py``: it starts nothing and ends batch kernels on a timer.

A day of 2,000 users is thousands of kernels; on a 2-core machine real kernels
(containers or local ipykernels, ~0.6 s of CPU each to boot) would measure the
machine, not the scheduler. This agent is the package's :class:`AgentBackend`
contract with no process behind it: ``start_kernels`` records the kernel and
says it is ready at once, and a batch kernel's ``sleep SECONDS`` command
becomes a timer whose end is reported as the kernel's exit (``EXITED``, code 0),
the same event a Docker or local kernel sends. Everything above it, the
manager, its scheduling loop, the store, the kernel-event watcher and the
lifecycle driver, runs as in production. It is a bench instrument only: no
test of an agent uses it.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from bai_jupyter.agents.base import (
    AgentBackend,
    AgentError,
    KernelEvent,
    KernelEventKind,
    KernelStarted,
    LiveKernel,
)
from bai_jupyter.agents.capped import EXEC_OUTPUT_LIMIT, LOG_BYTES_LIMIT
from bai_jupyter.kernel_plan import KernelPlan
from bai_jupyter.model import ExecResult
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime.protocol import READY_LINE


def sleep_seconds(command: str | None) -> float | None:
    """The seconds of a ``sleep N`` command (the trace's duration), else ``None``."""
    words = shlex.split(command or "")
    if len(words) == 2 and words[0] == "sleep":
        return float(words[1])
    return None


class TimerAgent(AgentBackend):
    """Kernels that cost nothing: ready at once, a batch ``sleep N`` exits after N s."""

    backend = "timer"

    def __init__(self, agent_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(agent_id, **kwargs)
        self.kernels: dict[str, LiveKernel] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        #: How many kernels were started here (for the bench's report).
        self.started = 0

    async def machine_slots(self) -> ResourceSlot:
        raise AgentError("a timer agent has no machine: give it `slots`")

    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        loop = asyncio.get_running_loop()
        started = []
        for plan in plans:
            container = f"timer-{plan.kernel_id}"
            self.kernels[plan.kernel_id] = LiveKernel(
                session_id, plan.kernel_id, container, True, labels=dict(plan.labels)
            )
            seconds = sleep_seconds(plan.bootstrap.get("startup_command"))
            if plan.bootstrap.get("mode") == "batch" and seconds is not None:
                self.timers[plan.kernel_id] = loop.call_later(
                    seconds, self._exit, session_id, plan.kernel_id
                )
            started.append(KernelStarted(plan.kernel_id, container))
        self.started += len(plans)
        return started

    def _exit(self, session_id: str, kernel_id: str) -> None:
        self.timers.pop(kernel_id, None)
        kernel = self.kernels.get(kernel_id)
        if kernel is None:
            return
        self.kernels[kernel_id] = LiveKernel(
            session_id, kernel_id, kernel.container_id, False, 0, kernel.labels
        )
        self._report(KernelEvent(KernelEventKind.EXITED, session_id, kernel_id, exit_code=0))

    async def wait_for_output(self, kernel_id: str, text: str, timeout: float) -> bool:
        return kernel_id in self.kernels and text == READY_LINE

    async def destroy_session(self, session_id: str) -> None:
        for kernel_id in [k for k, v in self.kernels.items() if v.session_id == session_id]:
            timer = self.timers.pop(kernel_id, None)
            if timer is not None:
                timer.cancel()
            del self.kernels[kernel_id]

    async def logs(
        self, kernel_id: str, tail: int | None = None, limit: int = LOG_BYTES_LIMIT
    ) -> str:
        return f"{READY_LINE}\n" if kernel_id in self.kernels else ""

    async def exec(
        self,
        kernel_id: str,
        command: list[str],
        timeout: float = 60,
        limit: int = EXEC_OUTPUT_LIMIT,
    ) -> ExecResult:
        raise AgentError("a timer agent runs no commands")

    async def signal(self, kernel_id: str, signum: int) -> None:
        return None

    async def live_kernels(self) -> list[LiveKernel]:
        return list(self.kernels.values())

    async def _release(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
