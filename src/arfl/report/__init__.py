"""``arfl report``: per-phase latency, fault verdicts, correctness, SLOs, HTML and comparisons.

Public API::

    report = build_report(Path("runs/clicks-20261125-213000"))   # -> Report
    report.to_dict()                                             # the --json contract
    render_html(report, Path("report.html"))
    comparison = compare([build_report(a), build_report(b)])     # -> Comparison
    render_compare_html(comparison, Path("compare.html"))
    validate_slo(spec.report.slo)                                # -> list of problems

Names are loaded on first use, so that the spec validator can import
:mod:`arfl.report.slo` without pulling in plotly and the run-directory readers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arfl.report.build import analyse, build_report
    from arfl.report.comparison import Comparison, ComparisonRow, compare
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
    from arfl.report.slo import check_slos

_WHERE = {
    "analyse": "build",
    "build_report": "build",
    "Comparison": "comparison",
    "ComparisonRow": "comparison",
    "compare": "comparison",
    "render_compare_html": "html",
    "render_html": "html",
    "Correctness": "model",
    "FaultStats": "model",
    "PhaseStats": "model",
    "Report": "model",
    "SloCheck": "model",
    "SloResult": "model",
    "RunData": "rundata",
    "load_run": "rundata",
    "check_slos": "slo",
}

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
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'arfl.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"arfl.report.{module}"), name)
