"""A ``passive`` per-record replica on a real Spark standalone cluster (master + worker started
by ``arfl.testing.spark``): executors run under the worker, tagged with the app id; after a
driver kill and restart, every expected record is in the output (dedup by rid)."""

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
from arfl.testing.spark import ResultReader, StandaloneCluster, produce_events, wait_caught_up

PARTITIONS = 2
RATE = 200


def _executors(cluster: StandaloneCluster, app_id: str) -> list[psutil.Process]:
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


# Generous: on an idle 2-core machine this takes ~1-2 min, under contention far longer.
@pytest.mark.timeout(1200)
def test_passive_replica_on_standalone_cluster_survives_driver_kill(
    stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    jars = ensure_installed().spark_kafka_jars
    with StandaloneCluster(tmp_path / "spark") as cluster:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        spec = parse_spec(
            {
                "name": "standalone",
                "source": {"topic": f"{topic_name}-in", "partitions": PARTITIONS},
                "steps": [{"filter": "amount > 25"}, {"select": ["user", "amount"]}],
                "sink": {"topic": f"{topic_name}-out"},
                "replication": {"mode": "passive"},
                "spark": {"master": cluster.master_url},
            }
        )
        ensure_topic(stack.kafka, spec.source.topic, PARTITIONS)
        out_topic = replica_topic(spec.sink.topic, 0)
        ensure_topic(stack.kafka, out_topic, 1)
        run = new_run_dir(tmp_path / "runs", spec.name)
        runner = ReplicaRunner(spec, run, stack.kafka, jars=jars)
        reader = ResultReader(stack.kafka, out_topic)
        measures: dict[str, Any] = {}
        try:
            runner.start()
            app_id = runner.wait_ready(timeout_s=300)[0].app_id
            assert app_id is not None
            nxt = produce_events(
                stack.kafka, spec.source.topic, partitions=PARTITIONS, rate=RATE, duration_s=5
            )
            assert reader.poll_until(lambda rs: len(rs) >= 50, timeout_s=240)
            execs = _executors(cluster, app_id)
            assert len(execs) == 1, "one executor JVM under the worker, tagged --app-id"
            measures["executor_rss_mb"] = round(execs[0].memory_info().rss / 2**20)

            runner.kill(0)
            producer = threading.Thread(
                target=produce_events,
                args=(stack.kafka, spec.source.topic),
                kwargs={"partitions": PARTITIONS, "rate": RATE, "duration_s": 5, "start_seq": nxt},
            )
            producer.start()  # events keep coming while the driver is down
            t_kill = time.time()
            deadline = time.monotonic() + 60
            while runner.states()[0].restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            st = runner.wait_ready(timeout_s=300)[0]
            measures["session_up_after_kill_s"] = round(time.time() - t_kill, 1)
            assert st.restarts == 1 and st.app_id != app_id
            producer.join(timeout=120)
            assert wait_caught_up(
                run / "progress" / "replica-0.jsonl", nxt + RATE * 5, timeout_s=300
            )
            assert reader.drain(timeout_s=120)
            # The master removed the dead application's executor.
            deadline = time.monotonic() + 60
            while _executors(cluster, app_id) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not _executors(cluster, app_id)
        finally:
            runner.stop()
            reader.close()

    expected = offline.recompute(spec, stack.kafka, jars)
    assert expected.input_records == nxt + RATE * 5
    copies: dict[str, list[Result]] = {}
    for r in reader.results:
        copies.setdefault(r.result.rid, []).append(r.result)
    assert set(copies) == expected.final
    for rid, cs in copies.items():
        assert {c.hash for c in cs} == {expected.results[rid].hash}, rid
    measures["re_emitted"] = len(reader.results) - len(copies)
    journal = [e["event"] for e in read_jsonl(run / "journal.jsonl")]
    assert journal.count("replica-restarted") == 1
    print("\nMEASURES", json.dumps(measures, indent=1))


@pytest.fixture(autouse=True)
def _no_process_left(tmp_path: Path) -> Any:
    yield
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(tmp_path) in a for a in (p.info.get("cmdline") or []))
    ]
    assert not left, f"processes left behind: {[p.pid for p in left]}"
