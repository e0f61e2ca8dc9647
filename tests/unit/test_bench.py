"""The benchmark scripts' own arithmetic (they run real deployments; this checks what they
compute from a recorded run)."""

from __future__ import annotations

import itertools
import statistics
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "runs" / "real-passive-kill-executor"


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))


def test_latency_floor_warmup_counts_from_the_input_start() -> None:
    import latency_floor

    from arfl.measure.histogram import read_latency_log
    from arfl.report.rundata import load_run

    intervals = read_latency_log(RUN / "latency.hlog")
    input_start = load_run(RUN).input_start
    assert input_start is not None
    # The merger logged (empty) intervals for 27 s before the input started: counting the
    # warm-up from the log's first interval would let every warm-up result in.
    assert intervals[0].start_s < input_start - 20
    warmup = 20.0
    after = sum(iv.count for iv in intervals if iv.start_s >= input_start + warmup)
    assert 0 < after < sum(iv.count for iv in intervals)
    got = latency_floor.steady_percentiles(RUN, warmup)
    assert got["count"] == after


def test_realtime_boundary_medians_count_only_the_phase_batches() -> None:
    import realtime

    from arfl.report.build import build_report
    from arfl.run.progress import batch_timing
    from arfl.run.rundir import read_jsonl

    report = build_report(RUN)
    steady = next(p for p in report.phases if p.name == "steady")
    assert report.input_start is not None
    lo, hi = report.input_start + steady.start_s, report.input_start + steady.end_s
    lines = read_jsonl(RUN / "progress" / "replica-0.jsonl")
    inside = [p for p in lines if lo <= datetime.fromisoformat(p["timestamp"]).timestamp() < hi]
    # The fixture's steady phase holds some of its batches, not all: the filter matters.
    assert 2 < len(inside) < len(lines)
    got = realtime.boundary_ms(RUN, report, steady)
    assert got["queryPlanning_ms"] == statistics.median(
        p["durationMs"]["queryPlanning"] for p in inside
    )
    spans = sorted(t for t in map(batch_timing, inside) if t is not None)
    idle = [b[0] - a[0] - a[1] / 1000 for a, b in itertools.pairwise(spans)]
    assert got["between_ms"] == pytest.approx(1000 * statistics.median(idle), abs=0.01)
    assert realtime.boundary_ms(RUN, report, None) == {}
