"""``python -m bai_jupyter.image {build,ensure,status}`` (``scripts/_env.sh`` runs ``ensure``)."""

import sys

from .cli import main

sys.exit(main())
