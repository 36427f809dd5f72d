"""Warm pools: sessions started ahead of demand and claimed by matching launches.

- :mod:`.config`: the ``warm_pools`` setting and the pool owner;
- :mod:`.warm_pool`: the rounds that keep each pool filled, and give way under pressure;
- :mod:`.claims`: a create served from a pool instead of the queue;
- :mod:`.handover`: a claimed kernel moved to its user's notebook folder.
"""
