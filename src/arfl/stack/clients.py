"""The parts of confluent-kafka's clients that arfl's processes use, as protocols.

Components take these instead of the concrete classes so that unit tests can pass fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


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
