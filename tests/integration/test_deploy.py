"""``arfl deploy`` end to end on the embedded stack with real Spark applications.

Each test runs a real deployment (injector -> Kafka -> Spark replica(s) with executor JVMs ->
Kafka -> merger -> final topic) and checks the final output against the results recomputed
offline from the input topic: nothing lost, nothing twice, identical content.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest
from deploy_checks import (
    check_against_offline,
    check_run_dir,
    check_silent_then_resumed,
    journal_events,
    windowed_spec,
)

from arfl.orchestrate.deploy import DeployOptions, Tick, deploy
from arfl.run.rundir import read_jsonl
from arfl.stack import StackInfo
from arfl.testing.spark import StandaloneCluster

pytestmark = pytest.mark.integration


def test_deploy_none_windowed_matches_offline_and_a_pause_stalls_it(
    stack: StackInfo, tmp_path: Path
) -> None:
    spec = windowed_spec(
        "dep-none", chaos=[{"at": "18s", "fault": "pause", "replica": 0, "duration": "5s"}]
    )
    ticks: list[Tick] = []
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path), on_tick=ticks.append)
    assert result.summary["produced"] == 200 * 30
    assert result.summary["duplicates_dropped"] == 0
    assert result.summary["divergent"] == 0
    check_against_offline(stack, spec, result)
    check_run_dir(result)
    assert any(t.snapshot is not None and t.snapshot.results > 0 for t in ticks)
    assert {s for t in ticks for s in t.replicas.values()} >= {"running"}
    # The pause froze the replica (no output) and SIGCONT let it go on where it was.
    (inj,) = journal_events(result.run_dir, "fault-injected")
    (rev,) = journal_events(result.run_dir, "fault-reverted")
    check_silent_then_resumed(result.run_dir, 0, float(inj["ended"]), float(rev["ended"]))
    assert result.summary["replica_restarts"] == 0


def _executors(cluster: StandaloneCluster, app_id: str) -> list[psutil.Process]:
    """Executor JVMs of ``app_id`` under the standalone worker."""
    worker = psutil.Process(cluster.pids()["worker"])
    out = []
    for p in worker.children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmd and app_id in cmd:
            out.append(p)
    return out


def test_deploy_passive_driver_killed_on_a_standalone_cluster_restarts_from_checkpoint(
    stack: StackInfo, tmp_path: Path
) -> None:
    # One run for both: passive's restart from the checkpoint, and a master given on the command
    # line (a standalone cluster, whose executors are the worker's children, not the driver's).
    spec = windowed_spec(
        "dep-passive",
        mode="passive",
        duration="20s",
        source={"partitions": 4},
        chaos=[{"at": "6s", "fault": "kill-replica", "replica": 0}],
    )
    with StandaloneCluster(tmp_path / "spark") as cluster:
        result = deploy(spec, None, DeployOptions(runs_root=tmp_path, master=cluster.master_url))
        journal = read_jsonl(result.run_dir / "journal.jsonl")
        apps = [e["app_id"] for e in journal if e["event"] == "replica-ready"]
        assert len(apps) == 2 and apps[0] != apps[1], apps
        # The master removes the dead application's executor once its driver is gone.
        deadline = time.monotonic() + 60
        while _executors(cluster, apps[0]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _executors(cluster, apps[0])
    assert result.summary["master"].startswith("spark://127.0.0.1:")
    kinds = [e["event"] for e in journal]
    assert "fault-injected" in kinds
    assert kinds.count("replica-died") == 1 and kinds.count("replica-restarted") == 1
    died = next(e for e in journal if e["event"] == "replica-died")
    assert died["exit_code"] == -9
    assert result.summary["replica_restarts"] == 1
    # Complete and exact although the restarted driver re-emitted some results.
    check_against_offline(stack, spec, result)
    # The restarted query continued the same checkpoint: one query id, two runs, and its
    # first batch after the restart did not start from offset 0 again.
    ckpt = result.run_dir / "checkpoints" / "replica-0"
    assert (ckpt / "offsets").is_dir() and (ckpt / "commits").is_dir()
    progress = read_jsonl(result.run_dir / "progress" / "replica-0.jsonl")
    assert len({p["id"] for p in progress}) == 1
    assert len({p["runId"] for p in progress}) == 2
    starts = [p["sources"][0].get("startOffset") for p in progress if p.get("sources")]
    assert starts.count(None) <= 1
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["latency_ms"]["max"] >= summary["latency_ms"]["p50"]
