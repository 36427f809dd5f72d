"""The offline recipe: debootstrap a Debian root, run ``setup.sh`` in it, ``docker import`` it.

For where no registry answers; needs root (debootstrap, mount, chroot).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .process import (
    STEP_TIMEOUT,
    WORK_PARENT,
    ImageBuildError,
    Progress,
    run_command,
    run_logged,
)
from .recipe import IMAGE_CHANGES, KERNEL_IMAGE_DIR, PACKAGES, SUITE, image_labels

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"

_CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
                    timeout=STEP_TIMEOUT,
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


def build_offline(tag: str, recipe: str, progress: Progress) -> None:
    """Build ``tag`` from a debootstrap root, labelled with ``recipe``; the log kept on failure."""
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
            run_logged(
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
            run_command(
                ["mount", "-t", "proc", "proc", str(root / "proc")], "mount /proc in the root"
            )
            dev_null = root / "dev/null"
            if not dev_null.is_char_device():
                run_command(
                    ["mount", "--bind", "/dev", str(root / "dev")], "bind-mount /dev in the root"
                )
            progress(f"apt-get install {' '.join(PACKAGES)} (in the chroot)")
            run_logged(
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
