"""The agents a configuration gives: configured ones, else one chosen by the backend setting."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, Unavailable
from ..resources import ResourceSlot
from .base import AgentBackend

__all__ = ["make_agents"]


async def make_agents(
    configs: Sequence[Mapping[str, Any]],
    backend: str,
    log: logging.Logger | logging.LoggerAdapter[Any],
    disk_limit: str = "",
    firewall: bool = True,
    local_root: Path | None = None,
) -> list[AgentBackend]:
    """The configured agents; none configured: Docker when an engine answers, else local."""
    from .docker import DockerAgent
    from .local import LocalAgent

    def slots(value: Any) -> ResourceSlot | None:
        return None if value is None else ResourceSlot(value)

    made: list[AgentBackend] = []
    for conf in configs:
        kind = conf.get("backend", "docker")
        common = {
            "agent_id": conf.get("id") or f"{kind}-{len(made) + 1}",
            "resource_group": conf.get("resource_group", "default"),
            "capacity": slots(conf.get("capacity")),
        }
        if conf.get("reserve") is not None:
            common["reserve"] = ResourceSlot(conf["reserve"])
        if kind == "docker":
            made.append(
                DockerAgent(
                    endpoint=conf.get("endpoint"),
                    publish_ports=conf.get("publish_ports"),
                    disk_limit=disk_limit,
                    firewall=firewall,
                    **common,
                )
            )
        elif kind == "local":
            made.append(LocalAgent(root=local_root, **common))
        else:
            raise InvalidRequest(f"agents: unknown backend {kind!r} (use docker or local)")
    if made:
        return made
    if backend != "local" and await DockerAgent.engine_answers(None):
        log.info("bai-jupyter: kernels run in Docker (the local engine answered)")
        return [DockerAgent("docker", disk_limit=disk_limit, firewall=firewall)]
    if backend == "docker":
        raise Unavailable("backend 'docker' is configured but no Docker engine answers")
    why = "backend=local" if backend == "local" else "no Docker engine answered"
    log.warning(
        "bai-jupyter: %s; kernels run as local processes "
        "(no isolation, no SSH, no resource limits)",
        why,
    )
    return [LocalAgent("local", root=local_root)]
