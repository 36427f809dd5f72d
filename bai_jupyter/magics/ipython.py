"""IPython's untyped helpers for magics, typed (arguments, parsing, display)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from IPython import display as _display
from IPython.core import magic_arguments as _margs

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


_arguments: Any = _margs
_displays: Any = _display


def magic_arguments(name: str) -> Callable[[F], F]:
    """IPython's decorator that builds the command's parser (and help) from its arguments."""
    decorator: Callable[[F], F] = _arguments.magic_arguments(name)
    return decorator


def argument(*flags: str, **options: Any) -> Callable[[F], F]:
    """One ``argparse`` argument of a command."""
    decorator: Callable[[F], F] = _arguments.argument(*flags, **options)
    return decorator


def parse_argstring(command: Callable[..., Any], line: str) -> Any:
    """The parsed options of ``line``; a UsageError (one line) when they are wrong."""
    return _arguments.parse_argstring(command, line)


def display(obj: Any, display_id: bool = False) -> Any:
    """Show ``obj`` in the front end; with ``display_id`` a handle to update it in place."""
    return _displays.display(obj, display_id=display_id)


def pretty(text: str) -> Any:
    """Plain text for ``display`` (shown as is, not as a quoted string)."""
    return _displays.Pretty(text)
