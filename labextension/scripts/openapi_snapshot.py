"""Write test/api-snapshot.json: the API as the extension's tests check it.

The server's OpenAPI document (``bai_jupyter/server/openapi.py``) is reduced to what
``src/types.ts`` mirrors (each schema's properties, their types, enums and
nullability, and what is required), next to the lifecycle's status sets
(``bai_jupyter/model/status.py``), so the jest tests compare the TypeScript side
with them without running Python. Run it after changing either (``jlpm snapshot``
from ``labextension/``, with the project's Python as ``python``) and commit the file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bai_jupyter.model import status
from bai_jupyter.server.openapi import openapi

KEEP = ("type", "enum", "nullable")


def reduce(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {key: schema[key] for key in KEEP if key in schema}
    if "required" in schema:
        out["required"] = sorted(schema["required"])
    if "properties" in schema:
        out["properties"] = {
            name: reduce(prop) for name, prop in sorted(schema["properties"].items())
        }
    if isinstance(schema.get("items"), dict):
        out["items"] = reduce(schema["items"])
    return out


def status_sets() -> dict[str, list[str]]:
    """The named sets of statuses, in lifecycle order."""
    active: Iterable[status.Status] | None = getattr(status, "ACTIVE", None)
    if active is None:  # still the manager's own
        from bai_jupyter.manager import core

        active = core.ACTIVE
    sets: dict[str, Iterable[status.Status]] = {
        "STARTING": status.STARTING,
        "ACTIVE": active,
        "TERMINAL": status.TERMINAL,
    }
    order = list(status.Status)
    return {
        name: [s.value for s in sorted(members, key=order.index)] for name, members in sets.items()
    }


#: The file the jest tests read (tests/test_openapi.py checks it is current).
TARGET = Path(__file__).resolve().parent.parent / "test" / "api-snapshot.json"


def snapshot_text() -> str:
    """The snapshot as it should be now: the file's whole content."""
    document = openapi("/")
    schemas = {name: reduce(s) for name, s in sorted(document["components"]["schemas"].items())}
    snapshot = {"openapi": document["openapi"], "statuses": status_sets(), "schemas": schemas}
    return json.dumps(snapshot, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    TARGET.write_text(snapshot_text())
    sys.stdout.write(f"wrote {TARGET}\n")


if __name__ == "__main__":
    main()
