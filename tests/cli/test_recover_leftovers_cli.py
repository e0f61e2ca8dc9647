"""``arfl chaos recover`` and ``arfl stack down --runs`` stop what a dead deployment left
running (here: a driver in its own session, as ReplicaRunner starts it, with a child)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arfl.cli.main import main
from arfl.processes import create_time, is_running, stop_pid

DRIVER = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)"
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def leftover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, list[psutil.Process]]]:
    """A run whose arfl is gone and whose replica 0 driver (with a child) still runs."""
    from arfl.faults import leftovers

    monkeypatch.setattr(leftovers, "TREE_GRACE_S", 0.5)  # the child never exits by itself
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, *SLEEP], start_new_session=True)
    root = psutil.Process(driver.pid)
    deadline = time.monotonic() + 20
    while not root.children():
        assert time.monotonic() < deadline, "the fake driver started no child"
        time.sleep(0.02)
    procs = [root, *root.children()]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "runs" / "gone-run"
    run_dir.mkdir(parents=True)
    state = {
        "run": run_dir.name,
        "pid": dead.pid,
        "replicas": {"0": {"driver_pid": driver.pid, "driver_create_time": create_time(root)}},
    }
    (run_dir / "state.json").write_text(json.dumps(state))
    try:
        yield run_dir, procs
    finally:
        for p in procs:
            if is_running(p):
                stop_pid(p.pid, create_time(p), grace_s=1.0)
        driver.wait()


def test_chaos_recover_stops_a_dead_deployments_driver(
    leftover: tuple[Path, list[psutil.Process]], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, procs = leftover
    assert main(["chaos", "recover", "--runs", str(run_dir.parent)]) == 0
    assert not [p for p in procs if is_running(p)]
    out = capsys.readouterr().out
    assert "nothing to recover" not in out
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert [e["process"] for e in journal if e["event"] == "leftover-stopped"] == ["replica-0"]


def test_stack_down_runs_stops_a_dead_deployments_driver(
    leftover: tuple[Path, list[psutil.Process]], tmp_path: Path
) -> None:
    run_dir, procs = leftover
    state = tmp_path / "nostack"
    assert main(["stack", "down", "--state", str(state), "--runs", str(run_dir.parent)]) == 0
    assert not [p for p in procs if is_running(p)]
    assert "leftover-stopped" in (run_dir / "journal.jsonl").read_text()
