"""The arfl-kafka source in real Spark streaming queries (two queries = two replicas).

Each query has its own stream reader in its own planner process, its own checkpoint and its
own trigger timing — exactly what separates two replicas' drivers — so equal batch boundaries
across queries show the agreement; a restart on a checkpoint shows the replay.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from arfl.replica.modes.leaderless import EpochCuts
from arfl.replica.source import BatchOffset, SourceOptions, read_stream
from arfl.replica.source.datasource import SCHEMA
from arfl.replica.source.kafka import TopicLog
from arfl.replica.source.offsets import NO_BATCH
from arfl.replica.sparkenv import local_session
from arfl.run.names import leader_path
from arfl.stack import StackInfo, ensure_installed
from arfl.stack.topics import ensure_topic

INTERVAL_S = 1.0


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        mp.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        conf = {
            "spark.sql.shuffle.partitions": "2",
            "spark.python.unix.domain.socket.enabled": "true",
            # arfl's JVM reader (and the Kafka client it reads with)
            "spark.jars": ",".join(str(j) for j in ensure_installed().spark_kafka_jars),
        }
        with local_session("local[2]", conf) as session:
            session.sparkContext.setLogLevel("ERROR")
            yield session


def produce(bootstrap: str, topic: str, n: int, partitions: list[int], rate: float = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        value = json.dumps({"seq": i, "ts": int(time.time() * 1000)}).encode()
        p.produce(topic, key=b"k%d" % i, value=value, partition=partitions[i % len(partitions)])
        p.poll(0)
        if rate:
            time.sleep(1 / rate)
    p.flush(10)


def wait_until(cond: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what()}")
        time.sleep(0.5)


def rows_of(n: int, *replicas: Replica) -> Callable[[], str]:
    return lambda: (
        f"{n} rows; have "
        + ", ".join(
            f"r{r.opts.replica}: {r.count()} rows, {len(r.all_progress())} batches, "
            f"{r.restarts} restarts"
            for r in replicas
        )
    )


class Replica:
    """One streaming query into a parquet table, restarted on its checkpoint if the machine was
    too loaded for Spark's planner process to connect back within Spark's fixed 10 s (seen at
    load average 15 on 2 cores; DESIGN.md §3) — any other failure fails the test."""

    def __init__(
        self,
        spark: Any,
        opts: SourceOptions,
        base: Path,
        build: Callable[[Any], Any] | None = None,
    ) -> None:
        self.spark, self.opts, self.build = spark, opts, build
        self.ckpt, self.out = base / "checkpoint", base / "out"
        self.progress: list[dict[str, Any]] = []
        self.restarts = 0
        self.q = self._start()

    def _start(self) -> Any:
        df = read_stream(self.spark, self.opts)
        return (
            (df if self.build is None else self.build(df))
            .writeStream.format("parquet")
            .option("path", str(self.out))
            .option("checkpointLocation", str(self.ckpt))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def check(self) -> None:
        if self.q.isActive:
            return
        err = str(self.q.exception())
        if "connect back" not in err or self.restarts >= 10:
            raise AssertionError(f"query of replica {self.opts.replica} failed: {err[:2000]}")
        self.progress += self.q.recentProgress
        self.restarts += 1
        self.q = self._start()

    def rows(self) -> Any:
        schema = SCHEMA if self.build is None else "key string, value string"
        return self.spark.read.schema(schema).parquet(str(self.out))

    def count(self) -> int:
        self.check()
        if not (self.out / "_spark_metadata").exists():
            return 0
        return int(self.rows().count())

    def restart(self) -> None:
        self.stop()
        self.q = self._start()

    def all_progress(self) -> list[dict[str, Any]]:
        return self.progress + list(self.q.recentProgress)

    def stop(self) -> None:
        self.progress += self.q.recentProgress
        if self.q.isActive:
            self.q.stop()


def reported(n: int, *replicas: Replica) -> Callable[[], bool]:
    """Every replica has ``n`` rows in its table and its progress reports reading them: a batch's
    rows are in the table (the file sink's commit) before Spark reports its progress (after the
    offsets' commit), so rows alone can be seen while the last batch is missing from
    ``recentProgress`` (a late replica that read everything in one batch had no progress yet)."""

    def done() -> bool:
        return all(
            r.count() >= n and sum(p["numInputRows"] for p in r.all_progress()) >= n
            for r in replicas
        )

    return done


def ends(progress: list[dict[str, Any]]) -> dict[int, BatchOffset]:
    """batchId -> end offset of every batch that read something."""
    out = {}
    for p in progress:
        src = p["sources"][0]
        if src["startOffset"] != src["endOffset"] and src["endOffset"]:
            end = src["endOffset"]
            e = BatchOffset.from_json(end if isinstance(end, str) else json.dumps(end))
            if e.batch != NO_BATCH:  # the first trigger reports the initial offset as its end
                out[p["batchId"]] = e
    return out


def stats(progress: list[dict[str, Any]]) -> str:
    runs = [p for p in progress if p["numInputRows"] > 0]
    if not runs:
        return "no batches"
    trig = sorted(p["durationMs"]["triggerExecution"] for p in runs)
    lat = sorted(p["durationMs"].get("latestOffset", 0) for p in runs)
    return (
        f"{len(runs)} batches, triggerExecution median {trig[len(trig) // 2]} ms "
        f"(p90 {trig[int(len(trig) * 0.9)]}), latestOffset median {lat[len(lat) // 2]} ms "
        f"(max {lat[-1]})"
    )


@pytest.mark.parametrize("reader", ["python", "jvm"])
def test_leaderless_replicas_agree_drop_markers_and_replay_after_restart(
    spark: Any, stack: StackInfo, topic_name: str, tmp_path: Path, reader: str
) -> None:
    """Both readers: the Python data source, and the JVM one (``arfl.source``, the same
    policy deciding in this process through Py4J, the executors reading with Kafka's Java
    client)."""
    ensure_topic(stack.kafka, topic_name, 3, log_append_time=True)

    def opts(r: int) -> SourceOptions:
        return SourceOptions(
            bootstrap=stack.kafka,
            topic=topic_name,
            mode="active-leaderless",
            replica=r,
            heartbeat_interval_s=INTERVAL_S,
            reader=reader,
        )

    n = 300
    # An aborted transaction first: its records hold offsets in both partitions but are never
    # rows (read committed, as librdkafka's default; the JVM reader's Kafka client needs it set).
    tx = Producer({"bootstrap.servers": stack.kafka, "transactional.id": f"{topic_name}-tx"})
    tx.init_transactions(10)
    tx.begin_transaction()
    for i in range(20):
        value = json.dumps({"seq": 10_000 + i, "ts": int(time.time() * 1000)}).encode()
        tx.produce(topic_name, key=b"aborted", value=value, partition=i % 2)
    tx.flush(10)
    tx.abort_transaction(10)
    # Partition 2 stays idle: only heartbeats can finalise its epochs.
    feeder = threading.Thread(target=produce, args=(stack.kafka, topic_name, n, [0, 1], 60))
    r0 = Replica(spark, opts(0), tmp_path / "r0")
    feeder.start()
    time.sleep(2)
    r1 = Replica(spark, opts(1), tmp_path / "r1")
    try:
        feeder.join()
        wait_until(lambda: r0.count() >= n and r1.count() >= n, 180, rows_of(n, r0, r1))
        rows = r0.rows().collect()
        assert len(rows) == n == r1.count()
        assert {r["partition"] for r in rows} == {0, 1}
        assert not any("__arfl_epoch" in (r["value"] or "") for r in rows)
        assert sorted(json.loads(r["value"])["seq"] for r in rows) == list(range(n))  # none aborted
        log = TopicLog(stack.kafka, topic_name)
        try:
            hw = log.high_watermarks()
        finally:
            log.close()
        assert hw[2] > 0  # the idle partition holds heartbeats...
        assert sum(hw.values()) > n  # ...and markers were dropped before the pipeline

        # Every batch of either replica ends on an epoch cut, and where both replicas ended a
        # batch at the same epoch they chose the same offsets: the cut of the log's time index.
        e0, e1 = ends(r0.all_progress()), ends(r1.all_progress())
        cuts0 = {e.batch: e for e in e0.values()}
        cuts1 = {e.batch: e for e in e1.values()}
        # (Under load both replicas catch up in multi-epoch batches, so few epochs coincide.)
        common = sorted(set(cuts0) & set(cuts1))
        assert [cuts0[j] for j in common] == [cuts1[j] for j in common]
        assert len(cuts0) >= 2 and len(cuts1) >= 2
        log = TopicLog(stack.kafka, topic_name)
        try:
            index = EpochCuts(log, round(INTERVAL_S * 1000))
            for j, e in (cuts0 | cuts1).items():
                probe = index.probe(j, BatchOffset(NO_BATCH, dict.fromkeys(e.offsets, 0)))
                assert probe.final and probe.cut == dict(e.offsets), (j, e, probe)
        finally:
            log.close()
        described = {p["sources"][0]["description"] for p in r0.all_progress()}
        assert all(("ArflMicroBatchStream" in d) is (reader == "jvm") for d in described), described
        print(f"\nleaderless r0: {stats(r0.all_progress())}")
        print(f"leaderless r1: {stats(r1.all_progress())}")

        # (A replica far behind that merges epochs: the windowed test below.)

        # Restart replica 0 on its checkpoint with the last batch uncommitted: Spark re-runs
        # that batch from its offset log, and the boundaries it replays are the same.
        r0.stop()
        commits = r0.ckpt / "commits"
        last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
        (commits / str(last)).unlink()
        for crc in commits.glob(f".{last}.crc"):
            crc.unlink()
        before = r0.all_progress()
        r0.progress = []
        r0.restart()
        produce(stack.kafka, topic_name, 50, [0, 1])
        wait_until(
            lambda: r0.count() >= n + 50 and r1.count() >= n + 50, 120, rows_of(n + 50, r0, r1)
        )
        replay = ends(r0.all_progress())
        assert ends(before)[last] == replay[last]
        after0 = {e.batch: e for e in replay.values()}
        after1 = {e.batch: e for e in ends(r1.all_progress()).values()}
        common = sorted(set(after0) & set(after1))
        assert [after0[j] for j in common] == [after1[j] for j in common]
        assert r0.count() == n + 50  # the re-run batch was not written twice
    finally:
        r0.stop()
        r1.stop()


def test_leader_replicas_apply_the_same_decisions(
    spark: Any, stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    from kazoo.client import KazooClient
    from kazoo.recipe.election import Election

    ensure_topic(stack.kafka, topic_name, 2)
    pipeline = f"p{uuid.uuid4().hex[:8]}"

    def opts(r: int) -> SourceOptions:
        return SourceOptions(
            bootstrap=stack.kafka,
            topic=topic_name,
            mode="active-leader",
            replica=r,
            pipeline=pipeline,
            zookeeper=stack.zookeeper,
            decision_topic=f"arfl.{pipeline}.decisions",
            election_path=leader_path(pipeline, "t"),
            max_records_per_batch=40,
        )

    n = 400
    r0 = Replica(spark, opts(0), tmp_path / "r0")
    r1 = Replica(spark, opts(1), tmp_path / "r1")
    zk = KazooClient(hosts=stack.zookeeper)
    zk.start(timeout=15)
    try:
        produce(stack.kafka, topic_name, n, [0, 1], rate=200)
        wait_until(reported(n, r0, r1), 180, rows_of(n, r0, r1))
        # One candidacy per replica: readers in Spark's planning workers do not join.
        contenders = Election(zk, leader_path(pipeline, "t")).contenders()
        assert sorted(contenders) == ["0", "1"]
        e0, e1 = ends(r0.all_progress()), ends(r1.all_progress())
        assert [e0[b] for b in sorted(e0)] == [e1[b] for b in sorted(e1)]
        ks = [e0[b].batch for b in sorted(e0)]
        assert ks == list(range(len(ks)))
        assert len(ks) >= n // 40
        assert r0.count() == r1.count() == n
        print(f"\nleader r0: {stats(r0.all_progress())}\nleader r1: {stats(r1.all_progress())}")
        # A replica that starts when every decision is made (far behind) merges the ready
        # decisions (merge_decisions, up to its own batch cap): far
        # fewer batches, the same rows, and it ends exactly where the others end.
        merging = replace(opts(2), merge_decisions=True, max_records_per_batch=10_000)
        late = Replica(spark, merging, tmp_path / "r2")
        try:
            wait_until(reported(n, late), 120, rows_of(n, late))
            e2 = ends(late.all_progress())
            assert late.count() == n
            assert e2[max(e2)] == e0[max(e0)], (e2, e0)
            assert len(e2) < len(e0) // 2, (len(e2), len(e0))
            print(f"leader late r2 (merging): {stats(late.all_progress())}")
        finally:
            late.stop()
    finally:
        zk.stop()
        zk.close()
        r0.stop()
        r1.stop()


def _disordered(bootstrap: str, topic: str, n: int, rate: float) -> None:
    """``n`` events over 2 partitions, event time up to 3 s behind the send time (seeded)."""
    rnd = random.Random(7)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        now = int(time.time() * 1000)
        event = {"seq": i, "ts": now, "user": f"u{i % 4}", "amount": 1.0,
                 "et": now - rnd.randint(0, 3000)}  # fmt: skip
        p.produce(topic, value=json.dumps(event).encode(), partition=i % 2)
        p.poll(0)
        time.sleep(1 / rate)
    p.flush(10)


LATE_WINDOW = {"size": "1s", "key": "user", "watermark": "500ms"}


def _late_drops(progress: list[dict[str, Any]]) -> tuple[int, int]:
    """Rows dropped behind a watermark: (Spark's own count, the agreed watermark's)."""
    spark_own = sum(
        int(o.get("numRowsDroppedByWatermark") or 0)
        for p in progress
        for o in p.get("stateOperators") or []
    )
    # (Spark's in-process progress gives each observed metric as a Row.)
    observed = [(p.get("observedMetrics") or {}).get("arfl_late") for p in progress]
    agreed = sum(int(m["rows"] or 0) for m in observed if m is not None)
    return spark_own, agreed


def test_leaderless_windows_drop_the_same_late_rows_however_batches_run(
    spark: Any, stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    """A windowed replica that keeps up and two that start with the whole input in
    the log — one running the agreed batches one by one, one merging them — drop the same late
    rows and emit the same windows (before the agreed watermark the merging one kept rows the
    others dropped: Spark drops by the previous Spark batch's watermark). A fourth merges
    too, read by arfl's JVM reader: the same rows dropped, the same windows."""
    from deploy_checks import windowed_spec

    from arfl.replica.query import apply_steps, parse_events, shape_results

    ensure_topic(stack.kafka, topic_name, 2, log_append_time=True)
    # deploy_checks' windowed pipeline (its 1 s window per user, watermark 500 ms, count) without
    # its filter, on this topic, event time "et".
    spec = windowed_spec(
        "latewin",
        mode="active-leaderless",
        replicas=2,
        source={"topic": topic_name, "event_time": "et"},
        steps=[{"window": {**LATE_WINDOW, "agg": {"n": "count(*)"}}}],
    )

    def build(df: Any) -> Any:
        return shape_results(apply_steps(parse_events(df, spec), spec), spec, 0)

    def opts(r: int, **kw: Any) -> SourceOptions:
        # What the mode configures for this spec (the agreed watermark), 1-s agreed batches.
        return SourceOptions(
            bootstrap=stack.kafka, topic=topic_name, mode="active-leaderless", replica=r,
            heartbeat_interval_s=INTERVAL_S, event_time_field="et", watermark_delay_ms=500,
            **kw,
        )  # fmt: skip

    def windows(r: Replica) -> dict[str, str]:
        return {row["key"]: json.loads(row["value"])["hash"] for row in r.rows().collect()}

    n = 600
    live = Replica(spark, opts(0), tmp_path / "r0", build)
    try:
        _disordered(stack.kafka, topic_name, n, 100)
        log = TopicLog(stack.kafka, topic_name)
        try:
            hw = log.high_watermarks()
        finally:
            log.close()

        def read_all(r: Replica) -> Callable[[], bool]:
            def done() -> bool:
                r.check()
                e = ends(r.all_progress())
                return bool(e) and all(e[max(e)].offsets.get(p, 0) >= hw[p] for p in hw)

            return done

        wait_until(read_all(live), 120, lambda: f"the live replica to read {hw}")
        behind = {
            "aligned": Replica(spark, opts(1, heartbeat=False), tmp_path / "r1", build),
            "merging": Replica(
                spark, opts(2, heartbeat=False, max_epochs_per_batch=0), tmp_path / "r2", build
            ),
            # The JVM reader gives each row its agreed batch's watermark (KafkaRange.lateBefore)
            # from the same plan: several agreed batches per Spark batch here.
            "merging-jvm": Replica(
                spark,
                opts(3, heartbeat=False, max_epochs_per_batch=0, reader="jvm"),
                tmp_path / "r3",
                build,
            ),
        }
        try:
            for name, r in behind.items():
                wait_until(read_all(r), 120, lambda name=name: f"the {name} replica to read {hw}")
            time.sleep(3)  # the batches that emit what the last watermark closed
            got = {"live": windows(live)} | {name: windows(r) for name, r in behind.items()}
            progress = {"live": live.all_progress()} | {
                name: r.all_progress() for name, r in behind.items()
            }
        finally:
            for r in behind.values():
                r.stop()
        drops = {name: _late_drops(p) for name, p in progress.items()}
        batches = {name: sum(1 for x in p if x["numInputRows"]) for name, p in progress.items()}
        print(f"\nwindows {dict((k, len(v)) for k, v in got.items())}, late drops {drops}, "
              f"batches {batches}")  # fmt: skip
        assert len(got["live"]) > 10
        # The agreed watermark dropped the same rows in all three, and Spark's own dropped
        # nothing more (its threshold never passes the agreed one).
        assert drops["live"][1] > 0 and len(set(drops.values())) == 1, drops
        assert all(own == 0 for own, _ in drops.values()), drops
        assert batches["merging"] < batches["aligned"] // 2, batches
        assert batches["merging-jvm"] < batches["aligned"] // 2, batches
        for name in behind:
            a, b = got["live"], got[name]
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            assert not differ, (name, [(k, a.get(k), b.get(k)) for k in differ[:5]])
    finally:
        live.stop()
