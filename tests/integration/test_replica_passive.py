"""A ``passive`` replica killed mid-run is restarted from its checkpoint: after dedup by rid,
every expected window is there, copies of one rid agree, and nothing unexpected appears."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from arfl.configs.spec import parse_spec
from arfl.pipelines import offline
from arfl.pipelines.records import Result, replica_topic
from arfl.pipelines.rundir import new_run_dir, read_jsonl
from arfl.pipelines.runner import ReplicaRunner
from arfl.stack import StackInfo, ensure_installed
from arfl.stack.topics import ensure_topic
from arfl.testing.spark import ResultReader, produce_events, wait_caught_up

PARTITIONS = 4
RATE = 200


# Generous: on an idle 2-core machine this takes ~1-2 min, under contention far longer.
@pytest.mark.timeout(1200)
def test_passive_replica_resumes_from_checkpoint_after_driver_kill(
    stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    jars = ensure_installed().spark_kafka_jars
    spec = parse_spec(
        {
            "name": "passivewin",
            "source": {"topic": f"{topic_name}-in", "partitions": PARTITIONS, "event_time": "ts"},
            "steps": [
                {"filter": "amount > 5"},
                {
                    "window": {
                        "size": "1s",
                        "key": "user",
                        "watermark": "500ms",
                        "agg": {"n": "count(*)", "total": "sum(amount)"},
                    }
                },
            ],
            "sink": {"topic": f"{topic_name}-out"},
            "replication": {"mode": "passive", "restart": True},
            "spark": {"master": "local-cluster[1,1,1024]"},
        }
    )
    ensure_topic(stack.kafka, spec.source.topic, PARTITIONS)
    out_topic = replica_topic(spec.sink.topic, 0)
    ensure_topic(stack.kafka, out_topic, 1)
    run = new_run_dir(tmp_path / "runs", spec.name)
    runner = ReplicaRunner(spec, run, stack.kafka, jars=jars)
    stop = threading.Event()
    seq = [0]

    def produce() -> None:
        while not stop.is_set():
            seq[0] = produce_events(
                stack.kafka,
                spec.source.topic,
                partitions=PARTITIONS,
                rate=RATE,
                duration_s=1.0,
                start_seq=seq[0],
                stop=stop,
            )

    producer = threading.Thread(target=produce)
    measures: dict[str, Any] = {}
    reader = ResultReader(stack.kafka, out_topic)
    try:
        runner.start()
        runner.wait_ready(timeout_s=300)
        producer.start()
        # Kill once the replica has emitted results (its checkpoint has committed batches).
        assert reader.poll_until(lambda rs: len(rs) >= 20, timeout_s=240), "no output before kill"
        before_kill = len(reader.results)
        first_app = runner.states()[0].app_id
        killed_pid = runner.kill(0)
        t_kill = time.time()
        deadline = time.monotonic() + 60
        while runner.states()[0].restarts < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        state = runner.wait_ready(timeout_s=300)[0]
        assert state.pid != killed_pid
        assert state.restarts == 1
        assert state.app_id != first_app
        # Output resumes after the restart.
        assert reader.poll_until(lambda rs: len(rs) > before_kill + 20, timeout_s=240)
        measures["output_gap_after_kill_s"] = _gap_after(reader, t_kill)
        time.sleep(3)
        stop.set()
        producer.join(timeout=60)
        assert not producer.is_alive()
        assert wait_caught_up(run / "progress" / "replica-0.jsonl", seq[0], timeout_s=300)
        assert reader.drain(timeout_s=120)
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(timeout=60)
        runner.stop()
        reader.close()

    expected = offline.recompute(spec, stack.kafka, jars)
    assert expected.input_records == seq[0]
    assert len(expected.final) > 20
    missing = sorted(expected.final - reader.rids())
    assert not missing, f"missing after restart: {missing[:10]}"

    copies: dict[str, list[Result]] = {}
    for r in reader.results:
        copies.setdefault(r.result.rid, []).append(r.result)
    for rid, cs in copies.items():
        exp = expected.results.get(rid)
        assert exp is not None, f"unexpected result {rid}"
        assert {c.hash for c in cs} == {exp.hash}, f"{rid}: copies differ from the recomputation"
    measures["results"] = len(reader.results)
    measures["distinct_rids"] = len(copies)
    measures["re_emitted"] = len(reader.results) - len(copies)

    events = read_jsonl(run / "journal.jsonl")
    names = [e["event"] for e in events]
    assert names.count("replica-died") == 1
    assert names.count("replica-restarted") == 1
    died = next(e for e in events if e["event"] == "replica-died")
    assert died["exit_code"] == -9
    restarted = next(e for e in events if e["event"] == "replica-restarted")
    ready2 = [e for e in events if e["event"] == "replica-ready"][1]
    measures["restart_downtime_s"] = restarted["downtime_s"]
    measures["restart_session_up_after_kill_s"] = round(ready2["t"] - died["t"], 1)
    ckpt = run / "checkpoints" / "replica-0"
    assert (ckpt / "offsets").is_dir() and (ckpt / "commits").is_dir()
    # The restarted query continued the same checkpoint: one query id, batch ids continue.
    progress = read_jsonl(run / "progress" / "replica-0.jsonl")
    assert len({p["id"] for p in progress}) == 1
    assert len({p["runId"] for p in progress}) == 2
    print("\nMEASURES", json.dumps(measures, indent=1))


def _gap_after(reader: ResultReader, t_kill: float) -> float:
    """Seconds from the kill to the first record written after it (by Kafka timestamp)."""
    after = [r.kafka_ts_ms for r in reader.results if r.kafka_ts_ms > t_kill * 1000]
    return round(min(after) / 1000 - t_kill, 1) if after else float("nan")


@pytest.fixture(autouse=True)
def _no_driver_left(tmp_path: Path) -> Any:
    yield
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(tmp_path) in a for a in (p.info.get("cmdline") or []))
    ]
    assert not left, f"processes left behind: {[p.pid for p in left]}"
