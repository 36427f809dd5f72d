"""The default kernel image: Debian bookworm with python3, ipykernel and sshd.

Any image with ``python3``, ``ipykernel`` and ``sshd`` can run a session (see
docs/architecture.md); this package builds the one we use by default (its tag
is :data:`~bai_jupyter.runtime.protocol.DEFAULT_IMAGE`), from ONE package list
(:data:`~.recipe.PACKAGES`) and ONE install script (``kernel_image/setup.sh``)
through either of two recipes, so they cannot drift:

* online (:mod:`.online`): ``docker build`` of ``kernel_image/Dockerfile``
  (``FROM debian:bookworm-slim``), where a registry is reachable;
* offline (:mod:`.offline`): ``debootstrap --variant=minbase`` from a Debian
  mirror, the same ``setup.sh`` inside that chroot, then ``tar | docker
  import`` (needs root).

The image carries the label :data:`~.recipe.RECIPE_LABEL` =
:func:`~.recipe.recipe_hash`, so :func:`ensure_image` is a cheap ``docker image
inspect`` (:mod:`.status`) when nothing changed and rebuilds (:mod:`.build`)
only when the recipe does. Command line (:mod:`.cli`): ``bai-jupyter image``,
or ``python -m bai_jupyter.image {ensure,build,status}`` (``scripts/_env.sh``).
"""

from .build import build_image, ensure_image
from .cli import format_status, main
from .offline import DEFAULT_MIRROR, DEFAULT_SECURITY_MIRROR
from .process import DockerUnavailable, ImageBuildError, Progress, say
from .recipe import (
    BASE_IMAGE,
    BUILD_LABEL,
    IMAGE_CHANGES,
    KERNEL_IMAGE_DIR,
    PACKAGES,
    RECIPE_LABEL,
    SERVICE_PORTS_LABEL,
    recipe_hash,
)
from .status import ImageStatus, check_docker, image_status, registry_reachable

__all__ = [
    "BASE_IMAGE",
    "BUILD_LABEL",
    "DEFAULT_MIRROR",
    "DEFAULT_SECURITY_MIRROR",
    "IMAGE_CHANGES",
    "KERNEL_IMAGE_DIR",
    "PACKAGES",
    "RECIPE_LABEL",
    "SERVICE_PORTS_LABEL",
    "DockerUnavailable",
    "ImageBuildError",
    "ImageStatus",
    "Progress",
    "build_image",
    "check_docker",
    "ensure_image",
    "format_status",
    "image_status",
    "main",
    "recipe_hash",
    "registry_reachable",
    "say",
]
