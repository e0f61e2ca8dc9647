"""A restarted windowed replica's start at a window boundary (orchestrate/window_resume, and
plan_resume's use of it): the boundary, each partition's first offset at or after it, and the
reasons it falls back to a peer's checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from arfl.configs.load import parse_spec
from arfl.configs.window_start import WINDOW_START_MARGIN_MS
from arfl.orchestrate.resume import plan_resume
from arfl.orchestrate.window_resume import WindowStart, newest_results, place


class _Msg:
    def __init__(self, partition: int, offset: int, value: bytes) -> None:
        self._p, self._o, self._v = partition, offset, value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes:
        return self._v


class _Consumer:
    """A topic's partitions as lists of (Kafka timestamp, value)."""

    def __init__(self, parts: dict[int, list[tuple[int, bytes]]]) -> None:
        self.parts = parts
        self.at: dict[int, int] = {}
        self.read = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.parts[tp.partition])

    def assign(self, tps: list[TopicPartition]) -> None:
        self.at = {tp.partition: tp.offset for tp in tps}

    def unassign(self) -> None:
        self.at = {}

    def consume(self, num_messages: int, timeout: float) -> list[_Msg]:
        out = []
        for p, o in self.at.items():
            batch = self.parts[p][o : o + 20]
            self.at[p] = o + len(batch)
            out += [_Msg(p, o + i, v) for i, (_, v) in enumerate(batch)]
        self.read += len(out)
        return out

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        out = []
        for tp in tps:
            recs = self.parts[tp.partition]
            hit = next((i for i, (ts, _) in enumerate(recs) if ts >= tp.offset), -1)
            out.append(TopicPartition(tp.topic, tp.partition, hit))
        return out


T0 = 1_700_000_000_000


def _events(n: int, every_ms: int, send_lag_ms: int = 3) -> list[tuple[int, bytes]]:
    """n events of one partition, event times ``every_ms`` apart, each sent a little later."""
    return [
        (T0 + i * every_ms + send_lag_ms, json.dumps({"ts": T0 + i * every_ms}).encode())
        for i in range(n)
    ]


def test_the_start_is_a_window_boundary_and_each_partition_starts_at_its_first_event_after_it() -> (
    None
):
    parts = {0: _events(20_000, 2), 1: _events(13_000, 3)}
    consumer = _Consumer(parts)
    newest = T0 + 38_997  # partition 1's newest event; partition 0's is at 39,998
    others = {1: newest - 5, 2: newest - 700}
    placed = place(consumer, "in", {0: 0, 1: 0}, "ts", 1_000, others, now_ms=newest + 10)
    assert isinstance(placed, WindowStart)
    # The oldest of the other replicas' newest results, less the margin, rounded down.
    assert placed.start_ms == (newest - 700 - WINDOW_START_MARGIN_MS) // 1_000 * 1_000
    for p, recs in parts.items():
        times = [json.loads(v)["ts"] for _, v in recs]
        at = placed.offsets[p]
        assert times[at] >= placed.start_ms > times[at - 1]
        assert placed.replay[p] == len(recs) - at
    # Kafka's time index and a short scan, not the partitions from their start.
    assert consumer.read < 3_000


NOW = T0 + 40_000


@pytest.mark.parametrize(
    ("others", "parts", "says"),
    [
        ({1: T0 + 20_000}, None, "20.0 s old"),
        ({1: None}, None, "replica 1 has delivered no result yet"),
        ({1: T0 + 39_990}, {0: _events(20_000, 2), 1: [(NOW, b"not json")] * 3}, "not JSON"),
        ({1: T0 + 39_990}, {0: _events(20_000, 2), 1: [(NOW, b'{"x":1}')]}, "no numeric 'ts'"),
    ],
)
def test_a_start_that_cannot_be_placed_says_why(
    others: dict[int, int | None], parts: dict[int, list[tuple[int, bytes]]] | None, says: str
) -> None:
    consumer = _Consumer(parts or {0: _events(20_000, 2), 1: _events(20_000, 2)})
    placed = place(consumer, "in", {0: 0, 1: 0}, "ts", 1_000, others, now_ms=NOW)
    assert isinstance(placed, str) and says in placed


def test_deploys_start_offsets_are_a_floor_and_an_empty_or_ended_partition_starts_at_its_end() -> (
    None
):
    marker = (NOW, b'{"eoi":true,"ts":1}')
    consumer = _Consumer({0: _events(20_000, 2), 1: [], 2: [*_events(10, 2), marker]})
    placed = place(
        consumer, "in", {0: 19_990, 1: 0, 2: 0}, "ts", 1_000, {1: T0 + 39_998}, now_ms=NOW
    )
    assert isinstance(placed, WindowStart)
    assert placed.offsets == {0: 19_990, 1: 0, 2: 10}


def test_the_newest_results_come_from_the_last_monitor_line(tmp_path: Path) -> None:
    monitor = tmp_path / "monitor.jsonl"
    assert newest_results(monitor, [1]) == {1: None}
    lines = [
        {"t": 1, "replicas": {"0": {"last_src_ts": 5}, "1": {"last_src_ts": 6}}},
        {"t": 2, "replicas": {"0": {"last_src_ts": 7}, "1": {"last_src_ts": None}}},
    ]
    monitor.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"t": 3, "repl')
    assert newest_results(monitor, [0, 1]) == {0: 7, 1: None}


def _spec(**replication: Any) -> Any:
    return parse_spec(
        {
            "name": "w",
            "source": {"topic": "in", "partitions": 2, "event_time": "ts"},
            "steps": [{"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}],
            "sink": {"topic": "out"},
            "replication": {
                "mode": "active",
                "replicas": 2,
                "trigger": "realtime",
                **replication,
            },
            "workload": {"duration": "60s"},
        }
    )


def test_plan_resume_starts_a_fresh_checkpoint_at_the_placed_offsets(tmp_path: Path) -> None:
    spec = _spec()
    assert spec.resumes_from_window_start and not spec.resumes_from_peer
    asked: list[tuple[Any, ...]] = []

    def fake_place(*args: Any) -> WindowStart:
        asked.append(args)
        return WindowStart(T0, {0: 10, 1: 20}, {0: 5, 1: 6})

    start = json.dumps({"in": {"0": 3, "1": 4}})
    own = {0: tmp_path / "c0", 1: tmp_path / "c1"}
    got = plan_resume(spec, tmp_path, 0, 2, own, start, fake_place)
    assert got.checkpoint == tmp_path / "checkpoints" / "replica-0.2"
    assert json.loads(got.start_offsets or "") == {"in": {"0": 10, "1": 20}}
    assert got.journal["resume"] == "window" and got.journal["window_start"] == T0
    [(topic, floors, field, size_ms, others)] = asked
    assert (topic, floors, field, size_ms) == (
        "in",
        {0: 3, 1: 4},
        "ts",
        1000,
    )
    assert others == {1: None}  # no monitor line yet


def test_plan_resume_falls_back_to_a_peers_checkpoint_with_the_reason(tmp_path: Path) -> None:
    spec = _spec()
    own = {0: tmp_path / "c0", 1: tmp_path / "c1"}
    got = plan_resume(
        spec, tmp_path, 0, 2, own, json.dumps({"in": {"0": 0}}), lambda *a: "no reason"
    )
    assert got.journal["resume"] in ("peer", "checkpoint")
    assert got.journal["why"] == "no window start: no reason"
    assert got.start_offsets is None


def test_a_window_resume_needs_kafka_and_explicit_offsets(tmp_path: Path) -> None:
    own = {0: tmp_path / "c0", 1: tmp_path / "c1"}

    def never(*a: Any) -> str:
        raise AssertionError("not asked")

    got = plan_resume(_spec(), tmp_path, 0, 2, own, None, never)
    assert "no Kafka or start offsets" in str(got.journal["why"])
