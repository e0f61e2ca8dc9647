"""active-leaderless against a real Kafka: heartbeats, idle partitions, replicas agreeing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from arfl.errors import DeployError
from arfl.replica.modes.leaderless import EpochCuts, HeartbeatTicker, LeaderlessPolicy
from arfl.replica.source import BatchOffset, SourceOptions
from arfl.replica.source.kafka import TopicLog
from arfl.replica.source.markers import is_marker, marker_epoch
from arfl.replica.source.offsets import NO_BATCH
from arfl.stack import StackInfo
from arfl.stack.topics import ensure_topic

INTERVAL_S = 0.2


@pytest.fixture
def topic(stack: StackInfo, topic_name: str) -> str:
    ensure_topic(stack.kafka, topic_name, 3, log_append_time=True)
    return topic_name


def produce_for(bootstrap: str, topic: str, seconds: float, partitions: list[int]) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for part in partitions:
            p.produce(topic, value=b'{"n": %d}' % n, partition=part)
            n += 1
        p.poll(0)
        time.sleep(0.01)
    p.flush(10)
    return n


def drain(cuts: EpochCuts, start: BatchOffset) -> list[BatchOffset]:
    out = []
    while True:
        end = cuts.next_end(start)
        if end == start:
            return out
        out.append(end)
        start = end


@pytest.fixture
def tickers(stack: StackInfo, topic: str) -> Iterator[list[HeartbeatTicker]]:
    made: list[HeartbeatTicker] = []
    yield made
    for t in made:
        t.stop()


def test_idle_partition_closes_batches_and_replicas_agree(
    stack: StackInfo, topic: str, tickers: list[HeartbeatTicker]
) -> None:
    for r in (0, 1):
        tickers.append(HeartbeatTicker(stack.kafka, topic, INTERVAL_S, replica=r).start())
    log_a = TopicLog(stack.kafka, topic)
    log_b = TopicLog(stack.kafka, topic)
    try:
        # Strict: one epoch per batch, so the two sequences must be identical.
        a = EpochCuts(log_a, round(INTERVAL_S * 1000), max_epochs=1)
        b = EpochCuts(log_b, round(INTERVAL_S * 1000), max_epochs=1)
        start = BatchOffset(NO_BATCH, log_a.low_watermarks())
        # Replica A plans while data flows into partitions 0 and 1 only (2 stays idle)...
        batches_a: list[BatchOffset] = []
        pos = start
        worker = threading.Thread(target=produce_for, args=(stack.kafka, topic, 2.5, [0, 1]))
        worker.start()
        t_lookups: list[float] = []
        while worker.is_alive():
            t0 = time.perf_counter()
            end = a.next_end(pos)
            t_lookups.append(time.perf_counter() - t0)
            if end != pos:
                batches_a.append(end)
                pos = end
            time.sleep(0.03)
        worker.join()
        time.sleep(2 * INTERVAL_S)
        batches_a += drain(a, pos)
        # ...replica B plans everything afterwards, in one go.
        batches_b = drain(b, start)
    finally:
        log_a.close()
        log_b.close()
    assert len(batches_a) >= 8, batches_a
    # B drains later, when the (still ticking) heartbeats have finalised a few more epochs.
    assert batches_b[: len(batches_a)] == batches_a
    # Strictly increasing epochs (one empty epoch is skipped only if a loaded machine woke
    # every ticker too late for it).
    epochs = [x.batch for x in batches_a]
    assert epochs == sorted(set(epochs))
    # The idle partition received heartbeats only, and busy ones mostly none (time index).
    sent = sum(t.stats()["markers_sent"] for t in tickers)
    skipped = sum(t.stats()["markers_skipped"] for t in tickers)
    assert sent > 0 and skipped > 0
    ticks = sum(t.stats()["ticks"] for t in tickers)
    med = sorted(t_lookups)[len(t_lookups) // 2] * 1000
    print(
        f"\nleaderless: {len(batches_a)} batches, latestOffset median {med:.1f} ms, "
        f"max {max(t_lookups) * 1000:.1f} ms; heartbeats: {sent} sent, {skipped} skipped "
        f"over {ticks} ticks (3 partitions x 2 replicas)"
    )


def test_markers_carry_the_epoch_and_a_header(
    stack: StackInfo, topic: str, tickers: list[HeartbeatTicker]
) -> None:
    t = HeartbeatTicker(stack.kafka, topic, INTERVAL_S, replica=0, skip_active=False)
    tickers.append(t)
    assert t.tick(12345) == 3
    c = Consumer({"bootstrap.servers": stack.kafka, "group.id": "t", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        msgs = [m for m in c.consume(10, timeout=5) if m.error() is None]
    finally:
        c.close()
    assert len(msgs) == 3
    assert all(is_marker(m.headers()) and marker_epoch(m.value()) == 12345 for m in msgs)


def test_leaderless_refuses_a_create_time_topic(stack: StackInfo, topic_name: str) -> None:
    ensure_topic(stack.kafka, topic_name, 1)
    opts = SourceOptions(
        bootstrap=stack.kafka, topic=topic_name, mode="active-leaderless", heartbeat=False
    )
    log = TopicLog(stack.kafka, topic_name)
    try:
        with pytest.raises(DeployError, match="LogAppendTime"):
            LeaderlessPolicy(opts, log)
    finally:
        log.close()


def test_a_replica_that_fell_behind_catches_up_on_agreed_cuts(
    stack: StackInfo, topic: str, tickers: list[HeartbeatTicker]
) -> None:
    tickers.append(HeartbeatTicker(stack.kafka, topic, INTERVAL_S, replica=0).start())
    produce_for(stack.kafka, topic, 1.5, [0])
    time.sleep(2 * INTERVAL_S)
    log = TopicLog(stack.kafka, topic)
    try:
        interval = round(INTERVAL_S * 1000)
        start = BatchOffset(NO_BATCH, log.low_watermarks())
        # The ticker keeps finalising boundaries: ask the catching-up replica first, so the
        # strict sequence drained after it reaches at least as far.
        behind = EpochCuts(log, interval, max_epochs=0).next_end(start)
        strict = drain(EpochCuts(log, interval, max_epochs=1), start)
    finally:
        log.close()
    # One batch takes everything final, ending on a cut the strict sequence has too.
    assert len(strict) >= 5
    assert behind in strict
    assert strict.index(behind) >= len(strict) - 3, (behind, strict[-3:])
