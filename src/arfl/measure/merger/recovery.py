"""What a restarted merger takes over from the one before it, from Kafka and the run directory
alone (docs/design.md, "A merger that restarts").

* **Where to read on**: the replica topics' positions the merger commits under its group once
  every result forwarded before them is acknowledged by the sink (:func:`committed`); without a
  commit, from the beginning.
* **What was forwarded**: the sink topic's tail, from :data:`LOOKBACK_S` before its newest
  record (:func:`sink_tail`). Every copy read again after the committed positions was read
  after that commit was taken, so its first copy, if forwarded, is in that tail: the tail's ids
  go into the dedup's exact memory, and a copy of them is a duplicate.
* **The latency of results the dead merger forwarded but never logged** (its open interval):
  each tail record newer than the last logged interval, at its sink timestamp.
* **The counts so far**: the previous incarnation's last monitor line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arfl.errors import DeployError
from arfl.run.streams import MonitorSnapshot

LOOKBACK_S = 10.0
"""How far before the sink's newest record the restarted merger reads it back. A commit is a
second or two older than the forwards it covers (one per tick, after the acknowledgements; a
paused merger forwards nothing either): 10 s is five times that. At 1,000 results/s reading
60 s of tail took 3.1 s of the take-over, docs/benchmarks.md."""


@dataclass
class SinkRecord:
    """One record of the sink's tail."""

    partition: int
    value: bytes
    timestamp_ms: int
    """The sink record's timestamp: when the merger produced it (CreateTime)."""


@dataclass
class Taken:
    """What a restarted merger took over."""

    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    """(replica topic, partition) -> the committed offset to read on from."""
    tail: list[SinkRecord] = field(default_factory=list)
    sink_records: int = 0
    """How many records the sink holds: every one a first copy (the sink is the run's own)."""
    counts: MonitorSnapshot | None = None
    """The previous incarnation's last monitor line (None: the first incarnation)."""


def committed(
    consumer: Any, partitions: list[tuple[str, int]], timeout_s: float
) -> dict[tuple[str, int], int]:
    """The offsets committed under the consumer's group for ``partitions`` (those with one).

    A broker just started has no group coordinator yet (its offsets topic is created on the
    first request): asked again until ``timeout_s``.

    Raises:
        DeployError: no answer by then (reading from the beginning with nothing remembered
            could forward results twice).
    """
    from confluent_kafka import KafkaException, TopicPartition

    from arfl.processes import wait_until

    asked = [TopicPartition(t, p) for t, p in partitions]
    failed: list[str] = []

    def answer() -> list[Any] | None:
        try:
            return list(consumer.committed(asked, timeout=min(5.0, timeout_s)))
        except KafkaException as e:
            failed[:] = [str(e)]
            return None

    try:
        got = wait_until(answer, timeout_s=timeout_s, interval_s=0.5) if asked else []
    except TimeoutError:
        raise DeployError(
            f"merger: its group's committed positions not readable within {timeout_s:.0f}s "
            f"({failed[0] if failed else 'no answer'})"
        ) from None
    return {(tp.topic, tp.partition): int(tp.offset) for tp in got if tp.offset >= 0}


def sink_tail(bootstrap: str, sink: str, timeout_s: float) -> tuple[list[SinkRecord], int]:
    """The sink's records from :data:`LOOKBACK_S` before its newest one (empty when empty),
    and how many records it holds in all."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "arfl-merger-recovery",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        meta = c.list_topics(sink, timeout=timeout_s).topics.get(sink)
        parts = sorted(meta.partitions) if meta is not None and meta.partitions else []
        total = 0
        ends: dict[int, int] = {}
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(sink, p), timeout=timeout_s)
            total += max(0, high - low)
            if high > low:
                ends[p] = high
        if not ends:
            return [], 0
        # Each partition's last record, read in one go: the newest is when the merger before
        # this one forwarded last.
        lasts = _read(c, [TopicPartition(sink, p, h - 1) for p, h in ends.items()], ends, timeout_s)
        newest = max(r.timestamp_ms for r in lasts)
        since = newest - int(LOOKBACK_S * 1000)
        starts = c.offsets_for_times(
            [TopicPartition(sink, p, since) for p in ends], timeout=timeout_s
        )
        assign = [
            TopicPartition(sink, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
            for tp in starts
        ]
        return _read(c, assign, ends, timeout_s), total
    finally:
        c.close()


def _read(c: Any, assign: list[Any], ends: dict[int, int], timeout_s: float) -> list[SinkRecord]:
    from arfl.processes import wait_until

    c.assign(assign)
    out: list[SinkRecord] = []
    left = {tp.partition for tp in assign if tp.offset >= 0 and tp.offset < ends[tp.partition]}

    def done() -> bool:
        for m in c.consume(num_messages=10_000, timeout=0.2):
            if m.error() is not None:
                continue
            p, off = m.partition(), m.offset()
            out.append(SinkRecord(p, m.value() or b"", int(m.timestamp()[1])))
            if off + 1 >= ends[p]:
                left.discard(p)
        return not left

    wait_until(done, timeout_s=timeout_s, interval_s=0, what="the sink's tail")
    return out


def last_counts(monitor: Path) -> MonitorSnapshot | None:
    """The last readable line of ``monitor.jsonl`` (None: none yet)."""
    try:
        lines = monitor.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return MonitorSnapshot.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
    return None


def first_output(monitor: Path) -> float | None:
    """When the first merger forwarded its first result, to its 1-s tick: the start of the
    first interval with output (None: none yet)."""
    try:
        with open(monitor, encoding="utf-8") as f:
            for line in f:
                try:
                    snap = MonitorSnapshot.from_dict(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    continue
                if snap.output_rate > 0:
                    return snap.t - snap.interval_s
    except OSError:
        return None
    return None
