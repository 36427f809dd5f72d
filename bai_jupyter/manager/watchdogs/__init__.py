"""The loops that watch sessions and agents, and act on what they see.

- :mod:`.scheduling`: the scheduling loop (a pass on enqueue, on an end, periodically);
- :mod:`.kernel_events`: what kernels report (exits, OOM kills, lost networks);
- :mod:`.reconcile`: the store matched with the agents after a restart;
- :mod:`.liveness`: agents that stop answering, and come back;
- :mod:`.hangs`: sessions stuck starting or ending forced to ERROR;
- :mod:`.idle`, :mod:`.idle_rules`, :mod:`.activity`, :mod:`.utilization`: the idle watch,
  which rules apply, last use, CPU use.
"""
