"""Replay a trace of session requests against virtual agents under a simulated clock.

An operator compares scheduling strategies here before changing them in
production, so the simulator runs the production code itself: every pass is
:func:`~bai_jupyter.scheduler.dispatcher.schedule` with plugins from
:func:`~bai_jupyter.scheduler.plugins.load_plugins`, on real
:class:`~bai_jupyter.model.Session` objects that walk the real lifecycle; a
session's fields are checked by the request schema, and fair shares are
:func:`~bai_jupyter.scheduler.shares.dominant_share`. Only the clock, the
agents and the containers are simulated.

Trace (JSON)::

    {"until": 1000,
     "agents": [{"id": "a1", "slots": {"cpu": "9", "mem": "18g"}}],
     "scheduler": {"sequencer": "fifo", "selector": "dispersed",
                   "options": {"num_retries_to_skip": 3}},
     "sessions": [{"id": "s1", "owner": "alice", "submit_at": 0, "duration": 100,
                   "resources": {"cpu": "1", "mem": "4g"}, "cluster_size": 1,
                   "cluster_mode": "single-node", "priority": 10,
                   "depends_on": [], "exit_code": 0, "starts_at": null}]}

``until``, ``agents`` and ``sessions`` are required; a top-level
``description`` is allowed for notes. ``resources`` are per kernel.
``duration: null`` runs until ``until``; a non-zero ``exit_code`` ends the
session with result FAILURE. Agents may name a ``resource_group``, but all of
them must name the same one: a trace is one group. Times are plain seconds.
Sessions submitted after ``until`` never enter the queue and are not listed; a
request that cannot fit even the empty agents is CANCELLED at submit with
``never-fits``.

Metrics:

* ``wait`` = ``scheduled_at`` − ``submit_at``; ``mean_wait`` and ``p95_wait``
  (nearest rank) are over the sessions that were scheduled, 0 when none was.
* The window is [first ``submit_at``, end], where end is the last time a
  session finished running, or ``until`` when one is still RUNNING at
  ``until``; ``makespan`` is its length.
* ``utilization[slot]`` = ∫ occupied dt / (group capacity × window length).
* ``dominant_share[owner]`` = time-average over the window of the owner's
  dominant share (max over slots of the owner's occupied / group capacity):
  how much of the group the owner held on average.
* ``dominant_share_at_until[owner]`` = the same share at the instant ``until``
  (after its events), every owner listed, 0 included: what DRF equalizes.

Ratios are rounded to 4 decimals.

Modules: ``trace`` (reading and checking a trace), ``engine`` (the simulated
clock), ``usage`` (the integrals behind the metrics), ``report`` (the result,
as JSON or a table).
"""

from .engine import simulate
from .report import METRICS_HELP, Metrics, SessionRow, SimulationResult, format_table
from .trace import Overrides, TraceError, load_trace

__all__ = [
    "METRICS_HELP",
    "Metrics",
    "Overrides",
    "SessionRow",
    "SimulationResult",
    "TraceError",
    "format_table",
    "load_trace",
    "simulate",
]
