"""The parts of confluent-kafka's clients that arfl's processes use, as protocols.

Components take these instead of the concrete classes so that unit tests can pass fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from arfl.configs.defaults import INJECTOR_LINGER_MS


class Producer(Protocol):
    """The part of ``confluent_kafka.Producer`` the injector and the merger use."""

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        partition: int = ...,
    ) -> None:
        """Queue one record (raises ``BufferError`` when the local queue is full)."""
        ...

    def list_topics(self, topic: str | None = None, timeout: float = ...) -> Any:
        """Cluster metadata (the injector reads a topic's partitions from it)."""
        ...

    def poll(self, timeout: float = ...) -> int:
        """Serve delivery callbacks."""
        ...

    def flush(self, timeout: float = ...) -> int:
        """Wait for outstanding deliveries; returns how many are still queued."""
        ...


def producer_config(bootstrap: str, linger_ms: float = INJECTOR_LINGER_MS) -> dict[str, Any]:
    """The input producers' confluent-kafka settings (the injector, the replayer, a standby's
    rehearsal): idempotent, short linger, Java-compatible key partitioning."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "arfl-injector",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        # A missing topic is a deploy error, not something to create with broker defaults.
        "allow.auto.create.topics": False,
        # Same partition for a key as Kafka's Java clients (and Spark) would pick.
        "partitioner": "murmur2_random",
    }
