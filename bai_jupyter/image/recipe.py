"""The recipe of the default kernel image: one package list, one config, one hash.

Changing anything here (or in ``kernel_image/``) changes :func:`recipe_hash`,
and :func:`~bai_jupyter.image.ensure_image` rebuilds. Bump
:data:`RECIPE_VERSION` for a change that the hashed texts do not show (e.g.
how the offline build is driven).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

RECIPE_VERSION = 1
SUITE = "bookworm"
BASE_IMAGE = "debian:bookworm-slim"
PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-ipykernel",
    "openssh-server",
    "openssh-client",
    "procps",
    "iproute2",
    "ca-certificates",
    "iputils-ping",
    "netbase",
    "rsync",
)
"""Debian packages of the kernel image, for both recipes."""

IMAGE_CHANGES: tuple[str, ...] = (
    'CMD ["/bin/bash"]',
    "ENV LANG=C.UTF-8",
    # debugpy (ipykernel's debugger) warns about frozen modules on every kernel start.
    "ENV PYDEVD_DISABLE_FILE_VALIDATION=1",
)
"""Image config the Dockerfile sets; the offline ``docker import`` applies the same."""

RECIPE_LABEL = "ai.backend.bai-jupyter.recipe"
BUILD_LABEL = "ai.backend.bai-jupyter.build"
SERVICE_PORTS_LABEL = "ai.backend.service-ports"

#: The Dockerfile and the install script both recipes run.
KERNEL_IMAGE_DIR = Path(__file__).resolve().parent.parent / "kernel_image"


def _recipe_files() -> dict[str, str]:
    return {
        name: (KERNEL_IMAGE_DIR / name).read_text(encoding="utf-8")
        for name in ("Dockerfile", "setup.sh")
    }


def recipe_hash() -> str:
    """sha256 of everything that shapes the image, so a stale image is detected by label."""
    recipe = {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "base": BASE_IMAGE,
        "packages": list(PACKAGES),
        "changes": list(IMAGE_CHANGES),
        "files": _recipe_files(),
    }
    blob = json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def image_labels(recipe: str, build: str) -> dict[str, str]:
    """Labels of a built image; ``service-ports`` empty: the base image declares none."""
    return {RECIPE_LABEL: recipe, BUILD_LABEL: build, SERVICE_PORTS_LABEL: ""}
