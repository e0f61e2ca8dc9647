"""``arfl deploy`` and ``arfl experiment``: options checked before anything starts."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from arfl.cli.commands import deploy as deploy_cmd
from arfl.cli.main import main
from arfl.orchestrate.deploy import DeployResult, Tick


@pytest.mark.parametrize("command", ["deploy", "experiment"])
def test_a_kubernetes_master_override_is_a_usage_error(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "absent.toml"
    assert main([command, str(spec), "--master", "k8s://https://h:6443"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--master" in err
    assert "master 'k8s://https://h:6443' is not supported" in err
    assert "only local[N], local-cluster[workers,cores,memMB] and spark://host:port" in err


SPEC = Path(__file__).resolve().parents[2] / "configs" / "clicks.toml"
START_UP = ["starting the stack", "starting replicas", "waiting for the standby"]


def _fake_deploy(run_dir: Path) -> Callable[..., DeployResult]:
    """``deploy`` without a deployment: the start-up's ticks, then an empty result."""

    def fake(
        spec: object, spec_path: object, options: object, on_tick: Any, on_run_dir: Any
    ) -> DeployResult:
        on_run_dir(run_dir)
        for i, phase in enumerate(START_UP):
            on_tick(Tick(float(i), phase, None, None, {0: "starting", 1: "starting"}))
        return DeployResult(run_dir, {"produced": 0, "results": 0})

    return fake


@pytest.mark.parametrize("args", [[], ["--no-live"]])
def test_output_that_is_no_terminal_gets_plain_lines_from_the_start_up_on(
    args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(deploy_cmd, "run_deploy", _fake_deploy(tmp_path / "run"))
    assert main(["deploy", str(SPEC), *args]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for phase in START_UP:
        assert any(line.endswith(f" {phase} | r0:starting r1:starting") for line in lines), (
            f"no plain line for {phase!r} in:\n{out}"
        )
    assert "arfl live" not in out and "\x1b[" not in out  # no table, no cursor movement


def test_a_terminal_gets_the_live_table_unless_no_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(deploy_cmd, "run_deploy", _fake_deploy(tmp_path / "run"))
    monkeypatch.setattr(deploy_cmd, "out", Console(force_terminal=True, width=120))
    assert main(["deploy", str(SPEC)]) == 0
    assert "arfl live: waiting for the standby" in capsys.readouterr().out
    assert main(["deploy", str(SPEC), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "arfl live" not in out and " waiting for the standby | r0:starting" in out


@pytest.mark.parametrize("command", [["deploy"], ["experiment", "--modes", "none,active"]])
def test_a_metrics_port_in_use_is_a_usage_error_before_any_run(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = [*command, str(SPEC), "--runs", str(runs), "--metrics-port", str(port)]
        assert main(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--metrics-port {port}: 127.0.0.1:{port} is already in use" in err
    assert "pick a free port with --metrics-port N" in err
    assert not runs.exists()


def test_deploy_announces_where_its_metrics_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[object] = []

    def fake(spec: object, spec_path: object, options: Any, **kw: Any) -> DeployResult:
        seen.append(options)
        return _fake_deploy(tmp_path / "run")(spec, spec_path, options, **kw)

    monkeypatch.setattr(deploy_cmd, "run_deploy", fake)
    args = ["deploy", str(SPEC), "--metrics-port", "9464", "--metrics-host", "::1"]
    assert main(args) == 0
    (options,) = seen
    assert (options.metrics_port, options.metrics_host) == (9464, "::1")
    assert "metrics: http://[::1]:9464/metrics" in capsys.readouterr().err
