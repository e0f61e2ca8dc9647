"""``[source.replay]``: its validation, the replayer's decoding, order and schedule (fake
producer, fake clock, a list of records instead of Kafka), and what it writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_injector import FakeClock, FakeProducer

from arfl.configs.load import parse_spec
from arfl.configs.replay import Position, parse_position
from arfl.configs.spec import Spec
from arfl.errors import SpecError
from arfl.run.rundir import read_jsonl
from arfl.run.streams import InjectorStatsTail
from arfl.workload.ranges import Replayed, decode, merge_by_time
from arfl.workload.replay import ReplayConfig, Replayer, Schedule

FIELDS = {
    "user": {"kind": "key", "cardinality": 10},
    "amount": {"kind": "float", "min": 0, "max": 100},
    "created": {"kind": "event-time"},
}


def _raw(replay: dict[str, Any], **workload: Any) -> dict[str, Any]:
    return {
        "name": "r",
        "source": {"topic": "in", "replay": replay},
        "sink": {"topic": "out"},
        "workload": {"duration": "10s", "warmup": "1s", "fields": FIELDS, **workload},
    }


def test_a_replay_spec_validates_and_round_trips_through_json() -> None:
    spec = parse_spec(
        _raw({"topic": "ext", "start": {"0": 5, "1": 3}, "end": "2026-01-05T10:00:00Z",
              "pace": 250, "time_field": "created", "bootstrap": "10.0.0.5:9092"})
    )  # fmt: skip
    replay = spec.source.replay
    assert replay is not None and replay.pace == 250
    assert replay.start_position() == Position("offsets", offsets={0: 5, 1: 3})
    assert replay.end_position() == Position("time", time_ms=1_767_607_200_000)
    again = Spec.model_validate(json.loads(json.dumps(spec.model_dump(mode="json"))))
    assert again == spec
    # Defaults: from the earliest offsets to the end offsets at start, at the recorded pace.
    plain = parse_spec(_raw({"topic": "ext"})).source.replay
    assert plain is not None
    assert (plain.start, plain.end, plain.pace, plain.time_field) == (
        "earliest", None, "recorded", None,
    )  # fmt: skip
    assert plain.end_position() == Position("latest")


def test_every_replay_problem_is_reported_at_once_with_its_key_path() -> None:
    raw = _raw(
        {"topic": "e x", "start": "yesterday", "end": "earliest", "pace": 0,
         "bootstrap": "nope", "time_field": "amount", "color": 1},
        rate=10, late=0.1,
    )  # fmt: skip
    del raw["workload"]["fields"]
    with pytest.raises(SpecError) as err:
        parse_spec(raw, "x.toml")
    problems = "\n".join(err.value.problems)
    for loc in ("source.replay.topic", "source.replay.start", "source.replay.end",
                "source.replay.pace", "source.replay.bootstrap", "source.replay.color",
                "workload.fields", "workload.rate", "workload.late"):  # fmt: skip
        assert f"x.toml: {loc}: " in problems, (loc, problems)
    assert "set source.replay.pace instead" in problems
    assert "a replay needs the replayed records' fields declared" in problems
    # The generator's key check does not apply: records keep their own keys.
    assert "source.key" not in problems


def test_replay_cross_checks_time_field_kind_and_order() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_raw({"topic": "ext", "start": 2000, "end": 1000, "time_field": "amount"}))
    problems = "\n".join(err.value.problems)
    assert "source.replay: end must be after start" in problems
    assert "source.replay.time_field: 'amount' is declared as a float field" in problems
    with pytest.raises(SpecError, match="end offsets before the start"):
        parse_spec(_raw({"topic": "ext", "start": {"0": 10}, "end": {"0": 5}}))


def test_positions_in_every_form() -> None:
    assert parse_position("earliest", end=False) == Position("earliest")
    assert parse_position("latest", end=True) == Position("latest")
    assert parse_position(1_700_000_000_123, end=False) == Position("time", 1_700_000_000_123)
    assert parse_position("2023-11-14T22:13:20.5+00:00", end=True).time_ms == 1_700_000_000_500
    assert parse_position({"3": 0}, end=True) == Position("offsets", offsets={3: 0})
    for bad, end, msg in [
        ("2026-01-05T10:00:00", False, "no time zone"),
        ("latest", False, "not a start position"),
        ("earliest", True, "not an end position"),
        ({"x": 1}, False, "partition 'x' is not a number"),
        ({"0": -1}, False, "must be an integer >= 0"),
        ({}, False, "at least one partition"),
        (-5, True, ">= 0"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_position(bad, end=end)


def test_decode_keeps_the_users_object_and_counts_what_is_not_an_event() -> None:
    assert decode(b'{"a": 1, "t": 50}', "t", 9) == ({"a": 1, "t": 50}, 50)
    assert decode(b'{"a": 1, "t": 50.0}', "t", 9) == ({"a": 1, "t": 50.0}, 50)
    assert decode(b'{"a": 1}', None, 9) == ({"a": 1}, 9)
    assert decode(b"not json", "t", 9) == "not a JSON object"
    assert decode(b"[1]", "t", 9) == "not a JSON object"
    assert decode(None, "t", 9) == "not a JSON object"
    assert decode(b'{"a": 1}', "t", 9) == "no integer 't'"
    assert decode(b'{"t": "soon"}', "t", 9) == "no integer 't'"
    assert decode(b'{"t": true}', "t", 9) == "no integer 't'"
    assert decode(b'{"a": 1}', None, None) == "no record timestamp"
    assert decode(b'{"eoi": true, "ts": 5}', None, 9) == "an end-of-input marker"


def _rec(p: int, o: int, t: int, **fields: Any) -> Replayed:
    return Replayed(p, o, f"k{p}".encode(), {"p": p, "v": o, **fields}, t)


def test_partitions_merge_by_recorded_time_each_in_its_own_order() -> None:
    p0 = [_rec(0, 0, 10), _rec(0, 1, 30), _rec(0, 2, 20)]  # 20 recorded before its predecessor
    p1 = [_rec(1, 0, 10), _rec(1, 1, 25)]
    order = [(r.partition, r.offset) for r in merge_by_time([iter(p0), iter(p1)])]
    assert order == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2)]
    sched = Schedule("recorded", 1_000)
    dues = [sched.due_ms(i, t) for i, t in enumerate([10, 10, 25, 30, 20])]
    assert dues == [0, 0, 15, 20, 20]  # never back in time
    assert not sched.capped(999) and sched.capped(1_000)
    fixed = Schedule(400, 10_000)
    assert [fixed.due_ms(i, 0) for i in range(5)] == [0, 2, 5, 7, 10]


class ListSource:
    """Records from lists, as the Kafka reader would give them."""

    def __init__(self, partitions: list[list[Replayed]], bad: int = 0) -> None:
        self.partitions = partitions
        self.bad = bad
        self.bad_examples = [{"partition": 0, "offset": 99, "why": "not a JSON object"}][:bad]
        self.ranges = {i: (0, len(p)) for i, p in enumerate(partitions)}
        self.closed = False

    def records(self) -> Iterator[Replayed]:
        return merge_by_time(iter(p) for p in self.partitions)

    def close(self) -> None:
        self.closed = True


def _replayer(
    tmp_path: Path, source: ListSource, duration: float = 10.0, pace: str | int = "recorded"
) -> tuple[Replayer, FakeProducer, FakeClock]:
    cfg = ReplayConfig(
        source_bootstrap="127.0.0.1:1", source_topic="ext", bootstrap="127.0.0.1:1",
        topic="in", duration_s=duration, pace=pace, time_field="created",
        stats_path=tmp_path / "injector.jsonl", journal_path=tmp_path / "journal.jsonl",
    )  # fmt: skip
    producer, clock = FakeProducer(partitions=2), FakeClock()
    return Replayer(cfg, producer=producer, source=source, clock=clock), producer, clock


def test_the_replayer_keeps_keys_and_fields_and_the_recorded_spacing(tmp_path: Path) -> None:
    base = 1_600_000_000_000
    p0 = [_rec(0, i, base + 3 * i, created=base + 3 * i) for i in range(400)]
    p1 = [_rec(1, i, base + 1 + 5 * i, created=base + 1 + 5 * i) for i in range(300)]
    replayer, producer, clock = _replayer(tmp_path, ListSource([p0, p1], bad=1))
    summary = replayer.run()

    assert (summary.produced, summary.delivered, summary.failed) == (700, 700, 0)
    events = producer.events()
    assert [e["seq"] for e in events] == list(range(700))
    t0_ms = round(summary.t0 * 1000)
    for (_t, key, _v), e in zip(producer.records, events, strict=True):
        assert key == f"k{e['p']}".encode()
        assert e["ts"] - t0_ms == e["created"] - base  # the recorded spacing
        assert e["sent_ms"] >= e["ts"]
    assert [e["created"] for e in events] == sorted(e["created"] for e in events)
    # The fake clock only moves by sleeping: the replay took the recorded span.
    span_s = (max(e["created"] for e in events) - base) / 1000
    assert clock.time() - summary.t0 == pytest.approx(span_s, abs=0.06)
    assert len(producer.markers) == 2
    assert replayer.source.closed

    tail = InjectorStatsTail(tmp_path / "injector.jsonl")
    seconds = tail.poll()
    assert sum(s.sent for s in seconds) == 700 and tail.summary is not None
    assert tail.summary.bad == 1 and tail.summary.to_dict()["bad"] == 1  # into summary.json
    assert tail.t0 == summary.t0
    journal = read_jsonl(tmp_path / "journal.jsonl")
    started = next(e for e in journal if e["event"] == "injector_started")
    assert started["t0"] == summary.t0 and started["replay"]["offsets"] == {
        "0": [0, 400], "1": [0, 300],
    }  # fmt: skip
    finished = next(e for e in journal if e["event"] == "injector_finished")
    assert (finished["produced"], finished["bad"], finished["capped"]) == (700, 1, False)
    assert finished["end_of_input_ts"] == t0_ms + 1_496 + 86_400_000
    warnings = [e["message"] for e in journal if e["event"] == "warning"]
    assert any("1 records of ext skipped" in w and "0:99 not a JSON object" in w for w in warnings)


def test_the_duration_caps_the_replay_and_a_fixed_pace_ignores_recorded_gaps(
    tmp_path: Path,
) -> None:
    recs = [_rec(0, i, 1_000 * i, created=1_000 * i) for i in range(100)]  # 1 s apart
    replayer, producer, clock = _replayer(tmp_path, ListSource([recs]), duration=2.0, pace=50)
    summary = replayer.run()
    assert summary.produced == 100  # 100 records at 50/s: due within 2 s
    assert clock.time() - summary.t0 < 2.1
    ts = [e["ts"] for e in producer.events()]
    assert ts[1] - ts[0] == 20

    replayer, producer, _ = _replayer(tmp_path / "b", ListSource([recs]), duration=2.5)
    summary = replayer.run()
    assert summary.produced == 3 and replayer.capped  # due at 0, 1 and 2 s
    journal = read_jsonl(tmp_path / "b" / "journal.jsonl")
    assert any("cut the replay of ext short after 3" in e.get("message", "") for e in journal)


def test_an_empty_range_replays_nothing_and_says_so(tmp_path: Path) -> None:
    replayer, producer, _ = _replayer(tmp_path, ListSource([[], []]))
    assert replayer.run().produced == 0
    assert len(producer.markers) == 2  # the pipeline still learns the input ended
    journal = read_jsonl(tmp_path / "journal.jsonl")
    assert any("nothing replayed" in e.get("message", "") for e in journal)


def test_the_config_file_round_trips_the_config(tmp_path: Path) -> None:
    cfg = ReplayConfig(
        source_bootstrap="h:1", source_topic="ext", bootstrap="h:2", topic="in",
        duration_s=5.0, start={"0": 4}, end="2026-01-05T10:00:00Z", pace=300,
        time_field="created",
    )  # fmt: skip
    path = tmp_path / "replayer.json"
    assert cfg.command(path, "py") == ["py", "-m", "arfl.workload.replay", "--config", str(path)]
    back = ReplayConfig.read(path)
    assert back == cfg
    assert (back.start, back.end, back.pace) == ({"0": 4}, "2026-01-05T10:00:00Z", 300)
    epoch = ReplayConfig(
        source_bootstrap="h:1", source_topic="ext", bootstrap="h:2", topic="in",
        duration_s=5.0, start=1_700_000_000_000,
    )  # fmt: skip
    assert ReplayConfig.read(epoch.write(path)).start == 1_700_000_000_000
