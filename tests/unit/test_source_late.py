"""The agreed watermark's bookkeeping (arfl.replica.source.late), no Kafka, no Spark.

The scan itself (:func:`group_maxes`) and the filter run for real in
``tests/integration/test_source_spark.py`` (three replicas, aligned and merged batches, the same
late rows dropped) and ``tests/unit/test_query.py`` (the window step's filter).
"""

from __future__ import annotations

import json

import pytest

from arfl.replica.modes.leaderless import EpochCuts
from arfl.replica.source.fetch import row_thresholds
from arfl.replica.source.late import (
    LateRule,
    annotate,
    event_time,
    newest_by_group,
    thresholds,
)
from arfl.replica.source.offsets import NO_BATCH, AgreedGroup, BatchOffset
from arfl.replica.source.options import SourceOptions

RULE = LateRule("et", 500)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b'{"et": 1700, "ts": 2000}', 1700),
        ('{"et": 1700.9, "ts": 1}', 1700),
        (b'{"eoi": true, "ts": 9000, "et": 1}', 9000),  # a marker counts with its ts
        (b'{"eoi": false, "et": 5, "ts": 1}', 5),
        (b'{"et": 1700}', None),  # no ts: the query's parse drops it as bad
        (b'{"et": 1700, "ts": "1"}', None),
        (b'{"et": "1700", "ts": 1}', None),
        (b'{"et": true, "ts": 1}', None),
        # Read as Spark reads the text the source hands it:
        (b'{"et": 1700, "ts": 1, "u": "\xff"}', 1700),  # invalid UTF-8, replaced
        (b'{"et": 1700, "ts": 1} trailing', 1700),  # the first JSON value
        (b"{'et': 1700, 'ts': 1}", None),  # single quotes: the query's parse refuses them too
        # Never raises, never a number a long cannot hold:
        (b'{"et": NaN, "ts": 1}', None),
        (b'{"et": Infinity, "ts": 1}', None),
        (b'{"et": 1e999, "ts": 1}', None),
        (b'{"et": 9223372036854775808, "ts": 1}', None),
        (b'{"et": -9223372036854775808, "ts": 1}', -(2**63)),
        (b"[" * 100_000 + b"]" * 100_000, None),
        (b"[1, 2]", None),
        (b"not json", None),
        (None, None),
    ],
)
def test_the_event_time_a_record_contributes(
    value: bytes | str | None, expected: int | None
) -> None:
    assert event_time(value, "et") == expected


def test_an_end_carries_the_newest_event_time_before_it_and_before_each_merged_group() -> None:
    start = BatchOffset(4, {0: 10, 1: 20}, tracked=True, event_max=1000)
    end = BatchOffset(
        7, {0: 30, 1: 40}, groups=(AgreedGroup({0: 15, 1: 25}), AgreedGroup({0: 22, 1: 31}))
    )
    # group 0 newest 1200, group 1 1500, group 2 none
    out = annotate(start, end, [1200, 1500, None])
    assert out.tracked and out.event_max == 1500
    assert out.groups == (AgreedGroup({0: 15, 1: 25}, 1200), AgreedGroup({0: 22, 1: 31}, 1500))
    assert out.same_position(end) and out.batch == 7
    # An older group does not lower the running max.
    assert annotate(start, end, [900, None, None]).groups[0].event_max == 1000
    # Thresholds per Kafka partition: each group's first offset and event_max - delay.
    assert thresholds(RULE, start, out, 1) == ((20, 500), (25, 700), (31, 1000))
    assert row_thresholds([20, 24, 25, 30, 31, 39], thresholds(RULE, start, out, 1)) == [
        500, 500, 700, 700, 1000, 1000,
    ]  # fmt: skip
    # From the topic's beginning nothing came before: no threshold for the first group.
    first = annotate(BatchOffset(NO_BATCH, {0: 0}), BatchOffset(0, {0: 5}), [None])
    assert first.tracked and first.event_max is None
    assert thresholds(RULE, BatchOffset(NO_BATCH, {0: 0}), first, 0) == ((0, None),)
    assert row_thresholds([1, 2], ()) == [None, None]


def test_a_row_belongs_to_the_last_agreed_batch_beginning_at_or_before_it() -> None:
    # Partition view: groups begin at offsets 10, 14, 14 (group 1 empty here), 17.
    cuts = [10, 14, 14, 17]
    out: list[int | None] = [None] * 4
    rows = [
        (10, b'{"et": 5, "ts": 0}'),
        (13, b'{"et": 9, "ts": 0}'),
        (14, b'{"et": 7, "ts": 0}'),
        (16, b"bad"),
        (17, b'{"eoi": true, "ts": 30}'),
        (18, b'{"et": 20, "ts": 0}'),
    ]
    newest_by_group(rows, cuts, "et", out)
    assert out == [9, None, 7, 30]
    # row_thresholds attributes the same way (the last of the batches beginning at 14).
    late = ((10, 1), (14, 2), (14, 3), (17, 4))
    assert row_thresholds([10, 13, 14, 16, 17, 18], late) == [1, 1, 3, 3, 4, 4]


def test_tracked_offsets_round_trip_and_untracked_ones_keep_their_format() -> None:
    end = BatchOffset(
        7, {1: 40, 0: 30}, tracked=True, event_max=1500, groups=(AgreedGroup({0: 15, 1: 25}, None),)
    )
    text = end.to_json()
    assert json.loads(text) == {
        "batch": 7,
        "offsets": {"0": 30, "1": 40},
        "event_max": 1500,
        "groups": [{"offsets": {"0": 15, "1": 25}, "event_max": None}],
    }
    assert BatchOffset.from_json(text) == end
    none_yet = BatchOffset(0, {0: 5}, tracked=True)
    assert BatchOffset.from_json(none_yet.to_json()) == none_yet
    assert BatchOffset(3, {0: 1}).to_json() == '{"batch":3,"offsets":{"0":1}}'
    with pytest.raises(ValueError, match="not an arfl source offset"):
        BatchOffset.from_dict({"batch": 1, "offsets": {}, "event_max": 1, "groups": [{"x": 1}]})


def test_the_rule_is_on_with_an_event_time_field_and_a_delay() -> None:
    base = SourceOptions(bootstrap="b:1", topic="t")
    assert base.late_rule is None
    on = SourceOptions.parse(
        {**base.to_options(), "event_time_field": "et", "watermark_delay_ms": "0"}
    )
    assert on.late_rule == LateRule("et", 0)
    assert RULE.threshold(None) is None and RULE.threshold(2000) == 1500


class _Log:
    """Two partitions of LogAppendTime timestamps (offset = index)."""

    def __init__(self, parts: dict[int, list[int]]) -> None:
        self.parts = parts

    def offsets_for_time(self, ts_ms: int) -> dict[int, int | None]:
        return {
            p: next((i for i, t in enumerate(r) if t >= ts_ms), None) for p, r in self.parts.items()
        }


def test_a_merged_leaderless_batch_names_where_each_aligned_group_begins() -> None:
    parts = {0: [1000 + 7 * i for i in range(120)], 1: [1003 + 11 * i for i in range(80)]}
    start = BatchOffset(NO_BATCH, {0: 0, 1: 0})

    def run(**kw: object) -> list[BatchOffset]:
        cuts = EpochCuts(_Log(parts), 100, clock=lambda: 2000, **kw)  # type: ignore[arg-type]
        out, at = [], start
        while (nxt := cuts.next_end(at)) != at:
            out.append(nxt)
            at = nxt
        return out

    aligned = run(group=2)
    (merged,) = run(group=2, max_epochs=0, with_groups=True)
    assert merged.same_position(aligned[-1])
    # The merged batch's groups begin exactly where the aligned batches after the first begin.
    assert [dict(g.offsets) for g in merged.groups] == [dict(a.offsets) for a in aligned[:-1]]
    (plain,) = run(group=2, max_epochs=0)
    assert plain.groups == ()


def test_a_checkpoint_without_the_newest_event_time_is_refused() -> None:
    # A checkpoint written before the agreed watermark (or by another mode) would restart it
    # from nothing while Spark keeps its own: the replicas would drop different rows.
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from arfl.errors import DeployError
    from arfl.replica.source.datasource import ArflKafkaStreamReader

    class Stay:
        def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
            return start

    opts = SourceOptions(bootstrap="b:1", topic="t", event_time_field="et", watermark_delay_ms=0)
    reader = ArflKafkaStreamReader(opts)
    reader._planner = (object(), Stay())  # type: ignore[assignment]
    old = BatchOffset(5, {0: 3}).to_dict()
    with pytest.raises(DeployError, match="fresh checkpoint"):
        reader.latestOffset(old, ReadAllAvailable())
    tracked = BatchOffset(5, {0: 3}, tracked=True, event_max=7).to_dict()
    assert reader.latestOffset(tracked, ReadAllAvailable()) == tracked
    initial = BatchOffset(NO_BATCH, {0: 0}).to_dict()
    assert reader.latestOffset(initial, ReadAllAvailable()) == initial
