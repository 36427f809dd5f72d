"""Inference endpoints: their records and the replicas that serve them.

- :mod:`.service`: endpoints created, read, updated (a new generation), deleted;
- :mod:`.replicas`: the loop that keeps each endpoint's replicas routed, healthy, scaled;
- :mod:`.rollout`: when a rolling update is done, or gives up;
- :mod:`.meta`: a replica session's endpoint and generation.
"""
