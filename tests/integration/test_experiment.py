"""``arfl experiment`` for real: the same spec and chaos once per mode, then the comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arfl.cli.main import main
from arfl.stack import StackInfo

pytestmark = pytest.mark.integration

SPEC = """
name = "exp"

[source]
topic = "ev"
partitions = 2
event_time = "ts"

[[steps]]
window = { size = "1s", key = "user", watermark = "500ms", agg = { n = "count(*)" } }

[sink]
topic = "ev-out"

[replication]
mode = "active-leaderless"
replicas = 2

[spark]
master = "local-cluster[1,1,1024]"
conf = { "spark.sql.shuffle.partitions" = "2" }

[workload]
rate = 100
duration = "12s"
keys = 10
warmup = "2s"

[[chaos]]
at = "6s"
fault = "pause"
replica = 1
duration = "2s"
"""


def test_two_modes_run_in_turn_and_are_compared(
    stack: StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "exp.toml"
    spec.write_text(SPEC)
    argv = ["experiment", str(spec), "--modes", "none,passive", "--no-live"]
    code = main([*argv, "--runs", str(tmp_path), "--master", "local[1]"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    (root,) = [p for p in tmp_path.iterdir() if p.name.startswith("exp-experiment-")]
    doc = json.loads((root / "comparison.json").read_text())
    exp = doc["experiment"]
    assert exp["failed"] == {}
    assert exp["modes"] == ["none", "passive"]
    # Replica 1 does not exist with one replica: the fault was aimed at replica 0, and said so.
    assert exp["chaos_mapping"] == [
        "none: chaos[0] (pause at 6s) replica 1 -> 0 (1 replica(s))",
        "passive: chaos[0] (pause at 6s) replica 1 -> 0 (1 replica(s))",
    ]
    runs = doc["runs"]
    assert [r["mode"] for r in runs] == ["none", "passive"]
    assert all(r["correctness"]["produced"] == 1200 for r in runs)
    for r in runs:
        assert [f["kind"] for f in r["faults"]] == ["pause"]
        assert r["faults"][0]["at_s"] == pytest.approx(6.0, abs=1.0)
        assert r["resources"]["cpu_s"] > 0 and r["resources"]["peak_rss_mb"] > 100
    rows = {(row["metric"], row["phase"]): row for row in doc["comparison"]["rows"]}
    assert rows[("cpu_s", "run")]["ratios"][0] == 1.0
    assert rows[("cpu_s", "run")]["ratios"][1] > 0
    assert ("p99", "overall") in rows and ("detect_s", "fault-1") in rows
    html = (root / "compare.html").read_text()
    assert "compare-latency-over-time" in html and "plotly" in html.lower()
    for mode in ("none", "passive"):
        assert mode in captured.out
    assert "cpu_s" in captured.out
