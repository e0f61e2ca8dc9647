"""``arfl report`` shows each replica's late drops next to the divergence count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arfl.cli.main import main

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _drop(batch: int, rows: int) -> str:
    return json.dumps({
        "batchId": batch,
        "timestamp": "2026-11-25T23:01:41.000Z",
        "durationMs": {"triggerExecution": 100},
        "stateOperators": [{"operatorName": "stateStoreSave", "numRowsDroppedByWatermark": rows}],
    })  # fmt: skip


def test_text_and_json_show_late_drops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "real-active-leaderless"
    shutil.copytree(RUNS / run.name, run)
    with (run / "progress" / "replica-1.jsonl").open("a") as f:
        f.write(_drop(10, 4) + "\n" + _drop(11, 3) + "\n")
    main(["report", str(run), "--no-html"])
    out = capsys.readouterr().out
    # The correctness table squeezes its columns in an 80-column terminal: words may wrap.
    words = out[out.index("correctness") :].split()
    assert "late" in words and "r1" in words and "7" in words
    main(["report", str(run), "--no-html", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["late_drops"]["rows"] == 7
    assert doc["late_drops"]["replicas"]["1"] == {
        "rows": 7, "batches": 2, "first_batch": 10, "last_batch": 11,
        "unreported_batches": [],
    }  # fmt: skip
    assert any("dropped behind the watermark" in w for w in doc["warnings"])
