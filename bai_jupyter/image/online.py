"""The online recipe: ``docker build`` of ``kernel_image/Dockerfile``, where a registry answers."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from .process import WORK_PARENT, Progress, run_logged
from .recipe import KERNEL_IMAGE_DIR, PACKAGES, image_labels


def build_online(tag: str, recipe: str, progress: Progress) -> None:
    """Build ``tag`` with the Dockerfile, labelled ``recipe``; a failure shows the log's tail."""
    cmd = ["docker", "build", "--tag", tag, "--build-arg", f"PACKAGES={' '.join(PACKAGES)}"]
    for key, value in image_labels(recipe, "dockerfile").items():
        cmd += ["--label", f"{key}={value}"]
    cmd.append(str(KERNEL_IMAGE_DIR))
    env = dict(os.environ)
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode != 0:
        env["DOCKER_BUILDKIT"] = "0"  # no buildx plugin: the classic builder, not an error
    progress(f"docker build {KERNEL_IMAGE_DIR}")
    with tempfile.TemporaryDirectory(prefix="bai-kernel-image-", dir=WORK_PARENT) as work:
        run_logged(cmd, "docker build", Path(work) / "build.log", env=env)
