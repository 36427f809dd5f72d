"""Building the kernel image: choose the recipe, one build at a time, check what was built.

Everything here is blocking (subprocess): the CLI and scripts call it directly,
async code through ``await asyncio.to_thread(ensure_image, tag)``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..runtime.protocol import DEFAULT_IMAGE
from .offline import build_offline
from .online import build_online
from .process import ImageBuildError, Progress, say
from .recipe import BASE_IMAGE, RECIPE_LABEL, recipe_hash
from .status import ImageStatus, check_docker, image_status, registry_reachable


@contextlib.contextmanager
def _build_lock(tag: str, progress: Progress) -> Iterator[None]:
    """Serialize builds on this machine (two test runs, two scripts): the second one waits."""
    name = hashlib.sha256(tag.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"bai-jupyter-image-{os.getuid()}-{name}.lock"
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build of {tag} (lock {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_image(
    tag: str = DEFAULT_IMAGE,
    offline: bool | None = None,
    *,
    progress: Progress = say,
) -> ImageStatus:
    """Build ``tag`` now, whatever is there (``bai-jupyter image build --force``).

    ``offline``: True = debootstrap, False = Dockerfile, None = Dockerfile when
    :func:`~.status.registry_reachable`, else debootstrap.
    """
    check_docker()
    with _build_lock(tag, progress):
        return _build_locked(tag, offline, progress)


def _build_locked(tag: str, offline: bool | None, progress: Progress) -> ImageStatus:
    before = image_status(tag)
    if offline is None:
        progress(f"probing for a registry (docker pull {BASE_IMAGE})")
        offline = not registry_reachable()
        if offline:
            progress("no registry reachable: building offline")
    started = time.monotonic()
    recipe = recipe_hash()
    if offline:
        progress(f"building kernel image {tag} offline (debootstrap, ~2 min)")
        build_offline(tag, recipe, progress)
    else:
        progress(f"building kernel image {tag} online (docker build, ~1 min)")
        build_online(tag, recipe, progress)
    after = image_status(tag)
    if not after.up_to_date:
        raise ImageBuildError(f"built {tag}, but its {RECIPE_LABEL} label does not match")
    if before.image_id and before.image_id != after.image_id:
        # Old builds lost their tag: drop them (prune keeps any a container still uses,
        # and a later build collects those).
        subprocess.run(
            ["docker", "image", "prune", "--force", "--filter", f"label={RECIPE_LABEL}"],
            capture_output=True,
            timeout=120,
            check=False,
        )
    size = f"{(after.size or 0) / 1e6:.0f} MB"
    progress(f"built {tag} ({size}) in {time.monotonic() - started:.0f} s")
    return after


def ensure_image(
    tag: str = DEFAULT_IMAGE,
    offline: bool | None = None,
    *,
    progress: Progress = say,
) -> ImageStatus:
    """Make sure ``tag`` exists and was built from the current recipe; build it only if not.

    Cheap when up to date (one ``docker image inspect``). ``offline`` as in
    :func:`build_image`. Raises :class:`~.process.ImageBuildError`.
    """
    status = image_status(tag)
    if status.up_to_date:
        return status
    check_docker()
    with _build_lock(tag, progress):
        status = image_status(tag)  # another process may have built it while we waited
        if status.up_to_date:
            return status
        if status.present:
            progress(f"kernel image {tag} is from another recipe: rebuilding")
        return _build_locked(tag, offline, progress)
