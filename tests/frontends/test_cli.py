"""The ``bai-jupyter`` command line (bai_jupyter.cli)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from traitlets import Unicode
from traitlets.config import Application

from bai_jupyter import __version__
from bai_jupyter.cli import SUBCOMMANDS, main
from bai_jupyter.cli.app import BaiJupyterCommand
from bai_jupyter.cli.base import ALIASES, BaiCommand, subcommand

TRACES = REPO / "examples" / "traces"
BASIC = str(TRACES / "basic.json")
HOL = str(TRACES / "head_of_line.json")
DRF = str(TRACES / "drf.json")


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["simulate", *args, "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def started(data: dict[str, Any]) -> dict[str, Any]:
    return {row["id"]: row["scheduled_at"] for row in data["sessions"]}


def test_json_output_parses_and_has_exactly_the_documented_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = run_json(capsys, BASIC)
    assert list(data) == ["sessions", "metrics"]
    assert list(data["sessions"][0]) == [
        "id", "status", "result", "status_info", "submit_at",
        "scheduled_at", "finished_at", "wait", "agents",
    ]  # fmt: skip
    assert list(data["metrics"]) == [
        "makespan", "mean_wait", "p95_wait", "utilization",
        "dominant_share", "dominant_share_at_until",
    ]  # fmt: skip
    assert data["metrics"]["utilization"] == {"cpu": 0.1111, "mem": 0.2222}
    assert data["metrics"]["dominant_share"] == {"alice": 0.2222}


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", DRF]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["ID", "OWNER", "STATUS"]
    assert "scheduler        drf / concentrated" in out
    assert "A 0.6667, B 0.6667 (at until)" in out


def test_flags_override_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    strict = started(run_json(capsys, HOL))
    heuristic = started(run_json(capsys, HOL, "--option", "num_retries_to_skip=2"))
    assert strict["small-1"] > strict["big"]
    assert heuristic["small-1"] < heuristic["big"]
    bounded = started(
        run_json(capsys, HOL, "--option", "num_retries_to_skip=2", "--option", "hol_max_wait=15")
    )
    assert bounded["big"] < bounded["small-3"]

    drf = run_json(capsys, DRF)["metrics"]["dominant_share_at_until"]
    fifo = run_json(capsys, DRF, "--sequencer", "fifo", "--selector", "dispersed")
    assert drf == {"A": 0.6667, "B": 0.6667}
    assert fifo["metrics"]["dominant_share_at_until"] != drf


def test_trace_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(Path(BASIC).read_text()))
    assert run_json(capsys, "-")["metrics"]["makespan"] == 100


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ("{not json", [], "not valid JSON (line 1, column 2"),
        (
            '{"until": 1, "agents": [{"id": "a", "slots": {"cpu": 1}}], "sessions": '
            '[{"id": "s", "submit_at": 0, "resources": {"cpu": "1", "mem": "4x"}}]}',
            [],
            "sessions[0].resources.mem: unknown unit",
        ),
        ("{}", [], "until: required"),
        (Path(BASIC).read_text(), ["--sequencer", "sjf"], "--sequencer: unknown sequencer 'sjf' "),
        (Path(BASIC).read_text(), ["--option", "hol_max_wait=-1"], "--option hol_max_wait: "),
    ],
)
def test_malformed_input_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    args: list[str],
    message: str,
) -> None:
    path = tmp_path / "trace.json"
    path.write_text(content)
    assert main(["simulate", str(path), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("bai-jupyter simulate: error: ")
    assert message in lines[0]


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["simulate", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: cannot read the trace" in capsys.readouterr().err


def test_unknown_names_list_the_available_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", BASIC, "--selector", "closest"]) == 2
    err = capsys.readouterr().err
    assert "available: concentrated, dispersed, roundrobin" in err


def test_usage_errors_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", BASIC, "--option", "no-equals-sign"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert main([]) == 2
    capsys.readouterr()
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bai-jupyter {__version__}"


def test_help_documents_the_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "dominant_share_at_until" in out and "time-average" in out
    assert "simulate" in SUBCOMMANDS


def test_console_script_reports_a_bad_trace(tmp_path: Path) -> None:
    """The installed entry point: exit status 2, one line on stderr, no traceback."""
    script = Path(sys.executable).parent / "bai-jupyter"
    bad = json.loads(Path(BASIC).read_text())
    bad["sessions"][0]["duration"] = -3
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    proc = subprocess.run(
        [str(script), "simulate", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        "bai-jupyter simulate: error: sessions[0].duration: must not be negative, got -3\n"
    )


def test_a_manager_service_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    """``bai-jupyter manager`` with a bad setting: exit status 1 and the reason in one log
    line, no traceback."""
    config = tmp_path / "manager_config.py"
    config.write_text(
        'c.TokenIdentity.users = {"t": "alice"}\n'
        'c.BaiSessionManager.backend = "local"\n'
        f"c.BaiSessionManager.store_url = {f'sqlite:///{tmp_path}/store.sqlite'!r}\n"
        f"c.LocalAgent.root = {str(tmp_path / 'kernels')!r}\n"
        'c.BaiSessionManager.resource_groups = {"default": {"idle": {"idle_timeout": "1h"}}}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BAI_JUPYTER", "JUPYTER"))}
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "config")
    script = Path(sys.executable).parent / "bai-jupyter"
    proc = subprocess.run(
        [str(script), "manager", f"--config={config}", "--ip=127.0.0.1", "--port=0"],
        capture_output=True, text=True, check=False, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out
    (line,) = [line for line in out.splitlines() if "idle_timeout" in line]
    assert line.endswith(
        "bai-jupyter: the session manager could not start: resource_groups.default.idle."
        "idle_timeout: must be seconds (0: off), got '1h'"
    ), out


def test_a_mistyped_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", BASIC, "--sequencr", "drf"]) == 2
    assert (
        "bai-jupyter simulate: error: unrecognized arguments: --sequencr" in capsys.readouterr().err
    )
    assert main(["image", "build", "--offline", "--online"]) == 2
    assert "--online: not allowed with argument --offline" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Every command is a Jupyter application: documented options, the server's config


def _commands(
    app: Application, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Application]]:
    yield path, app
    for name, (make, _) in app.subcommands.items():
        yield from _commands(make(app), (*path, name))


def test_every_command_documents_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    commands = dict(_commands(BaiJupyterCommand()))
    assert {" ".join(p) for p in commands} >= {"image build", "kernelspec install", "simulate"}
    for path, app in commands.items():
        assert isinstance(app, BaiCommand) and app.usage.startswith(
            " ".join(["bai-jupyter", *path])
        )
        own = {
            name: trait
            for name, trait in app.class_traits(config=True).items()
            if trait.this_class.__module__.startswith("bai_jupyter.")
        }
        assert all(trait.help for trait in own.values()), (path, own)
        assert main([*path, "--help"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: {app.usage}\n")


def test_a_new_subcommand_is_a_class_and_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The way a later ``bai-jupyter manager`` is added; it reads the server's config."""

    class HelloApp(BaiCommand):
        name = "bai-jupyter hello"
        usage = "bai-jupyter hello [--greeting G]"
        greeting = Unicode("hello", config=True, help="What to say.")
        aliases = {**ALIASES, "greeting": "HelloApp.greeting"}  # noqa: RUF012

        def run(self) -> int:
            print(self.greeting)
            return 3

    line = {"hello": subcommand(HelloApp, "say hello")}
    monkeypatch.setattr(BaiJupyterCommand, "subcommands", {**BaiJupyterCommand.subcommands, **line})
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    (tmp_path / "jupyter_server_config.py").write_text("c.HelloApp.greeting = 'from the config'\n")
    assert main(["hello"]) == 3
    assert capsys.readouterr().out == "from the config\n"
    assert main(["hello", "--greeting", "from the command line"]) == 3
    assert capsys.readouterr().out == "from the command line\n"
