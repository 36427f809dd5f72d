"""The shared manager service's settings (`bai-jupyter manager --config THIS`).

The same `c.BaiSessionManager.*` as in a single-user Jupyter server's config;
see docs/jupyterhub.md for every setting of a shared deployment. The tests load
this file as it is and add only their own agents, folders and policies.
"""

# ruff: noqa: F821 (`c` and `get_config` are given by the config loader)

import os

c = get_config()

# Your site: one store for the service (and any replica of it): PostgreSQL. The Hub
# passes BAI_MANAGER_STORE_URL on to the service (see the service's "environment" in
# jupyterhub_config.py); keep the password out of files local users can read.
c.BaiSessionManager.store_url = os.environ.get(
    "BAI_MANAGER_STORE_URL", "postgresql+psycopg://bai@localhost/bai"
)
# Fair share across users (dominant resource fairness).
c.BaiSessionManager.resource_groups = {
    "default": {"sequencer": "drf", "selector": "concentrated", "options": {}}
}
# Your site: limits, so that the first user to fill the agents does not keep them.
c.BaiSessionManager.policies = {
    "default": {
        "max_concurrent_sessions": 2,  # running at once; more wait in the queue
        "max_pending": 10,  # waiting at once; more are refused
        "max_resources": {"cpu": 4, "mem": "16g"},  # held at once by a user's sessions
        "idle_timeout": 3600,  # a session nobody used for an hour ends (idle-timeout)
        "session_lifetime": 7 * 24 * 3600,  # and any session after a week
    },
}
