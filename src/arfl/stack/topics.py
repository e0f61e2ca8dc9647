"""Topics arfl creates and deletes (confluent-kafka AdminClient)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata
from confluent_kafka.cimpl import NewTopic

from arfl.errors import ArflError, StackError
from arfl.processes import wait_until
from arfl.stack.health import _quiet

_METADATA_TIMEOUT_S = 10.0
_WAIT_S = 30.0


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap}, logger=_quiet)


def _metadata(admin: AdminClient, bootstrap: str) -> ClusterMetadata:
    try:
        return admin.list_topics(timeout=_METADATA_TIMEOUT_S)
    except KafkaException as e:
        raise StackError(
            f"kafka at {bootstrap} did not answer a metadata request within "
            f"{_METADATA_TIMEOUT_S:.0f}s ({e}); run 'arfl stack status'"
        ) from e


def _ready_partitions(md: ClusterMetadata, name: str) -> int | None:
    """Partitions of ``name`` that have a leader; None if the topic is unknown."""
    t = md.topics.get(name)
    if t is None or t.error is not None:
        return None
    return sum(1 for p in t.partitions.values() if p.leader >= 0 and p.error is None)


def ensure_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    *,
    log_append_time: bool = False,
    config: dict[str, str] | None = None,
) -> None:
    """Create topic ``name`` unless it exists; return once every partition has a leader.

    Args:
        bootstrap: Kafka bootstrap servers.
        name: topic name.
        partitions: partitions of a new topic; an existing topic needs at least this many.
        log_append_time: set ``message.timestamp.type=LogAppendTime`` (broker timestamps,
            monotonic per partition; what the time-index cuts of the leaderless mode rely on).
        config: further topic configs.

    Raises:
        StackError: Kafka unreachable; creation refused; or the topic exists with fewer
            partitions (an existing topic's configs are not checked).
    """
    if partitions < 1:
        raise StackError(f"topic {name}: partitions must be >= 1, got {partitions}")
    cfg = dict(config or {})
    if log_append_time:
        cfg["message.timestamp.type"] = "LogAppendTime"
    admin = _admin(bootstrap)
    md = _metadata(admin, bootstrap)
    existing = md.topics.get(name)
    if existing is None or existing.error is not None:
        # replication_factor -1: the broker's default.replication.factor (1 on the embedded
        # stack), so the same code works against a replicated external cluster.
        fut = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=cfg)],
            operation_timeout=_WAIT_S,
            request_timeout=_WAIT_S,
        )[name]
        try:
            fut.result()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            exists = isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS
            if not exists:
                raise StackError(
                    f"creating topic {name} on kafka at {bootstrap} failed: {e}"
                ) from e

    def led() -> bool:
        md = _metadata(admin, bootstrap)
        t = md.topics.get(name)
        have = len(t.partitions) if t is not None and t.error is None else None
        if have is not None and have < partitions:
            raise StackError(
                f"topic {name} on kafka at {bootstrap} has {have} partitions, {partitions} "
                "needed; delete it (or use another topic name)"
            )
        ready = _ready_partitions(md, name)
        return ready is not None and have is not None and ready == have

    wait_until(
        led,
        timeout_s=_WAIT_S,
        interval_s=0.1,
        error=lambda: StackError(
            f"topic {name} on kafka at {bootstrap}: partitions still without a leader after "
            f"{_WAIT_S:.0f}s; see the broker log ('arfl stack status' shows where)"
        ),
    )


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete the topics ``names`` (missing ones are ignored); wait until metadata drops them.

    Raises:
        StackError: Kafka unreachable or a deletion refused.
    """
    if not names:
        return
    admin = _admin(bootstrap)
    md = _metadata(admin, bootstrap)
    present = [n for n in names if n in md.topics and md.topics[n].error is None]
    if not present:
        return
    futs = admin.delete_topics(present, operation_timeout=_WAIT_S, request_timeout=_WAIT_S)
    for n, fut in futs.items():
        try:
            fut.result()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise StackError(f"deleting topic {n} on kafka at {bootstrap} failed: {e}") from e

    def gone() -> bool:
        md = _metadata(admin, bootstrap)
        return not any(n in md.topics and md.topics[n].error is None for n in present)

    wait_until(
        gone,
        timeout_s=_WAIT_S,
        interval_s=0.1,
        error=lambda: StackError(
            f"topics {present} still listed by kafka at {bootstrap} after {_WAIT_S:.0f}s"
        ),
    )


def require_topic(
    client: Any,
    bootstrap: str,
    topic: str,
    timeout_s: float,
    *,
    error: type[ArflError] = StackError,
    who: str = "",
    what: str = "topic",
    missing_hint: str = "create it first (arfl.stack.topics.ensure_topic)",
    unreachable_hint: str = "run 'arfl stack up' or check stack.kafka",
) -> Any:
    """Check, through an existing client, that Kafka answers and ``topic`` has partitions.

    Args:
        client: a confluent-kafka Producer, Consumer or AdminClient (anything with
            ``list_topics``).
        bootstrap: the address, for messages.
        topic: the topic that must exist.
        timeout_s: how long Kafka may take to answer.
        error: the error class raised (the caller's layer: DeployError, ReportError, ...).
        who: a prefix naming the component (``"injector: "``).
        what: how the topic is named in the message (``"sink topic"``).
        missing_hint: what to do when the topic does not exist.
        unreachable_hint: what to do when Kafka does not answer.

    Returns:
        The topic's metadata.

    Raises:
        ArflError: of class ``error``, naming host:port and what to do.
    """
    try:
        md = client.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as e:
        raise error(
            f"{who}kafka at {bootstrap} not reachable after {timeout_s:.0f}s ({e}); "
            f"{unreachable_hint}"
        ) from None
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise error(f"{who}{what} {topic!r} does not exist on kafka at {bootstrap}; {missing_hint}")
    return meta


_LEADER_PENDING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
"""Errors of a partition whose leadership is still moving into place: asked again."""


def watermarks(
    consumer: Any, topic: str, partitions: Iterable[int], timeout_s: float = _METADATA_TIMEOUT_S
) -> dict[int, tuple[int, int]]:
    """The low and high watermark of each partition, asked from the broker through ``consumer``.

    Args:
        consumer: an open confluent-kafka Consumer (its assignment is not touched).
        topic: the topic.
        partitions: the partition numbers to ask about.
        timeout_s: how long the broker may take to answer, per partition.

    Returns:
        Partition -> (first offset still in the log, offset after the last record).

    A partition whose leader is not in place yet (:data:`_LEADER_PENDING`: right after the topic
    was created, the broker may not yet lead a partition the metadata already names it leader
    of) is asked again every 0.1 s until ``timeout_s`` has passed for it.

    Raises:
        KafkaException: the broker did not answer, does not know the partition, or its leader
            was still not in place after ``timeout_s``.
    """
    out: dict[int, tuple[int, int]] = {}
    for p in partitions:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=timeout_s, cached=False
                )
                break
            except KafkaException as e:
                err = e.args[0] if e.args else None
                code = err.code() if isinstance(err, KafkaError) else None
                if code not in _LEADER_PENDING or time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)
        out[p] = (int(low), int(high))
    return out


def end_offsets(
    bootstrap: str,
    topic: str,
    partitions: int | None = None,
    timeout_s: float = _METADATA_TIMEOUT_S,
) -> dict[int, int]:
    """The end offset (the offset after the last record, never negative) of each partition.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: the topic.
        partitions: ask about partitions ``0 .. partitions - 1``; all of the topic's when None.
        timeout_s: how long Kafka may take to answer each request.

    Raises:
        StackError: ``partitions`` is None and Kafka is unreachable or the topic missing.
        KafkaException: the broker did not answer a watermark request.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "arfl-offsets"})
    try:
        numbers: Iterable[int] = (
            sorted(require_topic(consumer, bootstrap, topic, timeout_s).partitions)
            if partitions is None
            else range(partitions)
        )
        return _ends(consumer, topic, numbers, timeout_s)
    finally:
        consumer.close()


def _ends(consumer: Any, topic: str, partitions: Iterable[int], timeout_s: float) -> dict[int, int]:
    """Partition -> end offset (never negative), from :func:`watermarks`."""
    return {
        p: max(0, high)
        for p, (_, high) in watermarks(consumer, topic, partitions, timeout_s).items()
    }


class EndOffsetProbe:
    """:func:`end_offsets` of one topic, asked again and again over one consumer (a watch that
    samples every second should not start a Kafka client each time); :meth:`close` it.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: the topic.
        partitions: its partition count.
        timeout_s: how long Kafka may take to answer each request.
    """

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, timeout_s: float = _METADATA_TIMEOUT_S
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.timeout_s = timeout_s
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "arfl-offsets"})

    def __call__(self) -> dict[int, int]:
        """The end offset of each partition now.

        Raises:
            KafkaException: the broker did not answer a watermark request.
        """
        return _ends(self._consumer, self.topic, range(self.partitions), self.timeout_s)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


def read_to_end(
    bootstrap: str,
    topic: str,
    *,
    error: type[ArflError],
    missing_hint: str,
    unreachable_hint: str,
    timeout_s: float,
    group_prefix: str = "arfl-read",
) -> list[Message]:
    """Every record of ``topic`` from its start to the end it had when the read began.

    A throw-away consumer (a fresh group id, nothing committed) is assigned every non-empty
    partition from its low watermark and polled until each partition reached the high watermark
    captured at the start; records appended later are left out, so the read ends.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: the topic to read.
        error: the error class raised (the caller's layer: ReportError, ...).
        missing_hint: what to do when the topic does not exist.
        unreachable_hint: what to do when Kafka does not answer.
        timeout_s: how long reading up to the end may take.
        group_prefix: the consumer group id's prefix (a timestamp follows), naming the reader
            in the broker's logs.

    Returns:
        The raw messages (``value()``, ``key()``, ``partition()``, ``offset()``,
        ``timestamp()``, ``headers()``), in offset order per partition.

    Raises:
        ArflError: of class ``error``: Kafka is not reachable, the topic does not exist, or
            its end was not reached within ``timeout_s``.
        KafkaException: the broker did not answer a watermark request.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{group_prefix}-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "socket.timeout.ms": 10_000,
            # librdkafka logs every failed connection attempt; require_topic's error says it once.
            "log_level": 0,
            # Everything appended, as a non-transactional reader sees it; a transactional topic
            # (the final topic with a standby merger) may end with a marker, never delivered.
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    out: list[Message] = []
    try:
        meta = require_topic(
            consumer, bootstrap, topic, _METADATA_TIMEOUT_S, error=error,
            missing_hint=missing_hint, unreachable_hint=unreachable_hint,
        )  # fmt: skip
        ends: dict[int, int] = {}
        assign: list[TopicPartition] = []
        for p, (low, high) in watermarks(consumer, topic, meta.partitions).items():
            if high > low:
                ends[p] = high
                assign.append(TopicPartition(topic, p, low))
        if not assign:
            return out
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    part = msg.partition()
                    if err.code() == KafkaError._PARTITION_EOF and part is not None:
                        ends.pop(part, None)
                    continue
                part, off = msg.partition(), msg.offset()
                if part is None or off is None or part not in ends or off >= ends[part]:
                    continue
                out.append(msg)
                if off + 1 >= ends[part]:
                    del ends[part]
        if ends:
            raise error(
                f"reading {topic} at {bootstrap} did not reach its end within {timeout_s:.0f}s "
                f"(partitions {sorted(ends)} left)"
            )
        return out
    finally:
        consumer.close()
