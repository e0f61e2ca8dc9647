"""Output gaps from monitor ticks, SLO keys and checks, correctness against a recomputation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arfl.configs.slo import validate_slo
from arfl.errors import ReportError
from arfl.report.correctness import compare_results
from arfl.report.gaps import Gap, find_gaps, longest_in, overlapping
from arfl.report.model import Correctness, FaultStats, PhaseStats
from arfl.report.slo import check_slos
from arfl.run.records import Result
from arfl.run.streams import MonitorSnapshot

T = 1_800_000_000.0


def _tick(t: float, current_ms: float, longest_ms: float) -> MonitorSnapshot:
    return MonitorSnapshot(
        t=t, interval_s=1.0, output_rate=0, received=0, duplicates=0, interval={},
        cumulative={}, longest_gap_ms=longest_ms, current_gap_ms=current_ms, input_flowing=True,
        results=0, duplicates_total=0, divergent=0, bad=0, evicted=0,
    )  # fmt: skip


# --- gaps -------------------------------------------------------------------------------


def test_gap_spanning_ticks_that_set_a_record_is_exact() -> None:
    # Last result at T+0.7; nothing at T+1, T+2, T+3; next result at T+3.9 (gap 3200 ms).
    ticks = [
        _tick(T + 0, 5, 120),
        _tick(T + 1, 300, 300),
        _tick(T + 2, 1300, 1300),
        _tick(T + 3, 2300, 2300),
        _tick(T + 4, 40, 3200),
    ]
    gaps = find_gaps(ticks)
    big = max(gaps, key=lambda g: g.length_ms)
    assert big.start == pytest.approx(T + 0.7, abs=1e-3)
    assert big.length_ms == 3200
    assert big.exact and big.closed


def test_gap_that_set_no_record_is_a_lower_bound() -> None:
    # A record of 5000 ms happened earlier; a later 1.5-s gap spans one tick only.
    ticks = [
        _tick(T - 1, 10, 5000),
        _tick(T + 0, 10, 5000),
        _tick(T + 1, 800, 5000),
        _tick(T + 2, 10, 5000),
    ]
    gaps = find_gaps(ticks)
    g = next(g for g in gaps if g.start == pytest.approx(T + 0.2, abs=1e-3))
    assert g.length_ms == 800
    assert not g.exact


def test_sub_second_gap_seen_only_when_it_sets_a_record() -> None:
    ticks = [_tick(T + 0, 0, 0), _tick(T + 1, 0, 450), _tick(T + 2, 0, 450)]
    gaps = find_gaps(ticks)
    assert [(g.length_ms, g.exact) for g in gaps] == [(450, True)]


def test_gap_still_open_at_the_end() -> None:
    ticks = [_tick(T + 0, 10, 10), _tick(T + 1, 1010, 1010), _tick(T + 2, 2010, 2010)]
    gaps = find_gaps(ticks)
    assert gaps[-1].closed is False
    assert gaps[-1].length_ms == 2010


def test_longest_in_clips_to_the_range() -> None:
    gaps = [Gap(T + 10.0, 8000.0, exact=True)]
    assert longest_in(gaps, T + 12.0, T + 15.0) == (3000.0, True)
    assert longest_in(gaps, T + 0.0, T + 11.0) == (1000.0, True)
    assert longest_in(gaps, T + 20.0, T + 30.0) is None
    whole = overlapping(gaps, T + 12.0, T + 13.0)
    assert whole is not None and whole.length_ms == 8000.0


# --- SLOs -------------------------------------------------------------------------------


def _phase(name: str, kind: str, p99: float | None, gap: float | None = 100.0) -> PhaseStats:
    return PhaseStats(
        name=name, kind=kind, start_s=0.0, end_s=10.0,
        percentiles_ms={"p50": None if p99 is None else p99 / 2, "p99": p99, "p99.9": p99},
        max_ms=p99, count=0 if p99 is None else 100, covered_s=10.0,
        results_per_s=None if p99 is None else 10.0, max_gap_ms=gap,
    )  # fmt: skip


def _fault(
    masked: bool | None, recovery: float | None = 0.0, verdict: str = "", error: str | None = None
) -> FaultStats:
    return FaultStats(
        index=1, kind="pause", target=0, at_s=10.0, duration_s=2.0, window_s=2.0, detect_s=None,
        restored_s=2.0, recovery_s=recovery, masked=masked, p99_ms=100.0, max_gap_ms=10.0,
        verdict=verdict, error=error,
    )  # fmt: skip


_CORRECT = Correctness("merger", 100, 100, 0, 0, 0, 100)


@pytest.mark.parametrize(
    "key",
    ["p99", "p50", "p99.9", "max", "max_gap", "results_per_s", "fault.p99", "steady.p99.9",
     "recovery.max_gap", "tail.max", "overall.p90", "masked", "recovery", "detect", "missing",
     "duplicates", "divergent"],
)  # fmt: skip
def test_known_slo_keys_validate(key: str) -> None:
    value: object = {
        "masked": True,
        "missing": 0,
        "duplicates": 0,
        "divergent": 0,
        "results_per_s": 100,
    }.get(key.split(".")[-1] if "." in key else key, "1s")
    if key.endswith("results_per_s"):
        value = 100
    assert validate_slo({key: value}) == []


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("p999", "1s", "percentile 999 is not in (0, 100]"),
        ("latency", "1s", "unknown metric 'latency'"),
        ("during.p99", "1s", "unknown scope 'during'"),
        ("fault.masked", True, "masked is run-wide"),
        ("p99", 500, "expected a duration string"),
        ("masked", "yes", "masked takes true or false"),
        ("missing", "0", "missing takes a number"),
    ],
)
def test_bad_slo_keys_are_named(key: str, value: object, problem: str) -> None:
    problems = validate_slo({key: value})
    assert len(problems) == 1
    assert problems[0].startswith(f"report.slo.{key}: ")
    assert problem in problems[0]


def test_unknown_slo_is_an_error_not_a_pass() -> None:
    with pytest.raises(ReportError, match="unknown metric 'p99_latency'"):
        check_slos({"p99_latency": "1s"}, [], _phase("overall", "overall", 10.0), [], _CORRECT)


def test_slo_checks_pass_and_breach_with_named_lines() -> None:
    phases = [_phase("steady", "steady", 100.0), _phase("fault-1", "fault", 900.0, gap=2500.0)]
    overall = _phase("overall", "overall", 400.0, gap=2500.0)
    res = check_slos(
        {"p99": "500ms", "fault.p99": "500ms", "max_gap": "2s", "masked": True, "missing": 0},
        phases, overall, [_fault(False)], _CORRECT,
    )  # fmt: skip
    assert not res.passed
    lines = [c.line for c in res.breaches]
    assert lines == [
        "p99 (fault-1) 900.0 ms > 500ms",
        "max_gap (overall) 2500.0 ms > 2s",
        "masked: not masked: fault-1 pause",
    ]
    assert [c.key for c in res.checks if c.passed] == ["p99", "missing"]


def test_unmeasured_metric_does_not_meet_its_slo() -> None:
    res = check_slos(
        {"p99": "1s", "duplicates": 0, "recovery": "5s"},
        [], _phase("overall", "overall", None),
        [_fault(True, recovery=None)], Correctness("merger", None, 0, None, None, 0, 10),
    )  # fmt: skip
    assert [c.passed for c in res.checks] == [False, False, False]
    assert "not measured" in res.checks[0].line


def test_no_slo_passes() -> None:
    res = check_slos({}, [], _phase("overall", "overall", 1.0), [], _CORRECT)
    assert res.passed and res.checks == []


# --- correctness ------------------------------------------------------------------------


def _res(rid: str, h: str) -> Result:
    return Result(rid=rid, src_ts=0, replica=0, hash=h, data={})


def test_compare_results_counts_missing_duplicates_and_wrong_content() -> None:
    expected = {r: _res(r, "h" + r) for r in ("a", "b", "c", "d")}
    delivered = [_res("a", "ha"), _res("a", "ha"), _res("b", "WRONG"), _res("c", "hc"),
                 _res("z", "hz")]  # fmt: skip
    c = compare_results(expected, final={"a", "b", "c", "d"}, delivered=delivered,
                        merger_divergent=2, produced=50)  # fmt: skip
    assert (c.basis, c.expected, c.results, c.missing, c.duplicates, c.divergent) == (
        "recomputed", 4, 4, 1, 1, 3,
    )  # fmt: skip
    assert any("not in the recomputation" in n for n in c.notes)


def test_slo_module_is_light_for_the_spec_validator() -> None:
    # The spec validator may import arfl.report.slo: that must not import the spec module
    # back (a cycle) nor plotly (slow).
    import subprocess
    import sys

    code = (
        "import sys, arfl.report.slo; "
        "print(sorted(m for m in ('plotly', 'arfl.configs.spec', 'arfl.report.html') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"


def test_public_api_resolves() -> None:
    import types

    import arfl.report as report
    import arfl.report.comparison  # noqa: F401  (a submodule must not shadow an API name)

    for name in report.__all__:
        assert not isinstance(getattr(report, name), types.ModuleType), name
    with pytest.raises(AttributeError):
        _ = report.nothing_here


def test_masked_slo_without_a_verdict_is_not_met() -> None:
    unknown = "unknown: steady state too small (12 results over 2.0 s; ...)"
    res = check_slos(
        {"masked": True}, [], _phase("overall", "overall", 10.0), [_fault(None, verdict=unknown)],
        _CORRECT,
    )  # fmt: skip
    assert not res.passed
    assert res.checks[0].line == f"masked: not masked: fault-1 pause ({unknown})"


@pytest.mark.parametrize("key", ["masked", "recovery", "detect"])
def test_fault_slos_fail_when_no_fault_took_effect(key: str) -> None:
    # "Nothing to mask" is not a pass: no fault at all, or one whose injection failed (or came
    # after the input ended), fails every SLO about faults.
    target: object = True if key == "masked" else "10s"
    overall = _phase("overall", "overall", 10.0)
    res = check_slos({key: target}, [], overall, [], _CORRECT)
    assert not res.passed
    assert res.checks[0].line == f"{key}: cannot pass: no fault was injected"
    failed = _fault(None, recovery=None, error="injected after the input ended")
    res = check_slos({key: target}, [], overall, [failed], _CORRECT)
    assert not res.passed
    assert "fault-1 pause (injected after the input ended)" in res.checks[0].line
    # One fault took effect and one did not: still not a pass.
    res = check_slos({key: target}, [], overall, [_fault(True), failed], _CORRECT)
    assert not res.passed


def test_lost_sink_writes_make_a_run_incomplete(tmp_path: Path) -> None:
    import shutil

    from arfl.report import build_report

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures/runs/sim-active-kill", run)
    assert build_report(run).correctness.complete is True
    merger = json.loads((run / "merger.json").read_text())
    merger["delivery_failures"] = 3
    (run / "merger.json").write_text(json.dumps(merger))
    c = build_report(run).correctness
    assert c.delivery_failures == 3
    assert c.complete is False
    assert c.to_dict()["complete"] is False
    assert any("not written to the final topic" in n for n in c.notes)
    # A merger that died without writing its count: unknown, never complete.
    del merger["delivery_failures"]
    (run / "merger.json").write_text(json.dumps(merger))
    with (run / "journal.jsonl").open("a") as f:
        f.write(json.dumps({"t": 0, "event": "merger-exited", "exit_code": 4}) + "\n")
    assert build_report(run).correctness.complete is None
