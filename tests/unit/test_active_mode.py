"""Mode ``active``: explicit start offsets, staggered real-time batch boundaries."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.registry import MODES
from arfl.replica.modes.active import stagger_delay
from arfl.replica.modes.base import STAGGER_REF, ReplicaContext, get_mode, trigger_of


def _spec(trigger: str = "realtime", replicas: int = 2, stagger: bool = True) -> Spec:
    return parse_spec(
        {
            "name": "a",
            "source": {"topic": "t", "partitions": 2},
            "sink": {"topic": "o"},
            "replication": {
                "mode": "active",
                "replicas": replicas,
                "trigger": trigger,
                "trigger_interval": "10s",
                "stagger": stagger,
            },
        }
    )


def test_active_is_coordination_free_and_takes_both_triggers() -> None:
    info = MODES.info("active")
    assert info.coordination_free and info.active and info.min_replicas == 2
    assert info.triggers == {"micro-batch", "realtime"}


def test_realtime_trigger_is_the_checkpoint_interval() -> None:
    assert trigger_of(_spec()) == {"realTime": "10000 milliseconds"}
    assert trigger_of(_spec("micro-batch")) == {"processingTime": "10000 milliseconds"}


@pytest.mark.parametrize(
    ("now", "replica", "replicas", "want"),
    [
        (100.0, 1, 2, 5.0),  # half an interval after replica 0
        (100.0, 2, 4, 5.0),
        (100.0, 1, 4, 2.5),
        (107.0, 1, 2, 8.0),  # the slot at 105 passed: the next is 115
        (125.0, 1, 2, 0.0),  # exactly on a slot
    ],
)
def test_stagger_delay_falls_between_replica_zeros_boundaries(
    now: float, replica: int, replicas: int, want: float
) -> None:
    assert stagger_delay(100.0, now, 10.0, replica, replicas) == pytest.approx(want)


def test_start_delay_reads_replica_zeros_query_start(tmp_path: Path) -> None:
    ref = tmp_path / "replica-0.app.json"
    ref.write_text(json.dumps({"app_id": "x", "query_started": 1e12}))  # far future
    mode = get_mode("active")
    spec = _spec()

    def ctx(replica: int, attempt: int = 0) -> ReplicaContext:
        return ReplicaContext(replica, "k:1", "o.r0", tmp_path, attempt, {STAGGER_REF: str(ref)})

    # Replica 1 waits until half an interval after replica 0's start; replica 0, a restart
    # and micro-batches never wait.
    delay = mode.start_delay(spec, ctx(1))
    assert delay > 1e11
    assert mode.start_delay(spec, ctx(0)) == 0.0
    assert mode.start_delay(spec, ctx(1, 1)) == 0.0
    mb = _spec("micro-batch")
    assert mode.start_delay(mb, ctx(1)) == 0.0


def test_incomplete_checkpoint_writes_of_a_killed_driver_are_dropped(tmp_path: Path) -> None:
    from arfl.replica.modes.base import drop_incomplete_writes

    commits, offsets = tmp_path / "commits", tmp_path / "offsets"
    commits.mkdir()
    offsets.mkdir()
    left = [commits / ".0.f93e.tmp", commits / "..0.f93e.tmp.crc", offsets / ".3.ab.tmp"]
    kept = [commits / "0", commits / ".0.crc", offsets / "2", tmp_path / "metadata"]
    for f in left + kept:
        f.write_text("x")
    assert sorted(drop_incomplete_writes(tmp_path)) == sorted(left)
    assert all(f.exists() for f in kept) and not any(f.exists() for f in left)
    assert drop_incomplete_writes(tmp_path / "missing") == []


def test_executor_kill_targets_the_replicas_own_executor_when_app_ids_collide(
    tmp_path: Path,
) -> None:
    """Two local-cluster replicas started in the same second share an application id."""
    import subprocess
    import sys
    import time

    import psutil

    from arfl.targets.local import EXECUTOR_MAIN, LocalTarget
    from arfl.testing.faults import write_state

    app = "app-20261126093540-0000"
    executor = [sys.executable, "-c", "import time; time.sleep(60)", EXECUTOR_MAIN,
                "--executor-id", "0", "--app-id", app]  # fmt: skip
    spawn = f"import subprocess, time; subprocess.Popen({executor!r}); time.sleep(60)"
    drivers = [subprocess.Popen([sys.executable, "-c", spawn]) for _ in range(2)]
    try:
        target = LocalTarget.from_run_dir(
            write_state(
                tmp_path / "run",
                "run",
                {i: {"driver_pid": d.pid, "app_id": app} for i, d in enumerate(drivers)},
            )
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(len(target.replica_pids(i)) < 2 for i in (0, 1)):
            time.sleep(0.05)
        trees = [set(target.replica_pids(i)) for i in (0, 1)]
        for i in (0, 1):
            own = target.executor_pids(i)
            assert list(own) == ["0"] and own["0"] in trees[i], (i, own, trees)
        # While replica 0's executor is being replaced, replica 1's is no stand-in for it.
        psutil.Process(target.executor_pids(0)["0"]).kill()
        time.sleep(0.3)
        assert target.executor_pids(0) == {}
    finally:
        for d in drivers:
            children = psutil.Process(d.pid).children(recursive=True)
            d.kill()
            d.wait()
            for c in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    c.kill()


def test_stagger_false_starts_replicas_together_without_a_keeper() -> None:
    from arfl.replica.app import phase_keeper
    from arfl.replica.modes.base import PEER_PROGRESS

    ctx = ReplicaContext(
        replica=1,
        bootstrap="b",
        output_topic="o.r1",
        checkpoint_dir=Path("/nonexistent"),
        options={STAGGER_REF: "/nonexistent/app.json", PEER_PROGRESS: '["/x/replica-0.jsonl"]'},
    )
    off = _spec(stagger=False)
    assert get_mode("active").start_delay(off, ctx) == 0.0
    assert phase_keeper(object(), off, ctx) is None
    assert _spec().replication.stagger is True
