"""``bai-jupyter kernelspec``: what it writes, what it refuses, what Jupyter then finds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import jupyter_core.paths
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.provisioning.factory import KernelProvisionerFactory

from bai_jupyter import kernelspecs
from bai_jupyter.cli import main
from bai_jupyter.cli.kernelspec import agents_now
from bai_jupyter.resources import ResourceSlot, format_amount
from bai_jupyter.scheduler.config import MIN_RESOURCES, SchedulerConfig


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Jupyter data dir of the test's own (kernelspecs installed --user land here).

    The environment's and the system's kernelspecs are hidden too (``./scripts/lab``
    installs two bai kernelspecs into the venv).
    """
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    monkeypatch.setattr(jupyter_core.paths, "ENV_JUPYTER_PATH", [str(tmp_path / "env")])
    monkeypatch.setattr(jupyter_core.paths, "SYSTEM_JUPYTER_PATH", [str(tmp_path / "system")])
    return tmp_path / "data"


def test_install_writes_a_spec_on_the_bai_provisioner(data_dir: Path) -> None:
    argv = ["kernelspec", "install", "py-cluster-3", "--cluster-size", "3"]
    assert main([*argv, "--cpu", "0.5", "--mem", "1g", "--template", "gpu"]) == 0
    spec = json.loads((data_dir / "kernels" / "py-cluster-3" / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 · bai cluster ×3 · 0.5 CPU · 1 GiB"
    assert spec["interrupt_mode"] == "signal"
    assert spec["metadata"]["kernel_provisioner"] == {
        "provisioner_name": "bai",
        "config": {
            "cluster_size": 3,
            "template": "gpu",
            "resources": {"cpu": "0.5", "mem": "1g"},
        },
    }
    found = KernelSpecManager().get_kernel_spec("py-cluster-3")
    assert KernelProvisionerFactory.instance().is_provisioner_available(found)


def test_install_again_replaces_the_spec(data_dir: Path) -> None:
    assert main(["kernelspec", "install", "py", "--display-name", "One"]) == 0
    assert main(["kernelspec", "install", "py", "--display-name", "Two"]) == 0
    spec = json.loads((data_dir / "kernels" / "py" / "kernel.json").read_text())
    assert spec["display_name"] == "Two"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster-size", "0"], "cluster_size: must be an integer from 1 to 64, got 0"),
        (["--mem", "2x"], "resources.mem: unknown unit 'x'"),
        (["--cluster-mode", "sideways"], "cluster_mode:"),
        (["--launch-timeout", "0"], "launch_timeout: must be a positive number"),
    ],
)
def test_bad_values_are_refused_at_install(
    data_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["kernelspec", "install", "bad", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bai-jupyter kernelspec install: error: ")
    assert message in err
    assert not (data_dir / "kernels" / "bad").exists()


def test_a_bad_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernelspec", "install", "no spaces"]) == 2
    assert "is not a kernelspec name" in capsys.readouterr().err


def test_list_shows_only_bai_kernelspecs(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = data_dir / "kernels" / "plain"
    other.mkdir(parents=True)
    (other / "kernel.json").write_text(
        json.dumps({"argv": ["python3"], "display_name": "Plain", "language": "python"})
    )
    assert main(["kernelspec", "list"]) == 0
    assert "no kernelspec uses the bai provisioner" in capsys.readouterr().out
    argv = ["kernelspec", "install", "py", "--image", "bai-jupyter/python:3.11"]
    assert main([*argv, "--cpu", "1", "--mem", "2g"]) == 0
    capsys.readouterr()
    assert main(["kernelspec", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["name"], k["display_name"], k["config"]) for k in listed] == [
        (
            "py",
            "Python 3 · bai · 1 CPU · 2 GiB",
            {"image": "bai-jupyter/python:3.11", "resources": {"cpu": "1", "mem": "2g"}},
        )
    ]


# --- resources derived from the machine, names and logos


def machine() -> ResourceSlot:
    """This machine's biggest agent, as the manager finds it (the real engine, or this host)."""
    return kernelspecs.biggest(agents_now())


def _installed(data_dir: Path, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((data_dir / "kernels" / name / "kernel.json").read_text())
    return spec


@pytest.mark.parametrize("size", [1, 3])
def test_install_asks_for_a_share_of_this_machine(data_dir: Path, size: int) -> None:
    """No --cpu/--mem: the spec asks for half of this machine's agent (the real Docker
    engine's or this host's capacity), so a third session queues; the name says so."""
    assert main(["kernelspec", "install", "py", "--cluster-size", str(size)]) == 0
    capacity = machine()
    derived = kernelspecs.derive_resources(capacity, size)
    config = _installed(data_dir, "py")["metadata"]["kernel_provisioner"]["config"]
    assert ResourceSlot(config["resources"]) == derived
    assert (derived * size).fits_in(capacity)
    assert not (derived * size * 3).fits_in(capacity)  # the third such session waits
    cpu, mem = derived["cpu"], derived["mem"]
    label = "bai" if size == 1 else f"bai cluster ×{size}"
    mem_text = kernelspecs._describe_amount("mem", mem)
    assert (
        _installed(data_dir, "py")["display_name"]
        == f"Python 3 · {label} · {cpu:f} CPU · {mem_text}"
    )


def test_one_given_slot_is_kept_and_the_other_derived(data_dir: Path) -> None:
    assert main(["kernelspec", "install", "py", "--cpu", "0.25"]) == 0
    resources = _installed(data_dir, "py")["metadata"]["kernel_provisioner"]["config"]["resources"]
    derived = kernelspecs.derive_resources(machine())
    assert ResourceSlot(resources) == ResourceSlot({"cpu": "0.25", "mem": derived["mem"]})


def test_a_template_or_a_session_keeps_its_own_resources(data_dir: Path) -> None:
    assert main(["kernelspec", "install", "t", "--template", "gpu"]) == 0
    assert main(["kernelspec", "install", "s", "--session", "training"]) == 0
    for name in ("t", "s"):
        spec = _installed(data_dir, name)
        assert "resources" not in spec["metadata"]["kernel_provisioner"]["config"]
        assert spec["display_name"] == "Python 3 · bai"


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--cpu", "1", "--mem", "2g"], "Python 3 · bai · 1 CPU · 2 GiB"),
        (
            ["--cluster-size", "3", "--cpu", "1", "--mem", "2g"],
            "Python 3 · bai cluster ×3 · 1 CPU · 2 GiB",
        ),
        (["--cpu", "0.5", "--mem", "512m"], "Python 3 · bai · 0.5 CPU · 512 MiB"),
        (["--cpu", "2", "--mem", "1.5g", "--display-name", "Mine"], "Mine"),
    ],
)
def test_the_display_name_says_size_and_resources(
    data_dir: Path, args: list[str], name: str
) -> None:
    assert main(["kernelspec", "install", "py", *args]) == 0
    assert _installed(data_dir, "py")["display_name"] == name


def test_the_kernelspec_has_the_bai_logos(data_dir: Path) -> None:
    """Jupyter serves logo-*.png / logo-svg.svg of a kernelspec's directory as its icon."""
    assert main(["kernelspec", "install", "py", "--cpu", "1", "--mem", "1g"]) == 0
    resources = KernelSpecManager().get_all_specs()["py"]["resource_dir"]
    for logo in ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg"):
        written = (Path(resources) / logo).read_bytes()
        assert written == (kernelspecs.LOGO_DIR / logo).read_bytes()
    assert (Path(resources) / "logo-64x64.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (Path(resources) / "logo-svg.svg").read_bytes()


_cpus = st.decimals(min_value=Decimal("0.01"), max_value=512, places=2)
_mems = st.integers(min_value=6 * 2**20, max_value=4 * 2**40)


@given(
    cpu=_cpus,
    mem=_mems,
    size=st.integers(min_value=1, max_value=64),
    least_cpu=st.decimals(min_value=Decimal("0.01"), max_value=4, places=2),
    least_mem=st.integers(min_value=6 * 2**20, max_value=8 * 2**30),
)
def test_derived_requests_fit_their_machine_and_respect_the_minimum(
    cpu: Decimal, mem: int, size: int, least_cpu: Decimal, least_mem: int
) -> None:
    capacity = ResourceSlot({"cpu": cpu, "mem": mem})
    least = ResourceSlot({"cpu": least_cpu, "mem": least_mem})
    if not (least * size).fits_in(capacity):
        with pytest.raises(kernelspecs.KernelspecError, match="do not fit"):
            kernelspecs.derive_resources(capacity, size, min_resources=least)
        return
    derived = kernelspecs.derive_resources(capacity, size, min_resources=least)
    assert set(derived) == {"cpu", "mem"}
    assert (derived * size).fits_in(capacity)
    assert least.fits_in(derived)
    # What the CLI writes reads back the same, and the scheduler accepts it as is.
    written = {slot: format_amount(slot, amount) for slot, amount in derived.items()}
    assert ResourceSlot(written) == derived
    config = SchedulerConfig(min_resources=least, default_resources=least)
    assert config.kernel_resources(derived) == derived


@given(cpu=_cpus, mem=_mems, size=st.integers(min_value=1, max_value=64))
def test_derived_requests_keep_to_their_share_when_the_minimum_allows(
    cpu: Decimal, mem: int, size: int
) -> None:
    capacity = ResourceSlot({"cpu": cpu, "mem": mem})
    share = kernelspecs.MACHINE_SHARE
    if not (MIN_RESOURCES * size).fits_in(capacity):
        return
    derived = kernelspecs.derive_resources(capacity, size)
    for slot in ("cpu", "mem"):
        if MIN_RESOURCES[slot] * size <= capacity[slot] * share:
            assert derived[slot] * size <= capacity[slot] * share
        else:
            assert derived[slot] == MIN_RESOURCES[slot]


def test_an_installed_kernelspec_is_readable_by_every_user() -> None:
    """``--sys-prefix`` as root (a Hub's admin): another user's Jupyter finds the spec
    (the temporary folder's 0700 was copied before: "No such kernel" for everyone else)."""
    prefix = Path(tempfile.mkdtemp(prefix="bai-prefix-"))
    try:
        prefix.chmod(0o755)  # as a venv's prefix is; only the kernelspec is under test
        spec = kernelspecs.kernelspec_json("Shared", {"resources": {"cpu": "1", "mem": "1g"}})
        folder = Path(kernelspecs.install("shared", spec, prefix=str(prefix)))
        assert folder.stat().st_mode & 0o777 == 0o755
        assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o644}
        if os.getuid() != 0:
            return  # the modes above are what another user needs; reading as one needs root
        # What Jupyter does to find it: list the folder, read kernel.json.
        nobody = subprocess.run(
            ["sh", "-c", f"ls {folder} >/dev/null && cat {folder / 'kernel.json'}"],
            user=65534,
            capture_output=True,
            text=True,
            check=False,
        )
        assert nobody.returncode == 0, nobody.stderr
        assert json.loads(nobody.stdout)["display_name"] == "Shared"
    finally:
        shutil.rmtree(prefix)
