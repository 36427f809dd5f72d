"""The layout keeps the architecture (docs/architecture.md): one direction of calls, no
circle, and modules small enough to do one job.

Read from the source, so a new import that breaks a rule fails here with the
module that made it. The circle test follows every import at module level, those
under ``if TYPE_CHECKING:`` too (a circle only the type checker sees is still two
modules that each need the other); not those inside functions, run later if at
all. The direction rules follow every import, wherever it is written: an import
inside a function is a call against the direction all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bai_jupyter.api import SessionsAPI
from bai_jupyter.client import RemoteManager
from bai_jupyter.manager import ScopedManager

PACKAGE = Path(__file__).resolve().parent.parent / "bai_jupyter"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports at module level: top level, and in top-level ``if`` (``if TYPE_CHECKING:``
    included) and ``try``."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)


def _every_import(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (functions, ``TYPE_CHECKING`` blocks …)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _graph(
    imports: Callable[[ast.Module], Iterator[ast.Import | ast.ImportFrom]],
) -> dict[str, set[str]]:
    """Module → the modules of this package it imports (those ``imports`` finds)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # ``from x import y``: y may be a submodule of x, else a name in x.
                targets = [
                    f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix
                    for a in node.names
                ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


#: Module-level imports (load-time and ``TYPE_CHECKING``): what a circle is made of.
GRAPH = _graph(_module_level_imports)
#: Every import: what the direction rules check.
CALLS = _graph(_every_import)


def _reaches(start: str, prefixes: tuple[str, ...]) -> list[str]:
    """An import path from ``start`` into any module under ``prefixes``, or []."""
    seen = {start}
    paths = [[start]]
    while paths:
        path = paths.pop()
        for nxt in sorted(CALLS[path[-1]]):
            if nxt.startswith(prefixes):
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                paths.append([*path, nxt])
    return []


def _cycle() -> list[str]:
    """One circle of module-level imports, or []: a depth-first search for a back edge."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for nxt in sorted(GRAPH[module]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(GRAPH):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_no_module_imports_itself_back() -> None:
    """No circle: following imports from any module never leads back to it."""
    assert _cycle() == [], " → ".join(_cycle())


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _under(prefix: str) -> list[str]:
    return sorted(m for m in GRAPH if _within(m, prefix))


_STORE = "bai_jupyter.store"
_SCHEDULER = "bai_jupyter.scheduler"
_MANAGER = "bai_jupyter.manager"


@pytest.mark.parametrize(
    ("layer", "forbidden", "allowed"),
    [
        # Front ends reach the manager only through its API. The server extension, the
        # provisioner's embedded manager (reach) and `kernelspec install` (which asks a
        # manager of the server's config what agents there are) own one, so they may
        # import the manager, never what lies behind it.
        ("bai_jupyter.server", (_STORE, _SCHEDULER), ()),
        ("bai_jupyter.reach", (_STORE, _SCHEDULER), ()),
        # The command line may also replay traces on the simulator and read a group's
        # scheduler settings (what a kernelspec needs to fit); never the live pass.
        (
            "bai_jupyter.cli",
            (_STORE, _SCHEDULER),
            (f"{_SCHEDULER}.simulator", f"{_SCHEDULER}.config"),
        ),
        ("bai_jupyter.provisioner", (_STORE, _SCHEDULER, _MANAGER), ()),
        ("bai_jupyter.magics", (_STORE, _SCHEDULER, _MANAGER), ()),
        ("bai_jupyter.widgets", (_STORE, _SCHEDULER, _MANAGER), ()),
        ("bai_jupyter.sessions_model", (_STORE, _SCHEDULER, _MANAGER), ()),
        ("bai_jupyter.client", (_STORE, _SCHEDULER, _MANAGER), ()),
    ],
)
def test_front_ends_use_only_the_api(
    layer: str, forbidden: tuple[str, ...], allowed: tuple[str, ...]
) -> None:
    assert _under(layer), f"no module {layer}: the rule checks nothing"
    for module in _under(layer):
        wrong = sorted(
            t
            for t in CALLS[module]
            if t.startswith(forbidden) and not any(_within(t, a) for a in allowed)
        )
        assert not wrong, f"{module} imports {wrong}: front ends use bai_jupyter.api"


#: The modules outside the manager that may import it: those that build one (or, for
#: the registry, hold the one the server extension built). Every other front end calls
#: the sessions API (``bai_jupyter.api``), so it works against a manager elsewhere.
MANAGER_OWNERS = {
    # The server extension makes, starts, registers and stops its manager.
    "bai_jupyter.server.app",
    # What serves the handlers: a ScopedManager per caller over the manager it owns.
    "bai_jupyter.server.host",
    # Its kernel-access listener checks tokens with that manager's KernelTokens.
    "bai_jupyter.server.kernel_access",
    # `bai-jupyter manager`: the shared manager service.
    "bai_jupyter.service.app",
    # `kernelspec install` asks a manager of the server's config which agents it gives.
    "bai_jupyter.cli.kernelspec",
    # The provisioner's embedded manager (and a ScopedManager over the registered one).
    "bai_jupyter.reach",
    # The manager of this process, for in-process front ends (a type only).
    "bai_jupyter.registry",
}


def test_only_its_owners_import_the_manager() -> None:
    """Outside the manager package, only the modules that build a manager import it."""
    importers = {
        module
        for module, targets in CALLS.items()
        if not _within(module, _MANAGER) and any(_within(t, _MANAGER) for t in targets)
    }
    assert importers == MANAGER_OWNERS, (
        f"import the manager: {sorted(importers - MANAGER_OWNERS)} (use bai_jupyter.api); "
        f"no longer do: {sorted(MANAGER_OWNERS - importers)} (take them off the list)"
    )


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        # The scheduler decides; it never touches an engine, directly or not.
        (_SCHEDULER, ("bai_jupyter.agents", _MANAGER, "bai_jupyter.server")),
        # Agents act; they never touch the store or the scheduler.
        ("bai_jupyter.agents", (_STORE, _SCHEDULER, _MANAGER, "bai_jupyter.server")),
        # The runtime runs in the kernel with nothing of ours but itself.
        ("bai_jupyter.runtime", ("bai_jupyter.",)),
    ],
)
def test_lower_layers_never_call_up(layer: str, forbidden: tuple[str, ...]) -> None:
    for module in _under(layer):
        for target in CALLS[module]:
            if _within(target, layer):
                continue
            path = [target] if target.startswith(forbidden) else _reaches(target, forbidden)
            assert not path, f"{layer} must not reach {forbidden}: {' → '.join([module, *path])}"


def test_both_doors_are_the_same_api() -> None:
    """The manager in process and the one over HTTP offer one API (checked by mypy too)."""

    def in_process(api: ScopedManager) -> SessionsAPI:
        return api

    def over_http(api: RemoteManager) -> SessionsAPI:
        return api

    names = {n for n in dir(SessionsAPI) if not n.startswith("_")}
    for cls in (ScopedManager, RemoteManager):
        assert names <= set(dir(cls)), names - set(dir(cls))


#: The most lines a module of the package may have: past it, it does several jobs.
MAX_MODULE_LINES = 400


def test_no_module_does_several_jobs() -> None:
    """Every module stays short enough to do one job: a bigger one is split by job."""
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    over = {path: lines for path, lines in sorted(sizes.items()) if lines > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by job): {over}"
