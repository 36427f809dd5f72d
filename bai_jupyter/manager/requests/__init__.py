"""The request path: what a caller asks for, checked before anything runs.

- :mod:`.admission`: a request validated over its template, given its defaults, enqueued;
- :mod:`.launch`: a caller's create: admitted, claimed from a warm pool, else enqueued;
- :mod:`.mount_check`: which host directories a session may mount;
- :mod:`.policies`: per-user and per-group limits resolved for one owner;
- :mod:`.templates`: named, stored defaults;
- :mod:`.tokens`: kernel tokens, what code in a kernel may reach;
- :mod:`.services`: service ports a running session gains;
- :mod:`.views`: what a caller may see of the agents and the queue;
- :mod:`.retention`: records of ended sessions kept, then deleted.
"""
