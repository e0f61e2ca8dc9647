"""``arfl validate`` and the CLI error boundary: exit codes and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from arfl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in ("deploy", "chaos", "report", "experiment", "validate", "stack"):
        assert cmd in out


def test_valid_spec_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "configs" / "clicks.toml")]) == 0
    assert "ok" in capsys.readouterr().out


def test_invalid_spec_exits_2_with_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nextra = 1\n[source]\ntopic = "a"\npartitions = -1\n')
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: extra: unknown key" in err
    assert "bad.toml: source.partitions:" in err
    assert "bad.toml: sink: required key is missing" in err
    assert "Traceback" not in err


def test_several_files_all_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text("name = 1\n")
    b.write_text("[[[\n")
    assert main(["validate", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "a.toml: name:" in err
    assert "b.toml: not valid TOML" in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 2
    assert main(["no-such-command"]) == 2


def test_debug_shows_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", "validate", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "no such file" in err


def test_experiment_with_unknown_modes_exits_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = ROOT / "configs" / "clicks.toml"
    code = main(["experiment", str(spec), "--modes", "none,eventual", "--runs", str(tmp_path)])
    assert code == 2
    assert "unknown mode 'eventual'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
