"""``arfl report`` in an 80-column terminal: every line fits, and no number is split over two
lines ("35.0-116.0" folded into "35.0-11" and "6.0" reads as two other numbers)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rich.cells import cell_len

from arfl.cli.commands.report import _print_report
from arfl.cli.console import out as console
from arfl.cli.main import main
from arfl.report import build_report
from arfl.report.model import PhaseStats, Report
from arfl.report.tables import (
    correctness_rows,
    fault_rows,
    hop_rows,
    hot_key_rows,
    phase_rows,
    resource_rows,
    workload_rows,
)

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
WIDTH = 80


def _numbers(rep: Report) -> set[str]:
    """Every word with a digit in a cell of the report's tables."""
    tables = [phase_rows, fault_rows, correctness_rows, workload_rows, hot_key_rows, hop_rows,
              resource_rows]  # fmt: skip
    cells = [c for rows in tables for row in rows(rep)[1] for c in row]
    return {w for c in cells for w in c.split() if any(ch.isdigit() for ch in w)}


def _check(text: str, rep: Report) -> None:
    lines = text.splitlines()
    wide = [line for line in lines if cell_len(line) > WIDTH]
    assert not wide, "\n".join(wide)
    split = sorted(n for n in _numbers(rep) if not any(n in line for line in lines))
    assert not split, f"split over two lines: {split}\n{text}"


def _long_run(rep: Report) -> Report:
    """``rep`` as a long run with slow phases would have it: times past 100 s ("35.0-116.0"),
    latencies and gaps of thousands of ms, a phase per fault and recovery."""

    def slow(p: PhaseStats, i: int) -> PhaseStats:
        pct = {k: 1234.5 + 1000 * i + j for j, k in enumerate(p.percentiles_ms)}
        return dataclasses.replace(
            p, start_s=35.0 + 81 * i, end_s=116.0 + 81 * i, percentiles_ms=pct, max_ms=98765.4,
            results_per_s=12345.0, max_gap_ms=54321.0, max_gap_exact=False,
            sent_percentiles_ms={"p99": 4321.0},
        )  # fmt: skip

    names = ["steady", "fault-1", "recovery-1", "steady-1", "fault-2", "recovery-2", "tail"]
    phases = [
        slow(dataclasses.replace(rep.phases[0], name=n, kind=n.split("-")[0]), i)
        for i, n in enumerate(names)
    ]
    faults = [
        dataclasses.replace(f, at_s=135.0 + i, window_s=123.4, detect_s=12.34, restored_s=45.67,
                            first_batch_s=56.78, caught_up_s=67.89, recovery_s=78.9,
                            p99_ms=12345.6, max_gap_ms=23456.7)
        for i, f in enumerate(rep.faults)
    ]  # fmt: skip
    return dataclasses.replace(rep, phases=phases, overall=slow(rep.overall, 0), faults=faults)


@pytest.mark.parametrize(
    "run", ["real-active-rtm-kill-replica", "real-leaderless-kill-executor", "sim-active-kill"]
)
def test_recorded_runs_fit_80_columns_with_every_number_whole(
    run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "_width", WIDTH)
    assert main(["report", str(RUNS / run), "--no-html"]) in (0, 1)  # 1: an SLO breached
    _check(capsys.readouterr().out, build_report(RUNS / run))


def test_a_long_run_with_slow_phases_fits_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = _long_run(build_report(RUNS / "sim-active-kill"))
    monkeypatch.setattr(console, "_width", WIDTH)
    _print_report(rep)
    text = capsys.readouterr().out
    assert "35.0-116.0" in text and "≥54321" in text
    _check(text, rep)
