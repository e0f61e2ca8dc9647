"""The SLO keys of a spec (``[report.slo]``): their grammar and value types.

The report checks them (:mod:`arfl.report.slo`); the spec validator reports bad keys here.
A key is ``[scope.]metric``:

* latency metrics ``p<percentile>`` (``p50``, ``p99``, ``p99.9``, any percentile in (0, 100])
  and ``max``; ``max_gap`` (the longest output gap) -- a duration (``"500ms"``);
* ``results_per_s`` -- a number;
* scopes for those: ``overall`` (default), ``steady``, ``tail``, ``fault``, ``recovery``;
* run-wide: ``masked`` (true/false), ``recovery``, ``detect`` (durations), ``missing``,
  ``duplicates``, ``divergent`` (counts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from arfl.units import parse_duration, percentile_key

SCOPES = ("overall", "steady", "tail", "fault", "recovery")
PHASE_METRICS = ("max", "max_gap", "results_per_s")
"""Besides ``p<percentile>``."""
RUN_METRICS = ("masked", "recovery", "detect", "missing", "duplicates", "divergent")
PERCENTILE_METRIC = "p<percentile>"
METRIC_MEANINGS: dict[str, str] = {
    PERCENTILE_METRIC: "a latency percentile, any in (0, 100] (p50, p99, p99.9): met at or "
    "below it",
    "max": "the highest latency: met at or below it",
    "max_gap": "the longest gap in the output: met at or below it",
    "results_per_s": "results a second: met at or above it",
    "masked": "true: met when every fault was masked",
    "recovery": "met when every fault recovered within it",
    "detect": "met when every fault was detected within it",
    "missing": "results missing from the output: met at or below it",
    "duplicates": "results written to the output more than once: met at or below it",
    "divergent": "results whose replicas' copies differ: met at or below it",
}
"""What each metric measures and when its SLO is met (``docs/spec.md``)."""
_PCT_RE = re.compile(r"^p(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class SloKey:
    """A parsed key: ``scope`` (``run`` for run-wide metrics) and ``metric``."""

    scope: str
    metric: str


def known_keys() -> list[str]:
    """A readable list of the SLO keys (for error messages)."""
    return [
        "p<percentile> (p50, p99, p99.9, ...)",
        *PHASE_METRICS,
        *RUN_METRICS,
        f"any of the first three prefixed by a scope ({', '.join(SCOPES)}), e.g. fault.p99",
    ]


def parse_key(key: str) -> SloKey:
    head, dot, rest = key.partition(".")
    scope, metric = (head, rest) if dot and not re.match(r"^p\d+$", head) else ("", key)
    if scope and scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r} (known: {', '.join(SCOPES)})")
    if metric in RUN_METRICS:
        if scope:
            raise ValueError(f"{metric} is run-wide and takes no scope")
        return SloKey("run", metric)
    m = _PCT_RE.match(metric)
    if m:
        p = float(m.group(1))
        if not 0 < p <= 100:
            raise ValueError(f"percentile {p:g} is not in (0, 100]")
        return SloKey(scope or "overall", percentile_key(p))
    if metric in PHASE_METRICS:
        return SloKey(scope or "overall", metric)
    raise ValueError(f"unknown metric {metric!r} (known: {', '.join(known_keys())})")


def parse_value(key: SloKey, value: object) -> float | bool:
    if key.metric == "masked":
        if not isinstance(value, bool):
            raise ValueError(f"masked takes true or false, got {value!r}")
        return value
    if key.metric in ("missing", "duplicates", "divergent", "results_per_s"):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{key.metric} takes a number >= 0, got {value!r}")
        return float(value)
    # Everything else is a duration.
    return parse_duration(value)


def slo_percentiles(slo: Mapping[str, object]) -> list[float]:
    """The percentiles the SLO keys name (``{"fault.p95": ...}`` -> ``[95.0]``); invalid keys
    are ignored here (:func:`validate_slo` reports them)."""
    out: list[float] = []
    for key in slo:
        try:
            metric = parse_key(key).metric
        except ValueError:
            continue
        if _PCT_RE.match(metric):
            out.append(float(metric[1:]))
    return out


def validate_slo(slo: Mapping[str, object]) -> list[str]:
    """Problems with the SLO keys and values of a spec, one string per problem.

    Meant for the spec validator: ``report.slo.<key>: <problem>``. Empty when all is well.
    """
    problems: list[str] = []
    for key, value in slo.items():
        try:
            parse_value(parse_key(key), value)
        except ValueError as e:
            problems.append(f"report.slo.{key}: {e}")
    return problems
