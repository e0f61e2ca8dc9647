"""Compare a run's final output with the independently computed expected results."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from arfl.configs.expr import Value
from arfl.measure.check.evaluate import Expected
from arfl.measure.check.hops import HopLatency
from arfl.measure.check.skew import InputSkew
from arfl.run.records import final_values

MAX_EXAMPLES = 5
"""Examples kept per kind of problem."""
REL_TOL = 1e-9
"""Relative tolerance for numbers (the replicas sum in exact decimal and convert once)."""
ABS_TOL = 1e-12
"""Absolute tolerance, only so that a value of 0 can match a tiny rounding residue."""


@dataclass(frozen=True)
class Delivered:
    """One record of the final output topic: its result id and data (None if unreadable)."""

    rid: str | None
    data: Mapping[str, Any] | None


@dataclass(frozen=True)
class IndependentCheck:
    """The final output of a run against results computed without Spark.

    Counts are None when the check could not run (``unsupported`` says why). For a pipeline
    that emits window updates (real-time mode) the result ids counted are update ids
    (``<window>#<n>``), and three counts about windows are added.

    Attributes:
        expected: results the output must hold (per-record results, and windows that became
            final and had no late row; for updates, every update of a window with no late
            row).
        results: distinct result ids in the final output.
        missing: expected results not in the output.
        extra: result ids in the output that the input does not explain.
        duplicates: output records beyond the first of their result id.
        wrong: expected results delivered with another value (any copy).
        late_windows: windows with a row that may have arrived after the watermark passed
            them: not judged (Spark drops such rows; whether it did depends on batching).
        open_windows: windows the final watermark never passed: not required (0 for
            updates, which do not wait for the watermark).
        unreadable: output records that are not result records.
        input_records: records in the input topic (markers included).
        markers: heartbeat and end-of-input markers skipped.
        bad_input: input records that are not events (Spark drops them too).
        unsupported: ``"unsupported: <why>"`` when the spec or its input is outside what the
            check models; then every count is None.
        windows: updates only: distinct windows (window rids) among the delivered updates.
        final_values_checked: updates only: windows whose final value is judged (no late row,
            and some update the steps after the window keep).
        final_values_wrong: updates only: of those, windows whose last delivered update
            (largest n, :func:`arfl.run.records.final_values`) is not the expected final
            update with its value: a later or earlier n, another value, or none delivered.
        examples: a few rids per problem: ``missing`` (rid, expected), ``extra`` (rid,
            data), ``duplicates`` (rid, copies), ``wrong`` (rid, expected, got), ``late``,
            ``final_values_wrong`` (window, expected rid and data, got rid and data).
        workload: records per partition and per key of the input (:mod:`.skew`); None when
            the input was not read (a pipeline the check does not model).
        hops: the delivered results' latency hop by hop from the topics' timestamps
            (:mod:`.hops`); None when the topics were not read for it.
    """

    expected: int | None
    results: int | None
    missing: int | None
    extra: int | None
    duplicates: int | None
    wrong: int | None
    late_windows: int | None
    open_windows: int | None = None
    unreadable: int | None = None
    input_records: int | None = None
    markers: int | None = None
    bad_input: int | None = None
    unsupported: str | None = None
    windows: int | None = None
    final_values_checked: int | None = None
    final_values_wrong: int | None = None
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    workload: InputSkew | None = None
    hops: HopLatency | None = None

    @property
    def ok(self) -> bool | None:
        """True when nothing is missing, extra, duplicated or wrong (final values included);
        None if unsupported."""
        if self.unsupported is not None:
            return None
        return not (
            self.missing
            or self.extra
            or self.duplicates
            or self.wrong
            or self.unreadable
            or self.final_values_wrong
        )

    @classmethod
    def not_supported(cls, why: str) -> IndependentCheck:
        """The check's answer for a pipeline it does not model."""
        return cls(None, None, None, None, None, None, None, unsupported=f"unsupported: {why}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (numbers in examples as JSON numbers)."""
        d = asdict(self)
        d["ok"] = self.ok
        plain: dict[str, Any] = json.loads(json.dumps(d, default=_json_default))
        return plain


def _json_default(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    raise TypeError(f"not JSON: {v!r}")


def same_value(want: Value, got: Any) -> bool:
    """Numbers within :data:`REL_TOL`; strings, booleans and everything else exactly."""
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    if isinstance(want, int | float | Decimal) and isinstance(got, int | float | Decimal):
        return math.isclose(float(want), float(got), rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return bool(want == got)


def same_data(want: Mapping[str, Value], got: Mapping[str, Any]) -> bool:
    """Same columns (NULLs are absent on both sides) with the same values."""
    if set(want) != set(got):
        return False
    return all(same_value(v, got[k]) for k, v in want.items())


def compare(expected: Expected, delivered: Iterable[Delivered]) -> IndependentCheck:
    """Count missing, extra, duplicated and wrong results of the final output.

    Args:
        expected: from :func:`~arfl.measure.check.evaluate.expected_results`.
        delivered: every record of the final output topic.
    """
    copies: dict[str, int] = {}
    wrong: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    unreadable = 0
    records = list(delivered)
    for rec in records:
        if rec.rid is None or rec.data is None:
            unreadable += 1
            continue
        copies[rec.rid] = copies.get(rec.rid, 0) + 1
        want = expected.judged.get(rec.rid)
        if want is not None:
            if rec.rid not in wrong and not same_data(want, rec.data):
                wrong[rec.rid] = {"rid": rec.rid, "expected": want, "got": dict(rec.data)}
        elif rec.rid not in expected.late and rec.rid not in expected.open:
            extra.setdefault(rec.rid, {"rid": rec.rid, "data": dict(rec.data)})
    missing = [rid for rid in expected.judged if rid not in copies]
    dups = {rid: n for rid, n in copies.items() if n > 1}
    examples: dict[str, list[dict[str, Any]]] = {
        "missing": [{"rid": r, "expected": expected.judged[r]} for r in missing[:MAX_EXAMPLES]],
        "extra": list(extra.values())[:MAX_EXAMPLES],
        "duplicates": [{"rid": r, "copies": n} for r, n in list(dups.items())[:MAX_EXAMPLES]],
        "wrong": list(wrong.values())[:MAX_EXAMPLES],
        "late": [{"rid": r, "data": d} for r, d in list(expected.late.items())[:MAX_EXAMPLES]],
    }
    windows = checked = final_wrong = None
    if expected.updates:
        finals = final_values(r for r in records if r.data is not None)
        bad_finals = _wrong_final_values(expected, finals)
        windows, checked, final_wrong = len(finals), len(expected.final), len(bad_finals)
        examples["final_values_wrong"] = bad_finals[:MAX_EXAMPLES]
    return IndependentCheck(
        expected=len(expected.judged),
        results=len(copies),
        missing=len(missing),
        extra=len(extra),
        duplicates=sum(n - 1 for n in dups.values()),
        wrong=len(wrong),
        late_windows=expected.late_windows,
        open_windows=len(expected.open),
        unreadable=unreadable,
        input_records=expected.input_records,
        markers=expected.markers,
        bad_input=expected.bad,
        windows=windows,
        final_values_checked=checked,
        final_values_wrong=final_wrong,
        examples={k: v for k, v in examples.items() if v},
    )


def _wrong_final_values(
    expected: Expected, finals: Mapping[str, Delivered]
) -> list[dict[str, Any]]:
    """The judged windows whose last delivered update is not the expected final value."""
    out: list[dict[str, Any]] = []
    for window, (rid, want) in expected.final.items():
        got = finals.get(window)
        if got is not None and got.data is not None:
            if got.rid == rid and same_data(want, got.data):
                continue
            shown: dict[str, Any] | None = {"rid": got.rid, "data": dict(got.data)}
        else:
            shown = None
        out.append({"window": window, "expected": {"rid": rid, "data": want}, "got": shown})
    return out
