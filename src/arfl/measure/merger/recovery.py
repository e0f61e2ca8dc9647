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

import contextlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arfl.errors import DeployError, ReportError
from arfl.measure.histogram import (
    IntervalHistogram,
    IntervalRecorder,
    LatencyLogTail,
    LatencyLogWriter,
    new_histogram,
)
from arfl.measure.merger.core import MergeCore
from arfl.run.records import BadRecord, parse_result
from arfl.run.streams import MonitorSnapshot

LOOKBACK_S = 10.0
"""How far before the sink's newest record the restarted merger reads it back. A commit is a
second or two older than the forwards it covers (one per tick, after the acknowledgements; a
paused merger forwards nothing either): 10 s is five times that. At 1,000 results/s reading
60 s of tail took 3.1 s of the take-over, docs/benchmarks.md."""


LAST_OFFSETS = 16
"""How many of a partition's last offsets are read for its newest record."""


@dataclass
class SinkRecord:
    """One record of the sink's tail."""

    partition: int
    value: bytes
    timestamp_ms: int
    """The sink record's timestamp: when the merger produced it (CreateTime)."""
    n: int | None = None
    """Its number among the run's results (header :data:`SEQ_HEADER`; None: none)."""


SEQ_HEADER = "arfl-n"
"""The sink record header holding a result's number in the run (1, 2, ...): which results a
merger taken over from forwarded after its last logged interval. Offsets cannot say it once
the sink is transactional (commit markers take offsets too)."""


def sequence(headers: list[tuple[str, bytes]] | None) -> int | None:
    """The :data:`SEQ_HEADER` number of a sink record's headers (None: none or unreadable)."""
    for k, v in headers or ():
        if k == SEQ_HEADER:
            try:
                return int(v)
            except (TypeError, ValueError):
                return None
    return None


@dataclass
class Taken:
    """What a restarted merger took over."""

    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    """(replica topic, partition) -> the committed offset to read on from."""
    tail: list[SinkRecord] = field(default_factory=list)
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


def _tail_consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "arfl-merger-recovery",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # What was appended was forwarded, also in a transaction a standby's fence aborted.
            "isolation.level": "read_uncommitted",
            # A transactional partition's end is a marker no consumer is given: its end of
            # partition comes from an empty fetch, which the broker holds this long.
            "fetch.wait.max.ms": 10,
        }
    )


def _starts(c: Any, sink: str, timeout_s: float) -> tuple[dict[int, int], dict[int, int]]:
    """(partition -> the offset :data:`LOOKBACK_S` before the newest record, partition -> its
    end) for the non-empty partitions."""
    from confluent_kafka import TopicPartition

    meta = c.list_topics(sink, timeout=timeout_s).topics.get(sink)
    parts = sorted(meta.partitions) if meta is not None and meta.partitions else []
    ends: dict[int, int] = {}
    lows: dict[int, int] = {}
    for p in parts:
        low, high = c.get_watermark_offsets(TopicPartition(sink, p), timeout=timeout_s)
        if high > low:
            ends[p], lows[p] = high, low
    if not ends:
        return {}, {}
    # Each partition's last records, read in one go: the newest is when the merger before this
    # one forwarded last (a transactional sink's last offsets are markers: a few more).
    lasts = _read(
        c, [TopicPartition(sink, p, max(lows[p], h - LAST_OFFSETS)) for p, h in ends.items()],
        ends, timeout_s,
    )  # fmt: skip
    if not lasts:
        return lows, ends
    newest = max(r.timestamp_ms for r in lasts)
    since = newest - int(LOOKBACK_S * 1000)
    got = c.offsets_for_times([TopicPartition(sink, p, since) for p in ends], timeout=timeout_s)
    return (
        {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in got},
        ends,
    )


def sink_starts(bootstrap: str, sink: str, timeout_s: float) -> dict[int, int]:
    """Where :func:`sink_tail` starts, per non-empty partition of ``sink``."""
    c = _tail_consumer(bootstrap)
    try:
        return _starts(c, sink, timeout_s)[0]
    finally:
        c.close()


def sink_tail(bootstrap: str, sink: str, timeout_s: float) -> list[SinkRecord]:
    """The sink's records from :data:`LOOKBACK_S` before its newest one (empty when empty)."""
    from confluent_kafka import TopicPartition

    c = _tail_consumer(bootstrap)
    try:
        starts, ends = _starts(c, sink, timeout_s)
        if not ends:
            return []
        assign = [TopicPartition(sink, p, off) for p, off in starts.items()]
        return _read(c, assign, ends, timeout_s)
    finally:
        c.close()


def sink_rids_since(
    bootstrap: str,
    sink: str,
    since_ms: int,
    timeout_s: float,
    partitions: set[int] | None = None,
) -> set[str]:
    """The ids of the results appended to ``sink`` (its ``partitions``; None: all) from
    ``since_ms`` (its records' timestamps) to its current end, read ``read_uncommitted``:
    which of the writes whose delivery failed are there all the same
    (:meth:`arfl.measure.merger.process.Merger._resend`).

    Raises:
        TimeoutError: the sink not read to its end within ``timeout_s``.
        KafkaException: no answer to a metadata or offset request, or an error in it.
    """
    from confluent_kafka import KafkaException, TopicPartition

    c = _tail_consumer(bootstrap)
    try:
        meta = c.list_topics(sink, timeout=timeout_s).topics.get(sink)
        parts = sorted(meta.partitions) if meta is not None and meta.partitions else []
        ends: dict[int, int] = {}
        for p in parts if partitions is None else [p for p in parts if p in partitions]:
            low, high = c.get_watermark_offsets(TopicPartition(sink, p), timeout=timeout_s)
            if high > low:
                ends[p] = high
        if not ends:
            return set()
        got = c.offsets_for_times(
            [TopicPartition(sink, p, since_ms) for p in ends], timeout=timeout_s
        )
        for tp in got:
            if tp.error is not None:  # read as absent, its records would go out twice
                raise KafkaException(tp.error)
        assign = [
            TopicPartition(sink, tp.partition, tp.offset)
            for tp in got
            if 0 <= tp.offset < ends[tp.partition]
        ]
        rids: set[str] = set()
        if assign:
            for rec in _read(c, assign, ends, timeout_s):
                with contextlib.suppress(BadRecord):
                    rids.add(parse_result(rec.value).rid)
        return rids
    finally:
        c.close()


def _read(c: Any, assign: list[Any], ends: dict[int, int], timeout_s: float) -> list[SinkRecord]:
    from confluent_kafka import KafkaError

    from arfl.processes import wait_until

    c.assign(assign)
    out: list[SinkRecord] = []
    left = {tp.partition for tp in assign if tp.offset >= 0 and tp.offset < ends[tp.partition]}

    def done() -> bool:
        for m in c.consume(num_messages=10_000, timeout=0.2):
            err = m.error()
            if err is not None:
                # A transactional sink ends with a commit marker no consumer is given.
                if err.code() == KafkaError._PARTITION_EOF:
                    left.discard(m.partition())
                continue
            p, off = m.partition(), m.offset()
            out.append(
                SinkRecord(p, m.value() or b"", int(m.timestamp()[1]), sequence(m.headers()))
            )
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


def unlogged(
    tail: list[SinkRecord], counted: int, since: float, until: float
) -> tuple[IntervalHistogram, IntervalHistogram]:
    """The latencies of the sink records the merger before this one forwarded after its last
    logged interval (``since``; ``counted`` results by then) and never logged, those numbered
    (:data:`SEQ_HEADER`) above ``counted``: one interval up to ``until``, the arrival being the
    sink record's timestamp."""
    intended, sent = IntervalRecorder(since), IntervalRecorder(since)
    newest = [r for r in tail if r.n is not None and r.n > counted]
    for rec in newest:
        with contextlib.suppress(BadRecord):
            r = parse_result(rec.value)
            intended.record_ms(rec.timestamp_ms - r.src_ts)
            if r.sent_ts is not None:
                sent.record_ms(rec.timestamp_ms - r.sent_ts)
    end = max(until, since + 1e-3)
    return intended.roll(end), sent.roll(end)


def apply_counts(core: MergeCore, taken: Taken, monitor: Path) -> None:
    """Add the counts of the merger taken over from (its last monitor line) to ``core``'s
    (a fresh core's, or one that has counted only what it forwarded at the take-over), and its
    last forward for the output gap, unless set."""
    if taken.counts is not None:
        core.results += taken.counts.results
        core.duplicates += taken.counts.duplicates_total
        core.divergent += taken.counts.divergent
        core.bad += taken.counts.bad
        core.gaps.longest_s = max(core.gaps.longest_s, taken.counts.longest_gap_ms / 1000.0)
        core.gaps.first_output = first_output(monitor)
    if taken.tail and core.gaps.last_output is None:
        # The gap across the take-over runs from the dead merger's last forward.
        core.gaps.last_output = max(r.timestamp_ms for r in taken.tail) / 1000.0


class Past:
    """The interval logs of the merger taken over from, added up as they are read: beside the
    loop (a restarted merger, ``thread``) or while they grow (a standby calls :meth:`read` once
    a second while it follows), so that a take-over decodes at most the last interval or two
    (decoding a whole run's logs at once stalled the output, docs/benchmarks.md)."""

    def __init__(self, hlog: Path, sent_hlog: Path, *, thread: bool = False) -> None:
        self._tails = (LatencyLogTail(hlog), LatencyLogTail(sent_hlog))
        self._sums = (new_histogram(), new_histogram())
        self._last_end_s: float | None = None
        self._broken = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self.read, daemon=True)
            self._thread.start()

    def read(self) -> None:
        """Add the intervals logged since the last read (a log torn or unreadable: the rest of
        it is not read)."""
        with self._lock:
            if self._broken:
                return
            for i, (tail, total) in enumerate(zip(self._tails, self._sums, strict=True)):
                try:
                    intervals = tail.read()
                except ReportError:
                    self._broken = True
                    return
                for iv in intervals:
                    total.add(iv.histogram)
                    if i == 0:
                        self._last_end_s = iv.end_s

    def stitch(
        self,
        core: MergeCore,
        taken: Taken,
        start_s: float,
        hlog: LatencyLogWriter,
        sent_hlog: LatencyLogWriter,
    ) -> None:
        """Whole-run percentiles over both mergers' results, and one interval, up to this
        merger's start, of the results the one before forwarded and never logged: every sink
        record is a first copy, those beyond its last count were never logged."""
        if self._thread is not None:
            self._thread.join()
        self.read()
        for tail in self._tails:
            tail.close()
        core.recorder.cumulative.add(self._sums[0])
        core.sent_recorder.cumulative.add(self._sums[1])
        if self._last_end_s is None or taken.counts is None:
            return
        lost, lost_sent = unlogged(taken.tail, taken.counts.results, self._last_end_s, start_s)
        hlog.write(lost)
        sent_hlog.write(lost_sent)
        core.took_over(lost.count)
        core.recorder.cumulative.add(lost.histogram)
        core.sent_recorder.cumulative.add(lost_sent.histogram)
