"""SLOs of a spec (``[report.slo]``): which keys exist, and checking them against a report.

A key is ``[scope.]metric``:

* latency metrics ``p<percentile>`` (``p50``, ``p99``, ``p99.9``, any percentile in (0, 100])
  and ``max``; ``max_gap`` (the longest output gap) -- a duration (``"500ms"``), met when the
  measured value is at most it;
* ``results_per_s`` -- a number, met when the measured rate is at least it;
* scopes for those: ``overall`` (default: everything after the warm-up), ``steady``, ``tail``,
  ``fault`` (every fault window), ``recovery`` (every recovery phase);
* run-wide: ``masked`` (``true``: every fault was masked), ``recovery`` (a duration: every fault
  recovered within it), ``detect`` (a duration: every fault detected within it), ``missing``,
  ``duplicates``, ``divergent`` (counts: at most this many).

A metric that cannot be measured (no result at all, no steady state, a count that is unknown)
does not meet its SLO: an SLO is met only when it is shown to be met.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arfl.configs.slo import (
    parse_key,
    parse_value,
    validate_slo,
)
from arfl.errors import ReportError
from arfl.report.model import Correctness, FaultStats, PhaseStats, SloCheck, SloResult


def _ms(v: float | None) -> str:
    return "none" if v is None else f"{v:.1f} ms"


def _s(v: float | None) -> str:
    return "none" if v is None else f"{v:.2f} s"


def _target_str(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_slos(
    slo: Mapping[str, object],
    phases: Sequence[PhaseStats],
    overall: PhaseStats,
    faults: Sequence[FaultStats],
    correctness: Correctness,
) -> SloResult:
    """Check every SLO of a spec.

    Raises:
        ReportError: an SLO names an unknown metric or scope, or has a value of the wrong type
            (an SLO that cannot be checked must not pass silently).
    """
    problems = validate_slo(slo)
    if problems:
        raise ReportError(
            "cannot check the spec's SLOs: " + "; ".join(problems) + " (fix [report.slo])"
        )
    checks: list[SloCheck] = []
    for raw_key, raw_value in slo.items():
        key = parse_key(raw_key)
        target = parse_value(key, raw_value)
        tstr = _target_str(raw_value)
        if key.scope == "run":
            checks.append(_check_run(raw_key, key.metric, target, tstr, faults, correctness))
            continue
        if key.scope == "overall":
            scoped = [overall]
        elif key.scope in ("fault", "recovery"):
            scoped = [p for p in phases if p.kind == key.scope]
        else:
            scoped = [p for p in phases if p.name == key.scope]
        if not scoped:
            checks.append(
                SloCheck(
                    raw_key,
                    tstr,
                    "none",
                    False,
                    f"{raw_key}: no {key.scope} phase in this run, so it cannot be shown to be met",
                )
            )
            continue
        for phase in scoped:
            checks.append(_check_phase(raw_key, key.metric, float(target), tstr, phase))
    return SloResult(checks)


def _check_phase(raw: str, metric: str, target: float, tstr: str, phase: PhaseStats) -> SloCheck:
    value = phase.metric(metric)
    if metric == "results_per_s":
        ok = value is not None and value >= target
        actual = "none" if value is None else f"{value:.1f}/s"
        op = ">=" if ok else "<"
        return SloCheck(raw, tstr, actual, ok, f"{metric} ({phase.name}) {actual} {op} {tstr}")
    limit_ms = target * 1000.0
    ok = value is not None and value <= limit_ms
    actual = _ms(value)
    if metric == "max_gap" and not phase.max_gap_exact and value is not None:
        actual += " (at least)"
    op = "<=" if ok else ">"
    if value is None:
        line = f"{metric} ({phase.name}) not measured (no results) - cannot meet {tstr}"
    else:
        line = f"{metric} ({phase.name}) {actual} {op} {tstr}"
    return SloCheck(raw, tstr, actual, ok, line)


def _check_run(
    raw: str,
    metric: str,
    target: float | bool,
    tstr: str,
    faults: Sequence[FaultStats],
    correctness: Correctness,
) -> SloCheck:
    injected = [f for f in faults if f.error is None]
    if metric == "masked" and not target:
        return SloCheck(raw, tstr, "n/a", True, "masked = false: nothing to check")
    if metric in ("masked", "recovery", "detect"):
        # "Nothing to mask" is not a pass: a fault that did not take effect (its injection
        # failed, or it came after the input ended) fails every SLO about faults.
        void = [f"fault-{f.index} {f.kind} ({f.error})" for f in faults if f.error is not None]
        if not injected or void:
            what = "; ".join(void) if void else "no fault was injected"
            return SloCheck(
                raw, tstr, "no fault took effect" if not injected else "no", False,
                f"{metric}: cannot pass: {what}",
            )  # fmt: skip
    if metric == "masked":
        bad = [
            f"fault-{f.index} {f.kind}" + (f" ({f.verdict})" if f.verdict else "")
            for f in injected
            if f.masked is not True
        ]
        ok = not bad
        actual = "yes" if ok else "no"
        if ok:
            line = f"masked: all {len(injected)} fault(s) masked"
        else:
            line = "masked: not masked: " + ", ".join(bad)
        return SloCheck(raw, tstr, actual, ok, line)
    if metric in ("recovery", "detect"):
        limit = float(target)
        values = [(f, f.recovery_s if metric == "recovery" else f.detect_s) for f in injected]
        bad = [f"fault-{f.index} {f.kind} {_s(v)}" for f, v in values if v is None or v > limit]
        ok = not bad
        worst = max((v for _, v in values if v is not None), default=None)
        actual = _s(worst) if ok else "; ".join(bad)
        line = (
            f"{metric}: every fault within {tstr}"
            if ok
            else f"{metric}: beyond {tstr} (or never): " + ", ".join(bad)
        )
        return SloCheck(raw, tstr, actual, ok, line)
    value = getattr(correctness, metric)
    ok = value is not None and value <= float(target)
    actual = "unknown" if value is None else str(value)
    if value is None:
        line = f"{metric}: unknown (basis {correctness.basis}) - cannot meet <= {tstr}"
    else:
        line = f"{metric} {actual} {'<=' if ok else '>'} {tstr}"
    return SloCheck(raw, tstr, actual, ok, line)
