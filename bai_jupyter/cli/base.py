"""What every ``bai-jupyter`` command shares: the Jupyter server's config, and argparse's manners.

Each command is a traitlets :class:`~jupyter_core.application.JupyterApp`, so
it reads the config files the Jupyter server reads and ``c.BaiSessionManager.*``
means the same to both. Where a Jupyter application's manners are not a console
script's, ``bai-jupyter`` keeps its own: a mistake on the command line is a
usage line and one ``PROG: error: …`` line on stderr with exit status 2
(traitlets would log it and exit 1, or ignore a mistyped option), and a run
returns an exit status instead of leaving a singleton application behind.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Callable, Generator
from typing import Any, ClassVar, NoReturn

from jupyter_core.application import JupyterApp, NoStart, base_aliases, base_flags
from traitlets import TraitError
from traitlets.config import Application, Configurable
from traitlets.config.loader import ArgumentError, KVArgParseConfigLoader
from traitlets.utils.importstring import import_item

from .. import __version__

#: The aliases and flags of every command: Jupyter's, less ``--generate-config`` (it
#: would write a command's few options over the server's ``jupyter_server_config.py``)
#: and its ``-y``.
ALIASES: dict[str, Any] = {
    **base_aliases,
    "config": (
        "JupyterApp.config_file",
        "A config file to read instead of jupyter_server_config.py/.json (as for "
        "`jupyter server --config`).",
    ),
}
FLAGS: dict[str, Any] = {k: v for k, v in base_flags.items() if k not in ("generate-config", "y")}

Subcommand = tuple[Callable[[Application], Application], str]


def subcommand(target: str | type[Application], help: str) -> Subcommand:
    """A traitlets ``subcommands`` entry that makes a new application on each run.

    traitlets' own entries make a process-wide singleton, which a second run in
    the same process (tests, a notebook) would reuse with the first run's options.
    ``target`` may be an import path, so only the command that runs is imported.
    """

    def make(parent: Application) -> Application:
        app_class: type[Application] = import_item(target) if isinstance(target, str) else target
        return app_class(parent=parent)

    return make, help


class BaiCommand(JupyterApp):
    """A ``bai-jupyter`` command or subcommand (subclasses set the class attributes)."""

    version = __version__
    aliases = ALIASES
    flags = FLAGS
    #: One line: how to call it (argparse's usage line, also at the top of ``--help``).
    usage: ClassVar[str] = ""
    #: Names of the positional arguments it takes, all required (in ``extra_args``).
    arguments: ClassVar[tuple[str, ...]] = ()
    #: Groups of flags of which at most one may be given (argparse's mutually exclusive).
    exclusive: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def _config_file_name_default(self) -> str:
        return "jupyter_server_config"  # the server's, so that both read the same config

    def _log_level_default(self) -> int:
        return logging.WARNING  # a command prints its results; the log is for trouble

    def _find_subcommand(self, name: str) -> str:
        return ""  # no `bai-jupyter-NAME` executables: the subcommands are the classes listed

    def print_version(self) -> None:
        print(f"{self.name} {self.version}")

    def emit_description(self) -> Generator[str, None, None]:
        yield f"usage: {self.usage}"
        yield ""
        yield from super().emit_description()

    def usage_error(self, message: str) -> NoReturn:
        """Stop as argparse does on a command-line mistake: usage, one error line, exit 2."""
        print(f"usage: {self.usage}\n{self.name}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def adapt_argv(self, argv: list[str]) -> list[str]:
        """Turn a documented option spelling traitlets cannot parse into one it can."""
        return argv

    def _create_loader(
        self,
        argv: list[str] | None,
        aliases: dict[str, Any],
        flags: dict[str, Any],
        classes: list[type[Configurable]] | None,
    ) -> KVArgParseConfigLoader:
        return KVArgParseConfigLoader(
            argv,
            aliases,
            flags,
            classes=classes,
            log=self.log,
            subcommands=self.subcommands,
            prog=self.name,
            usage=self.usage,
        )

    def parse_command_line(self, argv: list[str] | None = None) -> None:
        """Parse like traitlets, but a bad value or argument count is a usage error."""
        args = list(sys.argv[1:] if argv is None else argv)
        if not (args and args[0] in self.subcommands):
            args = self.adapt_argv(args)
            self._check_options(args)
            for group in self.exclusive:
                options = {f"--{flag}" for flag in group}
                given = list(dict.fromkeys(arg for arg in args if arg in options))
                if len(given) > 1:
                    self.usage_error(f"argument {given[1]}: not allowed with argument {given[0]}")
        # traitlets' own parse, without its catch_config_error (which logs and exits 1).
        parse: Callable[[Application, list[str]], None] = inspect.unwrap(
            Application.parse_command_line
        )
        try:
            parse(self, args)
        except (TraitError, ArgumentError) as exc:
            self.usage_error(str(exc))
        if not self._dispatching:
            self._check_arguments()

    def _check_options(self, args: list[str]) -> None:
        """A mistyped option is an error, as in argparse (traitlets would warn and go on).

        ``--Class.trait=value`` is any configurable's trait, as for every Jupyter app."""
        known = {"help", "help-all", "version", *self.aliases, *self.flags}
        for arg in args:
            if arg == "--":
                return
            name = arg[2:].partition("=")[0]
            if arg.startswith("--") and name not in known and "." not in name:
                self.usage_error(f"unrecognized arguments: {arg}")

    def _check_arguments(self) -> None:
        given, wanted = self.extra_args, self.arguments
        if self.subcommands:
            choices = ", ".join(self.subcommands)
            if not given:
                self.usage_error(f"a subcommand is required: {choices}")
            self.usage_error(f"unknown subcommand {given[0]!r} (choose from {choices})")
        if len(given) < len(wanted):
            self.usage_error(
                f"the following arguments are required: {' '.join(wanted[len(given) :])}"
            )
        if len(given) > len(wanted):
            self.usage_error(f"unrecognized arguments: {' '.join(given[len(wanted) :])}")

    def start(self) -> None:
        super().start()  # a parent hands over to its subcommand here (NoStart)
        raise SystemExit(self.run())

    def run(self) -> int:
        """Do the command's work; its exit status (subcommands of a parent run instead)."""
        raise NotImplementedError


def run(app_class: type[BaiCommand], argv: list[str] | None = None) -> int:
    """Run a command as its console script does (``argv`` None: ``sys.argv``); its exit status."""
    app = app_class()
    try:
        app.initialize(argv)
        app.start()
    except NoStart:  # a subcommand showed its config (--show-config) instead of running
        return 0
    except SystemExit as exc:
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BrokenPipeError:
        # `bai-jupyter simulate big.json | head`: the reader left; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0
