"""Injector: fixed-rate schedule, catch-up without skipping, determinism, stats and stop."""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from arfl.errors import DeployError
from arfl.run.rundir import read_jsonl
from arfl.run.streams import InjectorStatsTail
from arfl.workload.injector import (
    Injector,
    InjectorConfig,
    encode_event,
    event_count,
    event_fields,
    intended_ms,
    main,
)


class FakeClock:
    """Time moves only when the code sleeps or a test advances it."""

    def __init__(self, wall: float = 1_700_000_000.0) -> None:
        self.wall0 = wall
        self.mono = 50.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.wall0 + (self.mono - 50.0)

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.mono += seconds

    def advance(self, seconds: float) -> None:
        self.mono += seconds


class FakeProducer:
    """Records what was produced; delivery callbacks run on poll/flush."""

    def __init__(
        self,
        on_produce: Callable[[int], None] | None = None,
        buffer_errors: int = 0,
        fail_every: int = 0,
        partitions: int = 3,
        clock: FakeClock | None = None,
    ) -> None:
        self.records: list[tuple[str, bytes, bytes]] = []
        self._pending: list[Callable[[Any, Any], None]] = []
        self._on_produce = on_produce
        self.buffer_errors = buffer_errors
        self.fail_every = fail_every
        self.polls = 0
        self.flushed = False
        self.partitions = partitions
        self.markers: list[tuple[str, int, bytes]] = []
        self.log: list[str] = []
        self.clock = clock
        self.flushed_at: list[float] = []
        self.markers_at: list[float] = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        partition: int = -1,
    ) -> None:
        if self.buffer_errors:
            self.buffer_errors -= 1
            raise BufferError("queue full")
        assert value is not None and on_delivery is not None
        if b'"eoi"' in value:
            # End-of-input markers go to an explicit partition, after every event.
            assert 0 <= partition < self.partitions
            self.markers.append((topic, partition, value))
            self.log.append(f"marker:{partition}")
            if self.clock is not None:
                self.markers_at.append(self.clock.time())
        else:
            assert key is not None and partition == -1  # events: partitioned by key
            self.records.append((topic, key, value))
            self.log.append("event")
            if self._on_produce:
                self._on_produce(len(self.records))
        self._pending.append(on_delivery)

    def list_topics(self, topic: str, timeout: float = 0) -> Any:
        parts = {p: object() for p in range(self.partitions)}
        return types.SimpleNamespace(
            topics={topic: types.SimpleNamespace(partitions=parts, error=None)}
        )

    def poll(self, timeout: float = 0) -> int:
        self.polls += 1
        n = len(self._pending)
        for i, cb in enumerate(self._pending):
            failed = self.fail_every and (i % self.fail_every == 0)
            cb("broker down" if failed else None, None)
        self._pending.clear()
        return n

    def flush(self, timeout: float = 0) -> int:
        self.flushed = True
        self.log.append("flush")
        self.poll()
        if self.clock is not None:
            self.flushed_at.append(self.clock.time())
        return 0

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(v) for _t, _k, v in self.records]


def _config(tmp_path: Path, rate: int = 1000, duration: float = 3.0, **kw: Any) -> InjectorConfig:
    return InjectorConfig(
        bootstrap="127.0.0.1:1", topic="src", rate=rate, duration_s=duration,
        stats_path=tmp_path / "stats.jsonl", journal_path=tmp_path / "journal.jsonl", **kw,
    )  # fmt: skip


def test_event_content_is_deterministic_and_in_range() -> None:
    a = [event_fields(7, i, 50) for i in range(2000)]
    assert a == [event_fields(7, i, 50) for i in range(2000)]
    assert a != [event_fields(8, i, 50) for i in range(2000)]
    users = {u for u, _ in a}
    assert users <= {f"u{k}" for k in range(50)}
    assert len(users) == 50  # every key is used over 2000 events
    for _u, amount in a:
        assert 0 <= amount < 100
        assert round(amount, 2) == amount
    assert len({amt for _, amt in a}) > 1000


def test_encode_event_is_the_records_format() -> None:
    v = json.loads(encode_event(17, "u42", 37.5, 1764106200123, 1764106200125))
    assert v == {
        "seq": 17,
        "user": "u42",
        "amount": 37.5,
        "ts": 1764106200123,
        "sent_ms": 1764106200125,
    }


def test_intended_times_follow_the_fixed_rate() -> None:
    assert [intended_ms(1000, i, 400) for i in range(5)] == [1000, 1002, 1005, 1007, 1010]
    assert event_count(1000, 5.0) == 5000
    assert event_count(3, 0.5) == 2


def test_on_schedule_every_event_once_with_intended_ts(tmp_path: Path) -> None:
    clock, prod = FakeClock(), FakeProducer()
    inj = Injector(_config(tmp_path, rate=1000, duration=3.0, keys=10), producer=prod, clock=clock)
    summary = inj.run()
    events = prod.events()
    assert [e["seq"] for e in events] == list(range(3000))
    t0_ms = round(clock.wall0 * 1000)
    assert [e["ts"] for e in events] == [t0_ms + i for i in range(3000)]
    assert all(e["sent_ms"] - e["ts"] <= 1 for e in events)  # never sent early, never late
    assert all(k == e["user"].encode() for (_t, k, _v), e in zip(prod.records, events, strict=True))
    assert {t for t, _k, _v in prod.records} == {"src"}
    assert summary.produced == summary.delivered == 3000
    assert summary.failed == 0 and not summary.stopped_early
    assert summary.achieved_rate == pytest.approx(1000, rel=0.01)
    assert prod.flushed

    tail = InjectorStatsTail(tmp_path / "stats.jsonl")
    seconds = tail.poll()
    assert [s.sent for s in seconds] == [1000, 1000, 1000]
    assert [s.target for s in seconds] == [1000, 1000, 1000]
    assert [s.total for s in seconds] == [1000, 2000, 3000]
    assert tail.summary is not None and tail.summary.produced == 3000
    journal = read_jsonl(tmp_path / "journal.jsonl")
    assert [e["event"] for e in journal] == ["injector_started", "injector_finished"]


def test_same_seed_same_events(tmp_path: Path) -> None:
    def run(seed: int) -> list[tuple[bytes, int, str, float]]:
        prod = FakeProducer()
        Injector(
            _config(tmp_path, rate=500, duration=1.0, seed=seed),
            producer=prod,
            clock=FakeClock(wall=1_700_000_000.0 + seed),
        ).run()
        return [
            (k, e["seq"], e["user"], e["amount"])
            for (_t, k, _v), e in zip(prod.records, prod.events(), strict=True)
        ]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_stall_is_caught_up_with_original_intended_times(tmp_path: Path) -> None:
    clock = FakeClock()

    def stall(n: int) -> None:
        if n == 500:  # the 500th send blocks for 2 s (a GC pause, a slow broker)
            clock.advance(2.0)

    prod = FakeProducer(on_produce=stall)
    summary = Injector(_config(tmp_path, rate=1000, duration=5.0), producer=prod, clock=clock).run()
    events = prod.events()
    t0_ms = round(clock.wall0 * 1000)
    assert [e["seq"] for e in events] == list(range(5000))  # nothing skipped
    assert [e["ts"] for e in events] == [t0_ms + i for i in range(5000)]
    late = [e for e in events if e["sent_ms"] - e["ts"] > 100]
    # The backlog behind the stall went out late but kept its intended time.
    assert len(late) > 1500
    assert max(e["sent_ms"] - e["ts"] for e in events) >= 1900
    assert summary.max_behind_ms >= 1900
    seconds = InjectorStatsTail(tmp_path / "stats.jsonl")
    stats = seconds.poll()
    assert sum(s.sent for s in stats) == 5000
    assert max(s.behind_ms for s in stats) >= 1900
    assert summary.achieved_rate >= 950  # caught up: no warning
    assert "warning" not in [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")]


def test_unsustainable_rate_journals_a_warning(tmp_path: Path) -> None:
    clock = FakeClock()
    # Each send takes 2 ms: at most 500 events/s against a 1000/s target.
    prod = FakeProducer(on_produce=lambda _n: clock.advance(0.002))
    summary = Injector(_config(tmp_path, rate=1000, duration=2.0), producer=prod, clock=clock).run()
    assert summary.produced == 2000  # still all of them, late
    assert summary.achieved_rate == pytest.approx(500, rel=0.05)
    warnings = [e for e in read_jsonl(tmp_path / "journal.jsonl") if e["event"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["target_rate"] == 1000
    assert "lower workload.rate" in warnings[0]["message"]


def test_full_local_queue_is_retried_not_dropped(tmp_path: Path) -> None:
    prod = FakeProducer(buffer_errors=3)
    summary = Injector(
        _config(tmp_path, rate=100, duration=1.0), producer=prod, clock=FakeClock()
    ).run()
    assert [e["seq"] for e in prod.events()] == list(range(100))
    assert summary.delivered == 100


def test_delivery_failures_are_counted_and_journaled(tmp_path: Path) -> None:
    prod = FakeProducer(fail_every=10)
    summary = Injector(
        _config(tmp_path, rate=100, duration=1.0), producer=prod, clock=FakeClock()
    ).run()
    assert summary.failed > 0
    assert summary.failed + summary.delivered == 100
    msgs = [e["message"] for e in read_jsonl(tmp_path / "journal.jsonl") if e["event"] == "warning"]
    assert any("not delivered" in m and "broker down" in m for m in msgs)


def test_stop_ends_early_and_flushes(tmp_path: Path) -> None:
    clock = FakeClock()
    holder: list[Injector] = []

    def stop_at(n: int) -> None:
        if n == 1234:
            holder[0].stop()

    prod = FakeProducer(on_produce=stop_at)
    inj = Injector(_config(tmp_path, rate=1000, duration=10.0), producer=prod, clock=clock)
    holder.append(inj)
    summary = inj.run()
    assert summary.stopped_early
    assert 1234 <= summary.produced < 10_000
    assert summary.produced == len(prod.records) == summary.delivered
    assert prod.flushed
    tail = InjectorStatsTail(tmp_path / "stats.jsonl")
    tail.poll()
    assert tail.summary is not None and tail.summary.stopped_early


def test_start_at_delays_the_schedule(tmp_path: Path) -> None:
    clock = FakeClock()
    start = clock.wall0 + 2.5
    prod = FakeProducer()
    Injector(
        _config(tmp_path, rate=10, duration=1.0, start_at=start), producer=prod, clock=clock
    ).run()
    events = prod.events()
    assert events[0]["ts"] == round(start * 1000)
    assert events[0]["sent_ms"] >= events[0]["ts"]


@pytest.mark.parametrize(("field", "value"), [("rate", 0), ("duration_s", 0.0), ("keys", 0)])
def test_bad_config_is_a_deploy_error(field: str, value: float) -> None:
    kw: dict[str, Any] = {"bootstrap": "x:1", "topic": "t", "rate": 10, "duration_s": 1.0}
    kw[field] = value
    with pytest.raises(DeployError, match=field.split("_")[0]):
        InjectorConfig(**kw)


def _round_trip(cfg: InjectorConfig, path: Path) -> InjectorConfig:
    """``cfg`` through its config file, as the injector process reads it."""
    cmd = cfg.command(path, "/py")
    assert cmd == ["/py", "-m", "arfl.workload.injector", "--config", str(path)]
    return InjectorConfig.read(path)


def test_the_config_round_trips_through_its_file(tmp_path: Path) -> None:
    from arfl.configs.workload import Workload
    from arfl.workload.generate import EventShape

    cfg = _config(tmp_path, rate=1234, duration=2.5, keys=7, seed=9, start_at=1.5)
    back = _round_trip(cfg, tmp_path / "injector.json")
    assert back == cfg and back.linger_ms == 2.0
    assert back.stats_path == tmp_path / "stats.jsonl"
    # a declared shape (a Workload model inside) travels too
    workload = Workload.model_validate({"fields": {"user": {"kind": "key", "cardinality": 3}}})
    shaped = InjectorConfig(
        bootstrap="x:1", topic="t", rate=5, duration_s=1.0, shape=EventShape(workload, "user")
    )
    assert _round_trip(shaped, tmp_path / "shaped.json") == shaped


def test_the_workloads_linger_reaches_the_producer(tmp_path: Path) -> None:
    from arfl.configs.workload import Workload
    from arfl.stack.clients import producer_config

    cfg = InjectorConfig.from_workload(Workload(linger="0ms"), bootstrap="x:1", topic="t")
    a = _round_trip(cfg, tmp_path / "injector.json")
    assert producer_config("x:1", a.linger_ms)["linger.ms"] == 0.0


def test_main_reports_an_unreachable_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Port 1 on loopback refuses connections: the error names the address and what to do.
    cfg = InjectorConfig(
        bootstrap="127.0.0.1:1", topic="t", rate=10, duration_s=1.0, connect_timeout_s=1.0
    )
    rc = main(cfg.command(tmp_path / "injector.json")[3:])
    assert rc == 4
    err = capsys.readouterr().err
    assert "127.0.0.1:1" in err and "not reachable" in err


def test_main_refuses_a_config_file_that_does_not_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "injector.json"
    bad.write_text('{"bootstrap": "x:1", "topic": "t", "rate": 10, "duration": 1}')
    assert main(["--config", str(bad)]) == 2
    assert "not a InjectorConfig" in capsys.readouterr().err
    bad.write_text('{"bootstrap": "x:1", "topic": "t", "rate": 0, "duration_s": 1}')
    assert main(["--config", str(bad)]) == 4
    assert "rate must be >= 1" in capsys.readouterr().err


# --- end of input ---------------------------------------------------------------------------


def test_end_of_input_marker_in_every_partition_after_the_last_event(tmp_path: Path) -> None:
    clock, prod = FakeClock(), FakeProducer(partitions=3)
    summary = Injector(_config(tmp_path, rate=100, duration=2.0), producer=prod, clock=clock).run()
    t0_ms = round(clock.wall0 * 1000)
    last_ts = intended_ms(t0_ms, 199, 100)
    assert prod.events()[-1]["ts"] == last_ts
    # One marker per partition, each far past the last event's time (the watermark passes
    # every window), the same whatever the wall clock did: a function of the schedule.
    assert sorted(p for _t, p, _v in prod.markers) == [0, 1, 2]
    assert {t for t, _p, _v in prod.markers} == {"src"}
    assert [json.loads(v) for _t, _p, v in prod.markers] == [
        {"eoi": True, "ts": last_ts + 86_400_000}
    ] * 3
    # Every event is flushed before the first marker: a batch boundary that includes one
    # partition's marker includes every partition's last event too (time-cut boundaries).
    first_marker = prod.log.index("marker:0")
    assert "event" not in prod.log[first_marker:]
    assert prod.log[first_marker - 1] == "flush"
    assert prod.log[-1] == "flush"
    # Markers are not events: the summary counts events only; the journal names the markers.
    assert summary.produced == summary.delivered == 200
    finished = read_jsonl(tmp_path / "journal.jsonl")[-1]
    assert finished["event"] == "injector_finished"
    assert finished["end_of_input_markers"] == 3
    assert finished["end_of_input_ts"] == last_ts + 86_400_000


def test_end_of_input_markers_are_appended_a_millisecond_after_every_event(
    tmp_path: Path,
) -> None:
    """The flush returns once every event is appended; a marker produced at once (the final
    flush sends it without linger) could share the last event's LogAppendTime millisecond
    (seen in a run: partition 1's last event and both markers at ...183516), and the
    independent check, which orders partitions by append time, then cannot tell whether a batch
    held the marker without that event: the event's window went unjudged ("late")."""
    clock = FakeClock()
    prod = FakeProducer(partitions=2, clock=clock)
    Injector(_config(tmp_path, rate=100, duration=1.0), producer=prod, clock=clock).run()
    events_appended_by = prod.flushed_at[0]
    assert prod.markers_at and min(prod.markers_at) >= events_appended_by + 0.002, (
        prod.flushed_at, prod.markers_at,
    )  # fmt: skip


def test_end_of_input_marker_time_does_not_depend_on_an_early_stop(tmp_path: Path) -> None:
    holder: list[Injector] = []
    prod = FakeProducer(on_produce=lambda n: holder[0].stop() if n == 50 else None)
    clock = FakeClock()
    inj = Injector(_config(tmp_path, rate=100, duration=2.0), producer=prod, clock=clock)
    holder.append(inj)
    assert inj.run().stopped_early
    ts = {json.loads(v)["ts"] for _t, _p, v in prod.markers}
    assert ts == {intended_ms(round(clock.wall0 * 1000), 199, 100) + 86_400_000}


def test_end_of_input_markers_can_be_turned_off(tmp_path: Path) -> None:
    prod = FakeProducer()
    cfg = _config(tmp_path, rate=100, duration=1.0, end_of_input=False)
    Injector(cfg, producer=prod, clock=FakeClock()).run()
    assert prod.markers == [] and len(prod.events()) == 100
    assert _round_trip(cfg, tmp_path / "off.json").end_of_input is False
    assert _round_trip(_config(tmp_path), tmp_path / "on.json").end_of_input is True


def test_undelivered_markers_are_a_warning(tmp_path: Path) -> None:
    prod = FakeProducer(partitions=2)
    real_produce = prod.produce

    def produce(*a: Any, **kw: Any) -> None:
        if kw.get("partition", -1) >= 0:
            kw["on_delivery"] = lambda _e, _m, cb=kw["on_delivery"]: cb("broker down", None)
        real_produce(*a, **kw)

    prod.produce = produce  # type: ignore[method-assign]
    summary = Injector(
        _config(tmp_path, rate=100, duration=1.0), producer=prod, clock=FakeClock()
    ).run()
    assert summary.failed == 0  # events were delivered
    msgs = [e["message"] for e in read_jsonl(tmp_path / "journal.jsonl") if e["event"] == "warning"]
    assert any("end-of-input" in m and "broker down" in m for m in msgs), msgs


def test_the_injector_records_how_far_the_wall_clock_moved(tmp_path: Path) -> None:
    from arfl.workload.produce import SecondStats

    class Clock:
        def __init__(self) -> None:
            self.mono, self.step = 10.0, 0.0

        def time(self) -> float:
            return 1_800_000_000.0 + self.mono + self.step

        def monotonic(self) -> float:
            return self.mono

        def sleep(self, seconds: float) -> None:
            self.mono += seconds

    clock = Clock()
    stats = SecondStats(tmp_path / "s.jsonl", clock=clock)
    stats.start(1_800_000_000.0)
    for k in range(1, 4):
        clock.mono += 1.0
        clock.step += 0.004 if k == 2 else 0.0  # NTP or the hypervisor: 4 ms in second 2
        stats.tick(float(k), 0)
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [round(x["clock_ms"], 2) for x in lines] == [0.0, 4.0, 4.0]
