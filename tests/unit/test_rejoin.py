"""RejoinTracker: a restarted replica has caught up once it processed what had arrived."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from arfl.orchestrate.rejoin import RejoinTracker
from arfl.run.rundir import Journal, read_jsonl


def _progress(start: float, dur_ms: int, offsets: dict[str, int]) -> dict[str, Any]:
    ts = datetime.fromtimestamp(start, UTC).isoformat().replace("+00:00", "Z")
    return {
        "timestamp": ts,
        "durationMs": {"triggerExecution": dur_ms},
        "sources": [{"endOffset": {"batch": 99, "offsets": offsets}}],
    }


class _World:
    def __init__(self) -> None:
        self.ends = {0: 100, 1: 50}
        self.progress: dict[int, dict[str, Any] | None] = {0: None, 1: None}


def _events(j: Journal, name: str) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(j.path) if e["event"] == name]


def test_caught_up_when_it_processed_what_had_arrived_at_the_restart(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    w = _World()
    t = RejoinTracker(j, lambda: dict(w.ends), lambda r: w.progress[r])
    # An old batch (before the restart) reached far: it does not count.
    w.progress[1] = _progress(90.0, 1000, {"0": 100, "1": 50})
    t.observe(100.0, {0: 0, 1: 1})  # restarted at 100 with the input at {0: 100, 1: 50}
    w.ends = {0: 180, 1: 90}
    w.progress[1] = _progress(110.0, 2000, {"0": 100, "1": 40})  # partition 1 not there yet
    t.observe(112.5, {0: 0, 1: 1})
    assert not _events(j, "replica-caught-up")
    assert t.rejoining == [1]
    w.progress[1] = _progress(113.0, 1500, {"0": 160, "1": 60})
    t.observe(115.0, {0: 0, 1: 1})
    (ev,) = _events(j, "replica-caught-up")
    assert ev["replica"] == 1 and ev["catchup_s"] == 14.5 and ev["by"] == "progress"
    assert ev["offsets"] == {"0": 100, "1": 50}
    assert t.rejoining == []
    t.finish()
    assert not _events(j, "replica-not-caught-up")


def test_a_replica_that_never_caught_up_is_journaled_at_the_end(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    w = _World()
    t = RejoinTracker(j, lambda: dict(w.ends), lambda r: w.progress[r])
    t.observe(50.0, {0: 0, 1: 0})
    t.observe(51.0, {0: 1, 1: 0})
    t.observe(52.0, {0: 1, 1: 0})  # the same restart is not counted twice
    t.finish()
    (ev,) = _events(j, "replica-not-caught-up")
    assert ev["replica"] == 0 and ev["restarted_at"] == 51.0


def test_a_batch_that_ended_after_the_last_tick_counts_at_the_end(tmp_path: Path) -> None:
    # The run ends right after the restarted replica's batch that caught up wrote its progress,
    # before a tick observed it (seen in a real run: batch end 395.0 s, end of the run 395.4 s).
    j = Journal(tmp_path / "journal.jsonl")
    w = _World()
    t = RejoinTracker(j, lambda: dict(w.ends), lambda r: w.progress[r])
    t.observe(100.0, {0: 1, 1: 0})
    w.progress[0] = _progress(103.0, 4000, {"0": 120, "1": 60})
    t.finish()
    (ev,) = _events(j, "replica-caught-up")
    assert ev["replica"] == 0 and ev["catchup_s"] == 7.0
    assert not _events(j, "replica-not-caught-up")


def test_marker_copies_after_the_restart_say_it_caught_up_before_its_batch_ends(
    tmp_path: Path,
) -> None:
    # A real-time replica's first batch after the restart ends an interval later; a marker
    # copy of every input partition that arrived after the restart says it read to the end.
    j = Journal(tmp_path / "journal.jsonl")
    w = _World()
    ended: dict[int, dict[int, float]] = {1: {0: 95.0, 1: 95.0}}  # before its death
    t = RejoinTracker(j, lambda: dict(w.ends), lambda r: w.progress[r], lambda r: ended.get(r, {}))
    t.observe(100.0, {0: 0, 1: 1})
    ended[1] = {0: 104.0, 1: 95.0}  # partition 1's copy is the old attempt's
    t.observe(105.0, {0: 0, 1: 1})
    assert not _events(j, "replica-caught-up") and t.rejoining == [1]
    ended[1] = {0: 104.0, 1: 106.5}
    t.observe(107.0, {0: 0, 1: 1})
    (ev,) = _events(j, "replica-caught-up")
    assert (ev["replica"], ev["catchup_s"], ev["by"]) == (1, 6.5, "markers")
    assert t.rejoining == []
