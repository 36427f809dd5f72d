"""Start and stop: a placed session brought to RUNNING, and any session to its end.

- :mod:`.start_stop`: the lifecycle driver (``Lifecycle``);
- :mod:`.images`: an agent that lacks the image gets it in PULLING;
- :mod:`.multinode`, :mod:`.swarm`, :mod:`.shared_folders`: sessions spread over
  several agents, their Swarm overlay and the data folders every agent must see;
- :mod:`.sftp`: system sessions' SFTP set-up and use.
"""
