"""Offsets, options, markers and per-batch caps of the arfl-kafka source (no I/O)."""

from __future__ import annotations

import json

import pytest

from arfl.errors import DeployError
from arfl.replica.source import BatchOffset, SourceOptions
from arfl.replica.source.markers import MARKER_HEADER, heartbeat, is_marker, marker_epoch
from arfl.replica.source.offsets import NO_BATCH, parse_partition_offsets
from arfl.replica.source.policy import cap_ends


def test_offset_json_round_trip_is_canonical() -> None:
    a = BatchOffset(7, {10: 5, 2: 9, 0: 0})
    b = BatchOffset(7, {0: 0, 2: 9, 10: 5})
    assert a.to_json() == b.to_json() == '{"batch":7,"offsets":{"0":0,"2":9,"10":5}}'
    assert BatchOffset.from_json(a.to_json()) == BatchOffset(7, {0: 0, 2: 9, 10: 5})
    # What Spark hands back is the dict after a JSON round trip (string keys).
    assert BatchOffset.from_dict(json.loads(json.dumps(a.to_dict()))).offsets == {0: 0, 2: 9, 10: 5}
    assert list(a.to_dict()["offsets"]) == ["0", "2", "10"]


def test_offset_from_foreign_checkpoint_says_what_to_do() -> None:
    with pytest.raises(ValueError, match="fresh checkpoint"):
        BatchOffset.from_dict({"topic": {"0": 5}})
    with pytest.raises(ValueError, match="not an arfl source offset"):
        BatchOffset.from_json("[1, 2]")


def test_records_until_and_same_position() -> None:
    s = BatchOffset(NO_BATCH, {0: 10, 1: 20})
    e = BatchOffset(3, {0: 15, 1: 20})
    assert s.records_until(e) == 5
    assert not s.same_position(e)
    assert e.same_position(BatchOffset(9, {0: 15, 1: 20}))


def test_parse_partition_offsets() -> None:
    assert parse_partition_offsets('{"0": 12, "3": 0}') == {0: 12, 3: 0}
    with pytest.raises(ValueError, match="partition -> offset"):
        parse_partition_offsets('{"0": "x"}')


def test_options_round_trip_and_errors() -> None:
    opts = SourceOptions(
        bootstrap="127.0.0.1:9092",
        topic="t",
        mode="active-leaderless",
        replica=2,
        heartbeat_interval_s=0.25,
        heartbeat=False,
    )
    assert SourceOptions.parse(opts.to_options()) == opts
    # Spark lower-cases option keys; values stay strings.
    raw = {k.upper(): v for k, v in opts.to_options().items()}
    assert SourceOptions.parse(raw) == opts
    with pytest.raises(DeployError) as e:
        SourceOptions.parse({"topic": "t", "replica": "x", "colour": "red", "mode": "magic"})
    msg = str(e.value)
    assert "'bootstrap' is required" in msg
    assert "replica='x'" in msg
    assert "unknown option 'colour'" in msg
    assert "mode='magic'" in msg
    with pytest.raises(DeployError, match="needs option 'zookeeper'"):
        SourceOptions.parse({"bootstrap": "b:1", "topic": "t", "mode": "active-leader"})


def test_markers_are_recognised_by_header_only() -> None:
    value, headers = heartbeat(42, 1)
    assert is_marker(headers)
    assert marker_epoch(value) == 42
    assert headers[0][0] == MARKER_HEADER
    assert not is_marker(None)
    assert not is_marker([("other", b"1")])
    # A user event that looks like a marker but has no header is data.
    assert marker_epoch(b'{"__arfl_epoch": 3}') == 3
    assert not is_marker([])
    assert marker_epoch(b"not json") is None


def test_cap_ends_takes_all_under_the_limit() -> None:
    assert cap_ends({0: 0, 1: 5}, {0: 10, 1: 7}, 100) == {0: 10, 1: 7}
    assert cap_ends({0: 0, 1: 5}, {0: 10, 1: 7}, None) == {0: 10, 1: 7}


def test_cap_ends_water_fills_and_never_moves_backwards() -> None:
    end = cap_ends({0: 0, 1: 0, 2: 100}, {0: 1000, 1: 3, 2: 50}, 11)
    assert end == {0: 8, 1: 3, 2: 100}
    assert sum(end[p] - s for p, s in {0: 0, 1: 0, 2: 100}.items()) == 11
    end = cap_ends({0: 0, 1: 0, 2: 0}, {0: 9, 1: 9, 2: 9}, 4)
    assert end == {0: 2, 1: 1, 2: 1}


def test_read_tasks_deal_partitions_round_robin_and_keep_every_range() -> None:
    from arfl.replica.source.datasource import group_ranges
    from arfl.replica.source.fetch import Range

    rs = [Range("b:1", "t", p, 10 * p, 10 * p + 5) for p in range(5)]
    # One executor core: one task reads every partition in turn (a task per partition would
    # only queue, each paying a Python worker hand-off and a consumer).
    assert group_ranges(rs, 1) == [rs]
    assert group_ranges(rs, 2) == [[rs[0], rs[2], rs[4]], [rs[1], rs[3]]]
    assert group_ranges(rs, 0) == group_ranges(rs, 9) == [[r] for r in rs]
    assert group_ranges([], 1) == []
