"""Injector and merger against a real Kafka broker, run through their process entry points."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from hdrh.log import HistogramLogReader

from arfl.measure.histogram import new_histogram
from arfl.measure.merger.config import MergerConfig
from arfl.processes import create_time, wait_until
from arfl.run.childconfig import ChildConfig
from arfl.run.records import END_OF_INPUT_FIELD, replica_topic
from arfl.run.rundir import read_jsonl
from arfl.run.streams import InjectorStatsTail, MonitorTail
from arfl.stack import StackInfo
from arfl.stack.topics import ensure_topic
from arfl.workload.injector import InjectorConfig

pytestmark = pytest.mark.integration


def _spawn(config: ChildConfig, log: Path) -> subprocess.Popen[bytes]:
    """Run ``config``'s process as deploy does (``python -m <module> --config FILE``)."""
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        config.command(log.with_suffix(".json")), stdout=out, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def read_topic(
    bootstrap: str, topic: str, expect: int, timeout: float = 30.0, settle: float = 1.5
) -> list[Any]:
    """Every record of ``topic``: waits for ``expect`` of them, then ``settle`` s for extras."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = c.list_topics(topic, timeout=10)
        c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
        out: list[Any] = []
        deadline = time.time() + timeout
        settle_until: float | None = None
        while time.time() < deadline:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                out.append(m)
            if len(out) >= expect and settle_until is None:
                settle_until = time.time() + settle
            if settle_until is not None and time.time() >= settle_until:
                break
        return out
    finally:
        c.close()


def test_injector_sends_exactly_rate_times_duration_on_schedule(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    topic = f"{topic_name}.src"
    ensure_topic(stack.kafka, topic, 4)
    stats, journal = tmp_path / "inj.jsonl", tmp_path / "journal.jsonl"
    p = _spawn(InjectorConfig(
        bootstrap=stack.kafka, topic=topic, rate=1000, duration_s=5.0, keys=20, seed=42,
        stats_path=stats, journal_path=journal, linger_ms=0.0,
    ), tmp_path / "injector.log")  # fmt: skip
    procs.append(p)
    assert p.wait(60) == 0, (tmp_path / "injector.log").read_text()

    tail = InjectorStatsTail(stats)
    seconds = tail.poll()
    assert tail.summary is not None and tail.t0 is not None
    assert tail.summary.produced == tail.summary.delivered == 5000
    assert tail.summary.achieved_rate >= 950
    # Five seconds of schedule; a backlog at the very end may spill into a sixth line.
    assert len(seconds) in (5, 6) and sum(s.sent for s in seconds) == 5000
    assert [s.target for s in seconds[:5]] == [1000] * 5

    # After the events, one end-of-input marker per partition (its event time a day later).
    everything = read_topic(stack.kafka, topic, 5000 + 4)
    markers = [m for m in everything if json.loads(m.value()).get(END_OF_INPUT_FIELD)]
    assert sorted(m.partition() for m in markers) == [0, 1, 2, 3]
    msgs = [m for m in everything if m not in markers]
    events = [json.loads(m.value()) for m in msgs]
    assert len(events) == 5000
    assert sorted(e["seq"] for e in events) == list(range(5000))
    t0_ms = round(tail.t0 * 1000)
    by_seq = {e["seq"]: e for e in events}
    assert all(by_seq[i]["ts"] == t0_ms + i for i in range(5000))  # intended, 1 ms apart
    assert all(e["sent_ms"] >= e["ts"] - 1 for e in events)
    # A key always lands in one partition, and the key is the user.
    partitions: dict[bytes, set[int]] = {}
    for m, e in zip(msgs, events, strict=True):
        assert m.key() == e["user"].encode()
        partitions.setdefault(m.key(), set()).add(m.partition())
    assert len(partitions) == 20 and all(len(ps) == 1 for ps in partitions.values())
    started, _ = read_jsonl(journal)
    assert [e["event"] for e in read_jsonl(journal)] == ["injector_started", "injector_finished"]
    assert started["linger_ms"] == 0.0  # --linger-ms (deploy's from [workload] linger)


def test_injector_stops_cleanly_on_sigterm(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    topic = f"{topic_name}.src"
    ensure_topic(stack.kafka, topic, 2)
    stats = tmp_path / "inj.jsonl"
    p = _spawn(InjectorConfig(
        bootstrap=stack.kafka, topic=topic, rate=500, duration_s=120.0, stats_path=stats,
    ), tmp_path / "injector.log")  # fmt: skip
    procs.append(p)
    tail = InjectorStatsTail(stats)
    deadline = time.time() + 30
    while not tail.poll() and time.time() < deadline:  # wait until it is really sending
        time.sleep(0.2)
    assert tail.latest is not None, (tmp_path / "injector.log").read_text()
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    tail.poll()
    assert tail.summary is not None and tail.summary.stopped_early
    produced = tail.summary.produced
    assert 0 < produced < 60_000 and tail.summary.delivered == produced
    everything = [json.loads(m.value()) for m in read_topic(stack.kafka, topic, produced + 2)]
    assert sum(1 for e in everything if e.get(END_OF_INPUT_FIELD)) == 2  # one per partition
    assert len(everything) == produced + 2


def _result(
    rid: str, src_ts: int, replica: int, data: dict[str, Any], sent_ts: int | None = None
) -> bytes:
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return json.dumps({
        "rid": rid, "src_ts": src_ts, "sent_ts": sent_ts, "replica": replica,
        "hash": hashlib.sha256(canon.encode()).hexdigest(), "data": data,
    }).encode()  # fmt: skip


def _produce_results(prod: Producer, topic: str, replica: int, count: int) -> None:
    """``count`` per-record results ``0:0`` .. ``0:<count-1>`` of one replica, flushed."""
    for i in range(count):
        rid = f"0:{i}"
        prod.produce(topic, key=rid.encode(),
                     value=_result(rid, int(time.time() * 1000), replica, {"n": i}))  # fmt: skip
    prod.flush(10)


def _wait_results(monitor: MonitorTail, count: int, timeout_s: float = 30.0) -> None:
    """Until the merger's monitor shows ``count`` results (fails after ``timeout_s``)."""

    def seen() -> bool:
        monitor.poll()
        return monitor.latest is not None and monitor.latest.results == count

    wait_until(seen, timeout_s=timeout_s, interval_s=0.3, what=f"{count} merged results")


def _hlog_count(path: Path) -> tuple[int, int]:
    """(values, intervals) of an interval log, read with HdrHistogram's own reader."""
    reader = HistogramLogReader(str(path), new_histogram())
    total, intervals = 0, 0
    while (h := reader.get_next_interval_histogram()) is not None:
        total += h.get_total_count()
        intervals += 1
    reader.close()
    return total, intervals


def _group(bootstrap: str, group: str, topics: list[str]) -> tuple[int, dict[str, int]]:
    """(members, committed offsets summed per topic) of a consumer group."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (desc,) = admin.describe_consumer_groups([group], request_timeout=10).values()
    parts = [TopicPartition(t, p) for t in topics for p in (0, 1)]
    (offsets,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, parts)], request_timeout=10
    ).values()
    committed: dict[str, int] = {}
    for tp in offsets.result().topic_partitions:
        committed[tp.topic] = committed.get(tp.topic, 0) + max(0, tp.offset)
    return len(desc.result().members), committed


def merger_topics(stack: StackInfo, topic_name: str) -> str:
    """A sink topic and its two replica topics, 2 partitions each; returns the sink's name."""
    sink = f"{topic_name}.out"
    for t in (sink, replica_topic(sink, 0), replica_topic(sink, 1)):
        ensure_topic(stack.kafka, t, 2)
    return sink


def test_merger_keeps_first_copies_of_two_replicas(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    sink = merger_topics(stack, topic_name)
    run_dir = tmp_path / "run"
    group = f"arfl-merger-{topic_name}"
    merger = _spawn(MergerConfig(
        bootstrap=stack.kafka, sink=sink, replicas=2, run_dir=run_dir,
        input_start=time.time(), group_id=group, fetch_wait_ms=1, linger_ms=0.0,
    ), tmp_path / "merger.log")  # fmt: skip
    procs.append(merger)

    # Two fake replicas: r0 emits results 0..299, r1 emits 100..399 (200 overlap). r1's copy
    # of 150 has other content (divergent); each writes one bad record. Every tenth result
    # has no actual send time (sent_ts null); the others were sent 5 ms after intended.
    prod = Producer({"bootstrap.servers": stack.kafka, "linger.ms": 1})
    rounds = 4
    for k in range(rounds):
        for r, lo in ((0, 0), (1, 100)):
            for i in range(lo + k * 75, lo + (k + 1) * 75):
                rid = f"{i % 2}:{i}"
                data = {"user": f"u{i % 7}", "n": i + (1 if (r == 1 and i == 150) else 0)}
                now_ms = int(time.time() * 1000)
                sent = None if i % 10 == 0 else now_ms + 5
                prod.produce(
                    replica_topic(sink, r),
                    key=rid.encode(),
                    value=_result(rid, now_ms, r, data, sent),
                )
        if k == 1:
            prod.produce(replica_topic(sink, 0), key=b"x", value=b'{"rid": "no-src-ts"}')
            prod.produce(replica_topic(sink, 1), key=b"y", value=b"\x00garbage\xff")
        prod.flush(10)
        time.sleep(1.0)

    monitor = MonitorTail(run_dir / "monitor.jsonl")
    deadline = time.time() + 30
    while time.time() < deadline:
        monitor.poll()
        if (
            monitor.latest is not None
            and monitor.latest.received >= 0
            and (
                monitor.latest.results == 400
                and monitor.latest.bad == 2
                and monitor.latest.duplicates_total == 200
            )
        ):
            break
        time.sleep(0.3)
    merger.send_signal(signal.SIGTERM)
    assert merger.wait(30) == 0, (tmp_path / "merger.log").read_text()
    # Partitions are assigned, not subscribed: the merger never joined its group (no member,
    # so no rebalance can make it read everything again), but it committed where it got to,
    # everything it read (302 records per replica topic), for a merger after it.
    members, committed = _group(stack.kafka, group, [replica_topic(sink, r) for r in (0, 1)])
    assert members == 0
    assert committed == {replica_topic(sink, 0): 301, replica_topic(sink, 1): 301}, committed

    final = json.loads((run_dir / "merger.json").read_text())
    assert (
        final["results"],
        final["duplicates"],
        final["divergent"],
        final["bad"],
        final["uncompared"],
        final["received"],
    ) == (400, 200, 1, 2, 0, 602)
    assert final["delivery_failures"] == 0 and final["complete_output"] is True
    assert final["stop_reason"] == "signal"
    assert final["results_without_sent_ts"] == 40 and final["latency_sent_ms"]["count"] == 360
    reps = final["replicas"]
    assert reps["0"]["received"] == 301 and reps["1"]["received"] == 301
    assert reps["0"]["wins"] + reps["1"]["wins"] == 400
    assert reps["0"]["wins"] >= 100 and reps["1"]["wins"] >= 100  # each has 100 unique
    assert 0 < final["latency_ms"]["p50"] < 5000 and final["latency_ms"]["max"] < 10_000

    out = read_topic(stack.kafka, sink, 400)
    rids = [m.key().decode() for m in out]
    assert len(rids) == 400 and len(set(rids)) == 400
    assert set(rids) == {f"{i % 2}:{i}" for i in range(400)}
    assert all(json.loads(m.value())["rid"] == m.key().decode() for m in out)

    (started,) = [
        e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "merger_started"
    ]
    assert (started["fetch_wait_ms"], started["linger_ms"]) == (1, 0.0)  # [merger] keys
    div = [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "divergence"]
    assert len(div) == 1 and div[0]["rid"] == "0:150"
    assert {div[0]["first_replica"], div[0]["replica"]} == {0, 1}
    assert div[0]["first_hash"] != div[0]["hash"]

    total, intervals = _hlog_count(run_dir / "latency.hlog")
    assert total == 400 and intervals >= rounds
    sent_total, sent_intervals = _hlog_count(run_dir / "latency-sent.hlog")
    assert sent_total == 360 and sent_intervals == intervals

    lines = read_jsonl(run_dir / "monitor.jsonl")
    assert len(lines) >= rounds
    ts = [ln["t"] for ln in lines]
    assert all(0.0 < b - a <= 1.0 + 1e-6 for a, b in itertools.pairwise(ts))
    assert sum(ln["output_rate"] for ln in lines) == 400
    assert set(lines[-1]["replicas"]) == {"0", "1"}


def test_merger_refuses_a_missing_sink_topic(
    stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    from arfl.errors import DeployError
    from arfl.measure.merger.process import Merger

    cfg = MergerConfig(
        bootstrap=stack.kafka, sink=f"{topic_name}.missing", replicas=2, run_dir=tmp_path
    )
    with pytest.raises(DeployError, match=r"sink topic .*missing.* does not exist"):
        Merger(cfg)


def test_merger_reads_a_replica_topic_created_after_it_started(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    sink = f"{topic_name}.out"
    for t in (sink, replica_topic(sink, 0)):
        ensure_topic(stack.kafka, t, 2)
    run_dir = tmp_path / "run"
    merger = _spawn(MergerConfig(
        bootstrap=stack.kafka, sink=sink, replicas=2, run_dir=run_dir, input_start=time.time(),
    ), tmp_path / "merger.log")  # fmt: skip
    procs.append(merger)
    prod = Producer({"bootstrap.servers": stack.kafka, "linger.ms": 1})
    _produce_results(prod, replica_topic(sink, 0), 0, 50)
    monitor = MonitorTail(run_dir / "monitor.jsonl")
    _wait_results(monitor, 50)
    # r1 appears late and repeats r0's results (from its first offset) plus 50 of its own.
    ensure_topic(stack.kafka, replica_topic(sink, 1), 2)
    _produce_results(prod, replica_topic(sink, 1), 1, 100)
    _wait_results(monitor, 100)
    merger.send_signal(signal.SIGTERM)
    assert merger.wait(30) == 0, (tmp_path / "merger.log").read_text()
    final = json.loads((run_dir / "merger.json").read_text())
    assert (final["results"], final["duplicates"], final["received"]) == (100, 50, 150)
    assert len(read_topic(stack.kafka, sink, 100)) == 100
    warnings = [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "warning"]
    assert any(replica_topic(sink, 1) in e["message"] for e in warnings)


def test_merger_ends_by_itself_when_its_owner_is_killed(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    sink = f"{topic_name}.out"
    for t in (sink, replica_topic(sink, 0)):
        ensure_topic(stack.kafka, t, 2)
    # The owner stands in for the deploy process; kill -9 gives it no chance to stop anything.
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    procs.append(owner)
    created = create_time(owner.pid)
    run_dir = tmp_path / "run"
    merger = _spawn(MergerConfig(
        bootstrap=stack.kafka, sink=sink, replicas=1, run_dir=run_dir,
        owner_pid=owner.pid, owner_create_time=created,
    ), tmp_path / "merger.log")  # fmt: skip
    procs.append(merger)
    prod = Producer({"bootstrap.servers": stack.kafka, "linger.ms": 1})
    _produce_results(prod, replica_topic(sink, 0), 0, 20)
    monitor = MonitorTail(run_dir / "monitor.jsonl")
    _wait_results(monitor, 20)
    time.sleep(2.0)
    assert merger.poll() is None, "the merger must keep running while its owner lives"

    owner.kill()
    owner.wait(10)
    killed = time.time()
    assert merger.wait(15) == 0, (tmp_path / "merger.log").read_text()
    assert time.time() - killed < 5.0

    final = json.loads((run_dir / "merger.json").read_text())
    assert final["stop_reason"] == "orphaned" and final["results"] == 20
    assert final["complete_output"] is True and final["delivery_failures"] == 0
    events = read_jsonl(run_dir / "journal.jsonl")
    orphaned = [e for e in events if e["event"] == "merger-orphaned"]
    assert len(orphaned) == 1 and orphaned[0]["owner_pid"] == owner.pid
    assert events[-1]["event"] == "merger_finished"
    assert len(read_topic(stack.kafka, sink, 20)) == 20


def test_merger_is_not_fooled_by_a_reused_owner_pid(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    sink = f"{topic_name}.out"
    for t in (sink, replica_topic(sink, 0)):
        ensure_topic(stack.kafka, t, 1)
    # A live pid with another create time is not the owner: as if the owner died and its pid
    # was handed to an unrelated process.
    alive = psutil.Process(os.getpid())
    run_dir = tmp_path / "run"
    merger = _spawn(MergerConfig(
        bootstrap=stack.kafka, sink=sink, replicas=1, run_dir=run_dir,
        owner_pid=alive.pid, owner_create_time=create_time(alive) - 100.0,
    ), tmp_path / "merger.log")  # fmt: skip
    procs.append(merger)
    assert merger.wait(30) == 0, (tmp_path / "merger.log").read_text()
    assert json.loads((run_dir / "merger.json").read_text())["stop_reason"] == "orphaned"
