"""Histogram helpers, the interval log, and the monitor/stats tailers."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import pytest
from hdrh.log import HistogramLogReader

from arfl.errors import ReportError
from arfl.measure import histogram as H
from arfl.run.streams import InjectorStatsTail, JsonlTail, MonitorTail

T0 = 1_764_106_200.0


def test_percentiles_in_ms_with_three_significant_digits() -> None:
    h = H.new_histogram()
    for v in range(1, 1001):  # 1..1000 ms
        H.record_ms(h, v)
    p = H.percentiles_ms(h, (50, 99.9))
    assert set(p) == {"p50", "p99.9", "max", "count"}
    assert p["p50"] == pytest.approx(500, rel=0.002)
    assert p["p99.9"] == pytest.approx(999, rel=0.002)
    assert p["max"] == pytest.approx(1000, rel=0.002)
    assert p["count"] == 1000


def test_empty_histogram_has_no_percentiles() -> None:
    p = H.percentiles_ms(H.new_histogram())
    assert p == {"p50": None, "p90": None, "p99": None, "p99.9": None, "max": None, "count": 0}


def test_out_of_range_values_are_clamped_not_lost() -> None:
    h = H.new_histogram()
    H.record_ms(h, -5)  # clock skew
    H.record_ms(h, 10 * 3_600_000)  # ten hours
    assert h.get_total_count() == 2
    assert h.get_min_value() == 1
    assert h.get_max_value() >= H.HIGHEST_TRACKABLE_US * 0.999


def test_percentile_keys() -> None:
    assert [H.percentile_key(p) for p in (50, 90.0, 99.9, 99.99)] == [
        "p50",
        "p90",
        "p99.9",
        "p99.99",
    ]


def test_recorder_roll_separates_intervals() -> None:
    r = H.IntervalRecorder(T0)
    r.record_ms(5)
    a = r.roll(T0 + 1)
    r.record_ms(50)
    r.record_ms(60)
    b = r.roll(T0 + 2)
    assert (a.count, b.count, r.cumulative.get_total_count()) == (1, 2, 3)
    assert (a.start_s, a.end_s, b.start_s, b.end_s) == (T0, T0 + 1, T0 + 1, T0 + 2)
    assert r.current.get_total_count() == 0


def _write_log(path: Path) -> list[H.IntervalHistogram]:
    r = H.IntervalRecorder(T0)
    written = []
    with H.LatencyLogWriter(path, T0, comment="test") as w:
        for s in range(4):
            for v in range(s * 100):
                r.record_ms(1 + v)
            iv = r.roll(T0 + s + 1)
            w.write(iv)
            written.append(iv)
    return written


def test_interval_log_round_trips_through_hdrh_reader(tmp_path: Path) -> None:
    path = tmp_path / "latency.hlog"
    written = _write_log(path)
    text = path.read_text()
    assert text.startswith("#test\n#[Histogram log format version 1.2]\n#[StartTime: ")
    assert (
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"' in text
    )

    # hdrh's own reader, as another tool would use it.
    reader = HistogramLogReader(str(path), H.new_histogram())
    counts = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        counts.append(hist.get_total_count())
    reader.close()
    assert counts == [0, 100, 200, 300]

    read = H.read_latency_log(path)
    assert [iv.count for iv in read] == [iv.count for iv in written]
    for a, b in zip(read, written, strict=True):
        assert a.start_s == pytest.approx(b.start_s, abs=1e-3)
        assert a.end_s == pytest.approx(b.end_s, abs=1e-3)
        assert a.percentiles_ms() == b.percentiles_ms()
    total = H.merge(read, T0 + 1, T0 + 3)
    assert total.get_total_count() == 300


def test_reading_a_missing_log_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not found"):
        H.read_latency_log(tmp_path / "nope.hlog")


def test_encode_decode() -> None:
    h = H.new_histogram()
    H.record_ms(h, 12.5)
    assert H.decode(H.encode(h)).get_total_count() == 1


def test_jsonl_tail_waits_for_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    tail = JsonlTail(path)
    assert tail.read_new() == []  # no file yet
    with open(path, "w") as f:
        f.write('{"a": 1}\n{"b"')
    assert tail.read_new() == [{"a": 1}]
    with open(path, "a") as f:
        f.write(': 2}\nnot json\n[1]\n{"c": 3}\n')
    assert tail.read_new() == [{"b": 2}, {"c": 3}]
    assert tail.read_new() == []


def _monitor_line(t: float, results: int) -> dict[str, object]:
    return {
        "t": t, "interval_s": 1.0, "output_rate": 10, "received": 20, "duplicates": 10,
        "interval": {"p50": 1.5, "max": 3.0, "count": 10}, "cumulative": {"p50": 1.0},
        "longest_gap_ms": 12.0, "current_gap_ms": 0.0, "input_flowing": True,
        "results": results, "duplicates_total": 10, "divergent": 0, "bad": 1, "evicted": 0,
        "replicas": {"0": {"received": 5, "wins": 3, "last_seen_t": t, "last_src_ts": 7,
                           "lag_ms": 2.0}, "1": {"received": 0}},
    }  # fmt: skip


def test_monitor_tail_parses_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "monitor.jsonl"
    path.write_text(
        json.dumps(_monitor_line(T0, 10))
        + "\n"
        + '{"t": "garbage"}\n'
        + json.dumps(_monitor_line(T0 + 1, 20))
        + "\n"
    )
    tail = MonitorTail(path)
    snaps = tail.poll()
    assert [s.results for s in snaps] == [10, 20]
    assert tail.latest is not None and tail.latest.t == T0 + 1
    s = tail.latest
    assert s.interval["p50"] == 1.5 and s.bad == 1
    assert s.replicas[0].wins == 3 and s.replicas[1].last_seen_t is None
    assert tail.poll() == [] and tail.latest is s


def test_injector_stats_tail(tmp_path: Path) -> None:
    path = tmp_path / "inj.jsonl"
    line = {
        "type": "second",
        "t": T0 + 1,
        "t0": T0,
        "sent": 99,
        "target": 100,
        "behind_ms": 1.5,
        "total": 99,
    }
    path.write_text(json.dumps(line) + "\n")
    tail = InjectorStatsTail(path)
    assert [s.sent for s in tail.poll()] == [99]
    assert tail.t0 == T0 and tail.summary is None
    summary = {
        "type": "summary",
        "t": T0 + 2,
        "t0": T0,
        "end": T0 + 1.9,
        "produced": 199,
        "delivered": 199,
        "failed": 0,
        "target_rate": 100,
        "achieved_rate": 99.5,
        "max_behind_ms": 1.5,
        "duration_s": 2.0,
        "stopped_early": False,
    }
    with open(path, "a") as f:
        f.write(json.dumps(summary) + "\n")
    assert tail.poll() == []
    assert tail.summary is not None and tail.summary.produced == 199
    assert tail.latest is not None and tail.latest.sent == 99


def test_first_interval_survives_a_start_time_that_rounds_up(tmp_path: Path) -> None:
    # 0.4567 is written as 0.457 with three decimals: the header must not pass the interval.
    start = T0 + 0.4567
    path = tmp_path / "latency.hlog"
    r = H.IntervalRecorder(start)
    r.record_ms(3.0)
    with H.LatencyLogWriter(path, start) as w:
        w.write(r.roll(T0 + 1))
    assert [iv.count for iv in H.read_latency_log(path)] == [1]


@pytest.mark.parametrize("n", [1, 7, 1000, 20_000])
def test_fast_percentiles_equal_hdrh(n: int) -> None:
    import random

    rng = random.Random(n)
    h = H.new_histogram()
    for _ in range(n):
        H.record_ms(h, rng.lognormvariate(2, 2.5))  # 0.01 ms .. minutes
    ps = (0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0)
    for hist in (h, H.decode(H.encode(h))):  # also a decoded (read-back) histogram
        assert H.values_at_percentiles(hist, ps) == {p: hist.get_value_at_percentile(p) for p in ps}


def test_jsonl_tail_from_end_reads_only_what_is_appended_later(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"a": 1}\n{"a": 2')  # the second line is still being written
    tail = JsonlTail(p, from_end=True)
    with p.open("a") as f:
        f.write('}\n{"a": 3}\n')
    assert tail.read_new() == [{"a": 3}]  # the cut line is skipped, not misread
    assert JsonlTail(p).read_new() == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_a_log_tail_reads_whole_interval_lines_as_the_log_grows(tmp_path: Path) -> None:
    path = tmp_path / "latency.hlog"
    tail = H.LatencyLogTail(path)
    assert tail.read() == []  # not written yet
    written = _write_log(path)
    assert [iv.count for iv in tail.read()] == [iv.count for iv in written]
    assert tail.read() == []
    # A line being written is left for the next read, then read whole.
    r = H.IntervalRecorder(T0 + 4)
    r.record_ms(7)
    with H.LatencyLogWriter(tmp_path / "one.hlog", T0) as w:
        w.write(r.roll(T0 + 5))
    line = (tmp_path / "one.hlog").read_text().splitlines()[-1] + "\n"
    with path.open("a") as f:
        f.write(line[:20])
    assert tail.read() == []
    with path.open("a") as f:
        f.write(line[20:])
    (iv,) = tail.read()
    assert iv.count == 1 and iv.start_s == pytest.approx(T0 + 4, abs=1e-3)
    tail.close()


def test_histograms_are_freed_by_their_last_reference_without_a_garbage_collection(
    tmp_path: Path,
) -> None:
    # The merger runs with automatic collection off: a histogram in a reference cycle (hdrh's
    # own, with its encoder) would stay until the process ends, ~190 KB a second.
    path = tmp_path / "latency.hlog"
    _write_log(path)
    gc.disable()
    try:
        made = [
            H.new_histogram(),
            H.decode(H.encode(H.new_histogram())),
            *H.LatencyLogTail(path).read(),
        ]
        made = [m.histogram if isinstance(m, H.IntervalHistogram) else m for m in made]
        refs = [weakref.ref(h) for h in made]
        made[0].add(made[1])  # the encoder still works through its weak reference
        assert made[0].get_total_count() == 0
        del made
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()
