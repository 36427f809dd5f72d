"""Entry point for ``python3 /opt/bai-runtime`` and ``python -m bai_jupyter.runtime``.

Run as a directory (in a kernel, on the image's own ``python3`` with nothing of
ours installed), this file is the top-level ``__main__``: it loads the directory
as a package of its own under a private name, so the runtime's modules import
each other relatively, exactly as they do inside ``bai_jupyter.runtime``. One
code path, no package of ours needed in the image.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

#: The runtime directory's package name when run as a directory (unique in any image).
_PRIVATE_NAME = "_bai_jupyter_runtime"


def _package() -> str:
    if __package__:
        return __package__
    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location(
        _PRIVATE_NAME, here / "__init__.py", submodule_search_locations=[str(here)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PRIVATE_NAME] = module
    spec.loader.exec_module(module)
    return _PRIVATE_NAME


if __name__ == "__main__":
    sys.exit(importlib.import_module(f"{_package()}.bai_runtime").main())
