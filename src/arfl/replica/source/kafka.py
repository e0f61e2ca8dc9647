"""The driver's view of an input topic: partitions, watermarks and the time index.

:class:`TopicLog` wraps one confluent-kafka consumer (never subscribed, never committing); the
replication policies only see the :class:`PartitionLog` protocol, so unit tests fake it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from arfl.errors import DeployError

REQUEST_TIMEOUT_S = 10.0
LATEST = -1
"""ListOffsets "timestamp" asking for the log end offset."""
EARLIEST = -2
"""ListOffsets "timestamp" asking for the log start offset."""
RETRY_SLEEP_S = 0.05
# Errors a fresh topic or a leader election produce for a moment; retried until the timeout.
_TRANSIENT = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_PARTITION",
        "_TIMED_OUT",
        "REQUEST_TIMED_OUT",
        "_TRANSPORT",
        "OFFSET_NOT_AVAILABLE",
        "UNKNOWN_LEADER_EPOCH",
        "FENCED_LEADER_EPOCH",
    }
)

_T = TypeVar("_T")


def is_transient(err: object) -> bool:
    """True for a KafkaError (or KafkaException) worth retrying."""
    e = getattr(err, "args", None)
    if e and hasattr(e[0], "name"):
        err = e[0]
    name = getattr(err, "name", None)
    retriable = getattr(err, "retriable", None)
    return (callable(name) and name() in _TRANSIENT) or (callable(retriable) and bool(retriable()))


def retry(call: Callable[[], _T], timeout_s: float = REQUEST_TIMEOUT_S) -> _T:
    """Run ``call``, retrying transient Kafka errors until ``timeout_s`` has passed."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as e:
            if not is_transient(e) or time.monotonic() > deadline:
                raise
        time.sleep(RETRY_SLEEP_S)


class PartitionLog(Protocol):
    """What a replication policy may ask about the input topic."""

    def partitions(self) -> list[int]:
        """The topic's partition numbers, ascending."""
        ...

    def high_watermarks(self) -> dict[int, int]:
        """Partition -> offset after the last record (the log end)."""
        ...

    def low_watermarks(self) -> dict[int, int]:
        """Partition -> first offset still in the log."""
        ...

    def offsets_for_time(self, ts_ms: int) -> dict[int, int | None]:
        """Partition -> first offset whose record timestamp is >= ``ts_ms``.

        ``None`` where no record has such a timestamp yet (the cut is not final there).
        """
        ...


class TopicLog:
    """:class:`PartitionLog` over a real Kafka topic.

    Args:
        bootstrap: ``host:port`` of the brokers.
        topic: the input topic (must exist).
        client_id: shows up in broker logs.
    """

    def __init__(self, bootstrap: str, topic: str, client_id: str = "arfl-source") -> None:
        from confluent_kafka import Consumer

        self.bootstrap = bootstrap
        self.topic = topic
        self._lock = threading.Lock()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{client_id}-planner",
                "client.id": client_id,
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "socket.connection.setup.timeout.ms": 5000,
            }
        )
        self._partitions = self._load_partitions()

    def _load_partitions(self) -> list[int]:
        from confluent_kafka import KafkaException

        try:
            md = self._consumer.list_topics(self.topic, timeout=REQUEST_TIMEOUT_S)
        except KafkaException as e:
            raise DeployError(
                f"kafka at {self.bootstrap}: cannot read metadata of topic {self.topic!r}: {e}; "
                "is the broker up ('arfl stack up')?"
            ) from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            raise DeployError(
                f"kafka at {self.bootstrap}: topic {self.topic!r} does not exist "
                f"({t.error if t is not None else 'unknown topic'}); create it before the replicas"
            )
        return sorted(t.partitions)

    def partitions(self) -> list[int]:
        """The topic's partition numbers, ascending (read once, at start)."""
        return list(self._partitions)

    def high_watermarks(self) -> dict[int, int]:
        """Partition -> log end offset, asked from the broker now (one ListOffsets request)."""
        return self._list_offsets(LATEST, "log end offsets")

    def low_watermarks(self) -> dict[int, int]:
        """Partition -> first offset still in the log (one ListOffsets request)."""
        return self._list_offsets(EARLIEST, "log start offsets")

    def _list_offsets(self, spec: int, what: str) -> dict[int, int]:
        found = self._lookup(spec, what)
        missing = [p for p, o in found.items() if o is None]
        if missing:
            raise DeployError(
                f"kafka at {self.bootstrap}: no {what} for {self.topic}{missing}; is the topic "
                "being deleted?"
            )
        return {p: int(o) for p, o in found.items() if o is not None}

    def offsets_for_time(self, ts_ms: int) -> dict[int, int | None]:
        """One ListOffsets request for all partitions (the broker's time index)."""
        if ts_ms < 0:
            raise ValueError(f"timestamp must be >= 0, got {ts_ms}")
        return self._lookup(ts_ms, "time-index lookup")

    def _lookup(self, ts_ms: int, what: str) -> dict[int, int | None]:
        from confluent_kafka import KafkaException, TopicPartition

        query = [TopicPartition(self.topic, p, ts_ms) for p in self._partitions]
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            with self._lock:
                try:
                    res = retry(
                        lambda: self._consumer.offsets_for_times(query, timeout=REQUEST_TIMEOUT_S)
                    )
                except KafkaException as e:
                    raise DeployError(
                        f"kafka at {self.bootstrap}: {what} of {self.topic!r} failed: {e}"
                    ) from None
            bad = [tp for tp in res if tp.error is not None]
            if not bad:
                return {tp.partition: (int(tp.offset) if tp.offset >= 0 else None) for tp in res}
            if not all(is_transient(tp.error) for tp in bad) or time.monotonic() > deadline:
                raise DeployError(
                    f"kafka at {self.bootstrap}: {what} of {self.topic}[{bad[0].partition}] "
                    f"failed: {bad[0].error}"
                )
            time.sleep(RETRY_SLEEP_S)

    def timestamp_type(self) -> str:
        """The topic's ``message.timestamp.type`` (``CreateTime`` or ``LogAppendTime``)."""
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin._config import ConfigResource

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        res = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        try:
            configs = admin.describe_configs([res])[res].result(timeout=REQUEST_TIMEOUT_S)
        except Exception as e:
            raise DeployError(
                f"kafka at {self.bootstrap}: cannot describe topic {self.topic!r}: {e}"
            ) from None
        entry = configs.get("message.timestamp.type")
        return str(entry.value) if entry is not None else "CreateTime"

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        with self._lock, contextlib.suppress(RuntimeError):  # already closed
            self._consumer.close()
