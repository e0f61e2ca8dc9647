"""``arfl report``: per-phase latency, fault verdicts, correctness, SLOs, HTML and comparisons.

Public API::

    report = build_report(Path("runs/clicks-20261125-213000"))   # -> Report
    report.to_dict()                                             # the --json contract
    render_html(report, Path("report.html"))
    comparison = compare([build_report(a), build_report(b)])     # -> Comparison
    render_compare_html(comparison, Path("compare.html"))
    validate_slo(spec.report.slo)                                # -> list of problems
"""

from __future__ import annotations

from arfl.report.build import analyse, build_report
from arfl.report.compare import Comparison, ComparisonRow, compare
from arfl.report.html import render_compare_html, render_html
from arfl.report.model import (
    Correctness,
    FaultStats,
    PhaseStats,
    Report,
    SloCheck,
    SloResult,
)
from arfl.report.rundata import RunData, load_run
from arfl.report.slo import check_slos, validate_slo

__all__ = [
    "Comparison",
    "ComparisonRow",
    "Correctness",
    "FaultStats",
    "PhaseStats",
    "Report",
    "RunData",
    "SloCheck",
    "SloResult",
    "analyse",
    "build_report",
    "check_slos",
    "compare",
    "load_run",
    "render_compare_html",
    "render_html",
    "validate_slo",
]
