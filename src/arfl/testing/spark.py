"""Spark for tests (and users): an in-process session stopped by pid, input and result helpers.

* A standalone cluster arfl did not start: :class:`arfl.testing.docker_cluster.DockerSparkCluster`.
* :func:`local_session` (from :mod:`arfl.replica.sparkenv`) yields a ``local[N]``
  SparkSession and kills its gateway JVM at exit.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arfl.errors import StackError
from arfl.processes import wait_until
from arfl.replica.sparkenv import local_session
from arfl.run.records import BadRecord, Result, parse_result
from arfl.stack.topics import watermarks


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def event(seq: int, ts_ms: int, keys: int = 10) -> dict[str, Any]:
    """The deterministic input event ``seq`` (records.py format) with intended time ``ts_ms``."""
    return {
        "seq": seq,
        "user": f"u{seq % keys}",
        "amount": float(seq % 50),
        "ts": ts_ms,
        "sent_ms": int(time.time() * 1000),
    }


def produce_events(
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    rate: int,
    duration_s: float,
    keys: int = 10,
    start_seq: int = 0,
    garbage: int = 0,
    stop: threading.Event | None = None,
) -> int:
    """Produce events at a fixed rate (``ts`` = intended send time); returns the next seq.

    Event ``seq`` goes to partition ``seq % partitions`` with key ``user``. ``garbage``
    unparseable records are written to partition 0 first (replicas must count and skip them).
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
    for _ in range(garbage):
        producer.produce(topic, value=b"this is not json", partition=0)
    t0 = time.time()
    n = int(rate * duration_s)
    seq = start_seq
    for i in range(n):
        if stop is not None and stop.is_set():
            break
        due = t0 + i / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        ev = event(seq, int(due * 1000), keys)
        producer.produce(
            topic, key=ev["user"], value=json.dumps(ev).encode(), partition=seq % partitions
        )
        producer.poll(0)
        seq += 1
    if producer.flush(30) != 0:
        raise StackError(f"kafka at {bootstrap}: events to {topic} not delivered in 30s")
    return seq


@dataclass(frozen=True)
class ReadResult:
    """A replica output record as read back: the parsed result and its Kafka timestamp."""

    result: Result
    kafka_ts_ms: int
    partition: int
    offset: int


class ResultReader:
    """Reads a replica's output topic from the beginning, accumulating results."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        """Assign every partition of ``topic`` from offset 0."""
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self.results: list[ReadResult] = []
        self.bad = 0
        self.markers = 0
        """Marker copies read (:mod:`arfl.run.records`): no result, so not in ``results``."""
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"arfl-test-{topic}-{time.time_ns()}",
                "enable.auto.commit": False,
                # arfl's sinks are read uncommitted (with a standby merger the final topic is
                # transactional, and the transactions are its fence, not its delivery unit).
                "isolation.level": "read_uncommitted",
            }
        )
        md = self._consumer.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions) if topic in md.topics else [0]
        self._consumer.assign([TopicPartition(topic, p, 0) for p in parts])

    def poll(self, seconds: float) -> int:
        """Read for about ``seconds``; returns how many records arrived."""
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            msg = self._consumer.poll(min(0.5, max(0.01, deadline - time.monotonic())))
            if msg is None or msg.error():
                continue
            try:
                res = parse_result(msg.value())
            except BadRecord:
                self.bad += 1
                continue
            if res.eoi:
                self.markers += 1
                continue
            self.results.append(
                ReadResult(res, int(msg.timestamp()[1]), msg.partition() or 0, msg.offset() or 0)
            )
            n += 1
        return n

    def poll_until(self, done: Callable[[list[ReadResult]], bool], timeout_s: float) -> bool:
        """Poll until ``done(results)`` or the timeout; returns whether ``done`` held."""

        def held() -> bool:
            if done(self.results):
                return True
            self.poll(1.0)  # reads for a second: the wait's pause
            return False

        with contextlib.suppress(TimeoutError):
            return wait_until(held, timeout_s=timeout_s, interval_s=0)
        return done(self.results)

    def drain(self, timeout_s: float = 120.0) -> bool:
        """Read until every record now in the topic was read (by high watermarks).

        Returns:
            True when the reader caught up with the topic's end before the timeout.
        """
        from confluent_kafka import TopicPartition

        assignment: list[TopicPartition] = self._consumer.assignment()
        parts = [tp.partition for tp in assignment]
        ends = {p: high for p, (_, high) in watermarks(self._consumer, self.topic, parts).items()}

        def at_end() -> bool:
            if all(
                pos.offset >= ends[pos.partition] or ends[pos.partition] == 0
                for pos in self._consumer.position(assignment)
            ):
                return True
            self.poll(1.0)  # reads for a second: the wait's pause
            return False

        with contextlib.suppress(TimeoutError):
            return wait_until(at_end, timeout_s=timeout_s, interval_s=0)
        return False

    def rids(self) -> set[str]:
        """Distinct result ids read so far."""
        return {r.result.rid for r in self.results}

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()

    def __enter__(self) -> ResultReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def consumed_offsets(progress: dict[str, Any]) -> int:
    """Sum of a progress event's source end offsets (records consumed so far, all partitions)."""
    from arfl.run.progress import end_offsets

    return sum(end_offsets(progress).values())


def wait_caught_up(
    progress_file: Path, records: int, timeout_s: float, settle_s: float = 5.0
) -> bool:
    """Wait until a replica consumed ``records`` input records and its output is complete.

    Complete means: after the batch that reached ``records``, either an empty batch ran (the
    no-data batch that advances the watermark and emits the windows it closed) or no batch
    at all ran for ``settle_s`` (per-record pipelines have no such batch; Spark reports idle
    time through ``onQueryIdle``, not as progress).
    """
    from arfl.run.rundir import read_jsonl

    reached_at: float | None = None
    reached_len = 0

    def caught_up() -> bool:
        nonlocal reached_at, reached_len
        progress = read_jsonl(progress_file)
        if not progress or consumed_offsets(progress[-1]) < records:
            return False
        if progress[-1].get("numInputRows", 0) == 0:
            return True
        if reached_at is None or len(progress) != reached_len:
            reached_at, reached_len = time.monotonic(), len(progress)
            return False
        return time.monotonic() - reached_at >= settle_s

    try:
        return wait_until(caught_up, timeout_s=timeout_s, interval_s=0.5)
    except TimeoutError:
        return False


__all__ = [
    "ReadResult",
    "ResultReader",
    "consumed_offsets",
    "event",
    "free_port",
    "local_session",
    "produce_events",
    "wait_caught_up",
]
