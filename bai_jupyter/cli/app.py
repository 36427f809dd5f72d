"""``bai-jupyter``: the command line's root, and the table of its subcommands."""

from __future__ import annotations

from .base import BaiCommand, run, subcommand

#: name → (its application class, as an import path: only the one that runs is imported;
#: one line of help). A new subcommand is one :class:`~.base.BaiCommand` and one line here.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "endpoint": (
        "bai_jupyter.cli.endpoint.EndpointApp",
        "create, list, show, update or delete inference endpoints",
    ),
    "image": (
        "bai_jupyter.image.cli.ImageApp",
        "build or inspect the default kernel image",
    ),
    "kernelspec": (
        "bai_jupyter.cli.kernelspec.KernelspecApp",
        "install or list kernelspecs whose kernel runs as main1 of a session",
    ),
    "manager": (
        "bai_jupyter.service.app.ManagerService",
        "run the shared session manager service (a JupyterHub service, or alone)",
    ),
    "simulate": (
        "bai_jupyter.cli.simulate.SimulateApp",
        "replay a session trace under a simulated clock",
    ),
}


class BaiJupyterCommand(BaiCommand):
    """``bai-jupyter COMMAND``."""

    name = "bai-jupyter"
    description = (
        "Backend.AI-style compute sessions, native in Jupyter. Every command reads the "
        "Jupyter server's config (jupyter_server_config.py/.json in Jupyter's config path, "
        "or the file of --config), so c.BaiSessionManager.* means the same to both."
    )
    usage = "bai-jupyter {" + ",".join(SUBCOMMANDS) + "} [options]"
    subcommands = {  # noqa: RUF012 (traitlets' own class attribute)
        name: subcommand(target, help) for name, (target, help) in SUBCOMMANDS.items()
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bai-jupyter`` console script; returns the exit status."""
    return run(BaiJupyterCommand, argv)
