"""``arfl report``: exit codes (0 met, 1 breached, 6 cannot report), ``--json``, HTML files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arfl.cli.app import app
from arfl.cli.main import _register, main

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(RUNS / name, dst)
    return dst


def test_slos_met_exit_0_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", str(RUNS / "sim-active-kill"), "--json", "--no-html"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["run"] == "sim-active-kill"
    assert doc["slo"] == {
        "passed": True,
        "breaches": [],
        "checks": doc["slo"]["checks"],
    }
    assert [f["masked"] for f in doc["faults"]] == [True, True]
    assert "SLO breached" not in captured.err


def test_tables_name_phases_faults_and_slos(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(RUNS / "sim-active-kill"), "--no-html"]) == 0
    out = capsys.readouterr().out
    for word in ("steady", "fault-1", "recovery-1", "fault-2", "tail", "kill-replica", "pause",
                 "correctness", "met", "p99 (overall)"):  # fmt: skip
        assert word in out, word


def test_slo_breach_exits_1_and_names_the_breaches() -> None:
    _register()
    result = CliRunner().invoke(app, ["report", str(RUNS / "sim-passive-kill"), "--no-html"])
    assert result.exit_code == 1, result.output
    assert "BREACHED p99 (overall) 11305.0 ms > 1s" in result.output
    assert "SLO breached (sim-passive-kill): max_gap (overall) 11350.3 ms > 2s" in result.output
    assert "masked: not masked: fault-1 kill-replica" in result.output


def test_slo_breach_exits_1_through_main(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(RUNS / "sim-passive-kill"), "--no-html"]) == 1


def test_unknown_slo_metric_exits_6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path, "sim-active-kill")
    spec = json.loads((run / "spec.json").read_text())
    spec["report"]["slo"] = {"p99": "1s", "p99_latency": "1s"}
    (run / "spec.json").write_text(json.dumps(spec))
    assert main(["report", str(run), "--no-html"]) == 6
    err = capsys.readouterr().err
    assert "report.slo.p99_latency: unknown metric 'p99_latency'" in err
    assert "Traceback" not in err


def test_not_a_run_directory_exits_6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 6
    assert "run directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 6
    assert "no spec.json" in capsys.readouterr().err


def test_html_written_next_to_the_run_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(tmp_path, "sim-active-kill")
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert 'id="latency-over-time"' in page
    assert f"HTML report: {run / 'report.html'}" in capsys.readouterr().err.replace("\n", "")


def test_compare_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "cmp.html"
    main(
        ["report", str(RUNS / "sim-active-kill"), str(RUNS / "sim-passive-kill"), "--json",
         "--html", str(html)]
    )  # fmt: skip
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [r["slo"]["passed"] for r in doc["runs"]] == [True, False]
    assert "SLO breached (sim-passive-kill)" in captured.err
    assert [r["run"] for r in doc["runs"]] == ["sim-active-kill", "sim-passive-kill"]
    assert doc["comparison"]["runs"] == ["sim-active-kill", "sim-passive-kill"]
    rows = {(r["metric"], r["phase"]): r for r in doc["comparison"]["rows"]}
    assert rows[("p99", "overall")]["ratios"][0] == 1.0
    assert rows[("p99", "overall")]["ratios"][1] > 10
    assert 'id="compare-latency-over-time"' in html.read_text()


def test_recompute_without_kafka_exits_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(tmp_path, "sim-active-kill")
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    for e in lines:
        if e["event"] == "run-started":
            e["kafka"] = "127.0.0.1:1"  # nothing listens on port 1
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert main(["report", str(run), "--recompute", "--no-html"]) == 6
    err = capsys.readouterr().err
    assert "kafka at 127.0.0.1:1 not reachable" in err
    assert "drop --recompute" in err


def test_text_with_brackets_is_printed_verbatim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(tmp_path, "real-none-noresults")
    lines = [x for x in (run / "journal.jsonl").read_text().splitlines() if "run-finished" not in x]
    lines.append(json.dumps({"t": 1.0, "event": "run-failed", "error": "replica(s) [0] [bold]x"}))
    (run / "journal.jsonl").write_text("\n".join(lines) + "\n")
    spec = json.loads((run / "spec.json").read_text())
    spec["report"]["slo"] = {}
    (run / "spec.json").write_text(json.dumps(spec))
    assert main(["report", str(run), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "the run failed: replica(s) [0] [bold]x" in out
    assert "no SLO in the spec ([report.slo])" in out


def _report_text(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    from arfl.cli.console import out as console

    monkeypatch.setattr(console, "_width", width)
    assert main(["report", str(RUNS / "sim-active-kill"), "--no-html"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [80, 100])
def test_wide_tables_show_every_value_whole_in_a_narrow_terminal(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _report_text(width, capsys, monkeypatch)
    assert "…" not in text  # a value cut to "1…" reads as a different number
    # On their side: a line per field, a column per fault (the correctness table per basis).
    lines = [line.strip() for line in text.splitlines()]
    for want in (
        r"# +1 +2", r"fault +kill-replica +pause", r"at +15\.0 +30\.0", r"window +15\.0 +9\.1",
        # A simulated run without trails: caught up was judged on the lag, and says so.
        r"caught up +12\.13 \(lag\) +4\.13 \(lag\)", r"masked +yes +yes", r"basis +merger",
        r"results +8,000",
    ):  # fmt: skip
        assert any(re.fullmatch(want, line) for line in lines), want


def test_a_wide_terminal_keeps_a_row_per_fault(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [line.strip() for line in _report_text(200, capsys, monkeypatch).splitlines()]
    assert any(re.match(r"1 +kill-replica +0 +15\.0 +15\.0 ", line) for line in lines)


def test_a_failure_is_red_in_either_orientation(monkeypatch: pytest.MonkeyPatch) -> None:
    from arfl.cli.commands.report import _rich_table
    from arfl.cli.console import out as console

    headers = ["#", "fault", "recovery", "masked"]
    rows = [["1", "kill-replica", "0.00", "yes"], ["2", "pause", "never", "NO"]]
    monkeypatch.setattr(console, "_width", 200)
    flat = _rich_table("faults", headers, rows)
    assert [r.style for r in flat.rows] == [None, "red"]
    side = _rich_table("faults", headers, rows, side=True)
    assert [c.header for c in side.columns] == ["#", "1", "2"]
    assert [c.style for c in side.columns][1:] == ["", "red"]  # fault 2's column, not a line
    with pytest.raises(ValueError, match="one cell per header"):
        _rich_table("faults", headers, [["1", "kill-replica"]])
