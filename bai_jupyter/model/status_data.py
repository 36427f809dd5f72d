"""The shape of a session's ``status_data``: every key the code writes, in one place.

``status_data`` is JSON in the store and in the API. A record written by an older
version may lack a key or hold something else: readers still read it defensively
(``.get`` and a default); the type is there so that mypy checks the keys the code writes
and reads. The records under a key are plain mappings, their fields listed here.
"""

from __future__ import annotations

from typing import Any, TypedDict


class StatusData(TypedDict, total=False):
    """A session's ``status_data`` (docs/architecture.md, "Session lifecycle")."""

    #: While pending (and once cancelled from the queue): ``{retries, last_try,
    #: failed_predicates: [{name, msg}], msg}``, why it is not placed yet.
    scheduler: dict[str, Any]
    #: ``failed-to-start``: the error.
    error: str
    #: Ended by a kernel (``kernel-exited``, ``kernel-lost`` …): which one (or ones, comma-
    #: separated), and its exit code.
    kernel: str
    exit_code: int | None
    #: Ended through the API (a DELETE, the sidebar, a kernel's shutdown): the caller.
    ended_by: str
    #: ``agent-lost``: the agent that stopped answering and the kernels it held.
    agent: str
    kernels: list[str]
    #: ``hang-timeout``: ``{state, since, limit}``, the state it stayed in past its limit.
    hang: dict[str, Any]
    #: While running: ``{last_activity, activity, rules: {name: {deadline …}}}``, the idle
    #: rules' deadlines.
    idle: dict[str, Any]
    #: While running: ``{count, last_at, kernel}``, processes killed for memory.
    oom: dict[str, Any]
    #: In PULLING: ``{image, agents: {agent id: {from, phase, done, total, progress}}}``
    #: (docs/multinode.md, "Images on every agent").
    pulling: dict[str, Any]
    #: Admitted with an admin's right to any host path (``manager.requests.mount_check``).
    admin_mounts: bool
    #: Claimed from a warm pool (``manager.pools.config.MARK``): ``{pool, claimed_at}``.
    warm_pool: dict[str, Any]
