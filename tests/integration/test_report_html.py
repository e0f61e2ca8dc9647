"""The HTML report of recorded run directories: one self-contained file with its plots.

Needs no services: it reads the run directories in ``tests/fixtures/runs`` (a real run and
simulated ones, see ``make_fixtures.py``) and checks the written page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from arfl.report import build_report, compare, render_compare_html, render_html

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _traces(page: str) -> dict[str, list[dict[str, Any]]]:
    """Plot div id -> traces, from the ``Plotly.newPlot("id", [traces...], ...)`` calls."""
    return {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\])\s*,\s*\{', page, re.S)
    }


def _plots(page: str) -> dict[str, list[str]]:
    """Plot div id -> trace names."""
    return {div: [t.get("name") for t in traces] for div, traces in _traces(page).items()}


def _self_contained(page: str) -> None:
    # plotly.js is inline: no network needed (the library itself mentions a CDN for geo maps
    # only, which these plots never load).
    assert not re.search(r"<script[^>]*\ssrc=", page)
    assert not re.search(r"<link[^>]*\shref=", page)
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # the library itself is there


def _page(run: str, tmp_path: Path) -> str:
    """The HTML report of the recorded run ``run``, checked to be self-contained."""
    path = render_html(build_report(RUNS / run), tmp_path / f"{run}.html")
    page = path.read_text(encoding="utf-8")
    _self_contained(page)
    return page


def test_real_run_html_has_its_plots(tmp_path: Path) -> None:
    page = _page("real-none-noresults", tmp_path)
    plots = _plots(page)
    assert set(plots) == {"latency-over-time", "latency-distribution", "output-rate"}
    assert plots["latency-over-time"] == ["max", "p99", "p50"]
    assert plots["output-rate"] == ["merged output (first copies)", "replica 0 (received)"]
    assert "real-none-noresults" in page
    assert "p99 (overall) not measured (no results)" in page


def test_real_run_with_results_html(tmp_path: Path) -> None:
    page = _page("real-none-window", tmp_path)
    plots = _plots(page)
    assert set(plots) == {
        "latency-over-time", "latency-distribution", "output-rate", "batch-duration",
    }  # fmt: skip
    assert plots["latency-distribution"] == ["steady", "overall"]
    assert plots["batch-duration"] == ["replica 0"]
    p99 = next(t for t in _traces(page)["latency-over-time"] if t["name"] == "p99")
    assert max(v for v in p99["y"] if v is not None) > 30_000  # the real latencies are drawn
    assert "input ends" in page


def test_faulted_run_html_shades_faults_and_shows_tables(tmp_path: Path) -> None:
    page = _page("sim-active-kill", tmp_path)
    plots = _plots(page)
    assert plots["latency-distribution"] == ["steady", "fault-1", "fault-2", "tail",
                                             "overall"]  # fmt: skip
    assert plots["output-rate"][1:] == [
        "replica 0 (received)", "replica 0 (first copies)", "replica 1 (received)",
        "replica 1 (first copies)",
    ]  # fmt: skip
    assert plots["batch-duration"] == ["replica 0", "replica 1"]  # from progress/replica-N
    assert "fault-1: kill-replica r0" in page and "fault-2: pause r1" in page  # shaded windows
    for heading in ("Phases", "Faults", "Correctness"):
        assert f"<h2>{heading}" in page


def test_comparison_html_overlays_runs(tmp_path: Path) -> None:
    reports = [build_report(RUNS / "sim-passive-kill"), build_report(RUNS / "sim-active-kill")]
    page = render_compare_html(compare(reports), tmp_path / "c.html").read_text(encoding="utf-8")
    _self_contained(page)
    assert len(re.findall(r"\* plotly\.js v\d", page)) == 1  # the library is embedded once
    plots = _plots(page)
    assert plots["compare-latency-over-time"] == [
        "sim-passive-kill p99", "sim-passive-kill p50", "sim-active-kill p99",
        "sim-active-kill p50",
    ]  # fmt: skip
    assert plots["compare-latency-distribution"] == ["sim-passive-kill", "sim-active-kill"]
    # Each run's own section follows, with unique plot ids.
    assert {"latency-over-time-1", "latency-over-time-2", "output-rate-2"} <= set(plots)
