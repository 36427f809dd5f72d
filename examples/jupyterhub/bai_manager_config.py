"""The shared manager service's settings (`bai-jupyter manager --config THIS`).

The same `c.BaiSessionManager.*` as in a single-user Jupyter server's config;
see docs/jupyterhub.md for every setting of a shared deployment.
"""

# ruff: noqa: F821 (`c` and `get_config` are given by the config loader)

import os

c = get_config()

# Your site: one store for the service (and any replica of it): PostgreSQL.
c.BaiSessionManager.store_url = os.environ.get(
    "BAI_MANAGER_STORE_URL", "postgresql+psycopg://bai@localhost/bai"
)
# Fair share across users (dominant resource fairness).
c.BaiSessionManager.resource_groups = {
    "default": {"sequencer": "drf", "selector": "concentrated", "options": {}}
}
