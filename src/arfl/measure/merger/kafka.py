"""The merger's Kafka clients: the consumer of the replica topics (assigned, never
subscribed) and the sink producer, with their settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from arfl.configs.defaults import MERGER_FETCH_WAIT_MS, MERGER_LINGER_MS
from arfl.errors import DeployError
from arfl.stack.clients import Producer


class Consumer(Protocol):
    """The part of ``confluent_kafka.Consumer`` the merger uses.

    There is deliberately no ``subscribe``: a group subscription can rebalance, and a
    rebalance with no committed offsets starts over from the beginning (every result again).
    """

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any:
        """Cluster metadata (``.topics[name].partitions`` / ``.error``)."""
        ...

    def assign(self, partitions: list[Any]) -> None:
        """Set the manual assignment (``TopicPartition`` list with start offsets)."""
        ...

    def incremental_assign(self, partitions: list[Any]) -> None:
        """Add partitions to the manual assignment, leaving the others where they are."""
        ...

    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]:
        """A batch of messages (possibly empty)."""
        ...

    def poll(self, timeout: float = ...) -> Any:
        """One message or ``None``."""
        ...

    def close(self) -> None:
        """Close the consumer."""
        ...

    def assignment(self) -> list[Any]:
        """The current assignment (``TopicPartition`` list)."""
        ...

    def position(self, partitions: list[Any]) -> list[Any]:
        """The next offsets to read (``TopicPartition`` list)."""
        ...

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> Any:
        """Store ``offsets`` under the group (no group is joined: a manual assignment)."""
        ...

    def committed(self, partitions: list[Any], timeout: float = ...) -> list[Any]:
        """The offsets stored under the group for ``partitions``."""
        ...


class SinkProducer(Producer, Protocol):
    """The part of ``confluent_kafka.Producer`` the merger uses on the final topic: headers
    and transactions besides the injector's part."""

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        partition: int = ...,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue one record (``BufferError`` when the local queue is full)."""
        ...

    def init_transactions(self, timeout: float = ...) -> None:
        """Take the transactional id: fences every producer that had it before."""
        ...

    def begin_transaction(self) -> None:
        """Open a transaction."""
        ...

    def commit_transaction(self, timeout: float = ...) -> None:
        """Flush and commit the open transaction."""
        ...

    def abort_transaction(self, timeout: float = ...) -> None:
        """Abort the open transaction."""
        ...

    def close(self) -> bool:
        """Shut the producer down now (its pending requests with it)."""
        ...

    def purge(self, in_queue: bool = ..., in_flight: bool = ..., blocking: bool = ...) -> None:
        """Fail the queued and in-flight records (their delivery reports say so)."""
        ...

    def __len__(self) -> int:
        """Records and requests waiting for their delivery report."""
        ...


def next_messages(consumer: Consumer, idle_timeout_s: float, max_messages: int = 1000) -> list[Any]:
    """What is queued (up to ``max_messages``) without waiting; when nothing is, the first
    message within ``idle_timeout_s``. ``consume()`` waits for ``num_messages`` *or* its
    timeout, which adds up to the timeout to every latency at low rates; ``poll()`` returns on
    the first message."""
    msgs = consumer.consume(num_messages=max_messages, timeout=0)
    if msgs:
        return msgs
    one = consumer.poll(idle_timeout_s)
    return [] if one is None else [one]


def append_time_s(msg: Any) -> float | None:
    """A record's Kafka timestamp in epoch seconds (the broker's append time on arfl's replica
    topics), None when it has none."""
    kind, ms = msg.timestamp()
    return None if kind == 0 else ms / 1000.0  # 0: TIMESTAMP_NOT_AVAILABLE


def consumer_config(
    bootstrap: str, group_id: str, fetch_wait_ms: int = MERGER_FETCH_WAIT_MS
) -> dict[str, Any]:
    """Low-latency consumer settings: short fetch wait, no automatic commit.

    The merger assigns partitions itself (see :class:`Consumer`): no group is joined, so no
    rebalance. It commits its positions under ``group_id`` by hand, once what it forwarded
    before them is acknowledged, so that a restarted merger reads on from there
    (:mod:`arfl.measure.merger.recovery`).
    """
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": "arfl-merger",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": fetch_wait_ms,
        "fetch.min.bytes": 1,
        # A few hundred copies queued ahead, not librdkafka's 64 MB: a replica's backlog (one
        # resumed, one catching up) then delays the other's fresh copies by milliseconds, not
        # by all of it (docs/benchmarks.md, "A replica's backlog in the merger's path").
        "queued.min.messages": 500,
        "queued.max.messages.kbytes": 256,
        "max.partition.fetch.bytes": 32 * 1024,
        "fetch.queue.backoff.ms": 1,
        "topic.metadata.refresh.interval.ms": 1000,
        "allow.auto.create.topics": False,
        # A standby reads the final topic too: every record appended there was forwarded,
        # also one of a transaction its fencing aborted (docs/design.md, "A standby merger").
        "isolation.level": "read_uncommitted",
    }


def sink_producer_config(
    bootstrap: str,
    linger_ms: float = MERGER_LINGER_MS,
    transactional_id: str | None = None,
    transaction_timeout_ms: int | None = None,
) -> dict[str, Any]:
    """Producer settings for the final topic: idempotent, short linger; with
    ``transactional_id``, transactional (the epoch that fences a merger taken over from),
    its transactions aborted by the broker after ``transaction_timeout_ms`` (default
    :data:`TRANSACTION_TIMEOUT_MS`), which times out its records too."""
    out: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "arfl-merger",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "queue.buffering.max.messages": 1_000_000,
        # A missing topic is a deploy error, not something to create with broker defaults.
        "allow.auto.create.topics": False,
    }
    if transactional_id is not None:
        out["transactional.id"] = transactional_id
        out["transaction.timeout.ms"] = transaction_timeout_ms or TRANSACTION_TIMEOUT_MS
        # A record times out with its transaction: the broker would abort it then anyway.
        out["message.timeout.ms"] = out["transaction.timeout.ms"]
    else:
        # A record waits for the sink as long as it takes: the idempotent producer's retries
        # keep their sequence numbers, so none is appended twice, where a timed-out record in
        # flight may be appended after its failure was reported (docs/design.md, "A write that
        # failed"). A sink away longer stops the merger's output, then its reading.
        out["message.timeout.ms"] = 0
    return out


TRANSACTION_TIMEOUT_MS = 60_000
"""The broker aborts a merger's transaction open this long (it commits one per second)."""


def kafka_consumer(bootstrap: str, group_id: str, fetch_wait_ms: int) -> Any:
    from confluent_kafka import Consumer as KafkaConsumer

    return KafkaConsumer(consumer_config(bootstrap, group_id, fetch_wait_ms))


def kafka_producer(
    bootstrap: str,
    sink: str,
    timeout_s: float,
    linger_ms: float,
    transactional_id: str | None,
    transaction_timeout_ms: int | None = None,
) -> Any:
    """The sink producer, after checking the broker answers and the sink topic exists.

    Raises:
        DeployError: Kafka unreachable, or no sink topic.
    """
    from confluent_kafka import Producer as KafkaProducer

    from arfl.stack.topics import require_topic

    producer = KafkaProducer(
        sink_producer_config(bootstrap, linger_ms, transactional_id, transaction_timeout_ms)
    )
    require_topic(
        producer,
        bootstrap,
        sink,
        timeout_s,
        error=DeployError,
        who="merger: ",
        what="sink topic",
        missing_hint="create it first (arfl.stack.topics.ensure_topic) or check sink.topic",
    )
    return producer
