"""watermarks(): a partition whose leader is not in place yet is asked again, not failed."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from arfl.stack.topics import watermarks


class _Consumer:
    """Answers ``get_watermark_offsets`` after ``errors`` (per partition) have been raised."""

    def __init__(self, errors: dict[int, list[int]]) -> None:
        self.errors = errors
        self.calls = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert cached is False
        self.calls += 1
        pending = self.errors.get(tp.partition)
        if pending:
            raise KafkaException(KafkaError(pending.pop(0)))
        return 0, 10 * tp.partition


def test_a_partition_without_its_leader_yet_is_asked_again() -> None:
    # Right after a topic is created the broker may not have taken over a partition that the
    # metadata already names it the leader of (seen in the suite: NOT_LEADER_FOR_PARTITION).
    c = _Consumer(
        {
            1: [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE],
            2: [KafkaError.UNKNOWN_TOPIC_OR_PART],
        }
    )
    assert watermarks(c, "t", [0, 1, 2], timeout_s=5.0) == {0: (0, 0), 1: (0, 10), 2: (0, 20)}
    assert c.calls == 6


def test_a_lasting_or_permanent_error_still_raises() -> None:
    c = _Consumer({0: [KafkaError.NOT_LEADER_FOR_PARTITION] * 1000})
    with pytest.raises(KafkaException):
        watermarks(c, "t", [0], timeout_s=0.5)
    c = _Consumer({0: [KafkaError.TOPIC_AUTHORIZATION_FAILED]})
    with pytest.raises(KafkaException):
        watermarks(c, "t", [0], timeout_s=5.0)
    assert c.calls == 1
