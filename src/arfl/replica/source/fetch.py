"""Executor side: read exactly one partition's offset range, markers dropped.

Consumers are cached per Python worker process, keyed by bootstrap servers: with
``spark.python.worker.reuse`` (Spark's default) the same worker runs many tasks, so after the
first batch a read costs an assign, a seek and the fetch, never a client start-up.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from arfl.replica.source.markers import is_marker

FETCH_TIMEOUT_S = 30.0
"""A range that cannot be fetched within this time fails the task (Spark retries it)."""
BATCH_SIZE = 2000

Row = tuple[str | None, str | None, str, int, int, int, int | None]
"""(key, value, topic, partition, offset, timestamp ms, late_before) — the source's schema."""

_cache: dict[str, Any] = {}
_cache_lock = threading.Lock()
_stats = {"consumers_created": 0, "reads": 0}


@dataclass(frozen=True, slots=True)
class Range:
    """One input partition of a batch: ``[start, end)`` of one Kafka partition.

    ``late``: ``(first offset, threshold)`` of each agreed batch in the range, for the
    ``late_before`` column (:mod:`arfl.replica.source.late`); empty: the column is null."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    late: tuple[tuple[int, int | None], ...] = ()


def consumer_for(bootstrap: str) -> Any:
    """The cached consumer of this process for ``bootstrap`` (created on first use)."""
    with _cache_lock:
        c = _cache.get(bootstrap)
        if c is None:
            from confluent_kafka import Consumer

            c = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "arfl-source-reader",
                    "client.id": f"arfl-reader-{os.getpid()}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                    "auto.offset.reset": "error",
                    "fetch.wait.max.ms": 10,
                    "socket.connection.setup.timeout.ms": 5000,
                }
            )
            _cache[bootstrap] = c
            _stats["consumers_created"] += 1
        return c


def stats() -> dict[str, int]:
    """Counters of this process (consumers created, ranges read): shows client reuse."""
    return dict(_stats)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def records(r: Range, timeout_s: float = FETCH_TIMEOUT_S) -> Iterator[list[Any]]:
    """Chunks of the range's non-marker messages, in offset order."""
    from confluent_kafka import KafkaError, TopicPartition

    if r.end <= r.start:
        return
    _stats["reads"] += 1
    consumer = consumer_for(r.bootstrap)
    consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
    deadline = time.monotonic() + timeout_s
    last = r.end - 1
    nxt = r.start
    try:
        while True:
            # consume() returns when it has n messages or at the timeout: ask for exactly what
            # is left, so a small range does not wait for the timeout.
            msgs = consumer.consume(max(1, min(BATCH_SIZE, r.end - nxt)), timeout=0.5)
            chunk = []
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(
                        f"kafka at {r.bootstrap}: reading {r.topic}[{r.partition}] "
                        f"[{r.start}, {r.end}) failed: {err}"
                    )
                off = m.offset()
                nxt = off + 1
                if off > last:
                    done = True
                    break
                if not is_marker(m.headers()):
                    chunk.append(m)
                if off == last:
                    done = True
                    break
            if chunk:
                yield chunk
            if done:
                return
            if not msgs:
                # Offsets of aborted transactions or compacted records never arrive: the
                # position tells whether the range is done.
                pos = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
                if pos >= r.end:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"kafka at {r.bootstrap}: {r.topic}[{r.partition}] offsets "
                        f"[{r.start}, {r.end}) not readable within {timeout_s:.0f}s (position "
                        f"{pos}); were they deleted by retention?"
                    )
    finally:
        consumer.unassign()


def read_range(r: Range, timeout_s: float = FETCH_TIMEOUT_S) -> Iterator[Row]:
    """Yield the records of ``[r.start, r.end)`` in offset order, markers dropped, as tuples.

    Raises:
        RuntimeError: the range could not be read within ``timeout_s`` (records deleted by
            retention, broker down); Spark fails the task and retries it.
    """
    for chunk in records(r, timeout_s):
        late = row_thresholds([m.offset() for m in chunk], r.late)
        for m, before in zip(chunk, late, strict=True):
            yield (
                _text(m.key()),
                _text(m.value()),
                r.topic,
                r.partition,
                m.offset(),
                m.timestamp()[1],
                before,
            )


def read_batches(r: Range, timeout_s: float = FETCH_TIMEOUT_S) -> Iterator[Any]:
    """Like :func:`read_range`, as Arrow record batches (no per-row conversion in Spark).

    Raises:
        RuntimeError: as :func:`read_range`.
    """
    import pyarrow as pa

    for chunk in records(r, timeout_s):
        n = len(chunk)
        offsets = [m.offset() for m in chunk]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([_text(m.key()) for m in chunk], pa.string()),
                pa.array([_text(m.value()) for m in chunk], pa.string()),
                pa.array([r.topic] * n, pa.string()),
                pa.array([r.partition] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array([m.timestamp()[1] for m in chunk], pa.int64()),
                pa.array(row_thresholds(offsets, r.late), pa.int64()),
            ],
            schema=arrow_schema(),
        )


def arrow_schema() -> Any:
    """The Arrow schema of the source's rows."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.string()),
            ("value", pa.string()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("late_before", pa.int64()),
        ]
    )


def row_thresholds(
    offsets: Sequence[int], late: Sequence[tuple[int, int | None]]
) -> list[int | None]:
    """The ``late_before`` value of each row (by offset) given
    :func:`arfl.replica.source.late.thresholds` (the last threshold starting at or before it)."""
    if not late:
        return [None] * len(offsets)
    firsts = [f for f, _ in late]
    return [late[max(0, bisect.bisect_right(firsts, o) - 1)][1] for o in offsets]
