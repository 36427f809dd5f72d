"""Backend.AI-style compute sessions, native in Jupyter."""

__version__ = "0.1.0"


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext bai_jupyter``: the ``%bai`` magics (``bai_jupyter.magics``)."""
    from .magics import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    """The Jupyter server extension (``bai_jupyter.server.app.BaiJupyterApp``)."""
    from .server.app import BaiJupyterApp

    return [{"module": "bai_jupyter.server.app", "app": BaiJupyterApp}]
