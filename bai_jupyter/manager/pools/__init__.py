"""Warm pools: sessions started ahead of demand and claimed by matching launches.

- :mod:`.config`: the ``warm_pools`` setting (the pool owner lives in :mod:`..owners`);
- :mod:`.warm_pool`: the keeper's rounds that fill each pool, and give way under pressure;
- :mod:`.claims`: a create served from a pool instead of the queue;
- :mod:`.handover`: a claimed kernel moved to its user's notebook folder.
"""
