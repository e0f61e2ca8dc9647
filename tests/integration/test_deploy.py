"""``arfl deploy`` end to end on the embedded stack with real Spark applications.

Each test runs a real deployment (injector -> Kafka -> Spark replica(s) with executor JVMs ->
Kafka -> merger -> final topic) and checks the final output against the results recomputed
offline from the input topic: nothing lost, nothing twice, identical content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.spec import Spec, parse_spec
from arfl.metrics.histogram import read_latency_log
from arfl.pipelines import offline
from arfl.pipelines.deploy import DeployOptions, DeployResult, Tick, deploy, scoped
from arfl.pipelines.rundir import read_jsonl
from arfl.stack import StackInfo, ensure_installed
from arfl.testing.spark import ResultReader, StandaloneCluster

pytestmark = pytest.mark.integration


def _spec(name: str, mode: str = "none", duration: str = "30s", **extra: Any) -> Spec:
    raw: dict[str, Any] = {
        "name": name,
        "source": {"topic": "clicks", "partitions": 2, "event_time": "ts"},
        "steps": [
            {"filter": "amount > 10"},
            {
                "window": {
                    "size": "1s",
                    "key": "user",
                    "watermark": "500ms",
                    "agg": {"n": "count(*)", "total": "sum(amount)"},
                }
            },
        ],
        "sink": {"topic": "clicks-out"},
        "replication": {"mode": mode, "replicas": 1},
        "spark": {
            "master": "local-cluster[1,1,1024]",
            "conf": {"spark.sql.shuffle.partitions": "2"},
        },
        "workload": {"rate": 200, "duration": duration, "keys": 20, "warmup": "2s"},
    }
    raw.update(extra)
    return parse_spec(raw, f"{name}.toml")


def _final_output(info: StackInfo, result: DeployResult) -> dict[str, list[Any]]:
    sink = result.summary["topics"]["sink"]
    with ResultReader(info.kafka, sink) as reader:
        expected = result.summary["results"]
        reader.poll_until(lambda rs: len(rs) >= expected, timeout_s=30)
        reader.poll(1.0)
        by_rid: dict[str, list[Any]] = {}
        for r in reader.results:
            by_rid.setdefault(r.result.rid, []).append(r.result)
        assert reader.bad == 0
    return by_rid


def _check_against_offline(
    info: StackInfo, spec: Spec, result: DeployResult
) -> offline.Recomputed:
    out = _final_output(info, result)
    dups = {rid: len(copies) for rid, copies in out.items() if len(copies) > 1}
    assert not dups, f"duplicates in the final output: {list(dups.items())[:5]}"
    expected = offline.recompute(
        scoped(spec, result.run_dir.name), info.kafka, ensure_installed().spark_kafka_jars
    )
    assert expected.input_records == result.summary["produced"]
    missing = expected.final - set(out)
    assert not missing, f"{len(missing)} final results missing, e.g. {sorted(missing)[:5]}"
    unexpected = set(out) - set(expected.results)
    assert not unexpected, f"results the input does not explain: {sorted(unexpected)[:5]}"
    wrong = [
        rid for rid, copies in out.items() if copies[0].hash != expected.results[rid].hash
    ]
    assert not wrong, f"content differs from the offline result for {wrong[:5]}"
    assert len(expected.final) > 0.8 * len(expected.results)
    return expected


def _check_run_dir(result: DeployResult) -> None:
    run = result.run_dir
    for name in ("spec.json", "state.json", "journal.jsonl", "latency.hlog", "summary.json"):
        assert (run / name).exists(), name
    intervals = read_latency_log(run / "latency.hlog")
    assert sum(i.count for i in intervals) == result.summary["results"]
    lat = result.summary["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    # Window of 1 s + watermark 0.5 s: a result cannot be older than that when it is emitted,
    # nor should it be minutes late on a healthy run.
    assert 500 <= lat["p50"] <= 60_000
    events = [e["event"] for e in read_jsonl(run / "journal.jsonl")]
    for ev in ("run-started", "replica-started", "workload-started", "run-finished"):
        assert ev in events
    progress = read_jsonl(run / "progress" / "replica-0.jsonl")
    assert progress and all("durationMs" in p for p in progress)


def test_deploy_none_windowed_matches_offline(stack: StackInfo, tmp_path: Path) -> None:
    spec = _spec("dep-none")
    ticks: list[Tick] = []
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path), on_tick=ticks.append)
    assert result.summary["produced"] == 200 * 30
    assert result.summary["duplicates_dropped"] == 0
    assert result.summary["divergent"] == 0
    _check_against_offline(stack, spec, result)
    _check_run_dir(result)
    assert any(t.snapshot is not None and t.snapshot.results > 0 for t in ticks)
    assert {s for t in ticks for s in t.replicas.values()} >= {"running"}


def test_deploy_passive_driver_killed_restarts_from_checkpoint(
    stack: StackInfo, tmp_path: Path
) -> None:
    spec = _spec(
        "dep-passive",
        mode="passive",
        duration="40s",
        chaos=[{"at": "12s", "fault": "kill-replica", "replica": 0}],
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    journal = read_jsonl(result.run_dir / "journal.jsonl")
    kinds = [e["event"] for e in journal]
    assert "fault-injected" in kinds
    assert "replica-died" in kinds
    assert "replica-restarted" in kinds
    assert result.summary["replica_restarts"] >= 1
    _check_against_offline(stack, spec, result)
    # The restarted driver resumed from the checkpoint: its first batch after the restart
    # does not start from offset 0 again.
    progress = read_jsonl(result.run_dir / "progress" / "replica-0.jsonl")
    starts = [p["sources"][0].get("startOffset") for p in progress if p.get("sources")]
    assert starts.count(None) <= 1
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["latency_ms"]["max"] >= summary["latency_ms"]["p50"]


def test_deploy_on_standalone_cluster(stack: StackInfo, tmp_path: Path) -> None:
    spec = _spec("dep-standalone", duration="20s")
    with StandaloneCluster(tmp_path / "spark") as cluster:
        result = deploy(spec, None, DeployOptions(runs_root=tmp_path, master=cluster.master_url))
    assert result.summary["master"].startswith("spark://127.0.0.1:")
    _check_against_offline(stack, spec, result)
