"""``BaiSessionManager``'s configuration: every trait of ``c.BaiSessionManager.*``.

A mixin of traits only, apart from the manager's operations, so that a reader
finds every setting and its help in one place. It is not a ``Configurable`` of
its own: the manager's config section stays ``BaiSessionManager`` alone.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any

from traitlets import (
    Bool,
    Dict,
    Float,
    HasTraits,
    Int,
    List,
    TraitError,
    Unicode,
    default,
    validate,
)

from ..agents.capped import EXEC_OUTPUT_LIMIT, LOG_BYTES_LIMIT, MAX_LOG_TAIL
from ..mounts import parse_prefixes
from ..runtime.protocol import DEFAULT_IMAGE

__all__ = ["ManagerSettings"]


class ManagerSettings(HasTraits):
    """The settings of :class:`~bai_jupyter.manager.BaiSessionManager`, each with its help."""

    store_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="SQLAlchemy URL of the store; default: a SQLite file in the Jupyter data dir.",
    )
    backend = Unicode(
        "auto",
        config=True,
        help="The backend of the one agent made when `agents` is empty: a name in the "
        "entry-point group bai_jupyter.agents ('docker': containers, configured as "
        "c.DockerAgent; 'local': processes, c.LocalAgent), or 'auto': Docker when an "
        "engine answers, else local.",
    )
    agents = List(
        Dict(),
        config=True,
        help="Agents, each {'backend': name (default 'docker'), **options}: the options "
        "are traits of that backend's class, set over its class config (DockerAgent: id, "
        "resource_group, slots, reserve, endpoint, publish_ports, disk_limit, "
        "host_firewall, pids_limit …; LocalAgent: id, resource_group, slots, reserve, "
        "root …). Empty: one agent chosen by `backend`.",
    )
    resource_groups = Dict(
        {"default": {"sequencer": "fifo", "selector": "concentrated", "options": {}}},
        config=True,
        help="Resource groups: name → {'sequencer', 'selector', 'options'} "
        "(see docs/scheduler.md).",
    )
    default_image = Unicode(
        DEFAULT_IMAGE,
        config=True,
        help="Kernel image for requests that name none (build it: `bai-jupyter image build`).",
    )
    data_folders_root = Unicode(
        "",
        config=True,
        help="Where named data folders live (<root>/<owner>/<name>); "
        "default: <jupyter data dir>/bai_jupyter/folders.",
    )
    registries = List(
        Unicode(),
        ["docker.io"],
        config=True,
        help="The registries agents may pull images from, each 'host[:port]' as an image "
        "names it ('docker.io': names with no registry, e.g. 'python:3.11'). An image of any "
        "other registry is used only where an agent has it (or copied from one): it is "
        "refused at create (400) otherwise, and no engine is ever asked to contact that "
        "registry. []: pull nothing.",
    )
    allowed_host_paths = List(
        Unicode(),
        config=True,
        help="Host directories sessions may mount, each '/prefix' or '/prefix:ro'. "
        "Under '/prefix:ro' any directory is mountable, always read-only; of a read-write "
        "'/prefix' only the prefix itself (kernels write in it, so a path below it could be "
        "swapped for a symlink before a session starts): list each such directory, and no "
        "prefix inside a read-write one. Default: none (only the owner's data folders, by "
        "name). Never mountable, even here: /proc, /sys, /dev, /run, the container "
        "engines' sockets and state, the store's directory, the Jupyter runtime and data "
        "dirs, this package and its runtime, and the data folders' root and anything in "
        "it. See 'Mounts' in docs/sessions.md.",
    )
    policies = Dict(
        {},
        config=True,
        help="Per-user and per-group limits: {'default': {...}, 'groups': {NAME: {...}}, "
        "'users': {NAME: {...}}}, each entry with any of max_concurrent_sessions, "
        "max_resources ({slot: amount}), max_pending, allowed_resource_groups, "
        "allowed_images (patterns), and the idle rules idle_timeout, session_lifetime "
        "(seconds, 0: off) and utilization ({'cpu_percent', 'window'}, 0: off), which win "
        "over a resource group's `idle`. A user's own entry wins, else the most generous of "
        "their groups', else default. Groups are a JupyterHub's (see docs/jupyterhub.md).",
    )
    default_max_pending = Int(
        50,
        allow_none=True,
        config=True,
        help="The most PENDING sessions one owner may have where no policies entry sets "
        "max_pending (a user's, their groups' or default's entry wins over this, higher or "
        "lower); a create over it is refused with 403. None: no limit. The warm pools' "
        "owner is exempt.",
    )
    admin_host_paths = Bool(
        False,
        config=True,
        help="Admins (bai_jupyter:admin, e.g. a JupyterHub's admins) may mount any host "
        "path that exists, not only those under allowed_host_paths; what is never "
        "mountable stays so. Off: everyone is held to allowed_host_paths.",
    )
    pass_interval = Float(5.0, config=True, help="Seconds between periodic scheduling passes.")
    pass_gap = Float(
        0.1,
        min=0.0,
        config=True,
        help="Seconds from one scheduling pass's start before the next may start: a burst "
        "of creates and ends (each wakes the scheduler) is served by one pass after it, "
        "and a lone create waits for none.",
    )
    start_timeout = Float(
        120.0, config=True, help="Seconds an agent may take to start a session's kernels."
    )
    ended_retention = Float(
        7 * 86400.0,
        config=True,
        help="Seconds an ended session's record (status, history, kernels' logs) is kept "
        "after it ended; older ones are deleted every retention_interval. 0: keep forever.",
    )
    retention_interval = Float(
        3600.0, config=True, help="Seconds between deletions of ended sessions past retention."
    )
    event_interval = Float(
        0.25,
        min=0.01,
        config=True,
        help="Seconds between reads of the store's change log for the changes other "
        "processes on the store made (this process's own are told at once): how late "
        "an event stream may tell another server's or replica's change.",
    )
    event_retention = Float(
        3600.0,
        min=60.0,
        config=True,
        help="Seconds the store keeps each session event: an event stream that resumes "
        "(`since`, Last-Event-ID) within it misses nothing; later it gets a `reset` event.",
    )
    log_limit = Int(
        LOG_BYTES_LIMIT,
        min=1024,
        config=True,
        help="Bytes of a kernel's log read at most, the last ones: what the logs API returns "
        "and what the store keeps of each kernel when its session ends. The log is read as "
        "a stream, so a kernel's output never takes more of the manager's memory.",
    )
    log_tail = Int(
        10_000,
        min=1,
        max=MAX_LOG_TAIL,
        config=True,
        help="Lines of a kernel's log returned when a request names no `tail` (and kept in "
        "the store when its session ends), within `log_limit` bytes.",
    )
    exec_output_limit = Int(
        EXEC_OUTPUT_LIMIT,
        min=1024,
        config=True,
        help="Bytes of an exec's output (stdout and stderr together) returned at most: the "
        "last ones (where a command says why it failed); the reply says how many came "
        "before. Read as it comes, so a command's output never takes more of the "
        "manager's memory.",
    )
    watchdog_interval = Float(
        5.0,
        config=True,
        help="Seconds between looks at running sessions' idle rules (activity, CPU use, "
        "lifetime) and at sessions stuck starting or ending (hang_timeout). The time left "
        "shown by the API is as fresh as this.",
    )
    hang_timeout = Dict(
        {},
        config=True,
        help="Seconds a session may stay in each of PREPARING, PULLING, CREATING and "
        "TERMINATING before it is forced to ERROR (hang-timeout) and its kernels and "
        "networks are removed, e.g. {'CREATING': 600}; the states left out keep their "
        "default (PULLING 1800, the others 300); 0: no limit. Read at every check.",
    )
    agent_lost_timeout = Float(
        60.0,
        config=True,
        help="Seconds an agent may go without answering before it is lost: its sessions "
        "end ERROR 'agent-lost' and nothing is placed there until it answers again (then "
        "its kernels of ended sessions are removed).",
    )
    server_gone_timeout = Float(
        30.0,
        config=True,
        help="Seconds a Jupyter server in remote mode (a JupyterHub user's server) may go "
        "without its heartbeat before it is gone: the sessions its kernels launched end "
        "TERMINATED 'server-gone' (sessions made through the API stay). A manager that "
        "starts counts from its start. Servers send one every third of it. 0: never.",
    )
    replica_name = Unicode(
        config=True,
        help="This manager process's name among the processes on its store (the replicas "
        "of a manager service, a Jupyter server, a console's embedded manager): who holds "
        "the leader's lease, in the logs and the scheduler view. Default: host:pid:random.",
    )
    lease_ttl = Float(
        3.0,
        min=0.5,
        config=True,
        help="Seconds the leader's lease lasts unless renewed (it is renewed every third "
        "of it). Of the manager processes on one store, the lease holder alone runs the "
        "scheduler and the watchdogs; when it dies, another takes over within about this "
        "long plus a third; a clean stop hands it over at once.",
    )
    note_interval = Float(
        1.0,
        min=0.05,
        config=True,
        help="Seconds between writes of this process's notes (Jupyter servers' heartbeats, "
        "sessions' use) to the store, where the leader's watchdogs read them.",
    )
    usage_interval = Float(
        2.0,
        min=0.0,
        config=True,
        help="Seconds between readings of running sessions' usage (CPU, memory, network "
        "per kernel, from the agents' stats), sent as `usage` events to the event streams "
        "that ask for them (`?usage=1`: the JupyterLab extension's charts) while any is "
        "open in this process. 0: no usage events (GET …/usage still reads on demand).",
    )
    agent_check_interval = Float(
        2.0, config=True, help="Seconds between checks that every agent answers."
    )
    warm_pools = List(
        Dict(),
        config=True,
        help="Warm pools: interactive sessions started ahead of demand, each entry "
        "{'name', 'size' (sessions kept warm, default 1), and one of 'request' (a session "
        "request), 'template' (a shared template; 'request' overrides it) or 'kernelspec' "
        "(a bai kernelspec's launch), 'notebook' (mount the notebooks' root, default true), "
        "'max_slots' (the most the pool holds in all)}. A launch whose request equals a "
        "pool's claims a warm session while nobody waits in its resource group (see "
        "docs/kernels.md, Warm pools).",
    )
    warm_pool_interval = Float(
        2.0, config=True, help="Seconds between the warm pools' refills and clean-ups."
    )

    @default("replica_name")
    def _default_replica_name(self) -> str:
        # Unique per manager, even two in one process (a test's, a server's and a tool's).
        return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"

    @validate("allowed_host_paths")
    def _valid_host_paths(self, proposal: Any) -> list[str]:
        """A bad entry or a prefix inside a read-write one stops the server at start."""
        try:
            parse_prefixes(proposal["value"])
        except ValueError as exc:
            raise TraitError(str(exc)) from exc
        return list(proposal["value"])
