"""The labextension's API snapshot is the server's OpenAPI document as it is now.

``labextension/test/api-snapshot.json`` is what the extension's jest tests check its
TypeScript types against; it is written by ``labextension/scripts/openapi_snapshot.py``
(``jlpm snapshot``). Regenerated here in memory, so a change to the OpenAPI schemas or
the status sets that was not followed by ``jlpm snapshot`` fails in pytest too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from conftest import REPO

SCRIPT = REPO / "labextension" / "scripts" / "openapi_snapshot.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openapi_snapshot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_labextensions_api_snapshot_is_current() -> None:
    script = _script()
    target: Path = script.TARGET
    expected: str = script.snapshot_text()
    assert target.read_text() == expected, (
        f"{target} is stale: run `jlpm snapshot` in labextension/ and commit the file"
    )
