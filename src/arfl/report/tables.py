"""The rows of the report's tables, shared by the terminal report (``arfl report``) and the
HTML one (:mod:`arfl.report.html`): phases, faults, correctness, workload, hops, hot keys,
resources, and the comparison of several runs."""

from __future__ import annotations

from collections.abc import Sequence

from arfl.report.comparison import Comparison
from arfl.report.model import FaultStats, PhaseStats, Report
from arfl.report.sections import ReplicaLateDrops


def fmt(v: float | None, unit: str = "", nd: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v:.{nd}f}{unit}"


def ms(v: float | None) -> str:
    """Milliseconds, compact: one decimal below 100 ms, none above."""
    if v is None:
        return "-"
    return f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"


def phase_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the phase table (shared with the terminal renderer)."""
    keys = list(report.overall.percentiles_ms)
    # The second reading (from the actual send time), when the run recorded it.
    sent = bool(report.overall.sent_percentiles_ms)
    headers = ["phase", "seconds", *keys, "max", "res/s", "max gap"]
    if sent:
        headers.append("p99 sent")
    rows = []
    for p in [*report.phases, report.overall]:
        rows.append(_phase_row(p, keys, sent))
    return headers, rows


def _phase_row(p: PhaseStats, keys: Sequence[str], sent: bool = False) -> list[str]:
    gap = ms(p.max_gap_ms)
    if p.max_gap_ms is not None and not p.max_gap_exact:
        gap = "≥" + gap
    row = [
        p.name + ("*" if p.kind == "warmup" else ""),
        f"{p.start_s:.1f}-{p.end_s:.1f}",
        *[ms(p.percentiles_ms.get(k)) for k in keys],
        ms(p.max_ms),
        fmt(p.results_per_s, nd=0),
        gap,
    ]
    if sent:
        row.append(ms(p.sent_percentiles_ms.get("p99")))
    return row


def fault_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the fault table."""
    headers = ["#", "fault", "rep", "at", "window", "detect", "restored", "healthy",
               "1st batch", "caught up", "recovery", "p99 ms", "gap ms", "masked"]  # fmt: skip
    return headers, [_fault_row(f) for f in report.faults]


def _fault_row(f: FaultStats) -> list[str]:
    if f.error is not None:
        return [str(f.index), f.kind, str(f.target), fmt(f.at_s, nd=1), "-", "-", "-", "-",
                "-", "-", "-", "-", "-", f"failed: {f.error}"]  # fmt: skip
    masked = {"masked": "yes", "not masked": "NO"}.get(f.outcome, f.outcome)
    recovery = "never" if f.recovery_s is None and f.masked is not None else fmt(f.recovery_s, nd=2)
    caught_up = fmt(f.caught_up_s, nd=2)
    if f.caught_up_on == "lag" and f.caught_up_s is not None:
        caught_up += " (lag)"  # not what it owes the output: docs/design.md §4
    return [
        str(f.index), f.kind, "-" if f.target is None else str(f.target), fmt(f.at_s, nd=1),
        fmt(f.window_s, nd=1), fmt(f.detect_s, nd=2), fmt(f.restored_s, nd=2),
        fmt(f.healthy_s, nd=2), fmt(f.first_batch_s, nd=2),
        caught_up, recovery,
        ms(f.p99_ms), ms(f.max_gap_ms), masked,
    ]  # fmt: skip


def correctness_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and the one row of the correctness table (the HTML and the terminal report).

    Update runs (``Correctness.updates``) add ``windows`` and ``final values checked / wrong``
    before ``complete``; their other counts are over update ids.
    """
    c = report.correctness

    def n(v: int | None) -> str:
        return "unknown" if v is None else f"{v:,}"

    headers = ["basis", "produced", "expected", "results", "missing", "duplicates", "divergent",
               "late drops", "lost writes"]  # fmt: skip
    row = [c.basis, n(c.produced), n(c.expected), n(c.results), n(c.missing), n(c.duplicates),
           n(c.divergent), late_drops_cell(report), n(c.delivery_failures)]  # fmt: skip
    if c.updates:
        headers += ["windows", "final values checked / wrong"]
        finals = (c.final_values_checked, c.final_values_wrong)
        row += [
            n(c.windows),
            "unknown" if finals == (None, None) else f"{n(finals[0])} / {n(finals[1])}",
        ]
    headers.append("complete")
    row.append("unknown" if c.complete is None else ("yes" if c.complete else "NO"))
    return headers, [row]


def late_drops_cell(report: Report) -> str:
    """Rows each replica dropped behind the watermark, e.g. ``r0 0, r1 12`` (short: the
    correctness table is already wide; the batches are in the JSON and the warning)."""
    per = report.late_drops.replicas
    if not per or all(r is None for r in per.values()):
        return "unknown"
    return ", ".join(f"r{i} {_late_drops(r)}" for i, r in sorted(per.items()))


def _late_drops(r: ReplicaLateDrops | None) -> str:
    if r is None:
        return "unknown"
    n = len(r.unreported_batches)
    if not n:
        return f"{r.rows:,}"
    return f">= {r.rows:,} ({n} batch{'es' if n > 1 else ''} unknown)"


def workload_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and the one row of the input's spread (the "Workload" block): records,
    records per partition, distinct keys, keyless records, the hottest keys with their share,
    and the max/mean ratios over keys and over partitions. No rows without a count."""
    w = report.workload
    headers = ["records", "per partition", "distinct keys", "keyless", "hot keys (share)",
               "key max/mean", "partition max/mean"]  # fmt: skip
    if w is None:
        return headers, []
    per = ", ".join(f"p{p} {n:,}" for p, n in sorted(w.partitions.items()))
    hot = ", ".join(f"{k} {share:.1%}" for k, _, share in w.top_keys[:3])
    row = [f"{w.records:,}", per or "-", f"{w.keys:,}", f"{w.keyless:,}", hot or "-",
           fmt(w.key_max_mean, "x", nd=2), fmt(w.partition_max_mean, "x", nd=2)]  # fmt: skip
    return headers, [row]


def hop_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per hop of the delivered results (:mod:`arfl.measure.check.hops`):
    results, p50, p99, max (ms). No rows when the hops were not measured."""
    h = report.hops
    rows = [] if h is None else [
        [name, f"{st.count:,}", f"{st.p50:g}", f"{st.p99:g}", f"{st.max:g}"]
        for name, st in h.hops.items()
    ]  # fmt: skip
    return ["hop", "results", "p50", "p99", "max"], rows


HOPS_NOTE = (
    "late: the injector's send minus the event's intended time; append: the broker's append "
    "of the input minus the send; replica i: the broker's append of its copy (its send on a "
    "CreateTime topic) minus the input's append; merge: the delivered copy's send minus the "
    "earliest replica copy's; e2e: delivered minus intended. "
    "From the topics' Kafka timestamps (1 ms), not from the merger."
)


def hot_key_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per hot key (up to 10, hottest first): key, records, share."""
    w = report.workload
    rows = [] if w is None else [[k, f"{n:,}", f"{s:.1%}"] for k, n, s in w.top_keys]
    return ["hot key", "records", "share of keyed records"], rows


def resource_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """Headers and the one row of the replicas' cost (CPU seconds, peak memory)."""
    r = report.resources
    per = ", ".join(f"r{i} {v:,.1f}" for i, v in sorted(r.cpu_s_per_replica.items()))
    return (
        ["replicas", "CPU s", "CPU s per replica", "peak RSS MiB"],
        [[str(report.replicas), fmt(r.cpu_s, nd=1), per or "-", fmt(r.peak_rss_mb, nd=0)]],
    )


def comparison_tables(comparison: Comparison) -> list[tuple[str, list[str], list[list[str]]]]:
    """``(metric, headers, rows)`` per metric: phases down, runs across (value and ratio)."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    metrics: list[str] = []
    for row in comparison.rows:
        if row.metric not in metrics:
            metrics.append(row.metric)
    headers = ["phase"]
    for i, run in enumerate(comparison.names):
        headers.append(run)
        if i:
            headers.append("x first")
    for metric in metrics:
        rows = []
        for row in comparison.table(metric):
            cells = [row.phase]
            for i, (v, r) in enumerate(zip(row.values, row.ratios, strict=True)):
                if isinstance(v, bool):
                    cells.append("yes" if v else "NO")
                else:
                    cells.append(fmt(v, nd=2 if metric.endswith("_s") else 1))
                if i:
                    cells.append("-" if r is None else f"{r:.2f}")
            rows.append(cells)
        out.append((metric, headers, rows))
    return out
