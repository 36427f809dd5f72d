"""A JupyterHub whose users share one bai-jupyter manager service.

Every user's single-user server runs the bai_jupyter extension in remote mode
(BAI_JUPYTER_MANAGER_URL): it starts no manager of its own and sends every API
call, kernel launch and `%bai` command to the service, as its user. One queue
and one scheduler (drf: fair share across users) for everyone.

Run it (from a checkout, in its .venv): `jupyterhub -f examples/jupyterhub/jupyterhub_config.py`.
The manager's own settings (store, agents, resource groups, policies) are in
bai_manager_config.py beside this file (BAI_MANAGER_CONFIG names another).
What to change for a real site is marked "your site". The tests start this file
as it is, with the variables below pointing at their own ports and folders.
"""

# ruff: noqa: F821 (`c` and `get_config` are given by JupyterHub's config loader)

import os
import sys
from pathlib import Path

c = get_config()

HERE = Path(__file__).resolve().parent
#: The service's name: its URL prefix (/services/bai-jupyter/) and its access scope.
SERVICE = "bai-jupyter"
MANAGER_PORT = int(os.environ.get("BAI_MANAGER_PORT", "8890"))
MANAGER_URL = f"http://127.0.0.1:{MANAGER_PORT}"
STATE = Path(os.environ.get("BAI_HUB_STATE", "."))  # the Hub's database, cookie secret

# --- the Hub --------------------------------------------------------------------------------
c.JupyterHub.ip = os.environ.get("BAI_HUB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("BAI_HUB_PORT", "8000"))
# Your site: the URL people open. The manager's links (%bai ports, status) are built on it:
# the Hub gives it to the service (JUPYTERHUB_PUBLIC_URL), so they go through the Hub's proxy.
c.JupyterHub.public_url = os.environ.get(
    "BAI_HUB_PUBLIC_URL", f"http://{c.JupyterHub.ip}:{c.JupyterHub.port}/"
)
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("BAI_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('BAI_PROXY_API_PORT', '8001')}"
if os.environ.get("BAI_PROXY_COMMAND"):
    c.ConfigurableHTTPProxy.command = [os.environ["BAI_PROXY_COMMAND"]]
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")

# Your site: your authenticator. The dummy one lets anyone in (demo and tests only).
c.JupyterHub.authenticator_class = os.environ.get("BAI_HUB_AUTHENTICATOR", "dummy")
c.Authenticator.allow_all = True
c.Authenticator.admin_users = set(os.environ.get("BAI_HUB_ADMINS", "admin").split(","))

# Your site: your spawner. Each user's server is a local process here.
c.JupyterHub.spawner_class = "simple"
c.Spawner.cmd = [str(Path(sys.prefix) / "bin" / "jupyterhub-singleuser")]
if os.getuid() == 0:
    c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {
    # Remote mode: the user's server and its kernels use the shared manager service.
    "BAI_JUPYTER_MANAGER_URL": f"{MANAGER_URL}/services/{SERVICE}/",
    **({"JUPYTER_PATH": os.environ["BAI_HUB_JUPYTER_PATH"]} if "BAI_HUB_JUPYTER_PATH" in os.environ else {}),
}
# The server's own Hub token (JUPYTERHUB_API_TOKEN) must reach the service.
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    f"access:services!service={SERVICE}",
]

# --- the manager service --------------------------------------------------------------------
c.JupyterHub.services = [
    {
        "name": SERVICE,
        "url": MANAGER_URL,
        # Managed: the Hub starts it, and starts it again should it exit.
        "command": [
            sys.executable,
            "-m",
            "bai_jupyter.cli",
            "manager",
            "--config",
            os.environ.get("BAI_MANAGER_CONFIG", str(HERE / "bai_manager_config.py")),
        ],
        # The Hub starts services with a filtered environment: pass on what the config reads.
        "environment": {
            k: os.environ[k] for k in ("BAI_MANAGER_STORE_URL",) if k in os.environ
        },
        "oauth_no_confirm": True,
    }
]
c.JupyterHub.load_roles = [
    # Every user may use the service (as themselves: their own sessions).
    {"name": "user", "scopes": ["self", f"access:services!service={SERVICE}"]},
    # The service asks the Hub who is an admin and in which groups (fair share, policies).
    {"name": "bai-jupyter-manager", "services": [SERVICE], "scopes": ["read:users", "list:users"]},
]
