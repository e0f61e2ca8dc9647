"""The report's correctness for update runs (window results under real-time mode): windows and
final values beside the unchanged counts, on a copy of a recorded run and on synthetic sinks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from arfl.report import build_report
from arfl.report.correctness import FINAL_VALUES_HINT, compare_results
from arfl.report.html import render_html
from arfl.report.tables import correctness_rows
from arfl.run.records import Result

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A recorded window run, its spec switched to real-time mode, without its check."""
    dst = tmp_path / "run"
    shutil.copytree(RUNS / "real-passive-kill-executor", dst)
    (dst / "check.json").unlink()
    spec = json.loads((dst / "spec.json").read_text())
    spec["replication"]["trigger"] = "realtime"
    (dst / "spec.json").write_text(json.dumps(spec))
    return dst


def _check(**counts: object) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "expected": 900, "results": 900, "missing": 0, "extra": 0, "duplicates": 0,
        "wrong": 0, "late_windows": 0, "open_windows": 0, "unreadable": 0,
        "unsupported": None, "windows": 120, "final_values_checked": 118,
        "final_values_wrong": 0, "examples": {},
    }  # fmt: skip
    doc.update(counts)
    return doc


def test_the_merger_basis_cannot_tell_windows_or_final_values(run: Path) -> None:
    c = build_report(run).correctness
    assert c.updates and c.basis == "merger"
    d = c.to_dict()
    assert (d["windows"], d["final_values_checked"], d["final_values_wrong"]) == (None, None, None)
    assert any("windows and final values unknown" in n for n in c.notes)


def test_the_check_gives_windows_and_final_values_beside_the_update_counts(run: Path) -> None:
    (run / "check.json").write_text(json.dumps(_check()))
    c = build_report(run).correctness
    assert c.updates
    assert (c.basis, c.expected, c.results, c.missing, c.duplicates) == (
        "independent", 900, 900, 0, 0,
    )  # fmt: skip
    assert (c.windows, c.final_values_checked, c.final_values_wrong) == (120, 118, 0)
    assert c.complete is True
    d = build_report(run).to_dict()["correctness"]
    assert (d["windows"], d["final_values_checked"], d["final_values_wrong"]) == (120, 118, 0)
    assert any("120 windows delivered" in n and "118 checked, 0 wrong" in n for n in c.notes)


def test_a_wrong_final_value_makes_the_run_incomplete(run: Path) -> None:
    example = {"window": "1000-2000:u1", "expected": {"rid": "1000-2000:u1#3"}, "got": None}
    (run / "check.json").write_text(
        json.dumps(_check(final_values_wrong=1, examples={"final_values_wrong": [example]}))
    )
    c = build_report(run).correctness
    assert c.complete is False
    assert any(n.startswith("final_values_wrong, e.g.") and "1000-2000:u1#3" in n for n in c.notes)


def test_an_append_run_has_no_window_fields(run: Path) -> None:
    spec = json.loads((run / "spec.json").read_text())
    spec["replication"]["trigger"] = "micro-batch"
    (run / "spec.json").write_text(json.dumps(spec))
    doc = _check(windows=None, final_values_checked=None, final_values_wrong=None)
    (run / "check.json").write_text(json.dumps(doc))
    c = build_report(run).correctness
    assert not c.updates
    assert "windows" not in c.to_dict()
    assert FINAL_VALUES_HINT not in c.notes
    headers, _ = correctness_rows(build_report(run))
    assert "windows" not in headers and headers[-1] == "complete"


def _res(rid: str, h: str) -> Result:
    return Result(rid=rid, src_ts=0, replica=0, hash=h, data={})


def test_recomputed_final_values_compare_each_windows_last_update_by_id_and_hash() -> None:
    expected = {r: _res(r, "h" + r) for r in ("w:a#1", "w:a#2", "w:b#1", "w:c#1", "w:c#2")}
    delivered = [
        _res("w:a#1", "hw:a#1"),  # w:a's final (#2) lost: its last update is #1
        _res("w:b#1", "hw:b#1"),
        _res("w:c#1", "hw:c#1"),
        _res("w:c#2", "WRONG"),
    ]
    c = compare_results(expected, set(expected), delivered, merger_divergent=0, produced=5,
                        updates=True)  # fmt: skip
    assert c.updates
    assert (c.missing, c.divergent) == (1, 1)  # counts over update ids, as before
    assert (c.windows, c.final_values_checked, c.final_values_wrong) == (3, 3, 2)
    assert c.complete is False
    plain = compare_results(expected, set(expected), delivered, 0, 5)
    assert not plain.updates and "windows" not in plain.to_dict()


def test_the_tables_show_windows_and_final_values(run: Path, tmp_path: Path) -> None:
    (run / "check.json").write_text(json.dumps(_check(final_values_wrong=2)))
    rep = build_report(run)
    headers, (row,) = correctness_rows(rep)
    assert headers[-3:] == ["windows", "final values checked / wrong", "complete"]
    assert row[-3:] == ["120", "118 / 2", "NO"]
    html = render_html(rep, tmp_path / "report.html").read_text()
    assert "<td>118 / 2</td>" in html and "largest n per key" in html


def test_the_merger_basis_shows_unknown_final_values(run: Path, tmp_path: Path) -> None:
    rep = build_report(run)
    headers, (row,) = correctness_rows(rep)
    cells = dict(zip(headers, row, strict=True))
    assert (cells["windows"], cells["final values checked / wrong"]) == ("unknown", "unknown")


@pytest.mark.parametrize("basis", ["merger", "independent", "recomputed"])
def test_every_basis_says_where_the_final_values_are(run: Path, basis: str) -> None:
    if basis == "recomputed":
        c = compare_results({}, set(), [_res("w:a#1", "h")], 0, 1, updates=True)
    else:
        if basis == "independent":
            (run / "check.json").write_text(json.dumps(_check()))
        c = build_report(run).correctness
    assert c.basis == basis and FINAL_VALUES_HINT in c.notes
