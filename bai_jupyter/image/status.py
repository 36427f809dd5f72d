"""What the Docker engine has: is there one, and is the image there and from this recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from ..runtime.protocol import DEFAULT_IMAGE
from .process import DockerUnavailable, ImageBuildError, run_command
from .recipe import BASE_IMAGE, BUILD_LABEL, RECIPE_LABEL, recipe_hash

REGISTRY_PROBE_TIMEOUT = 30.0
"""Seconds ``docker pull`` of the base image may take before we build offline."""


def check_docker() -> str:
    """Return the engine's version; ImageBuildError saying how to get one when none answers."""
    if shutil.which("docker") is None:
        raise DockerUnavailable(
            "no docker CLI on PATH: install Docker (Debian/Ubuntu: apt-get install docker.io; "
            "scripts/_env.sh does it when run as root)"
        )
    try:
        return run_command(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            "docker version",
            timeout=20.0,
        ).strip()
    except ImageBuildError as exc:
        raise DockerUnavailable(
            "no Docker engine answers: start one (systemctl start docker, or dockerd & as root; "
            f"scripts/_env.sh does it as root) or set DOCKER_HOST\n{exc}"
        ) from exc


def _inspect(ref: str) -> dict[str, Any] | None:
    """``docker image inspect``: the image's JSON, or None when there is no such image."""
    try:
        proc = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .}}", ref],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=30.0,
            check=False,
        )
    except FileNotFoundError:
        check_docker()  # raises the clear "no docker CLI" error
        raise
    if proc.returncode != 0:
        if "no such image" in proc.stderr.lower():
            return None
        check_docker()  # a dead engine: say so, not "inspect failed"
        raise ImageBuildError(f"docker image inspect {ref} failed", proc.stderr)
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@dataclass(frozen=True)
class ImageStatus:
    """What the engine has under a tag, against the recipe this code would build."""

    tag: str
    image_id: str | None
    recipe: str | None
    """The image's :data:`RECIPE_LABEL`, None when absent (or no image)."""
    expected: str
    size: int | None = None
    created: str | None = None
    build: str | None = None

    @property
    def present(self) -> bool:
        return self.image_id is not None

    @property
    def up_to_date(self) -> bool:
        return self.present and self.recipe == self.expected


def image_status(tag: str = DEFAULT_IMAGE) -> ImageStatus:
    """Inspect ``tag`` (one ``docker image inspect``: fast enough to call before every use)."""
    expected = recipe_hash()
    data = _inspect(tag)
    if data is None:
        return ImageStatus(tag, None, None, expected)
    labels: dict[str, str] = (data.get("Config") or {}).get("Labels") or {}
    return ImageStatus(
        tag=tag,
        image_id=str(data["Id"]),
        recipe=labels.get(RECIPE_LABEL),
        expected=expected,
        size=int(data.get("Size") or 0),
        created=str(data.get("Created") or "") or None,
        build=labels.get(BUILD_LABEL),
    )


def registry_reachable(timeout: float = REGISTRY_PROBE_TIMEOUT) -> bool:
    """True when the online recipe can run: the base image is here or ``docker pull`` gets it.

    Pulling through the engine (not probing an URL ourselves) honours its mirrors
    and proxies; the pull is needed by the online build anyway.
    """
    if _inspect(BASE_IMAGE) is not None:
        return True
    try:
        proc = subprocess.run(
            ["docker", "pull", "--quiet", BASE_IMAGE],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0
