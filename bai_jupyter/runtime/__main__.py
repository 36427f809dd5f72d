"""Entry point for ``python3 /opt/bai-runtime`` and ``python -m bai_jupyter.runtime``.

Run as a directory, this file is the top-level ``__main__`` and the directory is
``sys.path[0]``, so the logic module is imported by its plain, unique name
``bai_runtime``; run as a package it is imported relative to the package. One
code path, no package of ours needed in the image.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

if __name__ == "__main__":
    if __package__:
        _name = f"{__package__}.bai_runtime"
    else:
        _here = str(Path(__file__).resolve().parent)
        if _here not in sys.path:
            sys.path.insert(0, _here)
        _name = "bai_runtime"
    sys.exit(importlib.import_module(_name).main())
