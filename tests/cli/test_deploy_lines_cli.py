"""``arfl deploy``'s closing lines, on a recorded real run (``tests/fixtures/runs``)."""

from __future__ import annotations

import json
from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from arfl.cli.commands.deploy import report_lines
from arfl.report import build_report

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "real-active-rtm-kill-replica"


def _p99_after(path: Path, since: float, until: float) -> float:
    """p99 (ms) of the intervals of an HdrHistogram log that start in ``[since, until)``
    (seconds of the log's own time base), read and summed with hdrh's own reader."""
    reader = HistogramLogReader(str(path), HdrHistogram(1, 3_600_000_000, 3))
    total = HdrHistogram(1, 3_600_000_000, 3)
    while (h := reader.get_next_interval_histogram()) is not None:
        if since <= h.get_start_time_stamp() / 1000.0 - reader.base_time_sec < until:
            total.add(h)
    reader.close()
    return float(total.get_value_at_percentile(99.0)) / 1000.0


def test_deploy_ends_with_the_latency_after_the_warm_up_and_each_faults_verdict() -> None:
    report = build_report(RUN)
    lines = report_lines(report)
    assert len(lines) == 1 + len(report.faults)
    first = lines[0]
    assert first.startswith(f"after the {report.warmup_s:g}-s warm-up: latency ms p50=")
    shown = float(first.split("p99=")[1].split()[0])
    # The start-up's first seconds set the whole run's p99 (the done line's), not the rest.
    whole = json.loads((RUN / "summary.json").read_text())["latency_ms"]["p99"]
    assert shown < whole / 10, (shown, whole)
    # Another reading of the same data: hdrh's log reader, the intervals after the warm-up.
    assert report.input_start is not None and report.input_end_s is not None
    reader = HistogramLogReader(str(RUN / "latency.hlog"), HdrHistogram(1, 10, 3))
    reader.get_next_interval_histogram()  # reads the header (BaseTime)
    base = reader.base_time_sec
    reader.close()
    since = report.input_start + report.overall.start_s - base
    until = report.input_start + report.overall.end_s - base
    independent = _p99_after(RUN / "latency.hlog", since, until)
    assert abs(independent - shown) <= 0.05 * shown + 0.1, (independent, shown)
    assert lines[1].startswith("fault 1 kill-replica on replica 0 at 100.0s: ")
