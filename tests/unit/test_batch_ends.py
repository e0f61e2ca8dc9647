"""Batch ends: when each replica's micro-batches ended, and their marks on the latency plot.

:func:`arfl.run.progress.batch_ends` on hand-written progress lines; the report and its HTML on
the recorded runs in ``tests/fixtures/runs`` (``sim-active-kill``: two replicas with progress
files; ``real-active-leaderless``: a real two-replica run; ``real-none-noresults``: none).
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from arfl.report import Report, build_report
from arfl.report.html import MAX_BATCH_MARKS, latency_figure, render_html
from arfl.run.progress import batch_ends

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _epoch(h: int, m: int, s: int, ms: int) -> float:
    return datetime(2026, 11, 25, h, m, s, ms * 1000, tzinfo=UTC).timestamp()


def test_a_batch_ends_at_its_timestamp_plus_its_batch_duration() -> None:
    lines = [
        # Out of order on purpose: the ends come back in time order.
        {"timestamp": "2026-11-25T21:50:34.250Z", "batchId": 1, "batchDuration": 318},
        {"timestamp": "2026-11-25T21:50:33.938Z", "batchId": 0, "batchDuration": 312},
    ]
    assert batch_ends(lines) == pytest.approx(
        [_epoch(21, 50, 33, 938) + 0.312, _epoch(21, 50, 34, 250) + 0.318], abs=1e-6
    )


def test_batch_duration_wins_over_trigger_execution_which_is_the_fallback() -> None:
    both = {
        "timestamp": "2026-11-25T23:00:15.023Z",
        "batchDuration": 34056,
        "durationMs": {"triggerExecution": 34045},
    }
    only_trigger = {
        "timestamp": "2026-11-25T23:00:15.023Z",
        "durationMs": {"triggerExecution": 500},
    }
    start = _epoch(23, 0, 15, 23)
    assert batch_ends([both]) == pytest.approx([start + 34.056], abs=1e-6)
    assert batch_ends([only_trigger]) == pytest.approx([start + 0.5], abs=1e-6)


def test_timestamps_with_an_offset_or_without_a_zone() -> None:
    # Spark writes UTC with 'Z'; an explicit offset is honoured, no zone at all counts as UTC.
    start = _epoch(21, 50, 33, 938)
    offset = {"timestamp": "2026-11-25T22:50:33.938+01:00", "batchDuration": 100}
    naive = {"timestamp": "2026-11-25T21:50:33.938", "batchDuration": 200}
    assert batch_ends([offset, naive]) == pytest.approx([start + 0.1, start + 0.2], abs=1e-6)


def test_lines_without_a_readable_timestamp_or_duration_are_skipped() -> None:
    good = {"timestamp": "2026-11-25T21:50:33.938Z", "batchDuration": 312}
    lines: list[dict[str, Any]] = [
        {"batchDuration": 312},  # no timestamp
        {"timestamp": None, "batchDuration": 312},
        {"timestamp": "yesterday", "batchDuration": 312},
        {"timestamp": "2026-11-25T21:50:34.000Z"},  # no duration at all
        {"timestamp": "2026-11-25T21:50:34.000Z", "durationMs": {"addBatch": 5}},
        {"timestamp": "2026-11-25T21:50:34.000Z", "durationMs": "312"},  # not a mapping
        {"timestamp": "2026-11-25T21:50:34.000Z", "batchDuration": "slow"},
        {"timestamp": "2026-11-25T21:50:34.000Z", "batchDuration": -5},
        {"timestamp": "2026-11-25T21:50:34.000Z", "batchDuration": float("nan")},
        {},
        good,
    ]
    assert batch_ends(lines) == pytest.approx([_epoch(21, 50, 33, 938) + 0.312], abs=1e-6)
    assert batch_ends([]) == []


def _ends_from_files(run: Path, t0: float) -> dict[int, list[float]]:
    """Batch ends read straight from the progress files (seconds since ``t0``)."""
    out: dict[int, list[float]] = {}
    for f in sorted((run / "progress").glob("replica-*.jsonl")):
        ends = []
        for raw in f.read_text().splitlines():
            d = json.loads(raw)
            start = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp()
            ends.append(start + d["batchDuration"] / 1000.0 - t0)
        out[int(f.stem.split("-")[1])] = sorted(ends)
    return out


@pytest.fixture(scope="module")
def active() -> Report:
    return build_report(RUNS / "sim-active-kill")


def test_report_series_holds_each_replicas_batch_ends(active: Report) -> None:
    assert active.input_start is not None
    expected = _ends_from_files(RUNS / "sim-active-kill", active.input_start)
    assert sorted(active.series.batch_ends) == [0, 1]
    for r in (0, 1):
        assert active.series.batch_ends[r] == pytest.approx(expected[r], abs=1e-6)
    assert [len(v) for _, v in sorted(active.series.batch_ends.items())] == [93, 118]
    # Not part of the --json contract: the series are for the plots only.
    assert "batch_ends" not in json.dumps(active.to_dict())


def _traces(page: str) -> dict[str, list[dict[str, Any]]]:
    """Plot div id -> traces, from the ``Plotly.newPlot("id", [traces...], ...)`` calls."""
    return {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\])\s*,\s*\{', page, re.S)
    }


def test_html_latency_plot_marks_each_replicas_batch_ends(active: Report, tmp_path: Path) -> None:
    page = render_html(active, tmp_path / "report.html").read_text(encoding="utf-8")
    traces = _traces(page)["latency-over-time"]
    assert [t["name"] for t in traces] == ["max", "p99", "p50", "r0 batch ends", "r1 batch ends"]
    marks = {t["name"]: t for t in traces[3:]}
    for r in (0, 1):
        t = marks[f"r{r} batch ends"]
        # Every batch of this run ended inside the plotted time range: all are marked, on the
        # hidden 0..1 axis, as ticks.
        assert t["x"] == pytest.approx(active.series.batch_ends[r], abs=1e-6)
        assert t["yaxis"] == "y2" and t["mode"] == "markers"
        assert t["marker"]["symbol"] == "line-ns"
        assert len(set(t["y"])) == 1 and 0 < t["y"][0] < 1
    # One colour and one row per replica.
    assert marks["r0 batch ends"]["marker"]["color"] != marks["r1 batch ends"]["marker"]["color"]
    assert marks["r0 batch ends"]["y"][0] != marks["r1 batch ends"]["y"][0]
    assert '"yaxis2":{"overlaying":"y","range":[0,1],"visible":false' in page.replace(" ", "")


def test_batch_ends_outside_the_plotted_range_are_left_out() -> None:
    # The real run's replica 0 finished its first batch 11.7 s before the input started, before
    # the plot's left edge (5 s before the input start).
    rep = build_report(RUNS / "real-active-leaderless")
    ends = rep.series.batch_ends[0]
    assert len(ends) == 13 and ends[0] < -11
    fig = latency_figure(rep)
    (r0,) = [t for t in fig.data if t.name == "r0 batch ends"]
    lo, hi = fig.layout.xaxis.range
    assert list(r0.x) == [t for t in ends if lo <= t <= hi] and len(r0.x) == 12


def test_marks_are_capped_per_replica(active: Report) -> None:
    many = [0.01 * i for i in range(MAX_BATCH_MARKS + 300)]
    rep = dataclasses.replace(
        active, series=dataclasses.replace(active.series, batch_ends={0: many, 1: many[:10]})
    )
    by_name = {t.name: t for t in latency_figure(rep).data}
    capped = by_name[f"r0 batch ends (first {MAX_BATCH_MARKS} of {len(many)})"]
    assert list(capped.x) == many[:MAX_BATCH_MARKS]
    assert len(by_name["r1 batch ends"].x) == 10


def test_a_run_without_progress_has_no_batch_marks() -> None:
    rep = build_report(RUNS / "real-none-noresults")
    assert rep.series.batch_ends == {}
    fig = latency_figure(rep)
    assert [t.name for t in fig.data] == ["max", "p99", "p50"]
    assert "yaxis2" not in fig.to_plotly_json()["layout"]
