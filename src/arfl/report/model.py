"""The report's data: plain frozen dataclasses with a stable ``to_dict()`` (the ``--json``
contract, documented in ``docs/report-json.md``).

Times in the JSON are seconds relative to the input start (``start_s``, ``at_s``) or durations
in seconds (``*_s``); latencies and gaps are milliseconds (``*_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arfl.report.sections import LateDrops, Resources, Series, WorkloadSkew

if TYPE_CHECKING:
    # Only a type here: importing arfl.measure.check would load the spec module, which the
    # spec validator's import of arfl.report.slo must not (a cycle).
    from arfl.measure.check.hops import HopLatency

JSON_VERSION = 9
"""Bumped when a field of the ``--json`` output changes meaning or is removed. 8: an automatic
``warmup_s`` also waits for the output to settle after the replicas' first boundaries (MSER-5;
was: 1 s after them). 5:
``faults[].recovery_s`` requires the output good through the impact window too (was: for
``settle`` from T only, so an effect later than settle after the injection gave 0 s). 4:
``faults[].masked`` holds the window's p99 to the steady p99 at the window's length
(``faults[].steady_p99_ms``: the steady phase's worst stretch as long as the window, at least
the whole phase's; was: the whole phase's p99), ``recovery_s`` each interval's p99 to the
steady p99 at an interval's length (``faults[].steady_interval_p99_ms``). 3: the impact
window (``faults[].window_s``, the ``fault-N`` phase, ``masked``) runs to caught up + settle
(was: healthy + settle); ``caught_up_s`` and ``caught_up_lag_ms`` read the replica's trail
where the merger kept one (was: its lag). 2: ``faults[].caught_up_s`` reads the output (was:
the journal's ``replica-caught-up``, the replica's commits); ``caught_up_lag_ms`` added."""


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


@dataclass(frozen=True)
class PhaseStats:
    """Latency, throughput and gaps of one phase.

    Attributes:
        name: ``warmup``, ``steady``, ``fault-N``, ``recovery-N``, ``steady-N``, ``tail``.
        kind: ``warmup``, ``steady``, ``fault``, ``recovery`` or ``tail``.
        start_s: phase start, seconds after the input start.
        end_s: phase end, seconds after the input start.
        percentiles_ms: ``{"p50": ms, ...}`` for the spec's ``report.percentiles`` (None: no
            result arrived in the phase).
        max_ms: the largest latency in the phase.
        count: results (first copies) whose latency was recorded in the phase.
        covered_s: seconds of latency intervals the phase's numbers come from.
        results_per_s: ``count / covered_s``.
        max_gap_ms: the longest output gap that started in the phase (see :mod:`.gaps`).
        max_gap_exact: whether ``max_gap_ms`` is exact (to 1 ms) or a lower bound.
        fault: the fault's index (1-based) for ``fault``/``recovery`` phases.
        sent_percentiles_ms: the same percentiles of the latency from each result's *actual*
            send time (``latency-sent.hlog``; empty when the run has none). Far below
            ``percentiles_ms`` means the injector fell behind its schedule, not the pipeline.
    """

    name: str
    kind: str
    start_s: float
    end_s: float
    percentiles_ms: dict[str, float | None]
    max_ms: float | None
    count: int
    covered_s: float
    results_per_s: float | None
    max_gap_ms: float | None
    max_gap_exact: bool = True
    fault: int | None = None
    sent_percentiles_ms: dict[str, float | None] = field(default_factory=dict)

    def metric(self, key: str) -> float | None:
        """A numeric metric by name: ``p99``, ``p99.9``, ``max``, ``max_gap``,
        ``results_per_s``."""
        if key in self.percentiles_ms:
            return self.percentiles_ms[key]
        if key == "max":
            return self.max_ms
        if key == "max_gap":
            return self.max_gap_ms
        if key == "results_per_s":
            return self.results_per_s
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        """The ``phases[]`` entry of the JSON output."""
        p = self.percentiles_ms
        return {
            "name": self.name,
            "kind": self.kind,
            "start_s": _r(self.start_s),
            "end_s": _r(self.end_s),
            "p50_ms": p.get("p50"),
            "p90_ms": p.get("p90"),
            "p99_ms": p.get("p99"),
            "p999_ms": p.get("p99.9"),
            "max_ms": self.max_ms,
            "percentiles_ms": dict(p),
            "count": self.count,
            "covered_s": _r(self.covered_s),
            "results_per_s": _r(self.results_per_s, 1),
            "max_gap_ms": self.max_gap_ms,
            "max_gap_exact": self.max_gap_exact,
            "fault": self.fault,
            "sent_percentiles_ms": dict(self.sent_percentiles_ms),
        }


@dataclass(frozen=True)
class FaultStats:
    """One injected fault and how the pipeline coped.

    Attributes:
        index: 1-based, in order of injection.
        kind: the fault kind (``kill-replica``, ``pause``, ...).
        target: the replica it hit (None when unknown).
        at_s: injection time, seconds after the input start.
        duration_s: the requested duration (None for instant faults such as kills).
        window_s: the length of the fault window (see :func:`arfl.report.build.build_report`).
        detect_s: injection until the system noticed (supervisor saw the driver die; for
            ``kill-executor``: the replacement executor ran). None when nothing is journaled.
        restored_s: injection until the replica / executor was back (None when unknown).
        first_batch_s: kills of a replica: injection until the restarted replica finished its
            first micro-batch (None when unknown).
        caught_up_s: injection until the faulted replica was back within ``caught_up_lag_ms``
            behind the output (its trail, else its lag: ``ReplicaSnapshot.behind_ms``; R
            restored; :func:`arfl.report.verdicts.caught_up_at`; None when unknown or not
            before the output ended).
        caught_up_lag_ms: the faulted replica's lag allowance: p90 of its trail (else lag) over
            the steady phase, at least 100 ms (:func:`arfl.report.verdicts.lag_allowance`).
        recovery_s: injection until the output was back within tolerance of the steady state
            and stayed there for the settle time (0: never left it; None: not recovered
            before the next fault / the end of the output, or no usable steady state).
        masked: over the impact window, p99 and longest gap within tolerance of the steady
            state and no result missing (None: unknown, see ``verdict``).
        p99_ms: p99 of the impact window.
        steady_p99_ms: the steady p99 the window's p99 was held to: the highest p99 of the
            steady phase's stretches as long as the window, at least the whole phase's
            (:func:`arfl.report.verdicts.stretch_p99`; None: no usable steady state).
        steady_interval_p99_ms: the same at a latency interval's length (1 s): what each
            interval's p99 is held to for ``recovery_s``.
        max_gap_ms: the longest output gap overlapping the impact window.
        healthy_s: injection until the faulted replica delivered a result from input sent
            after the injection (None: not before the window's cap).
        window_ended_by: what ended the impact window: ``caught-up+settle``,
            ``healthy+settle`` (caught up unknown), ``next fault`` or ``end of input``.
        verdict: the masked verdict in words, with the figure that decided it.
        effect: what the fault did to what it hit, as the merger saw it
            (:func:`arfl.report.verdicts.replica_effect`); ``effect_seen`` says whether it
            showed (None: it cannot be seen).
        caught_up_on: what ``caught_up_s`` was judged on: ``trail`` (what the replica owes the
            output) or ``lag`` (its newest result's age, where no trail was kept: one replica,
            window results; a replica can be current on one partition and still replay
            another), None without an allowance.
        description: what the chaos runner said it did.
        error: why the fault failed (then no window and no verdict).
    """

    index: int
    kind: str
    target: int | None
    at_s: float | None
    duration_s: float | None
    window_s: float | None
    detect_s: float | None
    restored_s: float | None
    recovery_s: float | None
    masked: bool | None
    p99_ms: float | None
    max_gap_ms: float | None
    description: str = ""
    error: str | None = None
    first_batch_s: float | None = None
    caught_up_s: float | None = None
    caught_up_lag_ms: float | None = None
    healthy_s: float | None = None
    window_ended_by: str | None = None
    verdict: str = ""
    steady_p99_ms: float | None = None
    steady_interval_p99_ms: float | None = None
    effect: str = ""
    effect_seen: bool | None = None
    caught_up_on: str | None = None

    @property
    def outcome(self) -> str:
        """The verdict in a word: ``masked``, ``not masked``, ``no effect`` (the fault did not
        visibly hurt what it hit), ``unjudged`` (the input ended first, or the wall clock
        moved too much to tell), ``unknown`` or ``failed``."""
        if self.error is not None:
            return "failed"
        if self.masked is not None:
            return "masked" if self.masked else "not masked"
        for word in ("no effect", "unjudged"):
            if self.verdict.startswith(word):
                return word
        return "unknown"

    def to_dict(self) -> dict[str, Any]:
        """The ``faults[]`` entry of the JSON output."""
        return {
            "index": self.index,
            "kind": self.kind,
            "target": self.target,
            "at_s": _r(self.at_s),
            "duration_s": _r(self.duration_s),
            "window_s": _r(self.window_s),
            "detect_s": _r(self.detect_s),
            "restored_s": _r(self.restored_s),
            "first_batch_s": _r(self.first_batch_s),
            "caught_up_s": _r(self.caught_up_s),
            "caught_up_lag_ms": _r(self.caught_up_lag_ms),
            "recovery_s": _r(self.recovery_s),
            "masked": self.masked,
            "outcome": self.outcome,
            "verdict": self.verdict,
            "effect": self.effect,
            "effect_seen": self.effect_seen,
            "caught_up_on": self.caught_up_on,
            "healthy_s": _r(self.healthy_s),
            "window_ended_by": self.window_ended_by,
            "p99_ms": self.p99_ms,
            "steady_p99_ms": _r(self.steady_p99_ms),
            "steady_interval_p99_ms": _r(self.steady_interval_p99_ms),
            "max_gap_ms": self.max_gap_ms,
            "description": self.description,
            "error": self.error,
        }


@dataclass(frozen=True)
class Correctness:
    """Were the results right?

    Attributes:
        basis: ``recomputed`` (offline Spark batch job over the input topic, sink topic read
            back) or ``merger`` (the merger's own counters; nothing is re-read).
        expected: results the pipeline should have produced (None when unknown).
        results: distinct results delivered by the merger.
        missing: expected results never delivered (None when unknown).
        duplicates: copies of a result id delivered more than once to the sink.
        divergent: copies of one result id whose content differed (between replicas, or from
            the recomputation).
        produced: input events the injector produced.
        notes: how each number was obtained when that is not obvious.
        delivery_failures: results the merger could not write to the final topic (None:
            unknown).
        extra: delivered result ids the input does not explain (independent check only;
            None: not checked).
        updates: the run emits window updates (``Spec.emits_updates``: a window under real-time
            mode, one update per input record, rid ``<window>#<n>``, see
            :mod:`arfl.run.records`). The counts above are then over update ids, and the three
            below are written to :meth:`to_dict`.
        windows: update runs: distinct windows (window rids) among the delivered updates
            (None: unknown or not an update run).
        final_values_checked: update runs: windows whose final value was judged (None:
            unknown or not an update run).
        final_values_wrong: update runs: of those, windows whose last delivered update
            (largest n, :func:`arfl.run.records.final_values`) is not the expected final update
            with the expected value, none delivered included (None: unknown or not an update
            run).
    """

    basis: str
    expected: int | None
    results: int | None
    missing: int | None
    duplicates: int | None
    divergent: int | None
    produced: int | None
    notes: list[str] = field(default_factory=list)
    delivery_failures: int | None = None
    extra: int | None = None
    updates: bool = False
    windows: int | None = None
    final_values_checked: int | None = None
    final_values_wrong: int | None = None

    @property
    def complete(self) -> bool | None:
        """Every expected result in the final output exactly once with the same value, and
        nothing lost on the way to it (docs/design.md §4 "complete"); for an update run also
        every window's final value right. None when a count is unknown."""
        counts = (self.missing, self.duplicates, self.divergent, self.delivery_failures)
        if self.extra or self.final_values_wrong:
            return False
        if any(c is not None and c > 0 for c in counts):
            return False
        if any(c is None for c in counts):
            return None
        return True

    def to_dict(self) -> dict[str, Any]:
        """The ``correctness`` object of the JSON output (``windows`` and the final-value
        counts only for update runs, null there when unknown)."""
        out: dict[str, Any] = {
            "basis": self.basis,
            "expected": self.expected,
            "results": self.results,
            "missing": self.missing,
            "duplicates": self.duplicates,
            "divergent": self.divergent,
            "produced": self.produced,
            "delivery_failures": self.delivery_failures,
            "extra": self.extra,
            "complete": self.complete,
            "notes": list(self.notes),
        }
        if self.updates:
            out["windows"] = self.windows
            out["final_values_checked"] = self.final_values_checked
            out["final_values_wrong"] = self.final_values_wrong
        return out


@dataclass(frozen=True)
class SloCheck:
    """One SLO of the spec, checked.

    Attributes:
        key: as written in the spec (``p99``, ``fault.max_gap``, ``masked``).
        target: the spec's value, as written.
        actual: the measured value, rendered (``"812.3 ms"``, ``"none"``).
        passed: whether it was met.
        line: a one-line human description (``"p99 (overall) 812.3 ms > 500ms"``).
    """

    key: str
    target: str
    actual: str
    passed: bool
    line: str

    def to_dict(self) -> dict[str, Any]:
        """One entry of ``slo.checks``."""
        return {
            "key": self.key,
            "target": self.target,
            "actual": self.actual,
            "passed": self.passed,
            "line": self.line,
        }


@dataclass(frozen=True)
class SloResult:
    """Every SLO checked; ``passed`` is True when there is none."""

    checks: list[SloCheck]

    @property
    def passed(self) -> bool:
        """All SLOs met."""
        return all(c.passed for c in self.checks)

    @property
    def breaches(self) -> list[SloCheck]:
        """The SLOs not met."""
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        """The ``slo`` object of the JSON output."""
        return {
            "passed": self.passed,
            "breaches": [c.line for c in self.breaches],
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass(frozen=True)
class Report:
    """The report of one run; ``to_dict()`` is the ``--json`` output.

    Attributes:
        run: the run's id (directory name).
        run_dir: the run directory.
        mode: the replication mode.
        replicas: how many replicas.
        input_start: epoch seconds of the input start (time 0 of every ``*_s`` field).
        input_end_s: input end, seconds after the input start.
        warmup_s: the warm-up excluded from steady state.
        warmup_rule: where ``warmup_s`` comes from: ``workload.warmup``, or ``auto: ...``
            (:func:`arfl.run.steady.resolve_warmup`).
        tolerance: the ratio used for recovery and masking.
        percentiles: the percentiles shown.
        phases: in time order.
        overall: the whole measured run (input start + warm-up to input end).
        faults: in order of injection.
        correctness: result counts.
        slo: the spec's SLOs, checked.
        longest_gap_ms: the merger's run-wide longest output gap (exact, 1 ms).
        gap_resolution: how gaps were measured (a sentence).
        series: per-second data for plots.
        warnings: things the reader should know (partial run, missing files).
        resources: CPU seconds and peak memory of the replicas.
        late_drops: rows each replica dropped behind the watermark.
        workload: records per partition and per key of the input, with the hot keys (None:
            no independent check read the input).
        hops: the delivered results' latency hop by hop from the topics' Kafka timestamps
            (``check.json``'s ``hops``; None: not measured).
    """

    run: str
    run_dir: str
    mode: str
    replicas: int
    input_start: float | None
    input_end_s: float | None
    warmup_s: float
    tolerance: float
    percentiles: list[float]
    phases: list[PhaseStats]
    overall: PhaseStats
    faults: list[FaultStats]
    correctness: Correctness
    slo: SloResult
    longest_gap_ms: float | None
    gap_resolution: str
    series: Series
    warnings: list[str] = field(default_factory=list)
    resources: Resources = field(default_factory=Resources)
    late_drops: LateDrops = field(default_factory=LateDrops)
    workload: WorkloadSkew | None = None
    hops: HopLatency | None = None
    warmup_rule: str = "workload.warmup"

    def phase(self, name: str) -> PhaseStats:
        """A phase by name (``overall`` included).

        Raises:
            KeyError: no such phase.
        """
        if name == "overall":
            return self.overall
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` output (a stable contract; see ``docs/report-json.md``)."""
        return {
            "version": JSON_VERSION,
            "run": self.run,
            "run_dir": self.run_dir,
            "mode": self.mode,
            "replicas": self.replicas,
            "input_start": self.input_start,
            "input_end_s": _r(self.input_end_s),
            "warmup_s": self.warmup_s,
            "warmup_rule": self.warmup_rule,
            "tolerance": self.tolerance,
            "percentiles": list(self.percentiles),
            "phases": [p.to_dict() for p in self.phases],
            "overall": self.overall.to_dict(),
            "faults": [f.to_dict() for f in self.faults],
            "correctness": self.correctness.to_dict(),
            "late_drops": self.late_drops.to_dict(),
            "workload": None if self.workload is None else self.workload.to_dict(),
            "hops": None if self.hops is None else self.hops.to_dict(),
            "resources": self.resources.to_dict(),
            "slo": self.slo.to_dict(),
            "longest_gap_ms": self.longest_gap_ms,
            "gap_resolution": self.gap_resolution,
            "warnings": list(self.warnings),
        }
