"""``bai-jupyter kernelspec``: what it writes, what it refuses, what Jupyter then finds."""

from __future__ import annotations

import json
from pathlib import Path

import jupyter_core.paths
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.provisioning.factory import KernelProvisionerFactory

from bai_jupyter.cli import main


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
    assert spec["display_name"] == "Python 3 (bai cluster ×3)"
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
    assert main(["kernelspec", "install", "py", "--image", "bai-jupyter/python:3.11"]) == 0
    capsys.readouterr()
    assert main(["kernelspec", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["name"], k["display_name"], k["config"]) for k in listed] == [
        ("py", "Python 3 (bai)", {"image": "bai-jupyter/python:3.11"})
    ]
