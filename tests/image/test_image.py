"""The default kernel image (bai_jupyter.image): recipe, cache, and what runs inside it.

The ``docker`` tests use the real engine and the real image (built by
``scripts/_env.sh``, or here on first use, ~1-2 min). Without an engine they
skip, except under ``CI=true`` where they fail: CI must exercise them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bai_jupyter import image
from bai_jupyter.image import offline, recipe
from bai_jupyter.image.cli import ImageApp, ImageBuildApp, ImageStatusApp
from bai_jupyter.runtime.protocol import DEFAULT_IMAGE

IN_CI = os.environ.get("CI") == "true"


def _docker(*args: str, timeout: float = 120.0, stdin: str | None = None) -> str:
    """Run ``docker ARGS``; return stdout; fail the test with its output on error."""
    proc = subprocess.run(
        ["docker", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


# ---------------------------------------------------------------------------
# Fixtures (the engine one may move to conftest.py)


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The engine's version; skip without one, but fail under CI=true (CI must run them)."""
    try:
        return image.check_docker()
    except image.DockerUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true but no Docker engine answers:\n{exc}")
        pytest.skip(f"no Docker engine: {str(exc).splitlines()[0]}")


@pytest.fixture(scope="session")
def kernel_image(docker_engine: str) -> image.ImageStatus:
    """The default kernel image, built from the current recipe (built now if needed)."""
    try:
        return image.ensure_image(DEFAULT_IMAGE)
    except image.ImageBuildError as exc:
        if IN_CI:
            raise
        pytest.skip(f"cannot build the kernel image here: {str(exc).splitlines()[0]}")


def _run_in(status: image.ImageStatus, script: str, timeout: float = 60.0) -> str:
    assert status.image_id is not None
    return _docker("run", "--rm", status.image_id, "sh", "-c", script, timeout=timeout)


@pytest.fixture
def stale_tag(docker_engine: str) -> Iterator[str]:
    """A tiny image whose recipe label is not the current one (an empty rootfs)."""
    tag = f"bai-jupyter-test/stale:{uuid.uuid4().hex[:8]}"
    empty_tar = b"\0" * 1024  # a tar archive with no members
    proc = subprocess.run(
        ["docker", "import", "--change", f'LABEL {image.RECIPE_LABEL}="old"', "-", tag],
        input=empty_tar,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    yield tag
    subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)


# ---------------------------------------------------------------------------
# Without Docker: the recipe and the command line


def test_recipe_hash_is_stable_and_tracks_the_package_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = image.recipe_hash()
    assert len(first) == 64 and int(first, 16) >= 0
    assert image.recipe_hash() == first
    monkeypatch.setattr(recipe, "PACKAGES", (*image.PACKAGES, "vim-tiny"))
    assert image.recipe_hash() != first


def test_both_recipes_share_one_package_list_and_config() -> None:
    """The Dockerfile (package data) installs via setup.sh with PACKAGES, like the offline path."""
    dockerfile = (image.KERNEL_IMAGE_DIR / "Dockerfile").read_text()
    lines = [line.strip() for line in dockerfile.splitlines()]
    assert f"FROM {image.BASE_IMAGE}" in lines
    assert "ARG PACKAGES" in lines
    assert any("setup.sh" in line and "$PACKAGES" in line for line in lines if "RUN" in line)
    for change in image.IMAGE_CHANGES:  # the offline import applies exactly these
        assert change in lines, change
    for package in ("python3-ipykernel", "openssh-server", "openssh-client", "procps", "iproute2"):
        assert package in image.PACKAGES
        assert package not in dockerfile  # the list lives in one place only
    setup = (image.KERNEL_IMAGE_DIR / "setup.sh").read_text()
    assert "rm -f /etc/ssh/ssh_host_*" in setup
    assert "/run/sshd" in setup


def _parsed(*argv: str) -> object:
    """The action ``bai-jupyter image ARGV`` would run, parsed but not started."""
    app = ImageApp()
    app.initialize(list(argv))
    return app.subapp


def test_cli_parses_build_and_status() -> None:
    args = _parsed("build", "--offline", "--force", "--tag", "x/y:1")
    assert isinstance(args, ImageBuildApp)
    assert (args.offline, args.force, args.tag) == (True, True, "x/y:1")
    args = _parsed("build", "--online")
    assert isinstance(args, ImageBuildApp)
    assert (args.offline, args.force, args.tag) == (False, False, DEFAULT_IMAGE)
    assert isinstance(_parsed("status"), ImageStatusApp)
    with pytest.raises(SystemExit):
        _parsed("build", "--offline", "--online")


def test_no_docker_cli_is_a_clear_error_with_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bai_jupyter.image", "status"],
        env={**os.environ, "PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no docker CLI on PATH" in proc.stderr


def test_offline_build_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(image.ImageBuildError, match=r"needs root|debootstrap not found"):
        offline._check_offline_tools()


def test_mirror_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BAI_DEBIAN_MIRROR", raising=False)
    monkeypatch.delenv("BAI_DEBIAN_SECURITY_MIRROR", raising=False)
    assert offline._mirrors() == (image.DEFAULT_MIRROR, image.DEFAULT_SECURITY_MIRROR)
    monkeypatch.setenv("BAI_DEBIAN_MIRROR", "http://mirror.example/debian")
    assert offline._mirrors() == ("http://mirror.example/debian", None)


# ---------------------------------------------------------------------------
# With Docker: the real image


@pytest.mark.docker
def test_image_carries_the_recipe_labels(kernel_image: image.ImageStatus) -> None:
    labels = _docker(
        "image", "inspect", "--format", "{{json .Config.Labels}}", DEFAULT_IMAGE
    ).strip()
    assert f'"{image.RECIPE_LABEL}":"{image.recipe_hash()}"' in labels
    assert f'"{image.SERVICE_PORTS_LABEL}":""' in labels
    assert kernel_image.up_to_date


@pytest.mark.docker
def test_ensure_image_is_a_fast_no_op_when_up_to_date(kernel_image: image.ImageStatus) -> None:
    said: list[str] = []
    started = time.monotonic()
    status = image.ensure_image(DEFAULT_IMAGE, progress=said.append)
    elapsed = time.monotonic() - started
    assert elapsed < 2.0
    assert status.image_id == kernel_image.image_id
    assert said == []  # nothing built, nothing to say


@pytest.mark.docker
def test_status_command_reports_up_to_date(
    kernel_image: image.ImageStatus, capsys: pytest.CaptureFixture[str]
) -> None:
    assert image.main(["status"]) == 0
    out = capsys.readouterr().out
    assert DEFAULT_IMAGE in out and "up to date" in out and "present: yes" in out


@pytest.mark.docker
def test_stale_and_missing_images_are_reported(
    stale_tag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = image.image_status(stale_tag)
    assert status.present and not status.up_to_date and status.recipe == "old"
    assert image.main(["status", "--tag", stale_tag]) == 1
    assert "stale" in capsys.readouterr().out
    missing = image.image_status(f"bai-jupyter-test/missing:{uuid.uuid4().hex[:8]}")
    assert not missing.present and not missing.up_to_date


@pytest.mark.docker
def test_no_host_keys_are_baked_in(kernel_image: image.ImageStatus) -> None:
    assert _run_in(kernel_image, "ls /etc/ssh/ | grep -c ssh_host_ || true").strip() == "0"


@pytest.mark.docker
def test_tools_run_inside(kernel_image: image.ImageStatus) -> None:
    out = _run_in(
        kernel_image,
        "python3 -c 'import ipykernel; print(\"ipykernel\", ipykernel.__version__)'"
        " && ssh-keygen -A >/dev/null && /usr/sbin/sshd -t && echo sshd-config-ok"
        " && ip addr show lo && ps ax && ssh -V 2>&1",
    )
    assert "ipykernel 6." in out
    assert "sshd-config-ok" in out
    assert "127.0.0.1" in out  # ip addr
    assert "PID" in out  # ps
    assert "OpenSSH" in out


@pytest.mark.docker
def test_ipykernel_launcher_executes_code(kernel_image: image.ImageStatus) -> None:
    """``python3 -m ipykernel_launcher -f FILE`` (the kernelspec's argv) runs a cell."""
    script = """
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
assert km.kernel_spec.argv[1:4] == ["-m", "ipykernel_launcher", "-f"], km.kernel_spec.argv
out = []
reply = kc.execute_interactive("print(6 * 7)", timeout=30, output_hook=out.append)
print(reply["content"]["status"], [m["content"]["text"] for m in out if m["msg_type"] == "stream"])
kc.stop_channels()
km.shutdown_kernel(now=True)
"""
    assert kernel_image.image_id is not None
    out = _docker("run", "-i", "--rm", kernel_image.image_id, "python3", "-", stdin=script)
    assert "ok ['42\\n']" in out


@pytest.mark.docker
def test_sshd_serves_on_port_2200(kernel_image: image.ImageStatus) -> None:
    assert kernel_image.image_id is not None
    name = f"bai-jupyter-test-sshd-{uuid.uuid4().hex[:8]}"
    _docker(
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        kernel_image.image_id,
        "sh",
        "-c",
        "ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e -p 2200",
    )
    try:
        deadline = time.monotonic() + 15
        keys = ""
        while time.monotonic() < deadline:
            probe = subprocess.run(
                ["docker", "exec", name, "ssh-keyscan", "-p", "2200", "127.0.0.1"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            keys = probe.stdout
            if "ssh-ed25519" in keys:
                break
            time.sleep(0.2)
        assert "ssh-ed25519" in keys, keys
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
