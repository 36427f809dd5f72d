"""The local backend: kernels as native processes on this machine.

The embedded default where no Docker engine answers (a laptop without Docker,
Binder). Each kernel is the stdlib runtime (``bai_jupyter/runtime``) run by the
*current* interpreter in its own process group, with its own directory (see
``files``); ``processes`` reads the process table, ``kernels`` stops a kernel's
process tree, and ``agent`` ties them together as :class:`LocalAgent`.

What it does not do: no SSH between kernels, no isolation (kernels run as the
user, see the whole file system and share the machine's network, so cluster
hostnames such as ``sub1`` do not resolve; ``MASTER_ADDR`` is set to the
loopback address instead), no resource enforcement (slots are bookkeeping for
the scheduler only), read-only data folders are not read-only.
"""

from .agent import LocalAgent

__all__ = ["LocalAgent"]
