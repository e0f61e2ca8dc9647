"""Progress lines: per-partition end offsets of Spark's Kafka source and of arfl's source."""

from __future__ import annotations

import json

from arfl.run.progress import end_offsets, reached


def test_spark_kafka_source_offsets_per_partition() -> None:
    p = {"sources": [{"endOffset": json.dumps({"clicks.r": {"0": 120, "1": 80}})}]}
    assert end_offsets(p) == {0: 120, 1: 80}
    assert reached(p, {0: 120, 1: 80})
    assert not reached(p, {0: 100, 1: 81})


def test_arfl_source_batch_number_is_not_an_offset() -> None:
    # The epoch number is huge; summing it in made every batch look like the end of input.
    p = {"sources": [{"endOffset": {"batch": 3591306220, "offsets": {"0": 3835, "1": 1400}}}]}
    assert end_offsets(p) == {0: 3835, 1: 1400}
    assert not reached(p, {0: 3830, 1: 1402})
    assert reached(p, {0: 3830, 1: 1399})


def test_missing_or_garbled_offsets_reach_nothing() -> None:
    assert end_offsets({}) == {}
    assert end_offsets({"sources": [{"endOffset": "not json"}, {"endOffset": None}]}) == {}
    assert not reached({}, {0: 1})
    assert reached({}, {})
