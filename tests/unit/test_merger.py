"""Merger: first copy wins, bounded dedup, divergence, bad records, gaps, interval rollover."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from arfl.errors import DeployError
from arfl.measure.frontier import read_frontier
from arfl.measure.histogram import read_latency_log
from arfl.measure.merger import core, kafka, process
from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.core import (
    DedupState,
    GapTracker,
    InputWindow,
    MergeCore,
    Outcome,
    ReplicaCounters,
)
from arfl.measure.merger.process import Merger
from arfl.run import records
from arfl.run.records import replica_topic
from arfl.run.rundir import read_jsonl
from arfl.run.streams import MonitorSnapshot, MonitorTail

T0 = 1_700_000_000.0


def rec(
    rid: str, src_ts: int, replica: int = 0, h: str = "h1", sent_ts: int | None = None
) -> bytes:
    obj: dict[str, Any] = {"rid": rid, "src_ts": src_ts, "replica": replica, "hash": h}
    if sent_ts is not None:
        obj["sent_ts"] = sent_ts
    obj["data"] = {"n": 1}
    return json.dumps(obj).encode()


# ------------------------------------------------------------------ DedupState


def test_first_copy_wins_and_later_copies_are_duplicates() -> None:
    d = DedupState()
    assert d.offer("a", 1, "h", T0) == (True, None)
    assert d.offer("a", 0, "h", T0 + 0.1) == (False, None)
    assert d.offer("a", 1, "h", T0 + 0.2) == (False, None)
    assert d.offer("b", 0, "h", T0 + 0.3) == (True, None)
    assert len(d) == 2


def test_copy_with_other_hash_is_a_divergence_naming_both_replicas() -> None:
    d = DedupState()
    d.offer("a", 1, "h1", T0)
    first, div = d.offer("a", 0, "h2", T0 + 0.1)
    assert not first
    assert div is not None
    assert (div.rid, div.first_replica, div.first_hash, div.replica, div.hash) == (
        "a",
        1,
        "h1",
        0,
        "h2",
    )


def _copy(rid: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"rid": rid, "src_ts": 1, "replica": 0, "hash": "h", "data": data}).encode()


def test_divergence_carries_both_values_while_remembered() -> None:
    d = DedupState()
    d.offer("a", 1, "h1", T0, _copy("a", {"total": 1.0}))
    _, div = d.offer("a", 0, "h2", T0 + 0.1, _copy("a", {"total": 1.5}))
    assert div is not None
    assert div.to_dict()["first_data"] == {"total": 1.0}
    assert div.to_dict()["data"] == {"total": 1.5}
    # Only the newest first copies' records are kept; older ones report None.
    for i in range(core.DATA_MEMORY):
        d.offer(f"x{i}", 0, "h", T0 + 1)
        d.offer(f"y{i}", 0, "h", T0 + 1, _copy(f"y{i}", {"i": i}))
    _, old = d.offer("a", 0, "h3", T0 + 2, _copy("a", {"total": 2.0}))
    assert old is not None and old.first_data is None and old.data == {"total": 2.0}


def test_a_copy_is_read_as_the_full_parser_reads_it() -> None:
    """The merger's parse (no data built) accepts and refuses what parse_result does."""
    good = {"rid": "0:1", "src_ts": 5, "replica": 1, "hash": "h", "data": {"a": 1}}
    cases: list[Any] = [
        good, {**good, "sent_ts": 7}, {**good, "sent_ts": None}, {**good, "data": None},
        {**good, "eoi": True}, {**good, "eoi": 1}, {**good, "eoi": None},
        {**good, "data": [["a", 1]]}, {**good, "data": [1, 2]}, {**good, "data": 3},
        {**good, "src_ts": "x"}, {**good, "replica": None}, {k: v for k, v in good.items()
        if k != "hash"}, {**good, "sent_ts": "y"}, [1], "s",
    ]  # fmt: skip
    for obj in cases:
        raw = json.dumps(obj).encode()
        try:
            full = records.parse_result(raw)
        except records.BadRecord:
            with pytest.raises(records.BadRecord):
                records.parse_copy(raw)
            continue
        copy = records.parse_copy(raw)
        assert copy == (full.rid, full.src_ts, full.hash, full.sent_ts, full.eoi)
        assert records.copy_data(raw) == full.data
    for raw in (b"{", b"", None):
        with pytest.raises(records.BadRecord):
            records.parse_copy(raw)


# ------------------------------------------------------------------ gaps


def test_input_window_overlap_clips_to_input() -> None:
    w = InputWindow(start=T0, end=T0 + 10)
    assert w.overlap(T0 - 5, T0 + 2) == pytest.approx(2)
    assert w.overlap(T0 + 9, T0 + 20) == pytest.approx(1)
    assert w.overlap(T0 + 11, T0 + 20) == 0
    assert w.flowing(T0 + 5) and not w.flowing(T0 + 10.5) and not w.flowing(T0 - 1)
    assert InputWindow(start=T0).flowing(T0 + 1e6)
    assert InputWindow().overlap(1, 4) == 3 and not InputWindow().flowing(T0)


def test_gap_is_the_longest_silence_while_input_flows() -> None:
    w = InputWindow(start=T0, end=None)
    g = GapTracker()
    g.on_output(T0 + 5.0, w)  # start-up wait is not a gap
    assert g.longest_s == 0
    for t in (5.1, 5.2, 7.2, 7.3):
        g.on_output(T0 + t, w)
    assert g.longest_s == pytest.approx(2.0)
    # An open gap counts while input still flows...
    assert g.longest_so_far_s(T0 + 10.3, w) == pytest.approx(3.0)
    # ...but not after input ended.
    w.end = T0 + 8.3
    assert g.longest_so_far_s(T0 + 60, w) == pytest.approx(2.0)
    assert g.current_s(T0 + 60, w) == pytest.approx(1.0)


def test_gap_without_input_information_counts_closed_gaps_only() -> None:
    w = InputWindow()
    g = GapTracker()
    g.on_output(T0, w)
    g.on_output(T0 + 1.5, w)
    assert g.longest_s == pytest.approx(1.5)
    assert g.current_s(T0 + 100, w) == 0
    assert g.longest_so_far_s(T0 + 100, w) == pytest.approx(1.5)


# ------------------------------------------------------------------ MergeCore


def test_core_counts_first_copies_duplicates_bad_and_divergent() -> None:
    c = MergeCore(2, T0)
    ts = int(T0 * 1000)
    assert c.on_record(1, rec("a", ts, 1), T0 + 0.010)[0] is Outcome.FIRST
    assert c.on_record(0, rec("a", ts, 0), T0 + 0.020)[0] is Outcome.DUPLICATE
    out, div = c.on_record(0, rec("b", ts, 0, h="x"), T0 + 0.030)
    assert out is Outcome.FIRST and div is None
    out, div = c.on_record(1, rec("b", ts, 1, h="y"), T0 + 0.040)
    assert out is Outcome.DUPLICATE and div is not None and div.first_replica == 0
    assert c.on_record(0, b"not json", T0 + 0.05)[0] is Outcome.BAD
    assert c.on_record(1, b'{"rid": "c"}', T0 + 0.05)[0] is Outcome.BAD
    assert c.on_record(1, None, T0 + 0.05)[0] is Outcome.BAD
    assert (c.results, c.duplicates, c.divergent, c.bad, c.received) == (2, 2, 1, 3, 7)
    assert c.replicas[0].wins == 1 and c.replicas[1].wins == 1
    assert c.replicas[0].received == 3 and c.replicas[1].received == 4
    assert c.replicas[0].bad == 1 and c.replicas[1].bad == 2


def marker_copy(partition: int, offset: int, replica: int) -> bytes:
    obj = {"rid": f"{partition}:{offset}", "src_ts": 9, "replica": replica, "hash": "m",
           "data": {}, "eoi": True}  # fmt: skip
    return json.dumps(obj).encode()


def test_a_marker_copy_ends_its_partition_for_its_replica_and_is_no_result() -> None:
    c = MergeCore(2, T0)
    ts = int(T0 * 1000)
    assert c.on_record(0, rec("0:4", ts), T0 + 0.01, 3)[0] is Outcome.FIRST
    assert c.on_record(0, marker_copy(0, 5, 0), T0 + 0.02, 1)[0] is Outcome.MARKER
    assert c.on_record(1, marker_copy(0, 5, 1), T0 + 0.03, 1)[0] is Outcome.MARKER
    # Again after a restart: the newest arrival counts.
    assert c.on_record(0, marker_copy(0, 5, 0), T0 + 0.04, 1)[0] is Outcome.MARKER
    assert c.on_record(0, marker_copy(1, 7, 0), T0 + 0.05, 2)[0] is Outcome.MARKER
    # A marker copy that names no input partition is a bad record, never forwarded.
    bad = json.dumps({"rid": "w:x", "src_ts": 9, "replica": 0, "hash": "m", "eoi": True})
    assert c.on_record(0, bad.encode(), T0 + 0.06, 0)[0] is Outcome.BAD
    # Not received, not a result, no latency, no frontier, not in the dedup.
    assert (c.results, c.duplicates, c.received, c.bad) == (1, 0, 2, 1)
    assert c.replicas[0].last_src_ts == ts and len(c.dedup) == 1
    assert c.replicas[0].last_seen_t == T0 + 0.06 and c.replicas[1].last_seen_t is None
    assert c.replicas[0].ended == {0: T0 + 0.04, 1: T0 + 0.05}
    assert c.replicas[1].ended == {0: T0 + 0.03}
    interval, line, _ = c.tick(T0 + 1)
    assert interval.count == 1
    snap = MonitorSnapshot.from_dict(json.loads(json.dumps(line)))
    assert snap.replicas[0].ended == {0: pytest.approx(T0 + 0.04), 1: pytest.approx(T0 + 0.05)}
    assert snap.replicas[1].ended == {0: pytest.approx(T0 + 0.03)}


def test_a_marker_copy_is_dated_by_its_append_not_by_when_the_merger_read_it() -> None:
    # A merger that read a replica's marker copy late (paused, or restarted behind) must not
    # date it after a restart that came later: the copy is from before it.
    c = MergeCore(2, T0)
    assert c.on_record(0, marker_copy(0, 5, 0), T0 + 30.0, 1)[0] is Outcome.MARKER
    c.date_marker(T0 + 0.5)
    assert c.replicas[0].ended == {0: T0 + 0.5}
    # Without the broker's time (a topic that has none), the read time.
    c.on_record(1, marker_copy(1, 5, 1), T0 + 31.0, 1)
    c.date_marker(None)
    assert c.replicas[1].ended == {1: T0 + 31.0} and c.replicas[0].ended == {0: T0 + 0.5}


def test_core_records_latency_of_first_copies_only() -> None:
    c = MergeCore(2, T0)
    ts = int(T0 * 1000)
    c.on_record(0, rec("a", ts), T0 + 0.250)  # 250 ms
    c.on_record(1, rec("a", ts), T0 + 5.0)  # duplicate: not a latency
    c.on_record(1, rec("b", ts), T0 + 0.500)  # 500 ms
    interval, line, _sent = c.tick(T0 + 1)
    assert interval.count == 2
    assert line["interval"]["max"] == pytest.approx(500, rel=0.001)
    assert line["interval"]["p50"] == pytest.approx(250, rel=0.001)


def test_tick_rolls_intervals_and_keeps_cumulative() -> None:
    c = MergeCore(1, T0)
    ts = int(T0 * 1000)
    for i in range(100):
        c.on_record(0, rec(f"a{i}", ts), T0 + 0.010)  # 10 ms
    iv1, line1, _ = c.tick(T0 + 1)
    for i in range(100):
        c.on_record(0, rec(f"b{i}", ts), T0 + 1.100)  # 1100 ms
    iv2, line2, _ = c.tick(T0 + 2)
    iv3, line3, _ = c.tick(T0 + 3)
    assert (iv1.start_s, iv1.end_s, iv2.start_s, iv2.end_s) == (T0, T0 + 1, T0 + 1, T0 + 2)
    assert (iv1.count, iv2.count, iv3.count) == (100, 100, 0)
    assert line1["interval"]["max"] == pytest.approx(10, rel=0.001)
    assert line2["interval"]["p50"] == pytest.approx(1100, rel=0.001)
    assert line2["cumulative"]["count"] == 200
    assert line2["cumulative"]["p50"] == pytest.approx(10, rel=0.001)
    assert line2["cumulative"]["max"] == pytest.approx(1100, rel=0.001)
    assert line3["interval"]["p50"] is None and line3["output_rate"] == 0
    assert [ln["output_rate"] for ln in (line1, line2, line3)] == [100, 100, 0]
    snap = MonitorSnapshot.from_dict(json.loads(json.dumps(line2)))
    assert snap.results == 200 and snap.replicas[0].wins == 200
    assert snap.replicas[0].lag_ms == pytest.approx(2000)


def test_core_gap_follows_first_copies_not_duplicates() -> None:
    c = MergeCore(2, T0, window=InputWindow(start=T0))
    c.on_record(0, rec("a", 1), T0 + 1)
    c.on_record(1, rec("a", 1), T0 + 2)  # duplicate: no new result
    c.on_record(1, rec("b", 1), T0 + 4)
    line = c.tick(T0 + 4.5).line
    assert line["longest_gap_ms"] == pytest.approx(3000)
    assert line["input_flowing"] is True
    final = c.final(T0 + 5)
    assert final["first_output_delay_ms"] == pytest.approx(1000)


# ------------------------------------------------------------------ Merger with fakes


class FakeMessage:
    def __init__(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        error: Any = None,
        partition: int = 0,
        appended_ms: int | None = None,
    ) -> None:
        self._t, self._k, self._v, self._e, self._p = topic, key, value, error, partition
        self._appended_ms = appended_ms

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def error(self) -> Any:
        return self._e

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None

    def timestamp(self) -> tuple[int, int]:
        from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

        if self._appended_ms is None:
            return TIMESTAMP_NOT_AVAILABLE, -1
        return TIMESTAMP_LOG_APPEND_TIME, self._appended_ms


class FakeTopicMetadata:
    def __init__(self, partitions: int) -> None:
        self.partitions = {i: object() for i in range(partitions)}
        self.error = None if partitions else "UNKNOWN_TOPIC_OR_PART"


class FakeClusterMetadata:
    def __init__(self, topics: dict[str, FakeTopicMetadata]) -> None:
        self.topics = topics


class FakeConsumer:
    """Serves batches; topics have ``partitions`` partitions unless listed in ``missing``.

    A topic in ``missing`` has no metadata for its first ``missing[topic]`` look-ups (created
    after the merger started). ``subscribe`` is not offered: a group subscription rebalances.
    """

    def __init__(
        self,
        batches: list[list[FakeMessage]],
        partitions: int = 2,
        missing: dict[str, int] | None = None,
    ) -> None:
        self.batches = batches
        self.partitions = partitions
        self.missing = dict(missing or {})
        self.assigned: list[tuple[str, int, int]] = []
        self.assign_calls: list[str] = []
        self.closed = False
        self.commits: list[list[tuple[str, int, int]]] = []
        self.stored: list[tuple[str, int, int]] = []
        """Offsets committed by a merger before this one (a restart)."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> FakeClusterMetadata:
        assert topic is not None
        if self.missing.get(topic, 0) > 0:
            self.missing[topic] -= 1
            return FakeClusterMetadata({topic: FakeTopicMetadata(0)})
        return FakeClusterMetadata({topic: FakeTopicMetadata(self.partitions)})

    def assign(self, partitions: list[Any]) -> None:
        self.assign_calls.append("assign")
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.assign_calls.append("incremental_assign")
        new = [(tp.topic, tp.partition, tp.offset) for tp in partitions]
        overlap = {(t, p) for t, p, _o in new} & {(t, p) for t, p, _o in self.assigned}
        assert not overlap, f"re-assigned (would re-read) {overlap}"
        self.assigned += new

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        if self.batches:
            return list(self.batches.pop(0))
        threading.Event().wait(min(max(timeout, 0), 0.01))
        return []

    def poll(self, timeout: float = -1) -> Any:
        if self.batches:
            batch = self.batches[0]
            msg = batch.pop(0)
            if not batch:
                self.batches.pop(0)
            return msg
        threading.Event().wait(min(max(timeout, 0), 0.01))
        return None

    def close(self) -> None:
        self.closed = True

    def assignment(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(t, p, o) for t, p, o in self.assigned]

    def position(self, partitions: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition

        # Where reading got to: past what was served (the fake does not count; any offset).
        return [TopicPartition(tp.topic, tp.partition, 5) for tp in partitions]

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> None:
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        from confluent_kafka import TopicPartition

        stored = {(t, p): o for t, p, o in self.stored}
        return [
            TopicPartition(tp.topic, tp.partition, stored.get((tp.topic, tp.partition), -1001))
            for tp in partitions
        ]


class FakeProducer:
    """Acknowledges each record at once; a key in ``fail`` times out (``fail_times`` times,
    None: every time); ``unflushed`` records are still queued after the last flush."""

    def __init__(
        self,
        fail: set[bytes] | None = None,
        unflushed: int = 0,
        fail_times: int | None = None,
        fail_code: str = "_MSG_TIMED_OUT",
    ) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self.headers: list[list[tuple[str, bytes]] | None] = []
        self.fail = fail or set()
        self.fail_times = fail_times
        self.fail_code = fail_code
        self.failed_created_ms: list[int] = []
        self.unflushed = unflushed

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None:
        from confluent_kafka import KafkaError

        self.records.append((topic, key, value))
        self.headers.append(headers)
        failed = key in self.fail
        if failed and self.fail_times is not None:
            failed = sum(k == key for _, k, _ in self.records) <= self.fail_times
        if on_delivery:
            created = int(time.time() * 1000)
            msg = FakeMessage(topic, key, value, appended_ms=created)
            if failed:
                self.failed_created_ms.append(created)
            on_delivery(KafkaError(getattr(KafkaError, self.fail_code)) if failed else None, msg)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return self.unflushed


class FakeError:
    def name(self) -> str:
        return "_TRANSPORT"

    def __str__(self) -> str:
        return "transport failure"


def test_merger_writes_first_copies_files_and_journal(tmp_path: Path) -> None:
    import time

    sink = "out"
    t0, t1 = replica_topic(sink, 0), replica_topic(sink, 1)
    now_ms = int(time.time() * 1000)
    batches = [
        [FakeMessage(t0, b"a", rec("a", now_ms, 0)), FakeMessage(t1, b"a", rec("a", now_ms, 1))],
        [
            FakeMessage(t1, b"b", rec("b", now_ms, 1, h="x")),
            FakeMessage(t0, b"b", rec("b", now_ms, 0, h="y")),
            FakeMessage(t0, b"junk", b"\xff not json"),
            FakeMessage(t1, None, None, error=FakeError()),
        ],
        [FakeMessage(t0, b"c", rec("c", now_ms, 0))],
    ]
    consumer, producer = FakeConsumer(batches), FakeProducer()
    cfg = MergerConfig(bootstrap="x:1", sink=sink, replicas=2, run_dir=tmp_path, idle_s=1.2)
    final = Merger(cfg, consumer=consumer, producer=producer).run()

    assert consumer.closed
    assert [(t, k) for t, k, _v in producer.records] == [(sink, b"a"), (sink, b"b"), (sink, b"c")]
    assert producer.records[1][2] == rec("b", now_ms, 1, h="x")  # unchanged first copy
    assert (final["results"], final["duplicates"], final["divergent"], final["bad"]) == (3, 2, 1, 1)
    assert final["consumer_errors"] == 1 and final["delivery_failures"] == 0
    assert final["complete_output"] is True and final["stop_reason"] == "idle"
    assert json.loads((tmp_path / "merger.json").read_text())["results"] == 3

    journal = read_jsonl(tmp_path / "journal.jsonl")
    events = [e["event"] for e in journal]
    assert events[0] == "merger_started" and events[-1] == "merger_finished"
    div = [e for e in journal if e["event"] == "divergence"]
    assert len(div) == 1
    assert (div[0]["rid"], div[0]["first_replica"], div[0]["replica"]) == ("b", 1, 0)
    assert (div[0]["first_hash"], div[0]["hash"]) == ("x", "y")
    assert any(e["event"] == "warning" and e["code"] == "_TRANSPORT" for e in journal)

    intervals = read_latency_log(tmp_path / "latency.hlog")
    assert sum(iv.count for iv in intervals) == 3
    snaps = MonitorTail(tmp_path / "monitor.jsonl").poll()
    assert snaps and snaps[-1].results == 3 and snaps[-1].divergent == 1
    assert sum(s.output_rate for s in snaps) == 3


def test_merger_writes_the_output_frontier(tmp_path: Path) -> None:
    """Per input partition, the offset below which every result is delivered (both output
    partitions of replica 1's topic carry results of input partition 0)."""
    import time

    sink = "out"
    t0, t1 = replica_topic(sink, 0), replica_topic(sink, 1)
    now_ms = int(time.time() * 1000)
    batches = [
        [
            FakeMessage(t0, b"0:5", rec("0:5", now_ms, 0), partition=0),
            FakeMessage(t1, b"0:8", rec("0:8", now_ms, 1), partition=1),
            FakeMessage(t1, b"0:6", rec("0:6", now_ms, 1), partition=0),
            FakeMessage(t1, b"1:3", rec("1:3", now_ms, 1), partition=0),
        ]
    ]
    cfg = MergerConfig(bootstrap="x:1", sink=sink, replicas=2, run_dir=tmp_path, idle_s=0.5)
    Merger(cfg, consumer=FakeConsumer(batches), producer=FakeProducer()).run()
    assert read_frontier(tmp_path / "frontier.json") == {0: 6}


def test_the_merger_dates_a_marker_copy_by_its_append(tmp_path: Path) -> None:
    import time

    sink = "out"
    appended_ms = int(time.time() * 1000) - 30_000  # read 30 s after it was appended
    batches = [
        [FakeMessage(replica_topic(sink, 0), b"0:5", marker_copy(0, 5, 0), appended_ms=appended_ms)]
    ]
    cfg = MergerConfig(bootstrap="x:1", sink=sink, replicas=2, run_dir=tmp_path, idle_s=0.5)
    Merger(cfg, consumer=FakeConsumer(batches), producer=FakeProducer()).run()
    last = json.loads((tmp_path / "monitor.jsonl").read_text().splitlines()[-1])
    assert last["replicas"]["0"]["ended"] == {"0": round(appended_ms / 1000, 3)}
    assert last["results"] == 0


def test_merger_stops_on_until(tmp_path: Path) -> None:
    import time

    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, until=time.time() + 0.3
    )
    start = time.time()
    final = Merger(cfg, consumer=FakeConsumer([]), producer=FakeProducer()).run()
    assert 0.25 <= time.time() - start < 3
    assert final["results"] == 0 and final["latency_ms"]["p50"] is None


def test_merger_journals_only_the_first_divergences(tmp_path: Path) -> None:
    from arfl.measure.merger import core as m

    t0, t1 = replica_topic("s", 0), replica_topic("s", 1)
    n = m.MAX_JOURNALED_DIVERGENCES + 20
    batch = []
    for i in range(n):
        batch.append(FakeMessage(t0, None, rec(f"r{i}", 1, 0, h="a")))
        batch.append(FakeMessage(t1, None, rec(f"r{i}", 1, 1, h="b")))
    cfg = MergerConfig(bootstrap="x:1", sink="s", replicas=2, run_dir=tmp_path, idle_s=0.2)
    final = Merger(cfg, consumer=FakeConsumer([batch]), producer=FakeProducer()).run()
    assert final["divergent"] == n
    events = [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")]
    assert events.count("divergence") == m.MAX_JOURNALED_DIVERGENCES
    assert events.count("divergence_suppressed") == 1


def _round_trip(cfg: MergerConfig, tmp_path: Path) -> MergerConfig:
    """``cfg`` through its config file, as the merger process reads it."""
    cmd = cfg.command(tmp_path / "config" / "merger.json", "/py")
    assert cmd == ["/py", "-m", "arfl.measure.merger", "--config", cmd[-1]]
    return MergerConfig.read(Path(cmd[-1]))


def test_merger_config_validation_and_file(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="replicas"):
        MergerConfig(bootstrap="x:1", sink="s", replicas=0, run_dir=tmp_path)
    cfg = MergerConfig(
        bootstrap="x:1",
        sink="s",
        replicas=3,
        run_dir=tmp_path,
        input_stats=tmp_path / "inj.jsonl",
        idle_s=5.0,
        percentiles=(50.0, 99.99),
    )
    assert _round_trip(cfg, tmp_path) == cfg
    assert cfg.topics() == ["s.r0", "s.r1", "s.r2"]
    with pytest.raises(DeployError, match="percentiles"):
        MergerConfig(bootstrap="x", sink="s", replicas=1, run_dir=tmp_path, percentiles=(0, 101))
    # a file with a key the config does not name, or a wrong type, is no config
    bad = tmp_path / "bad.json"
    for text in ('{"bootstrap": "x", "sink": "s", "replicas": 1, "run_dir": "d", "lingr": 1}',
                 '{"bootstrap": "x", "sink": "s", "replicas": "two", "run_dir": "d"}'):  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ValidationError):
            MergerConfig.read(bad)


def test_merger_reads_the_input_window_from_injector_stats(tmp_path: Path) -> None:
    import time

    stats = tmp_path / "inj.jsonl"
    now = time.time()
    stats.write_text(
        json.dumps(
            {
                "type": "second",
                "t": now - 9,
                "t0": now - 10,
                "sent": 5,
                "target": 5,
                "behind_ms": 0,
                "total": 5,
            }
        )
        + "\n"
        + json.dumps(
            {
                "type": "summary",
                "t": now - 5,
                "t0": now - 10,
                "end": now - 5,
                "produced": 25,
                "delivered": 25,
                "failed": 0,
                "target_rate": 5,
                "achieved_rate": 5.0,
                "max_behind_ms": 0.1,
                "duration_s": 5.0,
            }
        )
        + "\n"
    )
    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, input_stats=stats, idle_s=0.2
    )
    # Input ended 5 s ago and nothing arrives: the idle stop applies right away.
    final = Merger(cfg, consumer=FakeConsumer([]), producer=FakeProducer()).run()
    assert final["input_start"] == pytest.approx(now - 10)
    assert final["input_end"] == pytest.approx(now - 5)
    assert final["end"] - final["start"] < 2


def test_main_reports_an_unreachable_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arfl.measure.merger.process import main

    cfg = MergerConfig(
        bootstrap="127.0.0.1:1", sink="s", replicas=2, run_dir=tmp_path, connect_timeout_s=1.0
    )
    rc = main(cfg.command(tmp_path / "merger.json")[3:])
    assert rc == 4
    err = capsys.readouterr().err
    assert "127.0.0.1:1" in err and "not reachable" in err


def test_main_refuses_a_config_file_that_does_not_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arfl.measure.merger.process import main

    bad = tmp_path / "merger.json"
    bad.write_text('{"bootstrap": "x:1", "sink": "s", "replicas": 2}')
    assert main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a MergerConfig" in err and "run_dir" in err  # the missing key, named
    bad.write_text('{"bootstrap": "x:1", "sink": "s", "replicas": 0, "run_dir": "d"}')
    assert main(["--config", str(bad)]) == 4  # its own check: a DeployError
    assert "replicas must be >= 1" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "none.json")]) == 2


def test_command_runs_the_module(tmp_path: Path) -> None:
    cfg = MergerConfig(bootstrap="x:1", sink="s", replicas=2, run_dir=tmp_path)
    assert _round_trip(cfg, tmp_path).replicas == 2


# ------------------------------------------------------------------ verdicts that hold up


def test_a_copy_after_more_than_300_s_of_merger_time_is_still_a_duplicate() -> None:
    # A restarted replica catches up for minutes and re-emits what the others delivered long
    # ago: by default, ids are remembered for the whole run.
    c = MergeCore(2, T0)
    ts = int(T0 * 1000)
    assert c.on_record(0, rec("a", ts), T0 + 0.1)[0] is Outcome.FIRST
    c.tick(T0 + 1)
    c.tick(T0 + 301)
    c.tick(T0 + 900)
    assert c.on_record(1, rec("a", ts), T0 + 900.5)[0] is Outcome.DUPLICATE
    assert (c.results, c.duplicates) == (1, 1)


def test_merger_assigns_every_partition_from_the_beginning_without_a_group(
    tmp_path: Path,
) -> None:
    from confluent_kafka import OFFSET_BEGINNING

    t0, t1 = replica_topic("s", 0), replica_topic("s", 1)
    consumer = FakeConsumer([[FakeMessage(t0, b"a", rec("a", 1))]], partitions=3)
    assert not hasattr(consumer, "subscribe")  # a subscribe() call would fail the run
    cfg = MergerConfig(bootstrap="x:1", sink="s", replicas=2, run_dir=tmp_path, idle_s=0.3)
    final = Merger(cfg, consumer=consumer, producer=FakeProducer()).run()
    assert final["results"] == 1 and final["stop_reason"] == "idle"
    assert consumer.assign_calls == ["assign"]
    assert sorted(consumer.assigned) == sorted(
        (t, p, OFFSET_BEGINNING) for t in (t0, t1) for p in range(3)
    )


def test_a_replica_topic_created_later_is_added_without_reassigning_the_others(
    tmp_path: Path,
) -> None:
    import time

    from confluent_kafka import OFFSET_BEGINNING

    t0, t1 = replica_topic("s", 0), replica_topic("s", 1)
    consumer = FakeConsumer([], partitions=2, missing={t1: 2})
    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=2, run_dir=tmp_path, until=time.time() + 2.5
    )
    Merger(cfg, consumer=consumer, producer=FakeProducer()).run()
    # incremental_assign refuses (in the fake) any partition assigned before: no re-read.
    assert consumer.assign_calls[0] == "assign"
    assert "incremental_assign" in consumer.assign_calls
    assert sorted(consumer.assigned) == sorted(
        (t, p, OFFSET_BEGINNING) for t in (t0, t1) for p in range(2)
    )
    events = read_jsonl(tmp_path / "journal.jsonl")
    assert any(e["event"] == "warning" and t1 in e["message"] for e in events)


def test_latency_from_the_actual_send_time_is_a_second_reading() -> None:
    c = MergeCore(2, T0)
    ts = int(T0 * 1000)
    # Intended at T0, actually sent 200 ms late, received at T0 + 0.250: 250 vs 50 ms.
    c.on_record(0, rec("a", ts, sent_ts=ts + 200), T0 + 0.250)
    c.on_record(1, rec("a", ts, sent_ts=ts + 201), T0 + 0.260)  # duplicate: no reading
    c.on_record(0, rec("b", ts), T0 + 0.300)  # no sent_ts: intended reading only
    tick = c.tick(T0 + 1)
    assert tick.interval.count == 2 and tick.sent_interval.count == 1
    assert tick.sent_interval.start_s == T0 and tick.sent_interval.end_s == T0 + 1
    assert tick.line["interval_sent"]["max"] == pytest.approx(50, rel=0.001)
    assert tick.line["interval"]["max"] == pytest.approx(300, rel=0.001)
    assert tick.line["results_without_sent_ts"] == 1
    final = c.final(T0 + 1)
    assert final["latency_sent_ms"]["count"] == 1
    assert final["latency_sent_ms"]["p50"] == pytest.approx(50, rel=0.001)
    assert final["latency_ms"]["count"] == 2
    assert final["results_without_sent_ts"] == 1


def test_merger_writes_the_sent_time_interval_log(tmp_path: Path) -> None:
    import time

    t0 = replica_topic("s", 0)
    now_ms = int(time.time() * 1000)
    batch = [
        FakeMessage(t0, b"a", rec("a", now_ms - 500, sent_ts=now_ms - 20)),
        FakeMessage(t0, b"b", rec("b", now_ms - 500, sent_ts=now_ms - 20)),
        FakeMessage(t0, b"c", rec("c", now_ms - 500)),
    ]
    cfg = MergerConfig(bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, idle_s=1.2)
    final = Merger(cfg, consumer=FakeConsumer([batch]), producer=FakeProducer()).run()
    latency = read_latency_log(tmp_path / "latency.hlog")
    sent = read_latency_log(tmp_path / process.SENT_HLOG)
    assert sum(iv.count for iv in latency) == 3 and sum(iv.count for iv in sent) == 2
    # One interval per second in both logs, over the same times.
    assert [(iv.start_s, iv.end_s) for iv in sent] == [(iv.start_s, iv.end_s) for iv in latency]
    assert final["latency_sent_ms"]["count"] == 2 and final["results_without_sent_ts"] == 1
    assert final["latency_sent_ms"]["max"] < final["latency_ms"]["max"]
    on_disk = json.loads((tmp_path / "merger.json").read_text())
    assert on_disk["latency_sent_ms"] == final["latency_sent_ms"]


def test_lost_sink_writes_make_the_output_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arfl.measure.merger import recovery

    monkeypatch.setattr(recovery, "sink_rids_since", lambda *a: set())
    t0 = replica_topic("s", 0)
    batch = [FakeMessage(t0, k, rec(k.decode(), 1)) for k in (b"a", b"b", b"c")]
    cfg = MergerConfig(bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, idle_s=0.3)
    # One times out at every try, two are never acknowledged.
    producer = FakeProducer(fail={b"b"}, unflushed=2)
    final = Merger(cfg, consumer=FakeConsumer([batch]), producer=producer).run()
    assert final["delivery_failures"] == 3 and final["complete_output"] is False
    on_disk = json.loads((tmp_path / "merger.json").read_text())
    assert on_disk["delivery_failures"] == 3 and on_disk["complete_output"] is False
    events = read_jsonl(tmp_path / "journal.jsonl")
    assert any(e["event"] == "warning" and "_MSG_TIMED_OUT" in e["message"] for e in events)


def _one_timed_out(
    tmp_path: Path, in_sink: Callable[..., set[str]]
) -> tuple[dict[str, Any], FakeProducer, FakeConsumer]:
    """A merger whose sink write of ``0:1`` timed out once, the sink read by ``in_sink``."""
    t0 = replica_topic("s", 0)
    now_ms = int(time.time() * 1000)
    batch = [FakeMessage(t0, f"0:{i}".encode(), rec(f"0:{i}", now_ms)) for i in range(3)]
    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, until=time.time() + 2.5
    )
    producer = FakeProducer(fail={b"0:1"}, fail_times=1)
    consumer = FakeConsumer([batch], partitions=1)
    with pytest.MonkeyPatch.context() as mp:
        from arfl.measure.merger import recovery

        mp.setattr(recovery, "sink_rids_since", in_sink)
        final = Merger(cfg, consumer=consumer, producer=producer).run()
    return final, producer, consumer


def test_a_sink_write_that_timed_out_is_written_again_once(tmp_path: Path) -> None:
    # A timed-out delivery used to count as acknowledged: the result was missing from the
    # sink and the positions past it were committed, so no restart would forward it either.
    asked: list[tuple[int, set[int] | None]] = []

    def in_sink(*a: Any) -> set[str]:
        asked.append((a[2], a[4]))
        return {"0:0", "0:2"}  # the timed-out record was not appended

    final, producer, consumer = _one_timed_out(tmp_path, in_sink)
    assert [k for _, k, _ in producer.records] == [b"0:0", b"0:1", b"0:2", b"0:1"]
    assert final["delivery_failures"] == 0 and final["complete_output"] is True, final
    assert final["results"] == 3
    # The sink was read, in the failed record's partition, from a second before it was made.
    (created,) = producer.failed_created_ms
    assert asked == [(created - process.RESEND_MARGIN_MS, {0})]
    assert consumer.commits  # once it was written


def test_a_sink_write_that_timed_out_but_was_appended_is_not_written_again(
    tmp_path: Path,
) -> None:
    final, producer, consumer = _one_timed_out(tmp_path, lambda *a: {"0:0", "0:1", "0:2"})
    assert [k for _, k, _ in producer.records] == [b"0:0", b"0:1", b"0:2"]
    assert final["delivery_failures"] == 0 and final["complete_output"] is True, final
    assert consumer.commits


def test_no_position_is_committed_past_a_write_not_known_to_be_in_the_sink(
    tmp_path: Path,
) -> None:
    def unreadable(*a: Any) -> set[str]:
        raise DeployError("broker unreachable")

    final, producer, consumer = _one_timed_out(tmp_path, unreadable)
    assert [k for _, k, _ in producer.records] == [b"0:0", b"0:1", b"0:2"]
    assert final["delivery_failures"] == 1 and final["complete_output"] is False, final
    # A restarted merger must read 0:1 again: nothing after it may be committed.
    assert consumer.commits == []


@pytest.mark.parametrize(
    ("code", "lost"), [("_MSG_TIMED_OUT", False), ("MSG_SIZE_TOO_LARGE", True)]
)
def test_a_write_that_keeps_failing_is_tried_again_unless_no_try_can_help(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, lost: bool
) -> None:
    from arfl.measure.merger import recovery

    monkeypatch.setattr(recovery, "sink_rids_since", lambda *a: set())
    t0 = replica_topic("s", 0)
    batch = [FakeMessage(t0, k, rec(k.decode(), 1)) for k in (b"a", b"b")]
    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, until=time.time() + 2.5
    )
    consumer = FakeConsumer([batch])
    producer = FakeProducer(fail={b"b"}, fail_code=code)
    final = Merger(cfg, consumer=consumer, producer=producer).run()
    tries = [k for _, k, _ in producer.records].count(b"b")
    assert final["delivery_failures"] == 1 and final["complete_output"] is False
    if lost:  # no merger will write it: counted lost at once, reading goes on
        assert tries == 1 and consumer.commits
    else:  # at every tick and at the end, and nothing is committed past it
        assert tries > 1 + process.FINAL_RESENDS and not consumer.commits


def test_no_lost_writes_means_complete_output_and_zero_failures(tmp_path: Path) -> None:
    import time

    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, until=time.time() + 0.2
    )
    Merger(cfg, consumer=FakeConsumer([]), producer=FakeProducer()).run()
    on_disk = json.loads((tmp_path / "merger.json").read_text())
    assert on_disk["delivery_failures"] == 0 and on_disk["complete_output"] is True
    assert on_disk["stop_reason"] == "until"


def test_merger_ends_by_itself_when_its_owner_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    checks: list[tuple[int, float | None]] = []

    def fake_same_process(pid: int, create_time: float | None) -> object | None:
        checks.append((pid, create_time))
        return object() if len(checks) < 3 else None  # the owner dies at the third check

    monkeypatch.setattr(process, "same_process", fake_same_process)
    cfg = MergerConfig(
        bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path,
        owner_pid=4242, owner_create_time=1234.5,
    )  # fmt: skip
    start = time.time()
    final = Merger(cfg, consumer=FakeConsumer([]), producer=FakeProducer()).run()
    assert time.time() - start < 6
    assert set(checks) == {(4242, 1234.5)} and len(checks) == 3
    assert final["stop_reason"] == "orphaned"
    assert json.loads((tmp_path / "merger.json").read_text())["stop_reason"] == "orphaned"
    events = read_jsonl(tmp_path / "journal.jsonl")
    orphaned = [e for e in events if e["event"] == "merger-orphaned"]
    assert len(orphaned) == 1 and orphaned[0]["owner_pid"] == 4242
    assert events[-1]["event"] == "merger_finished"


def test_owner_round_trips_and_needs_both(tmp_path: Path) -> None:
    cfg = MergerConfig(
        bootstrap="x", sink="s", replicas=1, run_dir=tmp_path,
        owner_pid=77, owner_create_time=1_764_106_200.123456,
    )  # fmt: skip
    a = _round_trip(cfg, tmp_path)
    assert (a.owner_pid, a.owner_create_time) == (77, 1_764_106_200.123456)
    plain = _round_trip(
        MergerConfig(bootstrap="x", sink="s", replicas=1, run_dir=tmp_path), tmp_path
    )
    assert plain.owner_pid is None and plain.owner_create_time is None
    with pytest.raises(DeployError, match="owner"):
        MergerConfig(bootstrap="x", sink="s", replicas=1, run_dir=tmp_path, owner_create_time=1.0)


def test_trail_is_the_age_of_the_oldest_output_result_a_replica_has_not_delivered() -> None:
    # Replica 0 is current on both partitions. Replica 1, restarted, is current on partition 0
    # but still replays partition 1 from 3 s back: its newest src_ts is fresh (lag_ms small),
    # yet it owes the output every partition-1 result since T0 + 7. The trail says so.
    c = MergeCore(2, T0)
    for k in range(10):
        for p in (0, 1):
            c.on_record(0, rec(f"{p}:{k}", int((T0 + k) * 1000)), T0 + k + 0.005)
    for k in range(10):
        c.on_record(1, rec(f"0:{k}", int((T0 + k) * 1000), 1), T0 + k + 0.010)
    for k in range(7):
        c.on_record(1, rec(f"1:{k}", int((T0 + k) * 1000), 1), T0 + 9.5)
    line = c.tick(T0 + 10).line
    r0, r1 = line["replicas"]["0"], line["replicas"]["1"]
    assert r1["lag_ms"] == pytest.approx(1000)  # as fresh as replica 0 by its newest result
    assert r1["trail_ms"] == pytest.approx(2995)  # owes 1:7 (out at T0 + 7.005), 1:8, 1:9
    assert r0["trail_ms"] == 0.0  # owes nothing
    # It delivers the rest: nothing owed any more.
    for k in range(7, 10):
        c.on_record(1, rec(f"1:{k}", int((T0 + k) * 1000), 1), T0 + 10.2)
    c.on_record(0, rec("0:10", int((T0 + 10) * 1000)), T0 + 10.3)
    line = c.tick(T0 + 10.5).line
    assert line["replicas"]["1"]["trail_ms"] == pytest.approx(200)  # owes 0:10
    snap = MonitorSnapshot.from_dict(json.loads(json.dumps(line)))
    assert snap.replicas[1].trail_ms == pytest.approx(200)
    assert snap.replicas[0].trail_ms == 0.0


def test_trail_of_a_replica_down_longer_than_followed_stays_at_least_that_long() -> None:
    c = MergeCore(2, T0)
    c.on_record(0, rec("0:0", 1), T0)
    assert c.tick(T0 + 1).line["replicas"]["1"]["trail_ms"] == pytest.approx(1000)
    # Replica 1 delivers nothing for longer than the merger follows what it owes: the owed
    # results leave memory, the trail does not shrink.
    late = T0 + core.OWED_MAX_S + 5
    assert c.tick(late).line["replicas"]["1"]["trail_ms"] == pytest.approx(
        (core.OWED_MAX_S + 5) * 1000
    )
    assert not c.dedup._owed[1]
    one = MergeCore(1, T0)
    one.on_record(0, rec("0:0", 1), T0)
    assert one.tick(T0 + 1).line["replicas"]["0"]["trail_ms"] is None


def test_no_trail_once_a_result_is_not_per_record() -> None:
    # A window result that one replica dropped as late would never be delivered by it: the
    # merger cannot tell that from a backlog, so window pipelines have no trail (caught up
    # falls back to the lag).
    c = MergeCore(2, T0)
    c.on_record(0, rec("0:0", 1), T0)
    assert c.tick(T0 + 1).line["replicas"]["1"]["trail_ms"] == pytest.approx(1000)
    c.on_record(0, rec("1000-2000:u1", 1), T0 + 1.1)
    c.on_record(0, rec("0:1", 1), T0 + 1.2)
    line = c.tick(T0 + 2).line
    assert line["replicas"]["0"]["trail_ms"] is None
    assert line["replicas"]["1"]["trail_ms"] is None
    # A record from a topic the merger has no index for (replica -1) is merged, not a crash.
    assert c.on_record(-1, rec("0:2", 1), T0 + 2.1)[0] is Outcome.FIRST
    assert c.on_record(-1, rec("0:0", 1), T0 + 2.2)[0] is Outcome.DUPLICATE


def test_results_a_replica_skipped_by_resuming_at_the_frontier_are_not_owed() -> None:
    # Replica 1 delivered 0:0-0:2, died, and its successor resumed at the output frontier
    # (offset 8): it will never deliver 0:3-0:7, which replica 0 delivered meanwhile. Having
    # delivered 0:8 on its only output partition, it is past them: they leave its trail. On
    # partition 1 it has delivered nothing yet: 1:0 stays owed.
    c = MergeCore(2, T0)
    for r in (0, 1):
        c.frontier.set_partitions(r, 1)
    for k in range(10):
        c.on_record(0, rec(f"0:{k}", int((T0 + k) * 1000)), T0 + k + 0.005, out_partition=0)
    for k in range(3):
        c.on_record(1, rec(f"0:{k}", int((T0 + k) * 1000), 1), T0 + k + 0.010, out_partition=0)
    assert c.tick(T0 + 10).line["replicas"]["1"]["trail_ms"] == pytest.approx(6995)  # owes 0:3
    for k in (8, 9):
        c.on_record(1, rec(f"0:{k}", int((T0 + k) * 1000), 1), T0 + 10.2, out_partition=0)
    assert c.tick(T0 + 10.5).line["replicas"]["1"]["trail_ms"] == 0.0
    c.on_record(0, rec("1:0", int((T0 + 10) * 1000)), T0 + 10.6, out_partition=0)
    assert c.tick(T0 + 11).line["replicas"]["1"]["trail_ms"] == pytest.approx(400)


def test_the_kafka_latency_settings_reach_the_clients_through_the_config_file(
    tmp_path: Path,
) -> None:
    default = MergerConfig(bootstrap="x", sink="s", replicas=1, run_dir=tmp_path)
    a = _round_trip(default, tmp_path)
    assert (a.fetch_wait_ms, a.linger_ms) == (5, 1.0)
    cfg = MergerConfig(
        bootstrap="x", sink="s", replicas=1, run_dir=tmp_path, fetch_wait_ms=1, linger_ms=0.5
    )
    a = _round_trip(cfg, tmp_path)
    assert (a.fetch_wait_ms, a.linger_ms) == (1, 0.5)
    assert kafka.consumer_config("x", "g", a.fetch_wait_ms)["fetch.wait.max.ms"] == 1
    assert kafka.sink_producer_config("x", a.linger_ms)["linger.ms"] == 0.5
    with pytest.raises(DeployError, match="fetch wait and linger"):
        MergerConfig(bootstrap="x", sink="s", replicas=1, run_dir=tmp_path, linger_ms=-1.0)


def test_a_sink_write_times_out_only_with_its_transaction() -> None:
    # The idempotent producer retries with the same sequence numbers until the sink answers:
    # a timed-out record in flight could be appended after its failure was reported, and a
    # record sent again after that would be there twice.
    from confluent_kafka import Producer as KafkaProducer

    plain = kafka.sink_producer_config("127.0.0.1:9")
    assert plain["message.timeout.ms"] == 0 and plain["enable.idempotence"] is True
    txn = kafka.sink_producer_config("127.0.0.1:9", transactional_id="t")
    assert txn["message.timeout.ms"] == txn["transaction.timeout.ms"]
    assert txn["transaction.timeout.ms"] == kafka.TRANSACTION_TIMEOUT_MS
    short = kafka.sink_producer_config("127.0.0.1:9", 1, "t", transaction_timeout_ms=2000)
    assert short["message.timeout.ms"] == 2000
    for conf in (plain, txn):
        KafkaProducer(dict(conf, log_level=0)).flush(0)  # librdkafka accepts them


def test_the_merger_queues_a_few_hundred_copies_ahead_not_megabytes() -> None:
    """A replica's backlog (a resumed replica, a newcomer catching up) must not queue
    megabytes of copies ahead of the other replica's fresh ones (docs/benchmarks.md, "A
    replica's backlog in the merger's path"); librdkafka accepts the settings."""
    from confluent_kafka import Consumer as KafkaConsumer

    conf = kafka.consumer_config("127.0.0.1:9", "g")
    assert conf["queued.min.messages"] <= 1000
    assert conf["queued.max.messages.kbytes"] <= 1024
    assert conf["max.partition.fetch.bytes"] <= 64 * 1024
    # A full queue is retried at once, not after librdkafka's default second.
    assert conf["fetch.queue.backoff.ms"] <= 5
    KafkaConsumer(conf).close()


def test_a_restarted_merger_reads_on_from_its_commits_and_forwards_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from arfl.measure.histogram import read_latency_log
    from arfl.measure.merger import recovery

    t0 = replica_topic("s", 0)
    now_ms = int(time.time() * 1000)
    # The first merger forwarded 0:0 and 0:1, committed its positions, and was killed after
    # forwarding 0:2 (in the sink, never logged).
    first = FakeConsumer([[FakeMessage(t0, b"0:0", rec("0:0", now_ms))]], partitions=1)
    cfg = MergerConfig(bootstrap="x:1", sink="s", replicas=1, run_dir=tmp_path, idle_s=0.3)
    final = Merger(cfg, consumer=first, producer=FakeProducer()).run()
    assert final["results"] == 1 and first.commits  # positions committed once acknowledged
    logged = read_latency_log(tmp_path / "latency.hlog")
    died_ms = int(time.time() * 1000)  # 0:1 and 0:2 were forwarded after the last interval
    # Every sink record carries its number in the run (0:0 was the first).
    tail = [recovery.SinkRecord(0, rec("0:0", now_ms), now_ms + 5, n=1)] + [
        recovery.SinkRecord(0, rec(rid, died_ms), died_ms + 5 + i, n=2 + i)
        for i, rid in enumerate(["0:1", "0:2"])
    ]
    monkeypatch.setattr(recovery, "sink_tail", lambda *a: tail)
    again = FakeConsumer(
        [[FakeMessage(t0, b"0:2", rec("0:2", now_ms)), FakeMessage(t0, b"0:3", rec("0:3", 1))]],
        partitions=1,
    )
    again.stored = [(t0, 0, 7)]
    producer = FakeProducer()
    time.sleep(0.3)  # the merger is down: no output
    restarted = time.time()
    final = Merger(cfg, consumer=again, producer=producer).run()
    assert again.assigned == [(t0, 0, 7)]  # on from the commit, not from the beginning
    # The gap runs from the dead merger's last forward (0:2 in the sink) over the restart.
    assert final["longest_gap_ms"] >= (restarted - (died_ms + 6) / 1000) * 1000
    assert [k for _, k, _ in producer.records] == [b"0:3"]  # 0:2 was in the sink already
    journal = [
        e for e in read_jsonl(tmp_path / "journal.jsonl") if e["event"] == "merger-recovered"
    ]
    assert journal and journal[0]["tail"] == 3
    # One log: the first merger's intervals, the never-logged 0:1 and 0:2 in the gap, then
    # the second merger's, in time order.
    both = read_latency_log(tmp_path / "latency.hlog")
    assert len(both) > len(logged)
    assert [i.start_s for i in both] == sorted(i.start_s for i in both)
    assert final["results"] == 4  # 0:0 before, 0:1 and 0:2 taken over, 0:3 now
    assert sum(i.count for i in both) == 4  # none counted twice, none lost
    assert final["latency_ms"]["count"] == 4  # whole-run percentiles over both mergers


def test_committed_positions_are_asked_again_while_the_coordinator_comes_up() -> None:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from arfl.measure.merger import recovery

    class Starting:
        calls = 0

        def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
            self.calls += 1
            if self.calls < 3:  # a fresh broker: no offsets topic, no coordinator yet
                raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
            return [TopicPartition(tp.topic, tp.partition, 12) for tp in partitions]

    c = Starting()
    assert recovery.committed(c, [("t", 0)], timeout_s=10) == {("t", 0): 12}
    assert c.calls == 3

    class Down:
        def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    with pytest.raises(DeployError, match="committed positions not readable"):
        recovery.committed(Down(), [("t", 0)], timeout_s=1)


def test_a_replica_lag_is_never_negative_when_a_tick_is_written_late() -> None:
    # After a take-over a merger writes its first tick for a second already past, and the
    # replica's newest result is newer than that second's end: it is not behind, by 0 ms.
    rc = ReplicaCounters(received=1, last_src_ts=1_000_500)
    assert rc.snapshot(1_000.0)["lag_ms"] == 0.0
    assert rc.snapshot(1_002.0)["lag_ms"] == pytest.approx(1_500)


def test_next_messages_never_waits_while_records_are_queued_and_blocks_only_when_idle() -> None:
    from arfl.measure.merger.kafka import next_messages

    class Consumer:
        def __init__(self, queued: list[str], polled: str | None) -> None:
            self.queued, self.polled = queued, polled
            self.calls: list[tuple[str, float]] = []

        def consume(self, num_messages: int = 1, timeout: float = -1) -> list[str]:
            self.calls.append(("consume", timeout))
            out, self.queued = self.queued[:num_messages], self.queued[num_messages:]
            return out

        def poll(self, timeout: float = -1) -> str | None:
            self.calls.append(("poll", timeout))
            return self.polled

    busy = Consumer(["a", "b"], "never")
    assert next_messages(busy, 0.05) == ["a", "b"]  # type: ignore[arg-type]
    assert busy.calls == [("consume", 0)]
    idle = Consumer([], "c")
    assert next_messages(idle, 0.05) == ["c"]  # type: ignore[arg-type]
    assert idle.calls == [("consume", 0), ("poll", 0.05)]
    assert next_messages(Consumer([], None), 0.05) == []  # type: ignore[arg-type]
