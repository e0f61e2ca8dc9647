"""One ``none`` replica per pipeline on real Kafka + real Spark (local-cluster executors).

A windowed and a per-record pipeline run at the same time (two driver processes); events are
produced at a fixed rate; each replica topic must hold well-formed results, one per rid, equal
to the batch recomputation (all records; the final windows). Prints measurements: start-up,
batch phases, per-record latency, RSS of driver and executor.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from deploy_checks import offline_recompute

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.orchestrate.drivers import DriverLaunch
from arfl.orchestrate.supervisor import ReplicaRunner
from arfl.replica import offline
from arfl.run.records import replica_topic
from arfl.run.rundir import new_run_dir, read_jsonl
from arfl.stack import StackInfo, ensure_installed
from arfl.stack.topics import ensure_topic
from arfl.testing.spark import ResultReader, produce_events, wait_caught_up

PARTITIONS = 4
RATE = int(os.environ.get("ARFL_TEST_RATE", "200"))
DURATION_S = 15.0
GARBAGE = 3


def _spec(
    name: str,
    topic: str,
    steps: list[dict[str, Any]],
    mode: str = "none",
    master: str = "local-cluster[1,1,1024]",
) -> Spec:
    return parse_spec(
        {
            "name": name,
            "source": {"topic": f"{topic}-in", "partitions": PARTITIONS, "event_time": "ts"},
            "steps": steps,
            "sink": {"topic": f"{topic}-out"},
            "replication": {"mode": mode},
            "spark": {"master": master, "conf": {"spark.sql.shuffle.partitions": "2"}},
        }
    )


WINDOW_STEPS: list[dict[str, Any]] = [
    {"filter": "amount > 10"},
    {"select": ["user", "amount"]},
    {
        "window": {
            "size": "1s",
            "key": "user",
            "watermark": "500ms",
            "agg": {"n": "count(*)", "total": "sum(amount)", "top": "max(amount)"},
        }
    },
]
RECORD_STEPS: list[dict[str, Any]] = [
    {"filter": "amount > 10"},
    {"select": ["user", "amount * 2 AS double_amount"]},
]


def _topics(stack: StackInfo, spec: Spec) -> None:
    ensure_topic(stack.kafka, spec.source.topic, PARTITIONS)
    ensure_topic(stack.kafka, replica_topic(spec.sink.topic, 0), 1)


def _rss_mb(runner: ReplicaRunner) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in runner.process_tree(0):
        try:
            cmd = " ".join(p.cmdline())
            rss = p.memory_info().rss / 2**20
        except psutil.Error:
            continue
        if "CoarseGrainedExecutorBackend" in cmd:
            out["executor_jvm"] = rss
        elif p.name() == "java":
            out["driver_jvm"] = rss
        elif "arfl.replica.driver" in cmd:
            out["driver_python"] = rss
    return out


def _check_against_offline(reader: ResultReader, expected: offline.Recomputed) -> None:
    results = [r.result for r in reader.results]
    assert reader.bad == 0
    rids = [r.rid for r in results]
    assert len(rids) == len(set(rids)), "a none replica without restarts emits each rid once"
    for r in results:
        assert r.replica == 0
        exp = expected.results.get(r.rid)
        assert exp is not None, f"{r.rid} is not an expected result"
        assert r.data == exp.data, r.rid
        assert r.hash == exp.hash, r.rid
        assert r.src_ts == exp.src_ts, r.rid
    assert expected.final <= set(rids)


def _phases(progress: list[dict[str, Any]]) -> dict[str, float]:
    busy = [p for p in progress if p.get("numInputRows", 0) > 0]
    keys = (
        "triggerExecution",
        "latestOffset",
        "walCommit",
        "addBatch",
        "commitOffsets",
        "queryPlanning",
        "getBatch",
    )
    out = {}
    for k in keys:
        vals = [p["durationMs"].get(k) for p in busy if k in p["durationMs"]]
        if vals:
            out[k] = statistics.median(vals)
    return out


# Generous: on an idle 2-core machine this takes ~1-2 min, under contention far longer.
@pytest.mark.timeout(1200)
def test_none_replicas_window_and_per_record_match_offline(
    stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    jars = ensure_installed().spark_kafka_jars
    win = _spec("nonewin", f"{topic_name}-w", WINDOW_STEPS)
    rec = _spec("nonerec", f"{topic_name}-r", RECORD_STEPS)
    for s in (win, rec):
        _topics(stack, s)
    runs = {s.name: new_run_dir(tmp_path / "runs", s.name) for s in (win, rec)}
    runners = {
        s.name: ReplicaRunner(s, runs[s.name], DriverLaunch(stack.kafka, jars=jars))
        for s in (win, rec)
    }
    measures: dict[str, Any] = {}
    t0 = time.monotonic()
    readers = {
        s.name: ResultReader(stack.kafka, replica_topic(s.sink.topic, 0)) for s in (win, rec)
    }
    try:
        for r in runners.values():
            r.start()
        for name, r in runners.items():
            r.wait_ready(timeout_s=300)
            measures[f"{name}_session_s"] = round(time.monotonic() - t0, 1)

        # Both topics get the same events; the per-record one also gets 3 garbage records.
        producers = [
            threading.Thread(
                target=produce_events,
                args=(stack.kafka, s.source.topic),
                kwargs={
                    "partitions": PARTITIONS,
                    "rate": RATE,
                    "duration_s": DURATION_S,
                    "garbage": g,
                },
            )
            for s, g in ((win, 0), (rec, GARBAGE))
        ]
        for p in producers:
            p.start()
        time.sleep(DURATION_S / 2)
        measures["rss_mb_mid_run"] = {n: _rss_mb(r) for n, r in runners.items()}
        for p in producers:
            p.join(timeout=DURATION_S * 5)
        assert not any(p.is_alive() for p in producers)
        for s, g in ((win, 0), (rec, GARBAGE)):
            assert wait_caught_up(
                runs[s.name] / "progress" / "replica-0.jsonl",
                int(RATE * DURATION_S) + g,
                timeout_s=300,
            ), s.name
        for reader in readers.values():
            assert reader.drain(timeout_s=120)
    finally:
        for r in runners.values():
            r.stop()
        for reader in readers.values():
            reader.close()

    # Recomputed after the replicas stopped: fewer JVMs competing for the 2 cores.
    expected = {s.name: offline_recompute(stack, s) for s in (win, rec)}
    assert expected["nonerec"].input_records == RATE * DURATION_S + GARBAGE
    assert len(expected["nonerec"].final) > 0.7 * RATE * DURATION_S
    assert len(expected["nonewin"].final) > 10 * (DURATION_S - 3)
    for name, reader in readers.items():
        _check_against_offline(reader, expected[name])
    lat = sorted(x.kafka_ts_ms - x.result.src_ts for x in readers["nonerec"].results)
    measures["per_record_latency_ms"] = {
        "p50": lat[len(lat) // 2],
        "p90": lat[int(len(lat) * 0.9)],
        "p99": lat[int(len(lat) * 0.99)],
        "max": lat[-1],
        "n": len(lat),
    }

    for name, run in runs.items():
        progress = read_jsonl(run / "progress" / "replica-0.jsonl")
        assert progress, f"{name}: no progress events"
        assert all("durationMs" in p and "batchId" in p for p in progress)
        measures[f"{name}_batches"] = len(progress)
        measures[f"{name}_phases_median_ms"] = _phases(progress)
        journal = [e["event"] for e in read_jsonl(run / "journal.jsonl")]
        assert journal == ["replica-started", "replica-ready", "replica-stopped"]
        assert not (run / "checkpoints").exists(), "mode none keeps no checkpoint in the run"
    bad = sum(
        p.get("observedMetrics", {}).get("arfl_input", {}).get("bad", 0) or 0
        for p in read_jsonl(runs["nonerec"] / "progress" / "replica-0.jsonl")
    )
    assert bad == GARBAGE
    app = json.loads((runs["nonerec"] / "replicas" / "replica-0.app.json").read_text())
    measures["nonerec_session_in_driver_s"] = app["session_s"]
    measures["nonerec_first_batch_after_spawn_s"] = _first_batch_s(runs["nonerec"])
    print("\nMEASURES", json.dumps(measures, indent=1))


def _first_batch_s(run: Path) -> float:
    """Seconds from the driver's spawn to the end of its first batch that had input."""
    started = next(
        e["t"] for e in read_jsonl(run / "journal.jsonl") if e["event"] == "replica-started"
    )
    first = next(
        p for p in read_jsonl(run / "progress" / "replica-0.jsonl") if p.get("numInputRows", 0) > 0
    )
    ts = datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00")).timestamp()
    return round(ts + first["durationMs"]["triggerExecution"] / 1000 - started, 1)


@pytest.fixture(autouse=True)
def _no_driver_left(tmp_path: Path) -> Any:
    yield
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(tmp_path) in a for a in (p.info.get("cmdline") or []))
    ]
    assert not left, f"processes left behind: {[p.pid for p in left]}"
