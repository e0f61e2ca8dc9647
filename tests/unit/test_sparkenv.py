"""A deployment's own SPARK_HOME: built, its executors' logs kept, deleted (sparkenv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from arfl.replica.sparkenv import (
    SCRATCH_ENV,
    driver_env,
    ensure_spark_home,
    local_session,
    pyspark_dir,
    run_spark_home,
)
from arfl.run.sparkhome import (
    OWNER_FILE,
    RUN_SPARK_HOMES,
    driver_scratch,
    driver_spark_home,
    make_scratch,
    owns_spark_home,
    processes_using,
    retire_spark_home,
)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ARFL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _used_home(run_dir: Path, drivers: tuple[str, ...] = ("replica-0",)) -> Path:
    """A run's SPARK_HOME as its drivers' ``local-cluster`` applications (all started in one
    second: one application id) and a killed JVM leave it."""
    home = run_spark_home(run_dir)
    for driver in drivers:
        own = ensure_spark_home(driver_spark_home(home, driver))
        ex = own / "work" / "app-20261128185800-0000" / "0"
        ex.mkdir(parents=True)
        (ex / "stderr").write_text(f"INFO Executor: Starting executor ID 0 of {driver}\n")
        (ex / "stdout").write_text("")  # empty: not kept
        (ex / "kafka-clients.jar").write_bytes(b"\0" * 2_000_000)
    scratch = own / "tmp" / "spark-0a3917d9" / "executor-62744f89"
    scratch.mkdir(parents=True)
    (scratch / "block").write_bytes(b"\0" * 500_000)
    return home


def test_two_runs_of_one_name_get_two_homes_each_naming_its_run(
    state: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "runs-a" / "clicks-1", tmp_path / "runs-b" / "clicks-1"
    ha, hb = run_spark_home(a), run_spark_home(b)
    assert ha != hb and ha.parent == hb.parent == state.resolve() / RUN_SPARK_HOMES
    assert ha.name.startswith("clicks-1-") and sorted(p.name for p in ha.iterdir()) == [OWNER_FILE]
    assert owns_spark_home(a, ha) and owns_spark_home(b, hb)
    assert not owns_spark_home(a, hb) and not owns_spark_home(b, ha)


def test_only_a_runs_own_home_is_its_own(state: Path, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r"
    home = run_spark_home(run)
    assert not owns_spark_home(run, tmp_path)
    assert not owns_spark_home(run, Path("/"))
    shared = ensure_spark_home(state / "spark-home")
    (shared / OWNER_FILE).write_text(str(run.resolve()))
    assert not owns_spark_home(run, shared)  # not under spark-runs
    (home / OWNER_FILE).unlink()
    assert not owns_spark_home(run, home)  # no owner file: not arfl's (or half deleted)


def test_retiring_moves_the_executor_logs_and_deletes_the_home_not_what_it_links(
    state: Path, tmp_path: Path
) -> None:
    home = _used_home(tmp_path / "runs" / "r")
    logs = tmp_path / "runs" / "r" / "logs" / "executors"
    retired = retire_spark_home(home, logs)
    assert retired is not None
    assert not home.exists()
    assert (pyspark_dir() / "jars").is_dir()  # the links were removed, not their targets
    kept = logs / "replica-0.app-20261128185800-0000.0.stderr"
    assert retired.executor_logs == (str(kept),)
    assert kept.read_text() == "INFO Executor: Starting executor ID 0 of replica-0\n"
    assert 2.5 <= retired.removed_mb < 3.0  # the jar copy and the scratch, not pyspark's jars
    assert retire_spark_home(home, logs) is None  # gone: nothing to do
    # The same run again (its logs already there): kept beside them.
    again = _used_home(tmp_path / "runs" / "r")
    second = retire_spark_home(again, logs)
    assert second is not None and second.executor_logs == (str(kept) + ".1",)


def test_drivers_started_in_one_second_keep_an_executor_log_each(
    state: Path, tmp_path: Path
) -> None:
    """Two ``local-cluster`` drivers started in one second get one application id: in one
    shared home their executors wrote one ``work/<app>/0/`` (one log lost); each in its own
    home, both logs are kept, named by the driver."""
    drivers = ("replica-0", "replica-1", "standby-0")
    home = _used_home(tmp_path / "runs" / "r", drivers)
    logs = tmp_path / "runs" / "r" / "logs" / "executors"
    retired = retire_spark_home(home, logs)
    assert retired is not None and not home.exists()
    names = [Path(p).name for p in retired.executor_logs]
    assert names == [f"{d}.app-20261128185800-0000.0.stderr" for d in drivers]
    for d in drivers:
        text = (logs / f"{d}.app-20261128185800-0000.0.stderr").read_text()
        assert text == f"INFO Executor: Starting executor ID 0 of {d}\n"


def test_a_home_its_drivers_shared_is_retired_too(state: Path, tmp_path: Path) -> None:
    """An older arfl ran every driver of a run in the run's home itself (``work/`` at its top):
    ``recover`` still keeps those logs and deletes it."""
    run = tmp_path / "runs" / "r"
    home = run_spark_home(run)
    ex = home / "work" / "app-1" / "0"
    ex.mkdir(parents=True)
    (ex / "stderr").write_text("executor log\n")
    retired = retire_spark_home(home, run / "logs" / "executors")
    assert retired is not None and not home.exists()
    assert retired.executor_logs == (str(run / "logs" / "executors" / "app-1.0.stderr"),)


def test_a_home_is_in_use_while_a_process_names_it(state: Path, tmp_path: Path) -> None:
    home = run_spark_home(tmp_path / "runs" / "r")
    assert processes_using(home) == []
    code = "import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, f"-cp={home}/standby-0/jars/*"])
    try:
        assert processes_using(home) == [proc.pid]
        assert processes_using(home.with_name(home.name + "x")) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_driver_jvms_temp_dirs_go_with_its_spark_home(state: Path) -> None:
    """A SIGKILLed driver never removes its ``spark-*``/``artifacts-*`` temp dirs and PySpark's
    sockets: they must be where the home's retirement deletes them, not in /tmp for good, and
    a socket's path must fit in 108 bytes however long the home's path is."""
    run_home = run_spark_home(state / ("r" * 120))
    home = ensure_spark_home(driver_spark_home(run_home, "replica-0"))
    env = driver_env(home, {"SPARK_SUBMIT_OPTS": "-Dmine=1"})
    scratch = Path(env[SCRATCH_ENV])
    assert env["SPARK_SUBMIT_OPTS"] == f"-Dmine=1 -Djava.io.tmpdir={scratch}"
    assert len(f"{scratch}/.{uuid.uuid4()}.sock") < 108 < len(str(home))
    make_scratch(scratch)
    (scratch / "artifacts-1").mkdir()
    (scratch / ".1.sock").touch()
    assert driver_scratch(home) == scratch and driver_scratch(run_home) != scratch
    retire_spark_home(run_home, state / "logs")
    assert not scratch.exists() and not run_home.exists()


def test_a_scratch_someone_else_made_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "arfl-spark-x"
    link.symlink_to(target)
    with pytest.raises(OSError, match="not a directory of this user's"):
        make_scratch(link)
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        make_scratch(tmp_path / "file")
    assert make_scratch(target) == target  # ours: used again


def test_a_local_sessions_jvm_keeps_its_temp_dirs_in_one_removed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes its dirs
    with local_session(app_name="arfl-test-tmpdir") as spark:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm_tmp = Path(jvm.System.getProperty("java.io.tmpdir"))
        assert jvm_tmp.parent == tmp_path, jvm_tmp
        made = sorted(p.name for p in jvm_tmp.iterdir())
        assert any(n.startswith(("spark-", "artifacts-")) for n in made), made
    assert not jvm_tmp.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a directory to another user")
def test_retiring_a_home_leaves_a_scratch_of_another_users(state: Path) -> None:
    run_home = run_spark_home(state / "r")
    home = ensure_spark_home(driver_spark_home(run_home, "replica-0"))
    scratch = make_scratch(driver_scratch(home))
    try:
        os.chown(scratch, 65534, 65534)
        retire_spark_home(run_home, state / "logs")
        assert scratch.is_dir() and not run_home.exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
