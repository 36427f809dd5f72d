"""``bai-jupyter``: the command line. Parsing and printing only; the work lives elsewhere.

Every command is a traitlets application (:class:`~.base.BaiCommand`) that
reads the Jupyter server's config; :data:`~.app.SUBCOMMANDS` lists them.
"""

from .app import SUBCOMMANDS, main

__all__ = ["SUBCOMMANDS", "main"]
