"""A fault placed after a batch boundary (``after_boundary``): whose boundaries count, how one is
found in the progress files, and the runner waiting for it (with the in-memory fault kind of
``test_faults``; no processes touched)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_faults import CALLS, FakeTarget, fake_kind  # noqa: F401 (a fixture)

from arfl.configs.chaos import Chaos
from arfl.errors import FaultError
from arfl.faults import align
from arfl.faults.base import FaultParams
from arfl.faults.runner import ChaosRunner
from arfl.run.rundir import RunPaths, read_jsonl


def _line(start: float, duration_ms: float) -> str:
    ts = datetime.fromtimestamp(start, UTC).isoformat(timespec="milliseconds")
    return json.dumps({"timestamp": ts.replace("+00:00", "Z"), "batchDuration": duration_ms})


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_the_survivors_boundaries_count() -> None:
    assert align.watched_replicas([0, 1], 0) == [1]
    assert align.watched_replicas([0, 1, 2], 1) == [0, 2]
    assert align.watched_replicas([0], 0) == [0]  # alone: its own (passive: after a checkpoint)
    assert align.watched_replicas([0, 1], None) == [0, 1]
    assert align.watched_replicas([0, 1, 2], "leader", leader=2) == [0, 1]
    assert align.watched_replicas([0, 1], "leader") == [0, 1]  # leader unknown: any
    assert align.watched_replicas([0, 1, 2], 0, peers=[1]) == [2]  # partition 0 from 1
    assert align.watched_replicas([0, 1], 0, peers=[1]) == [0, 1]  # hits both: either


def test_the_first_line_appended_after_the_wait_began_is_the_boundary(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    t = time.time()
    _append(paths.progress(1), _line(t - 60.0, 30_000.0) + "\n")  # before the wait: not counted
    _append(paths.progress(0), _line(t - 5.0, 1_000.0) + "\n")  # not watched
    stop = threading.Event()

    def later() -> None:
        time.sleep(0.5)
        _append(paths.progress(1), "not json\n" + _line(t - 30.0, 30_400.0)[:20])  # half a line
        time.sleep(0.2)
        _append(paths.progress(0), _line(t, 500.0) + "\n")
        _append(paths.progress(1), _line(t - 30.0, 30_400.0)[20:] + "\n")

    writer = threading.Thread(target=later)
    writer.start()
    found = align.next_boundary(paths.progress, [1], stop, timeout_s=5.0)
    writer.join()
    assert found is not None and found.replica == 1
    assert found.t == pytest.approx(t + 0.4, abs=0.002)  # start + batchDuration, from the line


def test_no_boundary_in_time_or_stopped_is_none(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    t0 = time.monotonic()
    assert align.next_boundary(paths.progress, [0], threading.Event(), timeout_s=0.2) is None
    assert 0.2 <= time.monotonic() - t0 < 2.0
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    t0 = time.monotonic()
    assert align.next_boundary(paths.progress, [0], stop, timeout_s=30.0) is None
    assert time.monotonic() - t0 < 2.0


def test_spec_entry_and_description() -> None:
    p = FaultParams.from_chaos(
        Chaos.model_validate(
            {"at": "85s", "fault": "kill-replica", "replica": 0, "after_boundary": "3s"}
        )
    )
    assert (p.at_s, p.after_boundary_s) == (85.0, 3.0)
    assert p.describe() == "kill-replica replica 0 3s after a batch boundary"
    plain = FaultParams.from_chaos(Chaos.model_validate({"at": "1s", "fault": "kill-replica"}))
    assert plain.after_boundary_s is None


@pytest.mark.usefixtures("fake_kind")
def test_the_runner_injects_after_the_survivors_boundary(tmp_path: Path) -> None:
    """Every 0.25 s both replicas end a batch, the target's (replica 0) a little earlier; the
    fault waits for the survivor's (replica 1) first one after the wait began, then 0.4 s."""
    paths = RunPaths(tmp_path)
    runner = ChaosRunner(FakeTarget(tmp_path))
    ends: list[float] = []
    done = threading.Event()

    def boundaries() -> None:
        while not done.wait(0.25):
            now = time.time()
            _append(paths.progress(0), _line(now - 1.05, 1_000.0) + "\n")
            ends.append(now)
            _append(paths.progress(1), _line(now - 2.0, 2_000.0) + "\n")

    writer = threading.Thread(target=boundaries)
    writer.start()
    try:
        out = runner.run_fault(FaultParams("test-fault", replica=0, after_boundary_s=0.4))
    finally:
        done.set()
        writer.join()
    assert out.error is None and out.injected_at is not None
    aligned, injected, _reverted = read_jsonl(paths.journal)
    assert aligned["event"] == "fault-aligned" and injected["event"] == "fault-injected"
    assert aligned["boundary_replica"] == 1 and aligned["after_s"] == 0.4
    (boundary,) = [t for t in ends if abs(aligned["boundary"] - t) < 0.002]
    assert boundary == min(t for t in ends if t >= aligned["t"] - aligned["waited_s"])
    assert -0.001 <= aligned["seen"] - boundary < 0.2
    assert out.injected_at - boundary == pytest.approx(0.4, abs=0.15)
    assert aligned["t"] <= injected["started"]
    assert CALLS == ["inject 0 0.0", "undo 0"]


@pytest.mark.usefixtures("fake_kind")
def test_without_a_boundary_nothing_is_injected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(align, "WAIT_MAX_S", 0.2)
    runner = ChaosRunner(FakeTarget(tmp_path))
    params = FaultParams("test-fault", replica=0, after_boundary_s=1.0)
    with pytest.raises(FaultError, match=r"not injected: 0.2 s passed before a batch boundary "
                       r"of replica 1 \(progress/replica-N.jsonl\)"):  # fmt: skip
        runner.run_fault(params)
    assert CALLS == [] and runner.outcomes[0].error is not None
    assert not _journal(tmp_path)
    # A schedule that ends first: the fault is journaled as failed, never injected.
    monkeypatch.setattr(align, "WAIT_MAX_S", 30.0)
    runner.start_schedule([params])
    t0 = time.monotonic()
    while len(runner.outcomes) < 2:  # waiting for its boundary
        assert time.monotonic() - t0 < 5
        time.sleep(0.01)
    runner.stop()
    (failed,) = _journal(tmp_path)
    assert failed["event"] == "fault-failed" and "the run ended" in failed["error"], failed
    assert CALLS == []


def _journal(run_dir: Path) -> list[dict[str, Any]]:
    path = RunPaths(run_dir).journal
    return read_jsonl(path) if path.exists() else []
