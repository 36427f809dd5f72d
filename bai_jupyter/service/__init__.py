"""The manager as a service of its own: ``bai-jupyter manager``.

One manager for everyone: a JupyterHub's users (authenticated through the Hub)
or a team with tokens of its own. It serves the same REST API, event stream and
service-port proxy as the server extension, with the same handlers
(:mod:`bai_jupyter.server`); single-user servers configured with its URL send
their API calls here instead of owning a manager.
"""
