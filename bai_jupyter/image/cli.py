"""``bai-jupyter image build|ensure|status`` (also ``python -m bai_jupyter.image``).

Exit status: 0 done or up to date; 1 a build failed (or ``status``: missing or
stale); 2 no Docker engine, or a usage error.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from traitlets import Bool, Unicode

from ..cli.base import ALIASES, FLAGS, BaiCommand, run, subcommand
from ..runtime.protocol import DEFAULT_IMAGE
from .build import build_image, ensure_image
from .offline import DEFAULT_MIRROR
from .process import DockerUnavailable, ImageBuildError, say
from .recipe import BASE_IMAGE, PACKAGES, RECIPE_LABEL, SUITE
from .status import ImageStatus, image_status

#: The prefix of every failure of an image action, from either command line.
_PROG = "bai-jupyter image"


def format_status(status: ImageStatus) -> str:
    """Human-readable ``image status`` lines."""
    lines = [f"tag:     {status.tag}"]
    if not status.present:
        lines += ["present: no", f"recipe:  (want {status.expected[:12]})"]
        return "\n".join(lines)
    size = f"{(status.size or 0) / 1e6:.0f} MB"
    lines.append(f"present: yes ({status.image_id}, {size}, created {status.created})")
    if status.up_to_date:
        lines.append(f"recipe:  up to date ({status.expected[:12]}, built by {status.build})")
    else:
        have = status.recipe[:12] if status.recipe else "no label"
        lines.append(f"recipe:  stale ({have}; want {status.expected[:12]}): run image build")
    return "\n".join(lines)


class ImageAction(BaiCommand):
    """One ``image`` action on one tag; Docker's failures become its exit status."""

    tag = Unicode(DEFAULT_IMAGE, config=True, help="Image tag.")

    aliases = {**ALIASES, "tag": "ImageAction.tag"}  # noqa: RUF012 (traitlets' own class attribute)

    def run(self) -> int:
        try:
            return self.act()
        except DockerUnavailable as exc:
            print(f"{_PROG}: error: {exc}", file=sys.stderr)
            return 2
        except ImageBuildError as exc:
            print(f"{_PROG}: error: {exc}", file=sys.stderr)
            return 1

    def act(self) -> int:
        raise NotImplementedError


class ImageBuildAction(ImageAction):
    """An action that may build: ``--offline`` or ``--online`` picks the recipe."""

    offline = Bool(
        None,
        allow_none=True,
        config=True,
        help="Build offline (debootstrap + docker import) or online (docker build); "
        "default: online when a registry answers.",
    )
    #: Said after "up to date": how to build anyway.
    up_to_date_hint: ClassVar[str] = ""

    exclusive = (("offline", "online"),)
    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **FLAGS,
        "offline": (
            {"ImageBuildAction": {"offline": True}},
            "debootstrap + docker import (needs root and debootstrap)",
        ),
        "online": (
            {"ImageBuildAction": {"offline": False}},
            f"docker build FROM {BASE_IMAGE} (needs a registry or that image)",
        ),
    }

    def act(self) -> int:
        status = image_status(self.tag)
        if status.up_to_date:
            short_id = (status.image_id or "")[:19]
            say(f"kernel image {self.tag} up to date ({short_id}){self.up_to_date_hint}")
            return 0
        ensure_image(self.tag, self.offline)
        return 0


class ImageBuildApp(ImageBuildAction):
    """``bai-jupyter image build``."""

    name = "bai-jupyter image build"
    description = "Build the kernel image (skipped when up to date, unless --force)."
    usage = "bai-jupyter image build [--offline | --online] [--tag T] [--force]"
    up_to_date_hint = "; --force rebuilds"

    force = Bool(False, config=True, help="Rebuild even when up to date.")

    flags = {  # noqa: RUF012 (traitlets' own class attribute)
        **ImageBuildAction.flags,
        "force": ({"ImageBuildApp": {"force": True}}, force.help),
    }

    def act(self) -> int:
        if self.force:
            build_image(self.tag, self.offline)
            return 0
        return super().act()


class ImageEnsureApp(ImageBuildAction):
    """``bai-jupyter image ensure``."""

    name = "bai-jupyter image ensure"
    description = "Build the kernel image only if missing or stale (scripts use this)."
    usage = "bai-jupyter image ensure [--offline | --online] [--tag T]"


class ImageStatusApp(ImageAction):
    """``bai-jupyter image status``."""

    name = "bai-jupyter image status"
    description = "Print the tag, whether it is present, and whether its recipe hash matches."
    usage = "bai-jupyter image status [--tag T]"

    def act(self) -> int:
        status = image_status(self.tag)
        print(format_status(status))
        return 0 if status.up_to_date else 1


class ImageApp(BaiCommand):
    """``bai-jupyter image ACTION``."""

    name = "bai-jupyter image"
    description = (
        f"Build or inspect the default kernel image ({DEFAULT_IMAGE}): Debian {SUITE} with "
        f"{', '.join(PACKAGES)}.\n\n"
        "Online it is a `docker build` of bai_jupyter/kernel_image/Dockerfile; offline (no "
        "registry reachable; needs root and debootstrap) a debootstrap root from "
        f"$BAI_DEBIAN_MIRROR (default {DEFAULT_MIRROR}) imported with `docker import`.\n\n"
        f"The image's label {RECIPE_LABEL} holds the recipe hash: a build is skipped when "
        "it matches, unless --force."
    )
    usage = "bai-jupyter image {build,ensure,status} [options]"
    subcommands = {  # noqa: RUF012 (traitlets' own class attribute)
        "build": subcommand(
            ImageBuildApp, "build the kernel image (skipped when up to date, unless --force)"
        ),
        "ensure": subcommand(
            ImageEnsureApp, "build the kernel image only if missing or stale (scripts use this)"
        ),
        "status": subcommand(
            ImageStatusApp, "print tag, whether present, and whether the recipe hash matches"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m bai_jupyter.image ACTION``: the same as ``bai-jupyter image ACTION``."""
    return run(ImageApp, argv)
