"""The one plugin lookup (``bai_jupyter.plugins``) behind agents and scheduler plugins."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

import pytest

from bai_jupyter import plugins as lookup
from bai_jupyter.agents.base import AgentBackend
from bai_jupyter.agents.plugins import GROUP as AGENTS
from bai_jupyter.agents.plugins import backend_class
from bai_jupyter.errors import ConfigError
from bai_jupyter.plugins import PluginError, check_known, load_plugin, plugin_names
from bai_jupyter.scheduler.config import SchedulerConfigError
from bai_jupyter.scheduler.plugins import SELECTOR_GROUP, SEQUENCER_GROUP, _load
from bai_jupyter.scheduler.selectors import AgentSelector
from bai_jupyter.scheduler.sequencers import Sequencer


def test_every_group_lists_its_built_ins() -> None:
    assert {"docker", "local"} <= set(plugin_names(AGENTS))
    assert plugin_names(SEQUENCER_GROUP) == ["drf", "fifo", "lifo"]
    assert plugin_names(SELECTOR_GROUP) == ["concentrated", "dispersed", "roundrobin"]
    assert plugin_names("bai_jupyter.no-such-group") == []


def test_one_lookup_loads_each_kind() -> None:
    assert issubclass(load_plugin(SEQUENCER_GROUP, "fifo", Sequencer, "sequencer"), Sequencer)
    selector = load_plugin(SELECTOR_GROUP, "dispersed", AgentSelector, "agent selector")
    assert issubclass(selector, AgentSelector)
    assert issubclass(backend_class("local"), AgentBackend)


def test_an_unknown_name_says_which_there_are() -> None:
    with pytest.raises(PluginError) as info:
        load_plugin(SEQUENCER_GROUP, "sjf", Sequencer, "sequencer")
    assert info.value.message == "unknown sequencer 'sjf' (available: drf, fifo, lifo)"
    with pytest.raises(PluginError, match=r"unknown thing 'x' \(available: none\)"):
        check_known("bai_jupyter.no-such-group", "x", "thing")
    check_known(SELECTOR_GROUP, "roundrobin", "agent selector")  # known: no error


def test_a_class_of_another_kind_is_refused() -> None:
    with pytest.raises(PluginError, match=r"^bai_jupyter.sequencers:fifo is not an AgentSelector"):
        load_plugin(SEQUENCER_GROUP, "fifo", AgentSelector, "agent selector")


def test_each_caller_raises_its_own_error_with_the_same_message() -> None:
    with pytest.raises(ConfigError, match=r"^unknown agent backend 'nope' \(available: "):
        backend_class("nope")
    with pytest.raises(SchedulerConfigError) as info:
        _load(SELECTOR_GROUP, "random", AgentSelector)
    assert str(info.value) == (
        "unknown agent selector 'random' (available: concentrated, dispersed, roundrobin)"
    )


class Shortest(Sequencer):
    """A third party's sequencer."""


def test_a_third_party_sequencer_is_found_like_a_built_in(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = EntryPoint("shortest", f"{__name__}:Shortest", SEQUENCER_GROUP)

    def with_ours(group: str) -> list[EntryPoint]:
        return [*entry_points(group=group), *([ours] if group == SEQUENCER_GROUP else [])]

    monkeypatch.setattr(lookup, "entry_points", with_ours)
    assert plugin_names(SEQUENCER_GROUP) == ["drf", "fifo", "lifo", "shortest"]
    assert _load(SEQUENCER_GROUP, "shortest", Sequencer) is Shortest
