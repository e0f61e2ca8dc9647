"""The report's correctness from the independent check (``check.json``) and its second latency
reading (``latency-sent.hlog``), on copies of a recorded run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arfl.report import build_report

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A real run without the independent check and the second latency log (added per test)."""
    dst = tmp_path / "run"
    shutil.copytree(RUNS / "real-passive-kill-executor", dst)
    (dst / "check.json").unlink()
    (dst / "latency-sent.hlog").unlink()
    return dst


def _check(**counts: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "expected": 900, "results": 898, "missing": 2, "extra": 0, "duplicates": 0,
        "wrong": 1, "late_windows": 3, "open_windows": 0, "unreadable": 0,
        "unsupported": None, "examples": {"missing": [{"rid": "1000-2000:u1"}]},
    }  # fmt: skip
    doc.update(counts)
    return doc


def test_without_check_json_the_merger_is_the_basis(run: Path) -> None:
    c = build_report(run).correctness
    assert c.basis == "merger"
    assert c.missing is None  # a filter and a window: the merger cannot know what is expected
    assert c.complete is None


def test_check_json_gives_expected_missing_and_wrong(run: Path) -> None:
    (run / "check.json").write_text(json.dumps(_check()))
    c = build_report(run).correctness
    assert (c.basis, c.expected, c.results, c.missing, c.duplicates, c.extra) == (
        "independent", 900, 898, 2, 0, 0,
    )  # fmt: skip
    assert c.divergent == 1  # the merger's 0 + one wrong value
    assert c.complete is False
    assert any("3 windows with late rows not judged" in n for n in c.notes)
    assert any("missing, e.g." in n and "1000-2000:u1" in n for n in c.notes)


def test_a_clean_check_makes_the_run_complete_and_extra_ids_do_not(run: Path) -> None:
    (run / "check.json").write_text(json.dumps(_check(missing=0, wrong=0, results=900)))
    assert build_report(run).correctness.complete is True
    (run / "check.json").write_text(json.dumps(_check(missing=0, wrong=0, extra=4)))
    c = build_report(run).correctness
    assert c.extra == 4 and c.complete is False


def test_an_unsupported_pipeline_keeps_the_merger_basis(run: Path) -> None:
    nulls = dict.fromkeys(("expected", "results", "missing", "extra", "duplicates", "wrong"))
    (run / "check.json").write_text(
        json.dumps(_check(**nulls, unsupported="unsupported: transform step"))
    )
    c = build_report(run).correctness
    assert c.basis == "merger" and c.missing is None
    assert "independent check: unsupported: transform step" in c.notes


def test_latency_from_the_actual_send_time_is_reported_beside(run: Path) -> None:
    assert build_report(run).overall.sent_percentiles_ms == {}
    shutil.copyfile(run / "latency.hlog", run / "latency-sent.hlog")
    rep = build_report(run)
    for phase in [*rep.phases, rep.overall]:
        assert phase.sent_percentiles_ms == phase.percentiles_ms
    assert (
        rep.to_dict()["overall"]["sent_percentiles_ms"]["p99"] == rep.overall.percentiles_ms["p99"]
    )


def test_a_recorded_run_carries_both_readings_and_its_check() -> None:
    rep = build_report(RUNS / "real-passive-kill-executor")
    assert rep.correctness.basis == "independent"
    sent, intended = rep.overall.sent_percentiles_ms, rep.overall.percentiles_ms
    assert sent["p50"] is not None and intended["p50"] is not None
    # An event is sent at or after its intended time: latency from the actual send time is
    # at most the intended one, and close to it while the injector keeps its schedule.
    assert 0.8 * intended["p50"] <= sent["p50"] <= intended["p50"] * 1.001
