"""``arfl stack ...`` through the CLI: JSON status, error messages and exit codes."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arfl.cli.app import app
from arfl.cli.main import _register, main
from arfl.errors import ExitCode
from arfl.testing import EmbeddedStack, free_ports

_register()
runner = CliRunner()


def test_status_json_without_a_stack(tmp_path: Path) -> None:
    result = runner.invoke(app, ["stack", "status", "--json", "--state", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["name"] for d in data] == ["zookeeper", "kafka"]
    assert all(d["pid"] is None and not d["running"] and not d["healthy"] for d in data)


def test_status_table_without_a_stack(tmp_path: Path) -> None:
    result = runner.invoke(app, ["stack", "status", "--state", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "zookeeper" in result.stdout and "stopped" in result.stdout


def test_down_without_a_stack(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["stack", "down", "--state", str(tmp_path), "--runs", str(tmp_path / "runs")]
    )
    assert result.exit_code == 0, result.output
    assert "nothing was running" in result.stdout


def test_up_on_a_taken_port_exits_3_with_the_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka, ctl = free_ports(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        zk = s.getsockname()[1]
        code = main(
            ["stack", "up", "--zk-port", str(zk), "--kafka-port", str(kafka),
             "--controller-port", str(ctl), "--state", str(tmp_path)]
        )  # fmt: skip
    assert code == int(ExitCode.STACK) == 3
    err = capsys.readouterr().err
    assert f"port {zk} on 127.0.0.1 is taken by another process (pid {os.getpid()}" in err
    assert "--zk-port" in err
    assert "Traceback" not in err


def test_up_with_equal_ports_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["stack", "up", "--zk-port", "9092", "--state", str(tmp_path)])
    assert code == 3
    assert "ports must differ" in capsys.readouterr().err


@pytest.mark.integration
def test_status_json_of_the_running_session_stack(stack_harness: EmbeddedStack) -> None:
    result = runner.invoke(app, ["stack", "status", "--json", "--state", str(stack_harness.state)])
    assert result.exit_code == 0, result.output
    data = {d["name"]: d for d in json.loads(result.stdout)}
    procs = stack_harness.processes()
    assert stack_harness.info is not None
    assert data["kafka"]["address"] == stack_harness.info.kafka
    assert data["zookeeper"]["address"] == stack_harness.info.zookeeper
    for name in ("kafka", "zookeeper"):
        assert data[name]["healthy"] is True
        assert data[name]["pid"] == procs[name].pid


def test_install_without_java_exits_3_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    code = main(["stack", "install", "--cache", str(tmp_path / "cache")])
    assert code == 3
    err = capsys.readouterr().err
    assert "no 'java' on PATH" in err and "JAVA_HOME" in err
    assert not (tmp_path / "cache" / "kafka-4.1.1" / "installed.json").exists()
