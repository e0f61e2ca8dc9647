"""The driver's view of an input topic: partitions, watermarks and the time index.

:class:`TopicLog` wraps one confluent-kafka consumer (never subscribed, never committing); the
replication policies only see the :class:`PartitionLog` protocol, so unit tests fake it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

from arfl.errors import DeployError

REQUEST_TIMEOUT_S = 10.0


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

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import KafkaException, TopicPartition

        out: dict[int, tuple[int, int]] = {}
        with self._lock:
            for p in self._partitions:
                try:
                    lo, hi = self._consumer.get_watermark_offsets(
                        TopicPartition(self.topic, p), timeout=REQUEST_TIMEOUT_S, cached=False
                    )
                except KafkaException as e:
                    raise DeployError(
                        f"kafka at {self.bootstrap}: cannot read offsets of {self.topic}[{p}]: {e}"
                    ) from None
                out[p] = (int(lo), int(hi))
        return out

    def high_watermarks(self) -> dict[int, int]:
        """Partition -> log end offset, asked from the broker now."""
        return {p: hi for p, (_, hi) in self._watermarks().items()}

    def low_watermarks(self) -> dict[int, int]:
        """Partition -> first offset still in the log."""
        return {p: lo for p, (lo, _) in self._watermarks().items()}

    def offsets_for_time(self, ts_ms: int) -> dict[int, int | None]:
        """One ListOffsets request for all partitions (the broker's time index)."""
        from confluent_kafka import KafkaException, TopicPartition

        query = [TopicPartition(self.topic, p, ts_ms) for p in self._partitions]
        with self._lock:
            try:
                res = self._consumer.offsets_for_times(query, timeout=REQUEST_TIMEOUT_S)
            except KafkaException as e:
                raise DeployError(
                    f"kafka at {self.bootstrap}: time-index lookup on {self.topic!r} failed: {e}"
                ) from None
        out: dict[int, int | None] = {}
        for tp in res:
            if tp.error is not None:
                raise DeployError(
                    f"kafka at {self.bootstrap}: time-index lookup on {self.topic}[{tp.partition}] "
                    f"failed: {tp.error}"
                )
            out[tp.partition] = int(tp.offset) if tp.offset >= 0 else None
        return out

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
