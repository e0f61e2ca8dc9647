"""``arfl deploy`` and ``arfl experiment``: options checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from arfl.cli.main import main


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
