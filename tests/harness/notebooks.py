"""One-cell notebooks: saved through a server's contents API, or run by ``jupyter execute``."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from harness.server import TOKEN, Server


def put_notebook(server: Server, name: str, source: str, kernelspec: str = "bai-w") -> None:
    """Save a one-cell notebook on a bai kernelspec through the contents API."""
    spec = {"name": kernelspec, "display_name": "bai", "language": "python"}
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": spec},
        "cells": [
            {
                "cell_type": "code",
                "id": "c1",
                "metadata": {},
                "source": source,
                "outputs": [],
                "execution_count": None,
            }
        ],
    }
    put_contents(server, name, {"type": "notebook", "format": "json", "content": notebook})


def put_file(server: Server, path: str, text: str) -> None:
    """A text file in the file browser's root."""
    put_contents(server, path, {"type": "file", "format": "text", "content": text})


def put_contents(server: Server, path: str, model: dict[str, Any]) -> None:
    """``model`` written at ``path`` through Jupyter's contents API."""
    request = urllib.request.Request(
        f"{server.url}api/contents/{path}",
        data=json.dumps(model).encode(),
        method="PUT",
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status in (200, 201)


def run_notebook(
    folder: Path, source: str, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``jupyter execute`` of a one-cell notebook on ``bai-py``: the run and what the cell
    printed (its standard output, every stream of it)."""
    notebook = folder / "hello.ipynb"
    cell: dict[str, Any] = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": source,
    }
    book = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    notebook.write_text(json.dumps(book))
    execute = Path(sys.executable).parent / "jupyter-execute"
    done = subprocess.run(
        [str(execute), "--inplace", "--kernel_name=bai-py", str(notebook)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    outputs = json.loads(notebook.read_text())["cells"][0]["outputs"]
    printed = [o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == "stdout"]
    return done, "".join("".join(text) for text in printed)
