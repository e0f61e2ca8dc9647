"""A deployment's own SPARK_HOME: built, its executors' logs kept, deleted (sparkenv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arfl.replica.sparkenv import (
    RUN_SPARK_HOMES,
    ensure_spark_home,
    is_run_spark_home,
    pyspark_dir,
    retire_spark_home,
    run_spark_home,
)


def _used_home(tmp_path: Path) -> Path:
    """A run's SPARK_HOME as a local-cluster application and a killed JVM leave it."""
    home = ensure_spark_home(tmp_path / RUN_SPARK_HOMES / "run-1")
    ex = home / "work" / "app-20261128185800-0000" / "0"
    ex.mkdir(parents=True)
    (ex / "stderr").write_text("INFO Executor: Starting executor ID 0\n")
    (ex / "stdout").write_text("")  # empty: not kept
    (ex / "kafka-clients.jar").write_bytes(b"\0" * 2_000_000)
    scratch = home / "tmp" / "spark-0a3917d9" / "executor-62744f89"
    scratch.mkdir(parents=True)
    (scratch / "block").write_bytes(b"\0" * 500_000)
    return home


def test_a_run_spark_home_lives_under_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARFL_STATE_DIR", str(tmp_path))
    assert run_spark_home("clicks-1") == tmp_path / RUN_SPARK_HOMES / "clicks-1"


def test_retiring_keeps_the_executor_logs_and_deletes_the_home_not_what_it_links(
    tmp_path: Path,
) -> None:
    home = _used_home(tmp_path)
    logs = tmp_path / "run" / "logs" / "executors"
    retired = retire_spark_home(home, logs)
    assert retired is not None
    assert not home.exists()
    assert (pyspark_dir() / "jars").is_dir()  # the links were removed, not their targets
    kept = logs / "app-20261128185800-0000.0.stderr"
    assert retired.executor_logs == [str(kept)]
    assert kept.read_text() == "INFO Executor: Starting executor ID 0\n"
    assert 2.5 <= retired.removed_mb < 3.0  # the jar copy and the scratch, not pyspark's jars
    assert retire_spark_home(home, logs) is None  # gone: nothing to do


def test_only_a_run_spark_home_is_one(tmp_path: Path) -> None:
    home = _used_home(tmp_path)
    assert is_run_spark_home(home)
    assert not is_run_spark_home(tmp_path)
    assert not is_run_spark_home(Path("/"))
    bare = tmp_path / RUN_SPARK_HOMES / "no-release"
    bare.mkdir()
    assert not is_run_spark_home(bare)  # arfl's RELEASE file says it built it
    shared = ensure_spark_home(tmp_path / "spark-home")
    assert not is_run_spark_home(shared)
