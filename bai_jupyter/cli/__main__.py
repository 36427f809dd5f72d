"""``python -m bai_jupyter.cli``: the ``bai-jupyter`` command where no script is installed."""

import sys

from .app import main

sys.exit(main())
