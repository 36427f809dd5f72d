"""The default kernel image: Debian bookworm with python3, ipykernel and sshd.

Any image with ``python3``, ``ipykernel`` and ``sshd`` can run a session (see
docs/architecture.md); this module builds the one we use by default, from ONE package list
(:data:`PACKAGES`) and ONE install script (``kernel_image/setup.sh``) through
either of two recipes, so they cannot drift:

* online: ``docker build`` of ``kernel_image/Dockerfile`` (``FROM
  debian:bookworm-slim``), where a registry is reachable;
* offline: ``debootstrap --variant=minbase`` from a Debian mirror, the same
  ``setup.sh`` inside that chroot, then ``tar | docker import`` (needs root).

The image carries the label :data:`RECIPE_LABEL` = :func:`recipe_hash`, so
:func:`ensure_image` is a cheap ``docker image inspect`` when nothing changed
and rebuilds only when the recipe does. Everything here is blocking
(subprocess): the CLI and scripts call it directly, async code through
``await asyncio.to_thread(ensure_image, tag)``.

Command line: ``python -m bai_jupyter.image {ensure,build,status}`` (used by
``scripts/_env.sh``), and the same ``build``/``status`` under ``bai-jupyter
image`` through :func:`add_cli`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .runtime.protocol import DEFAULT_IMAGE

# ---------------------------------------------------------------------------
# The recipe. Changing anything here (or in kernel_image/) changes
# recipe_hash(), and ensure_image() rebuilds. Bump RECIPE_VERSION for a change
# that the hashed texts do not show (e.g. how the offline build is driven).

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

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
KERNEL_IMAGE_DIR = Path(__file__).resolve().parent / "kernel_image"
WORK_PARENT = Path("/var/tmp")

REGISTRY_PROBE_TIMEOUT = 30.0
"""Seconds ``docker pull`` of the base image may take before we build offline."""

_CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_STEP_TIMEOUT = 1800.0
_TAIL_LINES = 30

Progress = Callable[[str], None]


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-_TAIL_LINES:])


class ImageBuildError(RuntimeError):
    """A build or check failed; the message says what, and shows the tail of its output."""

    def __init__(self, message: str, output: str = "") -> None:
        tail = _tail(output)
        super().__init__(f"{message}\n--- last lines of output ---\n{tail}" if tail else message)


class DockerUnavailable(ImageBuildError):
    """No docker CLI, or no engine answers: nothing to build with (tests skip or fail on it)."""


def say(message: str) -> None:
    """Default progress sink: one ``==>`` line on stderr (stdout stays the caller's)."""
    print(f"==> {message}", file=sys.stderr, flush=True)


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


# ---------------------------------------------------------------------------
# Running commands


def _run(
    cmd: Sequence[str],
    what: str,
    *,
    timeout: float | None = 60.0,
    env: dict[str, str] | None = None,
) -> str:
    """Run a short command, return its stdout+stderr; ImageBuildError with its tail on failure."""
    try:
        proc = subprocess.run(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{what}: {cmd[0]} not found on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        out = exc.output if isinstance(exc.output, str) else ""
        raise ImageBuildError(f"{what}: timed out after {timeout:.0f} s", out) from exc
    if proc.returncode != 0:
        raise ImageBuildError(
            f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}", proc.stdout
        )
    return proc.stdout


def _run_logged(
    cmd: Sequence[str], what: str, log: Path, *, env: dict[str, str] | None = None
) -> None:
    """Run a long, chatty command with its output appended to ``log`` (not kept in memory)."""
    with log.open("a", encoding="utf-8", errors="replace") as sink:
        sink.write(f"\n$ {shlex.join(cmd)}\n")
        sink.flush()
        try:
            rc = subprocess.run(
                list(cmd),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=_STEP_TIMEOUT,
                env=env,
                check=False,
            ).returncode
        except FileNotFoundError as exc:
            raise ImageBuildError(f"{what}: {cmd[0]} not found on PATH") from exc
        except subprocess.TimeoutExpired as exc:
            raise ImageBuildError(
                f"{what}: timed out after {_STEP_TIMEOUT:.0f} s",
                log.read_text(errors="replace"),
            ) from exc
    if rc != 0:
        raise ImageBuildError(
            f"{what} failed (exit {rc}): {shlex.join(cmd)}", log.read_text(errors="replace")
        )


# ---------------------------------------------------------------------------
# Docker queries


def check_docker() -> str:
    """Return the engine's version; ImageBuildError saying how to get one when none answers."""
    if shutil.which("docker") is None:
        raise DockerUnavailable(
            "no docker CLI on PATH: install Docker (Debian/Ubuntu: apt-get install docker.io; "
            "scripts/_env.sh does it when run as root)"
        )
    try:
        return _run(
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


# ---------------------------------------------------------------------------
# Building


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


def _mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root``, deepest last (from /proc/self/mounts)."""
    found: list[Path] = []
    prefix = str(root)
    with Path("/proc/self/mounts").open(encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) < 2:
                continue
            # /proc/mounts escapes space, tab, newline and backslash as octal.
            point = fields[1].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return found


def _unmount_all(root: Path) -> list[Path]:
    """Unmount everything under ``root`` (ours and any debootstrap left); return what stays."""
    for point in reversed(_mounts_under(root)):
        result = subprocess.run(["umount", str(point)], capture_output=True, check=False)
        if result.returncode != 0:
            subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=False)
    return _mounts_under(root)


def _sources_list(mirror: str, security: str | None) -> str:
    lines = [f"deb {mirror} {SUITE} main", f"deb {mirror} {SUITE}-updates main"]
    if security:
        lines.append(f"deb {security} {SUITE}-security main")
    return "\n".join(lines) + "\n"


def _mirrors() -> tuple[str, str | None]:
    """``BAI_DEBIAN_MIRROR`` (default deb.debian.org) and the security mirror.

    With a custom mirror, security updates come only from
    ``BAI_DEBIAN_SECURITY_MIRROR`` (a local mirror often means deb.debian.org is out of reach).
    """
    mirror = os.environ.get("BAI_DEBIAN_MIRROR", "").strip() or DEFAULT_MIRROR
    security = os.environ.get("BAI_DEBIAN_SECURITY_MIRROR")
    if security is None:
        security = DEFAULT_SECURITY_MIRROR if mirror == DEFAULT_MIRROR else ""
    return mirror, security.strip() or None


def _check_offline_tools() -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            "the offline kernel image build needs root (debootstrap, mount, chroot): run it as "
            "root (sudo bai-jupyter image build --offline), or use --online where a registry "
            "is reachable"
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap not found (needed for the offline kernel image build): "
            "apt-get install debootstrap (scripts/_env.sh does it as root)"
        )
    for tool in ("tar", "chroot", "mount", "umount"):
        if shutil.which(tool) is None:
            raise ImageBuildError(f"{tool} not found on PATH (needed for the offline build)")


def _import_rootfs(root: Path, tag: str, labels: dict[str, str]) -> None:
    """``tar -C root -c . | docker import`` with the same config and labels as the Dockerfile."""
    changes = [*IMAGE_CHANGES, f"ENV PATH={_CHROOT_PATH}"]
    changes += [f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()]
    import_cmd = ["docker", "import"]
    for change in changes:
        import_cmd += ["--change", change]
    import_cmd += ["-", tag]
    tar_cmd = [
        "tar",
        "--numeric-owner",
        "--xattrs",
        "--xattrs-include=security.capability",  # ping's file capability
        "-C",
        str(root),
        "-c",
        ".",
    ]
    with tempfile.TemporaryFile() as tar_err:
        with subprocess.Popen(tar_cmd, stdout=subprocess.PIPE, stderr=tar_err) as tar:
            assert tar.stdout is not None
            try:
                imported = subprocess.run(
                    import_cmd,
                    stdin=tar.stdout,
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=_STEP_TIMEOUT,
                    check=False,
                )
            finally:
                tar.stdout.close()
            tar_rc = tar.wait()
        if tar_rc != 0:
            tar_err.seek(0)
            raise ImageBuildError(
                f"tar of the root failed (exit {tar_rc})", tar_err.read().decode(errors="replace")
            )
    if imported.returncode != 0:
        raise ImageBuildError(
            f"docker import failed (exit {imported.returncode})",
            imported.stdout + imported.stderr,
        )


def _build_offline(tag: str, recipe: str, progress: Progress) -> None:
    _check_offline_tools()
    mirror, security = _mirrors()
    WORK_PARENT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bai-kernel-image-", dir=WORK_PARENT))
    root = work / "rootfs"
    log = work / "build.log"
    chroot_env = {
        "PATH": _CHROOT_PATH,
        "HOME": "/root",
        "LC_ALL": "C",
        "DEBIAN_FRONTEND": "noninteractive",
    }
    try:
        progress(f"debootstrap {SUITE} (minbase) from {mirror}")
        try:
            _run_logged(
                ["debootstrap", "--variant=minbase", SUITE, str(root), mirror], "debootstrap", log
            )
        except ImageBuildError as exc:
            # Its stdout says "see debootstrap.log"; that file goes with the work dir.
            detail = root / "debootstrap/debootstrap.log"
            if detail.exists():
                with log.open("a") as sink:
                    sink.write(detail.read_text(errors="replace"))
                raise ImageBuildError(
                    str(exc).split("\n", 1)[0], log.read_text(errors="replace")
                ) from exc
            raise
        (root / "etc/apt/sources.list").write_text(_sources_list(mirror, security))
        # The mirror must resolve inside the chroot: the host's resolver and hosts.
        for name in ("resolv.conf", "hosts"):
            target = root / "etc" / name
            target.unlink(missing_ok=True)
            shutil.copyfile(Path("/etc") / name, target)
        shutil.copyfile(KERNEL_IMAGE_DIR / "setup.sh", root / "tmp/bai-setup.sh")
        try:
            _run(["mount", "-t", "proc", "proc", str(root / "proc")], "mount /proc in the root")
            dev_null = root / "dev/null"
            if not dev_null.is_char_device():
                _run(["mount", "--bind", "/dev", str(root / "dev")], "bind-mount /dev in the root")
            progress(f"apt-get install {' '.join(PACKAGES)} (in the chroot)")
            _run_logged(
                ["chroot", str(root), "/bin/sh", "/tmp/bai-setup.sh", *PACKAGES],
                "setup.sh in the chroot",
                log,
                env=chroot_env,
            )
        finally:
            stuck = _unmount_all(root)
        if stuck:
            raise ImageBuildError(f"could not unmount {', '.join(map(str, stuck))}")
        # Docker bind-mounts its own resolv.conf and hosts at run time; ship neutral ones.
        (root / "etc/resolv.conf").write_text("")
        (root / "etc/hosts").write_text(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        )
        (root / "etc/hostname").unlink(missing_ok=True)
        (root / "tmp/bai-setup.sh").unlink(missing_ok=True)
        progress(f"docker import {tag}")
        _import_rootfs(root, tag, image_labels(recipe, "debootstrap"))
    except BaseException:
        if log.exists():
            kept = WORK_PARENT / "bai-jupyter-image-build.log"
            with contextlib.suppress(OSError):
                shutil.copyfile(log, kept)
                progress(f"build log kept in {kept}")
        raise
    finally:
        # Never rmtree through a mount (a bind-mounted /dev would be emptied).
        if _unmount_all(root):
            progress(f"WARNING: mounts remain under {root}; not removing {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _build_online(tag: str, recipe: str, progress: Progress) -> None:
    cmd = ["docker", "build", "--tag", tag, "--build-arg", f"PACKAGES={' '.join(PACKAGES)}"]
    for key, value in image_labels(recipe, "dockerfile").items():
        cmd += ["--label", f"{key}={value}"]
    cmd.append(str(KERNEL_IMAGE_DIR))
    env = dict(os.environ)
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode != 0:
        env["DOCKER_BUILDKIT"] = "0"  # no buildx plugin: the classic builder, not an error
    progress(f"docker build {KERNEL_IMAGE_DIR}")
    with tempfile.TemporaryDirectory(prefix="bai-kernel-image-", dir=WORK_PARENT) as work:
        _run_logged(cmd, "docker build", Path(work) / "build.log", env=env)


def build_image(
    tag: str = DEFAULT_IMAGE,
    offline: bool | None = None,
    *,
    progress: Progress = say,
) -> ImageStatus:
    """Build ``tag`` now, whatever is there (``bai-jupyter image build --force``).

    ``offline``: True = debootstrap, False = Dockerfile, None = Dockerfile when
    :func:`registry_reachable`, else debootstrap.
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
        _build_offline(tag, recipe, progress)
    else:
        progress(f"building kernel image {tag} online (docker build, ~1 min)")
        _build_online(tag, recipe, progress)
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
    :func:`build_image`. Raises :class:`ImageBuildError`.
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


# ---------------------------------------------------------------------------
# Command line


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


IMAGE_DESCRIPTION = "\n".join(
    textwrap.fill(paragraph, 78)
    for paragraph in (
        f"Build or inspect the default kernel image ({DEFAULT_IMAGE}): Debian {SUITE} with "
        f"{', '.join(PACKAGES)}.",
        "Online it is a `docker build` of bai_jupyter/kernel_image/Dockerfile; offline (no "
        "registry reachable; needs root and debootstrap) a debootstrap root from "
        f"$BAI_DEBIAN_MIRROR (default {DEFAULT_MIRROR}) imported with `docker import`.",
        f"The image's label {RECIPE_LABEL} holds the recipe hash: a build is skipped when "
        "it matches, unless --force.",
    )
)


def configure_cli(parser: argparse.ArgumentParser) -> None:
    """Add the ``image`` subcommands to ``parser`` (for cli.py's Subcommand table)."""
    actions = parser.add_subparsers(dest="image_action", metavar="ACTION", required=True)
    for name, help_text in (
        ("build", "build the kernel image (skipped when up to date, unless --force)"),
        ("ensure", "build the kernel image only if missing or stale (scripts use this)"),
        ("status", "print tag, whether present, and whether the recipe hash matches"),
    ):
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--tag", default=DEFAULT_IMAGE, metavar="T", help=f"image tag (default {DEFAULT_IMAGE})"
        )
        if name == "status":
            continue
        mode = sub.add_mutually_exclusive_group()
        mode.add_argument(
            "--offline",
            dest="offline",
            action="store_const",
            const=True,
            help="debootstrap + docker import (needs root and debootstrap)",
        )
        mode.add_argument(
            "--online",
            dest="offline",
            action="store_const",
            const=False,
            help=f"docker build FROM {BASE_IMAGE} (needs a registry or that image)",
        )
        if name == "build":
            sub.add_argument("--force", action="store_true", help="rebuild even when up to date")


def run_cli(args: argparse.Namespace) -> int:
    """Run ``image ACTION``. Exit 0 ok; 1 failed (or ``status``: missing/stale); 2 no engine."""
    try:
        if args.image_action == "status":
            status = image_status(args.tag)
            print(format_status(status))
            return 0 if status.up_to_date else 1
        if args.image_action == "build" and args.force:
            build_image(args.tag, args.offline)
            return 0
        status = image_status(args.tag)
        if status.up_to_date:
            hint = "; --force rebuilds" if args.image_action == "build" else ""
            short_id = (status.image_id or "")[:19]
            say(f"kernel image {args.tag} up to date ({short_id}){hint}")
            return 0
        ensure_image(args.tag, args.offline)
    except DockerUnavailable as exc:
        print(f"bai-jupyter image: error: {exc}", file=sys.stderr)
        return 2
    except ImageBuildError as exc:
        print(f"bai-jupyter image: error: {exc}", file=sys.stderr)
        return 1
    return 0


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``image`` to an argparse subparsers object; its handler is ``args.run``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "image",
        help="build or inspect the default kernel image",
        description=IMAGE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure_cli(parser)
    parser.set_defaults(run=run_cli)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m bai_jupyter.image ACTION``: the same as ``bai-jupyter image ACTION``."""
    parser = argparse.ArgumentParser(
        prog="python -m bai_jupyter.image",
        description=IMAGE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure_cli(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
