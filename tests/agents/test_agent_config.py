"""Agents chosen by name and configured through traitlets, and the rules their base shares.

No Docker engine is needed: where the Docker backend takes part, it is pointed at
a socket that does not exist, which is what ``auto`` sees on a machine without one.
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config, LoggingConfigurable

from bai_jupyter import plugins as lookup
from bai_jupyter.agents import plugins
from bai_jupyter.agents.base import (
    AgentBackend,
    KernelStarted,
    LiveKernel,
    kernel_connection,
    task_timed_out,
)
from bai_jupyter.agents.docker import DockerAgent
from bai_jupyter.agents.local import LocalAgent
from bai_jupyter.errors import ConfigError, Unavailable
from bai_jupyter.kernel_plan import KernelPlan
from bai_jupyter.model import ExecResult
from bai_jupyter.resources import ResourceSlot
from bai_jupyter.runtime.protocol import TASK_TIMEOUT_LINE, ServicePort, kernel_ports

NO_ENGINE = "unix:///nonexistent/docker.sock"


class Parent(LoggingConfigurable):
    """Stands where the manager stands: the agents' parent, holding the config."""


def _parent(tmp_path: Path, **sections: dict[str, Any]) -> Parent:
    config = Config({"LocalAgent": {"root": str(tmp_path / "kernels")}, **sections})
    return Parent(config=config, log=logging.getLogger("test-agent-config"))


class MachineOf(AgentBackend):
    """A backend of a fixed machine (only what capacity needs is real)."""

    backend = "fixed"

    async def machine_slots(self) -> ResourceSlot:
        return ResourceSlot({"cpu": 4, "mem": "8g", "cuda.device": 1})

    async def start_kernels(self, session_id: str, plans: list[KernelPlan]) -> list[KernelStarted]:
        raise NotImplementedError

    async def destroy_session(self, session_id: str) -> None:
        raise NotImplementedError

    async def logs(self, kernel_id: str, tail: int | None = None, limit: int = 1 << 20) -> str:
        raise NotImplementedError

    async def exec(
        self, kernel_id: str, command: list[str], timeout: float = 60, limit: int = 1 << 20
    ) -> ExecResult:
        raise NotImplementedError

    async def signal(self, kernel_id: str, signum: int) -> None:
        raise NotImplementedError

    async def live_kernels(self) -> list[LiveKernel]:
        raise NotImplementedError


# --- the rules of the base ------------------------------------------------------------------


async def test_capacity_is_the_configured_slots_else_the_machine_less_the_reserve() -> None:
    assert await MachineOf().capacity() == ResourceSlot({"cpu": 4, "mem": "7.5g", "cuda.device": 1})
    clamped = MachineOf(reserve={"cpu": 6, "mem": "1g"})  # more cpu than there is: none left
    assert await clamped.capacity() == ResourceSlot({"mem": "7g", "cuda.device": 1})
    fixed = MachineOf(slots={"cpu": "1.5", "mem": "1g"})  # the machine is not asked
    assert await fixed.capacity() == ResourceSlot({"cpu": "1.5", "mem": "1g"})


def test_slots_are_checked_when_set() -> None:
    with pytest.raises(TraitError, match="'reserve' trait of MachineOf: mem: cannot parse"):
        MachineOf(reserve={"mem": "lots"})
    with pytest.raises(TraitError):
        MachineOf(slots=["cpu"])
    assert MachineOf.class_traits()["reserve"].from_string("{'mem': '1g'}") == {"mem": "1g"}


def test_main1_ports_are_fresh_for_each_session() -> None:
    """A stale client of an ended session finds nothing on its old ports: no base comes
    back while it is among the last half of all bases picked (issue 27 point 6)."""
    from bai_jupyter.agents.docker.kernel_ports import PortBases
    from bai_jupyter.runtime.protocol import KERNEL_PORT_BASES

    bases = PortBases()
    picked = [bases.pick() for _ in range(len(KERNEL_PORT_BASES) // 2)]
    assert len(set(picked)) == len(picked)
    assert set(picked) <= set(KERNEL_PORT_BASES)
    for _ in range(200):  # later picks avoid the last 1,000
        base = bases.pick()
        assert base not in picked[-len(KERNEL_PORT_BASES) // 2 :]
        picked.append(base)


def test_shared_kernel_protocol() -> None:
    plan = {"key": "k", "transport": "tcp", "shell_port": 1}
    ports = kernel_ports(23005)
    assert list(ports.values()) == [23005, 23006, 23007, 23008, 23009]
    conn = kernel_connection(plan, "0.0.0.0", ports)
    assert conn["key"] == "k" and conn["ip"] == "0.0.0.0"
    assert [conn[f"{name}_port"] for name in ports] == list(ports.values())
    assert ServicePort.parse("web:http:8080").port_key == "service:web"
    said = f"out\n{TASK_TIMEOUT_LINE} after 1 s\n".encode()
    asked: list[int] = []

    def tail(lines: int) -> bytes:
        asked.append(lines)
        return said

    assert task_timed_out(124, tail) and asked  # the runtime's own time-out
    assert not task_timed_out(124, lambda lines: b"a command's own 124\n")
    asked.clear()
    assert not task_timed_out(1, tail) and not asked  # the log is read only for 124


async def test_close_ends_every_event_iterator() -> None:
    agent = MachineOf()
    first, second = agent.events(), agent.events()
    await agent.close()
    await agent.close()  # once is enough; again is harmless
    assert [e async for e in first] == [] and [e async for e in second] == []
    assert [e async for e in agent.events()] == []  # after close: ends at once


# --- configuration through traitlets ----------------------------------------------------------


def test_options_come_from_the_class_config_and_keywords_win(tmp_path: Path) -> None:
    parent = _parent(
        tmp_path,
        AgentBackend={"reserve": {"mem": "1g"}},
        DockerAgent={"disk_limit": "10g", "endpoint": NO_ENGINE},
    )
    docker = DockerAgent(parent=parent)
    assert (docker.id, docker.disk_limit, docker.endpoint) == ("docker", "10g", NO_ENGINE)
    assert docker.reserve == ResourceSlot({"mem": "1g"})  # the base class's section
    local = LocalAgent("local-a", parent=parent, kill_grace=0.5)
    assert (local.id, local.root, local.kill_grace) == ("local-a", tmp_path / "kernels", 0.5)
    assert local.reserve == ResourceSlot({"mem": "1g"})


def test_backends_are_found_by_name() -> None:
    assert plugins.backend_class("docker") is DockerAgent
    assert plugins.backend_class("local") is LocalAgent
    assert {"docker", "local"} <= set(plugins.backend_names())
    with pytest.raises(ConfigError, match=r"unknown agent backend 'nope' \(available: "):
        plugins.backend_class("nope")


async def test_configured_agents_set_traits_over_the_class_config(tmp_path: Path) -> None:
    parent = _parent(tmp_path, LocalAgent={"root": str(tmp_path / "k"), "kill_grace": 9.0})
    entries: list[dict[str, Any]] = [
        {"backend": "local", "slots": {"cpu": 2, "mem": "2g"}, "kill_grace": 1.0},
        {"backend": "local", "id": "mine", "resource_group": "gpu"},
    ]
    first, second = await plugins.make_agents(entries, "auto", parent)
    assert isinstance(first, LocalAgent) and isinstance(second, LocalAgent)
    assert (first.id, first.kill_grace, first.root) == ("local-1", 1.0, tmp_path / "k")
    assert await first.capacity() == ResourceSlot({"cpu": 2, "mem": "2g"})
    assert (second.id, second.resource_group, second.kill_grace) == ("mine", "gpu", 9.0)
    unknown = r"agents\[0\]: the local backend has no option capacity \(options: id, kill_"
    with pytest.raises(ConfigError, match=unknown):
        await plugins.make_agents([{"backend": "local", "capacity": {}}], "auto", parent)
    with pytest.raises(ConfigError, match=r"agents\[1\]: .*mem"):
        await plugins.make_agents([{"backend": "local"}, {"slots": {"mem": "x"}}], "auto", parent)


async def test_auto_takes_the_first_backend_that_can_run_kernels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    parent = _parent(tmp_path, DockerAgent={"endpoint": NO_ENGINE})
    with caplog.at_level(logging.INFO, "test-agent-config"):
        (agent,) = await plugins.make_agents([], "auto", parent)
        assert isinstance(agent, LocalAgent) and agent.id == "local"
        assert caplog.messages == [
            "bai-jupyter: no Docker engine answered; kernels run as local processes "
            "(no isolation, no SSH, no resource limits)"
        ]
        caplog.clear()
        (agent,) = await plugins.make_agents([], "local", parent)
        assert caplog.messages[0].startswith("bai-jupyter: backend=local; kernels run as local")
    with pytest.raises(Unavailable, match="'docker' is configured but no Docker engine answered"):
        await plugins.make_agents([], "docker", parent)


class Elsewhere(MachineOf):
    """A third party's backend, registered under its own name."""

    backend = "elsewhere"


async def test_a_third_party_backend_plugs_in_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = EntryPoint("elsewhere", f"{__name__}:Elsewhere", plugins.GROUP)

    def with_ours(group: str) -> list[EntryPoint]:
        return [*entry_points(group=group), ours]

    monkeypatch.setattr(lookup, "entry_points", with_ours)  # the one plugin lookup
    parent = _parent(tmp_path, Elsewhere={"slots": {"cpu": 1, "mem": "1g"}})
    (agent,) = await plugins.make_agents([{"backend": "elsewhere"}], "auto", parent)
    assert isinstance(agent, Elsewhere) and agent.id == "elsewhere-1"
    assert await agent.capacity() == ResourceSlot({"cpu": 1, "mem": "1g"})
    (named,) = await plugins.make_agents([], "elsewhere", parent)  # no auto_rank: named only
    assert isinstance(named, Elsewhere) and named.id == "elsewhere"


def test_a_network_is_made_once_and_a_concurrent_maker_is_no_error() -> None:
    """``create_network_once`` (the session bridges' and the overlays'): an existing name is
    left alone; a 409 (made meanwhile) is no error; any other refusal is."""
    import docker.errors

    from bai_jupyter.agents.docker.networks import create_network_once

    class Api:
        def __init__(self, existing: list[str], status: int | None = None) -> None:
            self.existing, self.status = existing, status
            self.made: list[tuple[str, dict[str, Any]]] = []

        def networks(self, names: list[str]) -> list[dict[str, str]]:
            return [{"Name": n} for n in self.existing if n in names]

        def create_network(self, name: str, **options: Any) -> None:
            if self.status is not None:
                response = type("R", (), {"status_code": self.status, "reason": "x"})()
                raise docker.errors.APIError("refused", response=response)  # type: ignore[no-untyped-call]
            self.made.append((name, options))

    api = Api(["bai-x"])
    create_network_once(api, "bai-x", driver="bridge")
    assert api.made == []
    api = Api([])
    create_network_once(api, "bai-y", driver="overlay", internal=True)
    assert api.made == [("bai-y", {"driver": "overlay", "internal": True, "check_duplicate": True})]
    create_network_once(Api([], status=409), "bai-z", driver="bridge")
    with pytest.raises(docker.errors.APIError):
        create_network_once(Api([], status=500), "bai-z", driver="bridge")
