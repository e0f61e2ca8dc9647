"""``--recompute``'s read-back of a sink topic against a real Kafka broker.

The offline recomputation itself (a Spark batch job) is :mod:`arfl.replica.offline`'s and is
tested there; here: every record of the sink topic is read back, across partitions, and counted
against expected results (missing, duplicates, content that differs).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from arfl.errors import ReportError
from arfl.report.correctness import compare_results, read_topic
from arfl.run.records import Result
from arfl.stack import StackInfo
from arfl.stack.topics import delete_topics, ensure_topic


def _value(rid: str, h: str) -> bytes:
    return json.dumps({"rid": rid, "src_ts": 1, "replica": 0, "hash": h, "data": {}}).encode()


def test_sink_read_back_and_counted(stack: StackInfo, topic_name: str) -> None:
    ensure_topic(stack.kafka, topic_name, 3)
    try:
        prod = Producer({"bootstrap.servers": stack.kafka, "linger.ms": 1})
        rids = [f"{i % 3}:{i}" for i in range(300)]
        for rid in rids:
            prod.produce(topic_name, key=rid.encode(), value=_value(rid, "h" + rid))
        prod.produce(topic_name, key=b"0:0", value=_value("0:0", "h0:0"))  # a duplicate
        prod.produce(topic_name, key=b"1:1", value=_value("1:1", "changed"))  # and a changed copy
        prod.produce(topic_name, key=b"x", value=b"not a result")
        assert prod.flush(30) == 0
        delivered = read_topic(stack.kafka, topic_name, timeout_s=60)
        assert len(delivered) == 302
        expected = {r: Result(r, 1, -1, "h" + r, {}) for r in [*rids, "2:999"]}
        c = compare_results(expected, set(expected), delivered, merger_divergent=0, produced=300)
        assert (c.expected, c.results, c.missing, c.duplicates, c.divergent) == (301, 300, 1, 2, 1)
    finally:
        delete_topics(stack.kafka, [topic_name])


def test_missing_topic_is_a_report_error(stack: StackInfo, topic_name: str) -> None:
    with pytest.raises(ReportError, match=f"topic .{topic_name}. does not exist on kafka at"):
        read_topic(stack.kafka, topic_name)
