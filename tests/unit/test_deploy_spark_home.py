"""Deploy's stop and the run's own SPARK_HOME: removed once the drivers are gone, never at the
cost of the run (a failure or a process still using it leaves it to ``arfl chaos recover``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arfl.configs.load import parse_spec
from arfl.errors import DeployError
from arfl.orchestrate.context import DeployOptions, create_run
from arfl.orchestrate.deploy import Deployment
from arfl.replica.sparkenv import run_spark_home
from arfl.run import sparkhome as sparkhome_mod
from arfl.run.rundir import read_jsonl


class _Runner:
    """Drivers already gone (or, with ``fail``, a stop that could not stop one)."""

    def __init__(self, home: Path, fail: bool = False) -> None:
        self.spark_home = home
        self.fail = fail

    def stop(self) -> None:
        if self.fail:
            raise RuntimeError("pid 4242 survived SIGKILL")

    def states(self) -> dict[int, object]:
        return {}

    def standby_states(self) -> list[object]:
        return []


def _deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool = False
) -> tuple[Deployment, Path]:
    """A deployment whose runner is done, and its run's SPARK_HOME (an executor log in it)."""
    monkeypatch.setenv("ARFL_STATE_DIR", str(tmp_path / "state"))
    spec = parse_spec({"name": "s", "source": {"topic": "in"}, "sink": {"topic": "out"}})
    d = Deployment(create_run(spec, None, DeployOptions(runs_root=tmp_path / "runs")))
    home = run_spark_home(d.ctx.dir)
    ex = home / "replica-0" / "work" / "app-1" / "0"
    ex.mkdir(parents=True)
    (ex / "stderr").write_text("executor log\n")
    d.runner = _Runner(home, fail)  # type: ignore[assignment]
    return d, home


def _events(d: Deployment, name: str) -> list[dict[str, object]]:
    return [e for e in read_jsonl(d.ctx.paths.journal) if e["event"] == name]


def test_the_stop_removes_the_runs_spark_home_and_keeps_its_executor_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, home = _deployment(tmp_path, monkeypatch)
    d.stop()
    assert not home.exists()
    kept = d.ctx.dir / "logs" / "executors" / "replica-0.app-1.0.stderr"
    assert kept.read_text() == "executor log\n"
    (ev,) = _events(d, "spark-home-removed")
    assert ev["home"] == str(home)


def test_a_failed_removal_is_a_warning_not_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, home = _deployment(tmp_path, monkeypatch)

    def refuse(home: Path, logs: Path) -> None:
        raise OSError(39, "Directory not empty", str(home / "tmp"))

    monkeypatch.setattr(sparkhome_mod, "retire_spark_home", refuse)
    d.stop()  # does not raise
    assert home.is_dir() and not _events(d, "spark-home-removed")
    (warning,) = _events(d, "warning")
    assert "not removed" in str(warning["message"]) and "recover" in str(warning["message"])
    (stopped,) = _events(d, "run-stopped")
    assert stopped["errors"] == []


def test_the_home_stays_while_a_process_uses_it_or_a_driver_could_not_be_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, home = _deployment(tmp_path, monkeypatch)
    jars = f"{home}/replica-0/jars/*"  # a driver's SPARK_HOME in the run's
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", jars])
    try:
        d.stop()
    finally:
        jvm.kill()
        jvm.wait()
    assert home.is_dir()
    (warning,) = _events(d, "warning")
    assert f"pids [{jvm.pid}] still use it" in str(warning["message"])
    failed, fhome = _deployment(tmp_path / "b", monkeypatch, fail=True)
    with pytest.raises(DeployError, match="survived SIGKILL"):
        failed.stop()
    assert fhome.is_dir() and not _events(failed, "spark-home-removed")
