"""Several runs side by side: every metric per phase, with ratios to the first run.

Phases are matched by name (``steady``, ``fault-1``, ``recovery-1``, ``tail``, ``overall``), so
runs of the same spec under different replication modes line up fault by fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arfl.coerce import opt_float
from arfl.errors import ReportError
from arfl.report.model import Report

COMPARED_METRICS: tuple[str, ...] = (
    "p50",
    "p90",
    "p99",
    "p99.9",
    "max",
    "max_gap",
    "results_per_s",
)
FAULT_METRICS: tuple[str, ...] = ("detect_s", "recovery_s", "masked")
RUN_METRICS: tuple[str, ...] = (
    "cpu_s",
    "peak_rss_mb",
    "replicas",
    "missing",
    "duplicates",
    "divergent",
)
"""Whole-run rows (phase ``run``): what the replicas cost and whether the output was right."""


def _run_metric(rep: Report, metric: str) -> float | None:
    if metric == "cpu_s":
        return rep.resources.cpu_s
    if metric == "peak_rss_mb":
        return rep.resources.peak_rss_mb
    if metric == "replicas":
        return float(rep.replicas)
    return opt_float(getattr(rep.correctness, metric))


@dataclass(frozen=True)
class ComparisonRow:
    """One metric of one phase (or fault) across runs.

    Attributes:
        metric: ``p99``, ``max_gap``, ``recovery_s``, ...
        phase: the phase name, or ``fault-N`` for fault metrics.
        values: one per run (None: not measured / no such phase).
        ratios: ``value / first run's value`` (None when either is missing or zero; always
            1.0 for the first run when it has a value).
    """

    metric: str
    phase: str
    values: list[float | bool | None]
    ratios: list[float | None]

    def to_dict(self) -> dict[str, Any]:
        """One entry of ``comparison.rows``."""
        return {
            "metric": self.metric,
            "phase": self.phase,
            "values": list(self.values),
            "ratios": [None if r is None else round(r, 4) for r in self.ratios],
        }


@dataclass(frozen=True)
class Comparison:
    """Runs compared; ``rows`` are grouped by metric, phases in time order."""

    reports: list[Report]
    rows: list[ComparisonRow]
    labels: list[str] = field(default_factory=list)
    """Short names for tables and legends (an experiment's modes); the run ids if empty."""

    @property
    def runs(self) -> list[str]:
        """The runs' ids, first (the reference) first."""
        return [r.run for r in self.reports]

    @property
    def names(self) -> list[str]:
        """What tables and plots call the runs: the labels, else the run ids."""
        return list(self.labels) if self.labels else self.runs

    def table(self, metric: str) -> list[ComparisonRow]:
        """The rows of one metric."""
        return [r for r in self.rows if r.metric == metric]

    def to_dict(self) -> dict[str, Any]:
        """The ``comparison`` object of the JSON output."""
        return {
            "runs": self.runs,
            "labels": self.names,
            "rows": [r.to_dict() for r in self.rows],
        }


def _ratio(v: float | bool | None, ref: float | bool | None) -> float | None:
    if isinstance(v, bool) or isinstance(ref, bool) or v is None or ref is None or ref == 0:
        return None
    return float(v) / float(ref)


def _phase_names(reports: Sequence[Report]) -> list[str]:
    names: list[str] = []
    for rep in reports:
        for p in rep.phases:
            if p.kind != "warmup" and p.name not in names:
                names.append(p.name)
    names.append("overall")
    return names


def compare(reports: Sequence[Report], labels: Sequence[str] | None = None) -> Comparison:
    """Compare runs, the first one being the reference (``labels``: one short name per run).

    Raises:
        ReportError: fewer than two reports, or labels that do not match them.
    """
    if len(reports) < 2:
        raise ReportError("comparing needs at least two runs")
    if labels is not None and len(labels) != len(reports):
        raise ReportError(f"{len(labels)} label(s) for {len(reports)} runs")
    rows: list[ComparisonRow] = []
    names = _phase_names(reports)
    for metric in COMPARED_METRICS:
        for name in names:
            values: list[float | bool | None] = []
            for rep in reports:
                try:
                    values.append(rep.phase(name).metric(metric))
                except KeyError:
                    values.append(None)
            if all(v is None for v in values):
                continue
            rows.append(ComparisonRow(metric, name, values, [_ratio(v, values[0]) for v in values]))
    n_faults = max(len(r.faults) for r in reports)
    for metric in FAULT_METRICS:
        for i in range(n_faults):
            fvalues: list[float | bool | None] = []
            for rep in reports:
                f = rep.faults[i] if i < len(rep.faults) else None
                fvalues.append(None if f is None else getattr(f, metric))
            rows.append(
                ComparisonRow(
                    metric, f"fault-{i + 1}", fvalues, [_ratio(v, fvalues[0]) for v in fvalues]
                )
            )
    for metric in RUN_METRICS:
        rvalues: list[float | bool | None] = [_run_metric(rep, metric) for rep in reports]
        if all(v is None for v in rvalues):
            continue
        rows.append(ComparisonRow(metric, "run", rvalues, [_ratio(v, rvalues[0]) for v in rvalues]))
    return Comparison(list(reports), rows, list(labels or []))
