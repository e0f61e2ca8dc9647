"""``arfl chaos``: forms, exit codes and messages, against a real (sleeping) process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arfl.cli.main import main
from arfl.faults.pending import PendingFaults
from arfl.faults.procs import identify
from arfl.testing.faults import write_state


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(10)


@pytest.fixture
def run_dir(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> Path:
    return write_state(tmp_path / "runs" / "r1", "r1", {0: {"driver_pid": sleeper.pid}})


def test_help_documents_the_forms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "arfl chaos RUN FAULT [options]" in out
    assert "arfl chaos RUN --list" in out and "arfl chaos recover [RUN]" in out
    assert "kill-executor" in out and "exits 5" in out


def test_list_shows_replicas_and_pids(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "--list"]) == 0
    out = capsys.readouterr().out
    assert "r1" in out and str(sleeper.pid) in out and "running" in out


def test_run_found_by_name_under_runs(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "r1", "--list", "--runs", str(run_dir.parent)]) == 0


def test_dry_run_injects_nothing(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "pause", "--replica", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and str(sleeper.pid) in out
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    assert not (run_dir / "journal.jsonl").exists()


def test_pause_by_hand_blocks_then_reverts(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "pause", "-r", "0", "--duration", "300ms"]) == 0
    out = capsys.readouterr().out
    assert "injected" in out and "reverted" in out
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    events = [
        json.loads(x)["event"] for x in (run_dir / "journal.jsonl").read_text().split("\n") if x
    ]
    assert events == ["fault-injected", "fault-reverted"]


def test_unknown_fault_exits_5_with_known_kinds(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "kil-executor", "-r", "0"]) == 5
    assert "unknown fault 'kil-executor' (known: delay, kill-executor" in capsys.readouterr().err


def test_kill_executor_without_executors_exits_5(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "kill-executor", "-r", "0"]) == 5
    err = capsys.readouterr().err
    assert "has no executor JVM" in err and "Traceback" not in err


def test_missing_replica_and_bad_duration(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "pause", "-r", "7"]) == 5
    assert "has no replica 7" in capsys.readouterr().err
    assert main(["chaos", str(run_dir), "pause", "-r", "0", "--duration", "ten"]) == 2
    assert main(["chaos", str(run_dir), "kill-replica", "-r", "0", "--duration", "1s"]) == 2


def test_unknown_run_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", str(tmp_path / "nope"), "--list"]) == 5
    assert "no run directory with a state.json" in capsys.readouterr().err


def test_recover_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "recover", "--runs", str(tmp_path)]) == 0
    assert "nothing to recover" in capsys.readouterr().out


def test_recover_resumes_a_process_left_paused(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    # as if an 'arfl chaos ... pause' had been SIGKILLed mid-fault
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pending = PendingFaults(run_dir)
    pending.add("pause", 0, {"pids": identify([sleeper.pid])})
    data = json.loads(pending.path.read_text())
    data["faults"][0]["owner_pid"] = dead.pid
    pending.path.write_text(json.dumps(data))
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert main(["chaos", "recover", "--runs", str(run_dir.parent)]) == 0
    assert "reverted pause replica 0" in capsys.readouterr().out
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    assert not pending.path.exists()
