"""The two-level scheduler: sequencers pick the next session, selectors place it."""

from .config import OwnerPolicy, SchedulerConfig, SchedulerConfigError
from .context import Snapshot
from .dispatcher import Cancellation, PassResult, Placement, schedule
from .placement import AgentState, never_fits
from .plugins import load_plugins
from .selectors import AgentSelector
from .sequencers import Sequencer

__all__ = [
    "AgentSelector",
    "AgentState",
    "Cancellation",
    "OwnerPolicy",
    "PassResult",
    "Placement",
    "SchedulerConfig",
    "SchedulerConfigError",
    "Sequencer",
    "Snapshot",
    "load_plugins",
    "never_fits",
    "schedule",
]
