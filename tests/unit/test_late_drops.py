"""Late drops: rows a replica's stateful operators dropped behind the watermark.

Fake progress lines (the fields Spark writes: ``batchId``, ``timestamp``, ``eventTime``,
``stateOperators[].numRowsDroppedByWatermark``); the watcher's part runs against files written
by the test, the report's against a copied fixture run with lines appended. No Spark.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from watch_fakes import FakeProcess, FakeResources, FakeRunner

from arfl.configs.load import parse_spec
from arfl.orchestrate import watch
from arfl.orchestrate.context import DeployOptions, RunContext, create_run
from arfl.orchestrate.slots import ReplicaState
from arfl.orchestrate.watch import LateDropWatch, Watcher
from arfl.report import build_report
from arfl.report.html import render_html
from arfl.report.tables import correctness_rows
from arfl.run.progress import (
    AGREED_WATERMARK,
    batch_late_drop,
    from_journal,
    late_drops,
    peer_batches,
    unreported_batches,
)
from arfl.run.rundir import Journal, RunPaths, read_jsonl

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _line(
    batch: int, *dropped: int, watermark: str | None = "2026-11-25T23:01:30.322Z"
) -> dict[str, Any]:
    """A progress line whose stateful operators dropped ``dropped`` rows (one per operator)."""
    line: dict[str, Any] = {
        "batchId": batch,
        "timestamp": f"2026-11-25T23:01:{10 + batch:02d}.000Z",
        "numInputRows": 10,
        "durationMs": {"triggerExecution": 100},
        "stateOperators": [
            {"operatorName": f"op{i}", "numRowsTotal": 5, "numRowsDroppedByWatermark": n}
            for i, n in enumerate(dropped)
        ],
    }
    if watermark is not None:
        line["eventTime"] = {"watermark": watermark}
    return line


# A replica's progress: batch 1 dropped 3 rows, batch 3 dropped in its second operator only,
# batch 4 in both; then the replica was killed and restarted from its checkpoint, re-ran batch 4
# (same id, same watermark from the offset log) and went on with 5 (dropped) and 6 (nothing).
LINES = [
    _line(0, 0),
    _line(1, 3),
    _line(2, 0),
    _line(2, 0),  # an idle trigger repeats the last batch id with nothing dropped
    _line(3, 0, 2),
    _line(4, 1, 4),
    _line(4, 1, 4),  # after the restart
    _line(5, 7, watermark=None),
    _line(6, 0),
]


def test_one_drop_per_batch_that_dropped_rows() -> None:
    drops = late_drops(LINES, replica=1)
    assert [(d.batch, d.rows, d.operators) for d in drops] == [
        (1, 3, {0: 3}),
        (3, 2, {1: 2}),
        (4, 5, {0: 1, 1: 4}),
        (5, 7, {0: 7}),
    ]
    assert all(d.replica == 1 for d in drops)
    assert drops[1].operator == 1 and drops[1].operator_name == "op1"
    assert drops[0].watermark == "2026-11-25T23:01:30.322Z" and drops[3].watermark is None
    assert drops[0].timestamp == "2026-11-25T23:01:11.000Z"


def test_batches_already_seen_are_left_out() -> None:
    assert [d.batch for d in late_drops(LINES, 0, seen={1, 4})] == [3, 5]


def test_unreported_batches_are_the_ids_missing_within_one_query() -> None:
    # LINES runs 0..6 (repeats, a re-run after a restart): nothing missing. A driver killed
    # right after committing a batch never wrote its progress line (Spark calls the listener
    # after the commit) and its restart goes on with the next id: that id is missing.
    assert unreported_batches(LINES) == []
    q = {"id": "q1"}
    lines = [{**_line(b), **q} for b in (0, 1, 2, 4, 5, 8)]
    assert unreported_batches(lines) == [3, 6, 7]
    # A restart on a new checkpoint (mode none's temporary one) is a new query, ids from 0
    # again: its ids are not holes of the old one; a query whose first line is not batch 0 lost
    # those.
    fresh = [{**_line(b), "id": "q2"} for b in (0, 1)] + [{**_line(b), "id": "q3"} for b in (2, 3)]
    assert unreported_batches([*lines, *fresh]) == [3, 6, 7, 0, 1]
    # Lines without a batch id or a query id do not make holes up.
    assert unreported_batches([{"id": "q"}, {"batchId": "x"}, _line(0), _line(1)]) == []


def test_lines_without_drops_or_unreadable_drop_nothing() -> None:
    assert batch_late_drop(_line(0, 0, 0), 0) is None
    assert batch_late_drop({"stateOperators": [{"numRowsDroppedByWatermark": 3}]}, 0) is None
    assert batch_late_drop({"batchId": 2}, 0) is None
    assert batch_late_drop({"batchId": 2, "stateOperators": "x"}, 0) is None
    odd = {"batchId": 2, "stateOperators": [None, {"numRowsDroppedByWatermark": "many"},
                                            {"numRowsDroppedByWatermark": 2}]}  # fmt: skip
    drop = batch_late_drop(odd, 0)
    assert drop is not None and drop.operators == {2: 2} and drop.operator_name is None


def test_rows_the_agreed_watermark_dropped_count_as_late_drops() -> None:
    # The window step's observed metric (arfl.replica.source.late): Spark's own operators then
    # see no late row.
    line = {**_line(3, 0), "observedMetrics": {"arfl_late": {"rows": 6}, "arfl_input": {"rows": 9}}}
    drop = batch_late_drop(line, 0)
    assert drop is not None and drop.rows == 6 and drop.operators == {AGREED_WATERMARK: 6}
    assert drop.operator_name == "agreed watermark"
    assert "every replica drops the same ones" in drop.journal_fields()["message"]
    both = batch_late_drop({**_line(3, 2), "observedMetrics": {"arfl_late": {"rows": 1}}}, 0)
    assert both is not None and both.rows == 3 and both.operators == {AGREED_WATERMARK: 1, 0: 2}
    assert (
        batch_late_drop({**_line(3, 0), "observedMetrics": {"arfl_late": {"rows": 0}}}, 0) is None
    )
    assert batch_late_drop({**_line(3, 0), "observedMetrics": {"arfl_late": "x"}}, 0) is None


def test_journal_event_reads_back() -> None:
    (drop,) = late_drops([_line(4, 1, 4)], replica=1)
    event = {"t": 1.0, "event": "late-drop", **drop.journal_fields()}
    event = json.loads(json.dumps(event))
    assert event["operator"] == 0 and event["operators"] == {"0": 1, "1": 4}
    assert event["watermark"] == "2026-11-25T23:01:30.322Z"
    assert "replica 1 batch 4: 5 row(s) dropped" in event["message"]
    assert from_journal(event) == drop
    assert from_journal({"event": "warning", "message": "x"}) is None
    assert from_journal({"event": "late-drop", "replica": 0}) is None


def _append(path: Path, *lines: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def _drop_events(journal: Journal) -> list[tuple[int, int, int]]:
    return [(e["replica"], e["batch"], e["rows"]) for e in journal.read()
            if e["event"] == "late-drop"]  # fmt: skip


def test_watch_journals_each_replica_batch_once_across_restarts(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    journal = Journal(paths.journal)
    drops = LateDropWatch(journal, paths, replicas=2)
    assert drops.poll() == 0  # no progress file yet
    _append(paths.progress(0), *LINES[:6])
    _append(paths.progress(1), _line(0, 2))
    assert drops.poll() == 4
    # The rest of replica 0's file: the restart's repeat of batch 4, then 5 and 6; a torn line
    # (the driver is still writing it) waits for the next poll.
    _append(paths.progress(0), *LINES[6:])
    with paths.progress(1).open("a") as f:
        f.write(json.dumps(_line(1, 9))[:20])
    assert drops.poll() == 1
    assert drops.poll() == 0
    with paths.progress(1).open("a") as f:
        f.write(json.dumps(_line(1, 9))[20:] + "\n")
    assert drops.poll() == 1
    expected = [(0, 1, 3), (0, 3, 2), (0, 4, 5), (1, 0, 2), (0, 5, 7), (1, 1, 9)]
    assert _drop_events(journal) == expected
    # A second watch of the same run (the orchestrator restarted) reads every line again but
    # journals nothing twice.
    again = LateDropWatch(journal, paths, replicas=2)
    assert again.poll() == 0
    _append(paths.progress(1), _line(1, 9), _line(2, 1))
    assert again.poll() == 1
    assert _drop_events(journal) == [*expected, (1, 2, 1)]


class _Watcher(Watcher):
    def source_end_offsets(self) -> dict[int, int]:
        return {0: 40}


def _ctx(tmp_path: Path) -> RunContext:
    spec = parse_spec(
        {
            "name": "w",
            "source": {"topic": "in", "partitions": 1},
            "sink": {"topic": "out"},
            "replication": {"mode": "active-leaderless", "replicas": 2},
        }
    )
    return create_run(spec, None, DeployOptions(runs_root=tmp_path, drain_s=0.5))


def test_the_watch_loop_journals_late_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "TICK_S", 0.02)
    ctx = _ctx(tmp_path)
    end = {"sources": [{"endOffset": {"batch": 7, "offsets": {"0": 40}}}], "numInputRows": 0}
    _append(ctx.paths.progress(0), {**_line(0, 0), **end}, {**_line(1, 6), **end})
    _append(ctx.paths.progress(1), {**_line(0, 0), **end})
    _Watcher(
        ctx,
        "127.0.0.1:1",
        FakeRunner({i: ReplicaState(i, "running", pid=i + 1) for i in range(2)}),  # type: ignore[arg-type]
        FakeProcess(alive=True),  # type: ignore[arg-type]
        FakeProcess(alive=False),  # type: ignore[arg-type]
        resources=FakeResources(),  # type: ignore[arg-type]
        write_state=lambda: None,
        active_faults=lambda: [],
        started_at=time.time(),
    ).run(None)
    assert _drop_events(ctx.journal) == [(0, 1, 6)]
    # Journaled by the loop's first tick, not only when the watch ended.
    kinds = [e["event"] for e in read_jsonl(ctx.paths.journal)]
    assert kinds.index("late-drop") < kinds.index("workload-finished")


def _copy_run(tmp_path: Path) -> Path:
    run = tmp_path / "real-active-leaderless"
    shutil.copytree(RUNS / run.name, run)
    return run


def test_report_counts_late_drops_per_replica(tmp_path: Path) -> None:
    run = _copy_run(tmp_path)
    before = build_report(run)
    assert before.late_drops.rows == 0
    assert before.to_dict()["late_drops"]["replicas"]["1"] == {
        "rows": 0, "batches": 0, "first_batch": None, "last_batch": None,
        "unreported_batches": [],
    }  # fmt: skip
    assert not [w for w in before.warnings if "watermark" in w]
    # Replica 1 (last batch 9 in the fixture) dropped rows in batches 10 and 12, was restarted
    # and re-ran batch 12; replica 0's batch 20 is only in the journal (its progress line never
    # made it: the run was killed while the driver wrote it).
    _append(run / "progress" / "replica-1.jsonl",
            _line(10, 4), _line(11, 0), _line(12, 0, 2), _line(12, 0, 2))  # fmt: skip
    with (run / "journal.jsonl").open("a") as f:
        (drop,) = late_drops([_line(20, 5)], replica=0)
        f.write(json.dumps({"t": 1.0, "event": "late-drop", **drop.journal_fields()}) + "\n")
        # The watcher journaled replica 1's batch 10 too: counted once.
        (dup,) = late_drops([_line(10, 4)], replica=1)
        f.write(json.dumps({"t": 1.0, "event": "late-drop", **dup.journal_fields()}) + "\n")
    rep = build_report(run)
    doc = json.loads(json.dumps(rep.to_dict()))["late_drops"]
    assert doc == {
        "rows": 11,
        "batches": 3,
        "agreed": False,
        "replicas": {
            "0": {
                "rows": 5,
                "batches": 1,
                "first_batch": 20,
                "last_batch": 20,
                "unreported_batches": [],
            },
            "1": {
                "rows": 6,
                "batches": 2,
                "first_batch": 10,
                "last_batch": 12,
                "unreported_batches": [],
            },
        },
    }
    assert rep.correctness.divergent == 49  # the correctness counts are untouched
    headers, (row,) = correctness_rows(rep)
    cell = row[headers.index("late drops")]
    assert headers.index("late drops") == headers.index("divergent") + 1
    assert cell == "r0 5, r1 6"
    assert any("11 row(s) in 3 batch(es) dropped behind the watermark" in w for w in rep.warnings)
    html = render_html(rep, tmp_path / "report.html").read_text()
    assert "<td>r0 5, r1 6</td>" in html and "numRowsDroppedByWatermark" in html


def test_report_says_which_batches_have_no_progress_line(tmp_path: Path) -> None:
    # Replica 1's query (last batch 9 in the fixture) committed batch 10 and was SIGKILLed before
    # its progress line was written; its restart from the checkpoint went on with 11 and
    # dropped rows there. Its count is what the lines say, with batch 10 named as unknown.
    run = _copy_run(tmp_path)
    query = json.loads((run / "progress" / "replica-1.jsonl").read_text().splitlines()[0])["id"]
    _append(run / "progress" / "replica-1.jsonl", {**_line(11, 3), "id": query})
    rep = build_report(run)
    doc = json.loads(json.dumps(rep.to_dict()))["late_drops"]["replicas"]
    assert doc["1"] == {
        "rows": 3, "batches": 1, "first_batch": 11, "last_batch": 11, "unreported_batches": [10],
    }  # fmt: skip
    assert doc["0"]["unreported_batches"] == []
    headers, (row,) = correctness_rows(rep)
    assert row[headers.index("late drops")] == "r0 0, r1 >= 3 (1 batch unknown)"
    (warning,) = [w for w in rep.warnings if "progress line" in w]
    assert "replica 1: batch 10 committed without a progress line" in warning


def test_batches_taken_from_a_peers_checkpoint_are_not_unreported(tmp_path: Path) -> None:
    """Replica 1 committed up to batch 9 and restarted from a copy of replica 0's checkpoint,
    whose last committed batch was 11 (``resume: peer``): it never ran 10 and 11, so they are
    no holes; a batch of its own committed without a line still is."""
    lines = [{**_line(b), "id": "q1"} for b in (0, 1, 2, 4, 5, 6, 7, 8, 9, 12, 13)]
    restarts = [
        {"event": "replica-restarted", "replica": 1, "resume": "peer", "batch": 11, "own_batch": 9},
        {"event": "replica-restarted", "replica": 1, "resume": "checkpoint"},
    ]
    assert unreported_batches(lines) == [3, 10, 11]
    assert peer_batches(restarts) == [10, 11]
    assert unreported_batches(lines, peer_batches(restarts)) == [3]
    # A replica with no commit of its own took every batch up to the copy's.
    assert peer_batches([{"resume": "peer", "batch": 2, "own_batch": None}]) == [0, 1, 2]
    assert peer_batches([{"resume": "peer"}, {"resume": "peer", "batch": "x"}]) == []
    # The report reads them from the journal.
    run = _copy_run(tmp_path)
    query = json.loads((run / "progress" / "replica-1.jsonl").read_text().splitlines()[0])["id"]
    _append(run / "progress" / "replica-1.jsonl", {**_line(12, 3), "id": query})
    with (run / "journal.jsonl").open("a") as f:
        f.write(json.dumps({"t": 0, **restarts[0]}) + "\n")
    rep = build_report(run)
    assert rep.to_dict()["late_drops"]["replicas"]["1"]["unreported_batches"] == []
    assert not [w for w in rep.warnings if "progress line" in w]


def test_report_says_when_every_drop_was_the_agreed_watermarks(tmp_path: Path) -> None:
    run = _copy_run(tmp_path)
    agreed = {"observedMetrics": {"arfl_late": {"rows": 3}}}
    for r in (0, 1):
        _append(run / "progress" / f"replica-{r}.jsonl", {**_line(30, 0), **agreed})
    rep = build_report(run)
    assert rep.late_drops.agreed and rep.to_dict()["late_drops"]["agreed"] is True
    (warning,) = [w for w in rep.warnings if "watermark" in w]
    assert "6 row(s) in 2 batch(es) dropped behind the agreed watermark" in warning
    assert "same rows in every replica" in warning and "may differ" not in warning
    html = render_html(rep, tmp_path / "report.html").read_text()
    assert "Every replica drops the same rows" in html
    # One drop by Spark's own watermark and the run is no longer all agreed.
    _append(run / "progress" / "replica-1.jsonl", _line(31, 2))
    mixed = build_report(run)
    assert not mixed.late_drops.agreed
    assert any("replicas' results may differ" in w for w in mixed.warnings)


def test_report_without_progress_says_unknown() -> None:
    rep = build_report(RUNS / "real-none-noresults")  # a run without progress files
    assert rep.late_drops.rows is None
    assert rep.to_dict()["late_drops"] == {
        "rows": None, "batches": None, "agreed": False, "replicas": {"0": None},
    }  # fmt: skip
    headers, (row,) = correctness_rows(rep)
    assert row[headers.index("late drops")] == "unknown"
