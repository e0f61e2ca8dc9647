"""The output frontier: the offset below which every result of an input partition is delivered."""

from __future__ import annotations

import json
from pathlib import Path

from arfl.measure.frontier import Frontier, read_frontier, write_frontier
from arfl.orchestrate.resume import resume_offsets


def test_a_partition_is_bounded_only_once_every_output_partition_saw_it() -> None:
    f = Frontier()
    f.set_partitions(0, 2)
    f.offer(0, 0, "0:10")
    assert f.safe() == {}  # output partition 1 may still hold an older result of input 0
    f.offer(0, 1, "0:7")
    assert f.safe() == {0: 7}
    f.offer(0, 1, "0:12")
    assert f.safe() == {0: 10}


def test_reordered_delivery_across_output_partitions_is_not_skipped() -> None:
    """Replica 0 wrote 0:5 to q0, then 0:6 to q1 and 0:7 to q0; the merger read 0:6 and 0:7
    first: 0:5 is on its way (q0 holds it before 0:7), but nothing yet shows that every
    offset below 7 arrived on q1."""
    f = Frontier()
    f.set_partitions(0, 2)
    f.offer(0, 1, "0:6")
    f.offer(0, 0, "0:7")
    assert f.safe() == {0: 6}


def test_replays_never_lower_it_and_the_best_replica_wins() -> None:
    f = Frontier()
    for r in (0, 1):
        f.set_partitions(r, 1)
    f.offer(0, 0, "1:50")
    f.offer(0, 0, "1:20")  # a restarted replica replaying from its checkpoint
    f.offer(1, 0, "1:40")
    assert f.safe() == {1: 50}


def test_window_update_ids_are_ignored() -> None:
    f = Frontier()
    f.set_partitions(0, 1)
    for rid in ("1764106200000-1764106201000:k#3", "0:12:1", "x:1"):
        f.offer(0, 0, rid)
    assert f.safe() == {} and not f.changed


def test_unknown_output_partitions_bound_nothing() -> None:
    f = Frontier()
    f.offer(0, 0, "0:5")
    assert f.safe() == {}


def test_file_round_trip_and_unreadable(tmp_path: Path) -> None:
    p = tmp_path / "frontier.json"
    assert read_frontier(p) is None
    write_frontier(p, {1: 9, 0: 4}, 1.5)
    assert json.loads(p.read_text()) == {"t": 1.5, "offsets": {"0": 4, "1": 9}}
    assert read_frontier(p) == {0: 4, 1: 9}
    p.write_text('{"offsets": [1]}')
    assert read_frontier(p) is None


def test_resume_offsets_move_deploys_start_up_to_the_frontier() -> None:
    start = json.dumps({"in": {"0": 100, "1": 200}})
    assert resume_offsets(start, {0: 150, 1: 180}) == {"in": {"0": 150, "1": 200}}
    assert resume_offsets(start, {0: 150}) is None  # partition 1 not bounded yet
    assert resume_offsets(start, None) is None
    assert resume_offsets(None, {0: 1}) is None
    assert resume_offsets("earliest", {0: 1}) is None
