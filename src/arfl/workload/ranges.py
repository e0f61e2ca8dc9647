"""What the replayer reads: a topic's range resolved to offsets per partition
(:func:`resolve_ranges`), read partition by partition (:class:`KafkaRangeReader`, or any
:class:`RecordSource`) and merged in recorded-time order (:func:`merge_by_time`)."""

from __future__ import annotations

import heapq
import json
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from arfl.configs.replay import Position
from arfl.errors import DeployError
from arfl.run.records import END_OF_INPUT_FIELD

if TYPE_CHECKING:
    pass


_HIGH_WATER = 20_000
"""Records buffered per partition before its fetching pauses (memory stays bounded)."""
_BAD_EXAMPLES = 3


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Replayed:
    """One good record of the replayed range.

    Attributes:
        partition, offset: where it was read.
        key: its Kafka key (kept).
        fields: its JSON object.
        recorded_ms: its recorded time (``time_field`` or the record timestamp), epoch ms.
    """

    partition: int
    offset: int
    key: bytes | None
    fields: dict[str, Any]
    recorded_ms: int


def decode(
    value: bytes | None, time_field: str | None, timestamp_ms: int | None
) -> tuple[dict[str, Any], int] | str:
    """A record's JSON object and recorded time, or why it is bad.

    Args:
        value: the record's value.
        time_field: the JSON field with the recorded time (None: ``timestamp_ms``).
        timestamp_ms: the Kafka record timestamp (None when not available).

    Returns:
        ``(fields, recorded_ms)``, or a short reason (``"not a JSON object"``, ...).
    """
    try:
        obj = json.loads(value) if value is not None else None
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return "not a JSON object"
    if obj.get(END_OF_INPUT_FIELD) is True:
        return "an end-of-input marker"
    if time_field is None:
        if timestamp_ms is None or timestamp_ms < 0:
            return "no record timestamp"
        return obj, timestamp_ms
    t = obj.get(time_field)
    if isinstance(t, float) and t.is_integer():
        t = int(t)
    if isinstance(t, bool) or not isinstance(t, int):
        return f"no integer {time_field!r}"
    return obj, t


def merge_by_time(partitions: Iterable[Iterator[Replayed]]) -> Iterator[Replayed]:
    """Every partition's records, each partition in its own order, the heads taken in order
    of recorded time (ties: lower partition first)."""
    return heapq.merge(*partitions, key=lambda r: (r.recorded_ms, r.partition))


class RecordSource(Protocol):
    """Where the replayed records come from (the Kafka reader, or a list in unit tests)."""

    bad: int
    bad_examples: list[dict[str, Any]]
    ranges: dict[int, tuple[int, int]]

    def records(self) -> Iterator[Replayed]:
        """The good records in replay order."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


def resolve_ranges(
    consumer: Any,
    topic: str,
    partitions: Iterable[int],
    start: Position,
    end: Position,
    timeout_s: float = 10.0,
) -> dict[int, tuple[int, int]]:
    """Partition -> ``(first offset, end offset)`` (end exclusive) of the range to replay.

    Offsets are clamped to what the partition holds; a partition an offset table leaves out
    is not replayed (``(high, high)``).

    Raises:
        KafkaException: the broker did not answer.
    """
    from confluent_kafka import TopicPartition

    from arfl.stack.topics import watermarks

    marks = watermarks(consumer, topic, partitions, timeout_s)

    def at_time(ms: int) -> dict[int, int]:
        asked = [TopicPartition(topic, p, ms) for p in marks]
        found = consumer.offsets_for_times(asked, timeout=timeout_s)
        # -1: no record at or after that time, i.e. the end of the partition.
        return {
            tp.partition: (tp.offset if tp.offset >= 0 else marks[tp.partition][1]) for tp in found
        }

    def offsets(pos: Position) -> dict[int, int]:
        if pos.kind == "earliest":
            return {p: low for p, (low, _) in marks.items()}
        if pos.kind == "latest":
            return {p: high for p, (_, high) in marks.items()}
        if pos.kind == "time":
            assert pos.time_ms is not None
            return at_time(pos.time_ms)
        assert pos.offsets is not None
        # A partition the table leaves out: from its end (not replayed), or to its end.
        return {p: pos.offsets.get(p, high) for p, (_, high) in marks.items()}

    first, last = offsets(start), offsets(end)
    out: dict[int, tuple[int, int]] = {}
    for p, (low, high) in sorted(marks.items()):
        a = min(max(first[p], low), high)
        out[p] = (a, min(max(last[p], a), high))
    return out


class KafkaRangeReader:
    """Reads the resolved ranges of a topic with one consumer and merges them by time."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        start: Position,
        end: Position,
        time_field: str | None,
        timeout_s: float = 15.0,
    ) -> None:
        """Connect, check the topic exists, resolve the range.

        Raises:
            DeployError: Kafka unreachable or the topic missing.
        """
        from confluent_kafka import Consumer, KafkaException

        from arfl.stack.topics import require_topic

        self.topic, self.time_field = topic, time_field
        self.bad = 0
        self.bad_examples: list[dict[str, Any]] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"arfl-replay-{time.time_ns()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "log_level": 0,
            }
        )
        meta = require_topic(
            self._consumer, bootstrap, topic, timeout_s, error=DeployError, who="replay: ",
            what="topic to replay",
            missing_hint="check source.replay.topic (and source.replay.bootstrap)",
        )  # fmt: skip
        try:
            self.ranges = resolve_ranges(
                self._consumer, topic, sorted(meta.partitions), start, end, timeout_s
            )
        except KafkaException as e:
            self._consumer.close()
            raise DeployError(f"replay: offsets of {topic} at {bootstrap}: {e}") from e
        self._buffers: dict[int, deque[Replayed]] = {p: deque() for p in self.ranges}
        self._open = {p for p, (a, b) in self.ranges.items() if b > a}
        self._paused: set[int] = set()

    def records(self) -> Iterator[Replayed]:
        """The good records of the range, in replay order (:func:`merge_by_time`)."""
        from confluent_kafka import TopicPartition

        if self._open:
            self._consumer.assign(
                [TopicPartition(self.topic, p, self.ranges[p][0]) for p in sorted(self._open)]
            )
        return merge_by_time(self._partition(p) for p in sorted(self._open))

    def _partition(self, p: int) -> Iterator[Replayed]:
        buf = self._buffers[p]
        while True:
            if buf:
                yield buf.popleft()
            elif p not in self._open:
                return
            else:
                self._fetch(p)

    def _fetch(self, wanted: int) -> None:
        """Poll once; resume ``wanted`` first if it was paused, pause full partitions."""
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, TopicPartition

        if wanted in self._paused:
            self._consumer.resume([TopicPartition(self.topic, wanted)])
            self._paused.discard(wanted)
        for msg in self._consumer.consume(num_messages=5_000, timeout=0.5):
            part, off = msg.partition(), msg.offset()
            if msg.error() is not None or part is None or off is None or part not in self._open:
                continue
            end = self.ranges[part][1]
            if off >= end:
                continue
            if off + 1 >= end:
                self._open.discard(part)
                # Stop fetching past the range (a live or long topic would keep coming).
                self._consumer.pause([TopicPartition(self.topic, part)])
            ts_type, ts = msg.timestamp()
            got = decode(
                msg.value(), self.time_field, None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts
            )
            if isinstance(got, str):
                self.bad += 1
                if len(self.bad_examples) < _BAD_EXAMPLES:
                    self.bad_examples.append({"partition": part, "offset": off, "why": got})
                continue
            self._buffers[part].append(Replayed(part, off, msg.key(), got[0], got[1]))
        if not self._buffers[wanted] and wanted in self._open:
            # The range may end in offsets that are never delivered (transaction markers,
            # compacted records): the consumer's position tells.
            (pos,) = self._consumer.position([TopicPartition(self.topic, wanted)])
            if pos.offset >= self.ranges[wanted][1]:
                self._open.discard(wanted)
        full = [
            p
            for p, b in self._buffers.items()
            if len(b) > _HIGH_WATER and p in self._open and p not in self._paused and p != wanted
        ]
        if full:
            self._consumer.pause([TopicPartition(self.topic, p) for p in full])
            self._paused.update(full)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


# --------------------------------------------------------------------------- replayer
