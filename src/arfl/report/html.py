"""The HTML report: one self-contained file (plotly.js embedded inline, no network needed).

One run: latency over time (per-second p50/p99/max, warm-up / fault / recovery windows shaded,
each replica's batch ends as a row of ticks along the bottom), the latency distribution per
phase (HdrHistogram style: x = 1/(1-q) on a log axis), output rate per replica, and the tables
of the text report. Several runs: the same plots overlaid (one colour per run) and the
comparison tables.

Plot ``div`` ids (stable, tests look for them): ``latency-over-time``,
``latency-distribution``, ``output-rate``, ``batch-duration`` (when progress was recorded);
comparisons: ``compare-latency-over-time``, ``compare-latency-distribution``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from arfl.errors import ReportError
from arfl.report.comparison import Comparison
from arfl.report.model import Report
from arfl.report.tables import (
    HOPS_NOTE,
    comparison_tables,
    correctness_rows,
    fault_rows,
    fmt,
    hop_rows,
    hot_key_rows,
    phase_rows,
    resource_rows,
    workload_rows,
)

PRE_INPUT_S = 5.0
"""Seconds before the input start shown on time axes."""
MAX_BATCH_MARKS = 500
"""Batch ends marked per replica on the latency plot (the first ones shown; keeps the page
small when batches are short)."""
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")
_DIST_TICKS = [1, 2, 10, 100, 1000, 10_000, 100_000, 1_000_000]
_DIST_LABELS = ["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"]
_LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "height": 460,
    "margin": {"l": 70, "r": 30, "t": 60, "b": 60},
    "font": {"size": 14},
    "legend": {"orientation": "h", "y": -0.18},
}


def _x_of(q: float) -> float:
    return 1.0 / (1.0 - q / 100.0) if q < 100.0 else math.inf


def _shade(fig: go.Figure, report: Report) -> None:
    """Shade the warm-up, fault windows and recoveries on a time axis; mark the input end."""
    if report.input_end_s is not None:
        fig.add_vline(
            x=report.input_end_s, line_dash="dash", line_color="#888888", line_width=1,
            annotation_text="input ends", annotation_position="top right",
            annotation_font_size=12,
        )  # fmt: skip
    for p in report.phases:
        if p.end_s <= p.start_s:
            continue
        if p.kind == "warmup":
            color, label = "rgba(128,128,128,0.15)", "warm-up"
        elif p.kind == "fault":
            color, label = "rgba(214,39,40,0.20)", p.name
            f = report.faults[p.fault - 1] if p.fault else None
            if f is not None:
                label = f"{p.name}: {f.kind}" + (f" r{f.target}" if f.target is not None else "")
        elif p.kind == "recovery":
            color, label = "rgba(255,127,14,0.15)", p.name
        else:
            continue
        # Recovery labels go to the bottom: they start where the fault's label would run on.
        fig.add_vrect(
            x0=p.start_s, x1=p.end_s, fillcolor=color, line_width=0, layer="below",
            annotation_text=label,
            annotation_position="bottom left" if p.kind == "recovery" else "top left",
            annotation_font_size=12,
        )  # fmt: skip


def latency_axis(values: Sequence[float | None]) -> dict[str, Any]:
    """A y axis for latencies: logarithmic with 1-2-5 ticks when they span more than a factor
    of 5 (a kill's spike next to steady state), linear otherwise."""
    present = [v for v in values if v is not None and v > 0]
    if not present or max(present) / min(present) < 5:
        return {"title": "latency (ms)", "type": "linear", "rangemode": "tozero"}
    lo, hi = min(present), max(present)
    ticks = [
        m * 10**e
        for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        for m in (1, 2, 5)
    ]
    ticks = [t for t in ticks if lo / 2 <= t <= hi * 2]
    return {
        "title": "latency (ms, log)",
        "type": "log",
        "tickmode": "array",
        "tickvals": ticks,
        "ticktext": [f"{t:g}" for t in ticks],
    }


def _time_range(report: Report) -> list[float]:
    """One x range for every time plot of a run, so they line up."""
    s = report.series
    xs = [*s.t_s, *s.rate_t_s]
    if not xs:
        return [0.0, report.input_end_s or 1.0]
    # The merger starts long before the input (replicas take minutes to start on a busy
    # machine); a few seconds of that are context, the rest is empty.
    return [max(min(min(xs), 0.0), -PRE_INPUT_S) - 0.5, max(xs) + 0.5]


def batch_end_traces(report: Report, x_range: Sequence[float]) -> list[go.Scatter]:
    """One row of ticks per replica at the bottom of a time plot: where its batches ended.

    The ticks sit on a hidden ``y2`` axis spanning 0..1 (the plot's own y axis may be
    logarithmic), one row per replica, so that staggered boundaries show side by side. Only
    ends inside ``x_range`` are drawn, at most :data:`MAX_BATCH_MARKS` per replica (the first).
    Colours follow the replicas' order, as in the other plots of the run.
    """
    lo, hi = x_range[0], x_range[-1]
    traces: list[go.Scatter] = []
    for i, (replica, ends) in enumerate(sorted(report.series.batch_ends.items())):
        shown = [t for t in ends if lo <= t <= hi]
        if not shown:
            continue
        kept = shown[:MAX_BATCH_MARKS]
        name = f"r{replica} batch ends"
        if len(kept) < len(shown):
            name += f" (first {len(kept)} of {len(shown)})"
        color = _COLORS[i % len(_COLORS)]
        traces.append(
            go.Scatter(
                x=kept, y=[0.03 + 0.05 * i] * len(kept), yaxis="y2", name=name, mode="markers",
                marker={"symbol": "line-ns", "size": 12, "color": color,
                        "line": {"color": color, "width": 1.5}},
                hovertemplate=f"r{replica} batch ended at %{{x:.2f}} s<extra></extra>",
            )
        )  # fmt: skip
    return traces


def latency_figure(report: Report) -> go.Figure:
    """Per-second p50/p99/max over time, phases shaded, each replica's batch ends marked."""
    s = report.series
    fig = go.Figure()
    for name, ys, color, dash in (
        ("max", s.max_ms, "#bbbbbb", "dot"),
        ("p99", s.p99_ms, "#d62728", "solid"),
        ("p50", s.p50_ms, "#1f77b4", "solid"),
    ):
        fig.add_trace(
            go.Scatter(x=s.t_s, y=ys, name=name, mode="lines+markers", connectgaps=False,
                       line={"color": color, "dash": dash}, marker={"size": 4})
        )  # fmt: skip
    x_range = _time_range(report)
    marks = batch_end_traces(report, x_range)
    for trace in marks:
        fig.add_trace(trace)
    if marks:
        fig.update_layout(
            yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}
        )
    _shade(fig, report)
    fig.update_layout(
        title=f"End-to-end latency per second - {report.run}",
        xaxis={"title": "seconds since input start", "range": x_range},
        yaxis=latency_axis([*s.p50_ms, *s.max_ms]),
        **_LAYOUT,
    )
    return fig


def _dist_trace(
    name: str, points: Sequence[tuple[float, float]], color: str | None, dash: str = "solid"
) -> go.Scatter:
    pts = [(x, v) for x, v in ((_x_of(q), v) for q, v in points) if math.isfinite(x)]
    return go.Scatter(
        x=[x for x, _ in pts], y=[v for _, v in pts], name=name, mode="lines",
        line={"color": color, "dash": dash, "shape": "hv"},
        hovertemplate="%{customdata}: %{y:.1f} ms<extra>" + html.escape(name) + "</extra>",
        customdata=[f"p{q:g}" for q, _ in points if q < 100.0],
    )  # fmt: skip


def _dist_layout(fig: go.Figure, title: str, values: Sequence[float | None]) -> None:
    fig.update_layout(
        title=title,
        xaxis={"type": "log", "tickmode": "array", "tickvals": _DIST_TICKS,
               "ticktext": _DIST_LABELS, "title": "percentile"},
        yaxis=latency_axis(values),
        **_LAYOUT,
    )  # fmt: skip


def distribution_figure(report: Report) -> go.Figure:
    """The latency distribution of each phase (HdrHistogram-style percentile plot)."""
    fig = go.Figure()
    colors = iter(_COLORS[1:] * 4)
    for name, points in report.series.distribution.items():
        color = "#000000" if name == "overall" else next(colors)
        fig.add_trace(_dist_trace(name, points, color, "dash" if name == "overall" else "solid"))
    values = [v for pts in report.series.distribution.values() for _, v in pts]
    _dist_layout(fig, f"Latency by percentile, per phase - {report.run}", values)
    return fig


def rate_figure(report: Report) -> go.Figure:
    """Output rate (first copies) and per-replica received records per second."""
    s = report.series
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=s.rate_t_s,
            y=s.output_rate,
            name="merged output (first copies)",
            mode="lines",
            line={"color": "#000000", "width": 3},
        )
    )
    for i, (replica, ys) in enumerate(sorted(s.replica_rate.items())):
        color = _COLORS[i % len(_COLORS)]
        fig.add_trace(
            go.Scatter(x=s.rate_t_s, y=ys, name=f"replica {replica} (received)", mode="lines",
                       line={"color": color})
        )  # fmt: skip
        if len(s.replica_rate) > 1:  # with one replica, every result is its first copy
            fig.add_trace(
                go.Scatter(x=s.rate_t_s, y=s.replica_wins.get(replica, []), mode="lines",
                           name=f"replica {replica} (first copies)",
                           line={"color": color, "dash": "dot"})
            )  # fmt: skip
    _shade(fig, report)
    fig.update_layout(
        title=f"Results per second - {report.run}",
        xaxis={"title": "seconds since input start", "range": _time_range(report)},
        yaxis_title="records / s",
        **_LAYOUT,
    )
    return fig


def batch_figure(report: Report) -> go.Figure:
    """Each replica's micro-batch durations (Spark's ``triggerExecution``) over time."""
    fig = go.Figure()
    for i, (replica, pts) in enumerate(sorted(report.series.batches.items())):
        fig.add_trace(
            go.Scatter(
                x=[t for t, _ in pts], y=[d for _, d in pts], name=f"replica {replica}",
                mode="markers", marker={"color": _COLORS[i % len(_COLORS)], "size": 5},
            )
        )  # fmt: skip
    _shade(fig, report)
    fig.update_layout(
        title=f"Micro-batch duration per replica - {report.run}",
        xaxis={"title": "batch start, seconds since input start", "range": _time_range(report)},
        yaxis=latency_axis([d for pts in report.series.batches.values() for _, d in pts]),
        **_LAYOUT,
    )
    fig.update_yaxes(title="batch duration (ms)")
    return fig


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _fig_html(fig: go.Figure, div_id: str, first: bool) -> str:
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=bool(first),
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px 40px;
       color: #222; }
h1 { font-size: 26px; } h2 { font-size: 20px; margin-top: 32px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
.ok { color: #2ca02c; font-weight: bold; } .bad { color: #d62728; font-weight: bold; }
.note { color: #666; font-size: 13px; }
.tables { display: flex; flex-wrap: wrap; gap: 8px 40px; }
"""


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _slo_html(report: Report) -> str:
    if not report.slo.checks:
        return "<p class='note'>The spec sets no SLO ([report.slo]).</p>"
    items = "".join(
        f"<li class='{'ok' if c.passed else 'bad'}'>{'met' if c.passed else 'BREACHED'}: "
        f"{html.escape(c.line)}</li>"
        for c in report.slo.checks
    )
    verdict = "all met" if report.slo.passed else "breached"
    return f"<p>SLOs: <b>{verdict}</b></p><ul>{items}</ul>"


def report_body(report: Report, first_plot: bool = True, id_suffix: str = "") -> str:
    """The HTML of one run's section (plots and tables).

    Args:
        report: the run.
        first_plot: embed plotly.js with the first plot (once per page).
        id_suffix: appended to the plot div ids (several runs on one page).
    """
    parts = [
        f"<h1>arfl report: {html.escape(report.run)}</h1>",
        f"<p>mode <b>{html.escape(report.mode)}</b>, {report.replicas} replica(s); "
        f"input {fmt(report.input_end_s, ' s')}, warm-up {report.warmup_s:g} s (excluded; "
        f"{html.escape(report.warmup_rule)}), "
        f"tolerance {report.tolerance:g}x</p>",
    ]
    share = report.resources.placement_line()
    if share:
        parts.append(f"<p>{html.escape(share)}</p>")
    parts += [f"<p class='bad'>{html.escape(w)}</p>" for w in report.warnings]
    parts.append(_slo_html(report))
    parts.append(_fig_html(latency_figure(report), "latency-over-time" + id_suffix, first_plot))
    parts.append(
        "<h2>Phases (latency and gaps in ms; * warm-up, excluded)</h2>"
        + _table(*phase_rows(report))
    )
    parts.append(f"<p class='note'>Output gaps: {html.escape(report.gap_resolution)}. "
                 f"Run-wide longest gap (merger, exact): {fmt(report.longest_gap_ms, ' ms')}."
                 "</p>")  # fmt: skip
    if report.faults:
        parts.append(
            "<h2>Faults (at: s after input start; window, detect, restored, recovery: "
            "s after injection)</h2>" + _table(*fault_rows(report))
        )
    parts.append(_fig_html(distribution_figure(report), "latency-distribution" + id_suffix, False))
    parts.append(_fig_html(rate_figure(report), "output-rate" + id_suffix, False))
    if any(report.series.batches.values()):
        parts.append(_fig_html(batch_figure(report), "batch-duration" + id_suffix, False))
    parts.append("<h2>Correctness</h2>" + _table(*correctness_rows(report)))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.correctness.notes)
    parts.append(f"<ul class='note'>{notes}</ul>")
    if report.correctness.updates:
        parts.append(
            "<p class='note'>Update run (a window under real-time mode): every input record "
            "that reaches a window yields an update <code>&lt;window rid&gt;#&lt;n&gt;</code>, "
            "and the counts are over update ids. A window's final value is its update with the "
            "largest n. The final topic keys every update by its window rid, so the final value "
            "is the record with the largest n per key (with no duplicates, also the last record "
            "per key, which a compacted topic keeps); <code>docs/report-json.md</code> shows "
            "how to read them.</p>"
        )
    if report.late_drops.rows and report.late_drops.agreed:
        parts.append(
            "<p class='note'>Late drops: rows dropped behind the agreed watermark (a row whose "
            "window ended before the newest event time ahead of its agreed batch, minus the "
            "window's watermark; journal <code>late-drop</code>). Every replica drops the same "
            "rows, however its batches run.</p>"
        )
    elif report.late_drops.rows:
        parts.append(
            "<p class='note'>Late drops: rows a replica's stateful operators dropped as older "
            "than its watermark (Spark's <code>numRowsDroppedByWatermark</code>, per batch; "
            "journal <code>late-drop</code>). The watermark advances where a replica's batches "
            "end, so another replica may have kept them.</p>"
        )
    if report.workload is not None:
        parts.append(
            "<h2>Workload (input records per partition and per Kafka key)</h2>"
            + _table(*workload_rows(report))
            + _table(*hot_key_rows(report))
        )
    if report.hops is not None and report.hops.hops:
        parts.append(
            "<h2>Latency by hop (ms, after the warm-up)</h2>"
            + _table(*hop_rows(report))
            + f"<p class='note'>{html.escape(HOPS_NOTE)}</p>"
        )
    elif report.hops is not None and report.hops.unsupported:
        parts.append(f"<p class='note'>Latency by hop: {html.escape(report.hops.unsupported)}</p>")
    parts.append("<h2>Resources</h2>" + _table(*resource_rows(report)))
    return "\n".join(parts)


def render_html(report: Report, path: Path) -> Path:
    """Write the HTML report of one run to ``path``.

    Raises:
        ReportError: the file cannot be written.
    """
    return _write(path, _page(f"arfl report {report.run}", report_body(report)))


def compare_latency_figure(comparison: Comparison) -> go.Figure:
    """Per-second p99 (solid) and p50 (dotted) of every run, overlaid."""
    fig = go.Figure()
    for i, (rep, name) in enumerate(zip(comparison.reports, comparison.names, strict=True)):
        color = _COLORS[i % len(_COLORS)]
        s = rep.series
        fig.add_trace(
            go.Scatter(x=s.t_s, y=s.p99_ms, name=f"{name} p99", mode="lines", line={"color": color})
        )
        fig.add_trace(
            go.Scatter(
                x=s.t_s,
                y=s.p50_ms,
                name=f"{name} p50",
                mode="lines",
                line={"color": color, "dash": "dot"},
            )
        )
    first = comparison.reports[0]
    _shade(fig, first)
    fig.update_layout(
        title="Latency per second, runs overlaid (windows shaded: first run)",
        xaxis={
            "title": "seconds since input start",
            "range": [
                min(_time_range(r)[0] for r in comparison.reports),
                max(_time_range(r)[1] for r in comparison.reports),
            ],
        },
        yaxis=latency_axis(
            [v for rep in comparison.reports for v in (*rep.series.p50_ms, *rep.series.p99_ms)]
        ),
        **_LAYOUT,
    )
    return fig


def compare_distribution_figure(comparison: Comparison) -> go.Figure:
    """The overall latency distribution of every run, overlaid."""
    fig = go.Figure()
    for i, (rep, name) in enumerate(zip(comparison.reports, comparison.names, strict=True)):
        points = rep.series.distribution.get("overall", [])
        fig.add_trace(_dist_trace(name, points, _COLORS[i % len(_COLORS)]))
    values = [
        v for rep in comparison.reports for _, v in rep.series.distribution.get("overall", [])
    ]
    _dist_layout(fig, "Latency by percentile (after warm-up), runs overlaid", values)
    return fig


def render_compare_html(comparison: Comparison, path: Path) -> Path:
    """Write the HTML comparison of several runs (overlaid plots, tables, then each run).

    Raises:
        ReportError: the file cannot be written.
    """
    parts = [
        f"<h1>arfl comparison: {html.escape(', '.join(comparison.names))}</h1>",
        "<p class='note'>Ratios are to the first run. Runs: "
        + ", ".join(
            html.escape(f"{n} = {r}" if n != r else r)
            for n, r in zip(comparison.names, comparison.runs, strict=True)
        )
        + ".</p>",
        _fig_html(compare_latency_figure(comparison), "compare-latency-over-time", True),
        _fig_html(compare_distribution_figure(comparison), "compare-latency-distribution",
                  False),
    ]  # fmt: skip
    units = {
        "results_per_s": "results/s", "detect_s": "s", "recovery_s": "s", "masked": "",
        "cpu_s": "CPU s", "peak_rss_mb": "MiB (peak RSS)", "replicas": "", "missing": "",
        "duplicates": "", "divergent": "",
    }  # fmt: skip
    tables = []
    for metric, headers, rows in comparison_tables(comparison):
        unit = units.get(metric, "ms")
        tables.append(f"<div><h2>{html.escape(metric)} {unit}</h2>{_table(headers, rows)}</div>")
    parts.append("<div class='tables'>" + "".join(tables) + "</div>")
    for i, rep in enumerate(comparison.reports):
        parts.append("<hr>" + report_body(rep, first_plot=False, id_suffix=f"-{i + 1}"))
    return _write(path, _page("arfl comparison", "\n".join(parts)))


def _write(path: Path, text: str) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise ReportError(f"cannot write the HTML report {path}: {e}") from e
    return path
