"""The watch loop's drain: replicas the supervisor gave up on are not waited for.

A fake runner, merger and injector (plain objects) and progress files written by the test: no
Spark, no Kafka.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from watch_fakes import FakeProcess, FakeResources, FakeRunner

from arfl.configs.load import parse_spec
from arfl.errors import DeployError
from arfl.measure.merger.core import MergeCore
from arfl.orchestrate import watch
from arfl.orchestrate.context import DeployOptions, RunContext, create_run
from arfl.orchestrate.slots import ReplicaState
from arfl.orchestrate.watch import Watcher, caught_up
from arfl.processes import wait_until
from arfl.run.rundir import read_jsonl

END = {0: 40, 1: 60}
DRAIN_S = 6.0


def _ctx(tmp_path: Path, replicas: int = 2) -> RunContext:
    spec = parse_spec(
        {
            "name": "w",
            "source": {"topic": "in", "partitions": 2},
            "sink": {"topic": "out"},
            "replication": {"mode": "active-leaderless", "replicas": replicas},
        }
    )
    return create_run(spec, None, DeployOptions(runs_root=tmp_path, drain_s=DRAIN_S))


def _progress(ctx: RunContext, replica: int, ends: dict[int, int]) -> None:
    line = {
        "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "durationMs": {"triggerExecution": 10},
        "numInputRows": 0,
        "sources": [{"endOffset": {"batch": 7, "offsets": {str(p): o for p, o in ends.items()}}}],
    }
    path = ctx.paths.progress(replica)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")


class _Watcher(Watcher):
    def source_end_offsets(self) -> dict[int, int]:
        return dict(END)


def _watcher(ctx: RunContext, states: dict[int, ReplicaState]) -> Watcher:
    return _Watcher(
        ctx,
        "127.0.0.1:1",
        FakeRunner(states),  # type: ignore[arg-type]
        FakeProcess(alive=True),  # type: ignore[arg-type]
        FakeProcess(alive=False),  # type: ignore[arg-type]
        resources=FakeResources(),  # type: ignore[arg-type]
        write_state=lambda: None,
        active_faults=lambda: [],
        started_at=time.time(),
    )


def _events(ctx: RunContext, name: str) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(ctx.paths.journal) if e["event"] == name]


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "TICK_S", 0.05)
    monkeypatch.setattr(watch, "QUIET_S", 0.2)


def test_last_progress_is_the_newest_line_read_incrementally(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    w = _watcher(ctx, {0: ReplicaState(0, "running", pid=1)})
    assert w.last_progress(0) is None
    _progress(ctx, 0, {0: 1, 1: 1})
    _progress(ctx, 0, {0: 5, 1: 5})
    first = w.last_progress(0)
    assert first is not None and first["sources"][0]["endOffset"]["offsets"] == {"0": 5, "1": 5}
    assert w.last_progress(0) is first  # nothing new: the kept line, the file not re-read
    _progress(ctx, 0, END)
    newest = w.last_progress(0)
    assert newest is not None and newest["sources"][0]["endOffset"]["offsets"] == {
        str(p): o for p, o in END.items()
    }


def test_caught_up_leaves_out_the_replicas_given_up_on(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _progress(ctx, 0, END)
    _progress(ctx, 1, {0: 10, 1: 10})  # stopped early: it was killed for good
    last = _watcher(ctx, {}).last_progress
    assert not caught_up(ctx.spec, last, END)
    assert caught_up(ctx.spec, last, END, without={1})
    assert not caught_up(ctx.spec, last, END, without={0})


def test_drain_does_not_wait_for_a_replica_that_gave_up(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _progress(ctx, 0, END)
    _progress(ctx, 1, {0: 10, 1: 10})
    # Replica 1 was restarted once, then killed with restart = false: it never comes back.
    states = {
        0: ReplicaState(0, "running", pid=1),
        1: ReplicaState(1, "dead", pid=2, restarts=1, exit_code=-9),
    }
    t0 = time.monotonic()
    _watcher(ctx, states).run(None)
    assert time.monotonic() - t0 < DRAIN_S / 2
    assert not [e for e in _events(ctx, "warning") if "had not caught up" in e["message"]]
    (excluded,) = _events(ctx, "replica-excluded")
    assert excluded["replica"] == 1 and excluded["remaining"] == [0]
    assert "continues without it" in excluded["message"]


def test_a_live_replica_behind_is_still_waited_for(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _progress(ctx, 0, END)
    _progress(ctx, 1, {0: 10, 1: 10})
    states = {0: ReplicaState(0, "running", pid=1), 1: ReplicaState(1, "running", pid=2)}
    t0 = time.monotonic()
    _watcher(ctx, states).run(None)
    assert time.monotonic() - t0 >= DRAIN_S
    assert [e for e in _events(ctx, "warning") if "had not caught up" in e["message"]]
    assert _events(ctx, "replica-excluded") == []


def _realtime_ctx(tmp_path: Path) -> RunContext:
    spec = parse_spec(
        {
            "name": "w",
            "source": {"topic": "in", "partitions": 2},
            "steps": [{"filter": "amount > 10"}],
            "sink": {"topic": "out"},
            "replication": {"mode": "active", "replicas": 2, "trigger": "realtime"},
        }
    )
    assert spec.passes_markers
    return create_run(spec, None, DeployOptions(runs_root=tmp_path, drain_s=DRAIN_S))


def _marker_copies(ctx: RunContext, ended: dict[int, list[int]]) -> None:
    """A monitor line after each replica delivered the marker copies of ``ended[r]``."""
    core = MergeCore(2, time.time() - 1)
    for r, parts in ended.items():
        for p in parts:
            raw = {"rid": f"{p}:{END[p] - 1}", "src_ts": 1, "replica": r, "hash": "m", "eoi": True}
            core.on_record(r, json.dumps(raw).encode(), time.time(), 0)
    _, line, _ = core.tick(time.time())
    with ctx.paths.monitor.open("a") as f:
        f.write(json.dumps(line) + "\n")


def test_real_time_replicas_past_every_marker_are_drained_before_their_batch_ends(
    tmp_path: Path,
) -> None:
    ctx = _realtime_ctx(tmp_path)
    _progress(ctx, 0, {0: 10, 1: 10})  # their last batches ended before the input did
    _progress(ctx, 1, {0: 10, 1: 10})
    _marker_copies(ctx, {0: [0, 1], 1: [1, 0]})
    states = {0: ReplicaState(0, "running", pid=1), 1: ReplicaState(1, "running", pid=2)}
    t0 = time.monotonic()
    _watcher(ctx, states).run(None)
    assert time.monotonic() - t0 < DRAIN_S / 2
    assert not [e for e in _events(ctx, "warning") if "had not caught up" in e["message"]]


def test_a_replica_short_of_one_marker_is_still_waited_for(tmp_path: Path) -> None:
    ctx = _realtime_ctx(tmp_path)
    _progress(ctx, 0, {0: 10, 1: 10})
    _progress(ctx, 1, {0: 10, 1: 10})
    _marker_copies(ctx, {0: [0, 1], 1: [0]})
    states = {0: ReplicaState(0, "running", pid=1), 1: ReplicaState(1, "running", pid=2)}
    t0 = time.monotonic()
    _watcher(ctx, states).run(None)
    assert time.monotonic() - t0 >= DRAIN_S
    assert [e for e in _events(ctx, "warning") if "had not caught up" in e["message"]]


def test_a_restarted_replica_is_not_read_to_the_end_by_its_old_attempts_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "REJOIN_GRACE_S", 0.0)
    ctx = _realtime_ctx(tmp_path)
    _progress(ctx, 0, {0: 10, 1: 10})
    _progress(ctx, 1, {0: 10, 1: 10})
    _marker_copies(ctx, {0: [0, 1], 1: [0, 1]})
    time.sleep(0.1)
    # Replica 1 was restarted after its markers: its new attempt has read nothing yet.
    states = {
        0: ReplicaState(0, "running", pid=1),
        1: ReplicaState(1, "running", pid=2, restarts=1),
    }
    t0 = time.monotonic()
    _watcher(ctx, states).run(None)
    assert time.monotonic() - t0 >= DRAIN_S
    (not_caught_up,) = _events(ctx, "replica-not-caught-up")
    assert not_caught_up["replica"] == 1


def test_marker_copies_count_once_every_partition_has_one_and_the_newest_is_quiet() -> None:
    end = {0: 40, 1: 60}
    assert watch.markers_passed({0: 10.0, 1: 11.0}, end, now=11.0 + watch.QUIET_S)
    assert not watch.markers_passed({0: 10.0, 1: 11.0}, end, now=10.9 + watch.QUIET_S)
    assert not watch.markers_passed({0: 10.0}, end, now=100.0)
    assert not watch.markers_passed({}, {}, now=100.0)  # no input end known


def test_every_replica_dead_fails_the_run(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    states = {0: ReplicaState(0, "dead", pid=1), 1: ReplicaState(1, "dead", pid=2)}
    with pytest.raises(DeployError, match="every replica is dead"):
        _watcher(ctx, states).run(None)


def test_the_live_view_shows_no_input_rate_once_the_input_ended(tmp_path: Path) -> None:
    # The injector's last second said 1000/s; once it finished, the live line kept showing it
    # for the whole drain (seen in the demo: "in 1000/s | out 0/s" after the input's end).
    ctx = _ctx(tmp_path)
    _progress(ctx, 0, END)
    _progress(ctx, 1, END)
    second = {"type": "second", "t": time.time(), "t0": time.time() - 1, "sent": 1000}
    second |= {"target": 1000, "behind_ms": 0.0, "total": 1000}
    ctx.injector_stats.parent.mkdir(parents=True, exist_ok=True)
    ctx.injector_stats.write_text(json.dumps(second) + "\n")
    states = {0: ReplicaState(0, "running", pid=1), 1: ReplicaState(1, "running", pid=2)}
    ticks: list[Any] = []
    _watcher(ctx, states).run(ticks.append)
    draining = [t for t in ticks if t.phase == "draining"]
    assert draining, [t.phase for t in ticks]
    assert all(t.injector is None for t in draining)


def test_a_dead_merger_is_replaced_and_one_that_keeps_dying_fails_the_run(
    tmp_path: Path,
) -> None:
    ctx = _ctx(tmp_path)
    w = _watcher(ctx, {0: ReplicaState(0, "running", pid=1)})
    started: list[FakeProcess] = []

    def restart() -> FakeProcess:
        started.append(FakeProcess(alive=True))
        return started[-1]

    w.restart_merger = restart  # type: ignore[assignment]
    for n in range(1, watch.MERGER_RESTARTS + 1):
        w.merger = FakeProcess(alive=False)  # type: ignore[assignment]
        w._check_alive({})
        assert w.merger is started[-1] and len(started) == n
    assert [e["exit_code"] for e in _events(ctx, "merger-died")] == [0] * watch.MERGER_RESTARTS
    assert len(_events(ctx, "merger-restarted")) == watch.MERGER_RESTARTS
    assert w._merger_text().endswith(f"restarted {watch.MERGER_RESTARTS}x")
    w.merger = FakeProcess(alive=False)  # type: ignore[assignment]
    with pytest.raises(DeployError, match="the merger died"):
        w._check_alive({})


def test_a_dead_merger_is_replaced_the_moment_it_exits_not_at_the_next_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "TICK_S", 2.5)
    ctx = _ctx(tmp_path)
    _progress(ctx, 0, END)
    w = _watcher(ctx, {0: ReplicaState(0, "running", pid=1)})
    real = subprocess.Popen(["sleep", "60"])

    class Merger(FakeProcess):
        def alive(self) -> bool:
            self.returncode = real.poll()
            return self.returncode is None

    w.merger = Merger(alive=True)  # type: ignore[assignment]
    w.merger.pid = real.pid
    w.restart_merger = lambda: FakeProcess(alive=True)  # type: ignore[assignment,return-value]
    t = threading.Thread(target=w.run, args=(None,), daemon=True)
    t.start()
    try:
        time.sleep(0.5)  # the first tick's wait has begun
        real.kill()
        killed = time.time()
        wait_until(lambda: _events(ctx, "merger-restarted"), timeout_s=5, interval_s=0.02)
        (died,) = _events(ctx, "merger-died")
        assert float(died["t"]) - killed < 1.0  # the next tick was ~2 s away
    finally:
        real.kill()
        real.wait()
        monkeypatch.setattr(watch, "TICK_S", 0.05)  # to drain and end quickly
        t.join(30)
