"""The benchmark scripts' own arithmetic (they run real deployments; this checks what they
compute from a recorded run)."""

from __future__ import annotations

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
