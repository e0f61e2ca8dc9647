"""The active-leader mode's decision log: a one-partition Kafka topic of batch decisions
(``{"k", "epoch", "leader", "start", "end"}``), appended by the leader and applied by every
replica, first entry per batch ``k`` wins (:class:`DecisionBook`). The election and the
policy that applies the decisions are in :mod:`arfl.replica.modes.leader`."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arfl.errors import DeployError
from arfl.processes import wait_until
from arfl.replica.source.kafka import REQUEST_TIMEOUT_S, retry

if TYPE_CHECKING:
    pass


log = logging.getLogger(__name__)

DECISION_WAIT_S = 10.0
"""How long a leader waits to read back the decision it appended."""


@dataclass(frozen=True, slots=True)
class Decision:
    """Where batch ``k`` ends, as one leader proposed it.

    Attributes:
        k: batch number (0, 1, ...).
        epoch: the proposing leader's epoch (its election node's sequence number).
        leader: the proposing replica's index.
        start: partition -> first offset of the batch (the previous decision's end).
        end: partition -> end offset (exclusive).
    """

    k: int
    epoch: int
    leader: int
    start: Mapping[int, int] = field(default_factory=dict)
    end: Mapping[int, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """The decision record's value."""
        return json.dumps(
            {
                "k": self.k,
                "epoch": self.epoch,
                "leader": self.leader,
                "start": {str(p): self.start[p] for p in sorted(self.start)},
                "end": {str(p): self.end[p] for p in sorted(self.end)},
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, value: bytes) -> Decision:
        """Parse a decision record.

        Raises:
            ValueError: not a decision.
        """
        try:
            d = json.loads(value)
            return cls(
                k=int(d["k"]),
                epoch=int(d["epoch"]),
                leader=int(d["leader"]),
                start={int(p): int(o) for p, o in d["start"].items()},
                end={int(p): int(o) for p, o in d["end"].items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a decision record ({e}): {value[:200]!r}") from None


class DecisionBook:
    """The applied view of the decision log: the first entry for each ``k`` wins."""

    def __init__(self) -> None:
        self._first: dict[int, Decision] = {}
        self.ignored = 0
        self.max_k = -1

    def add(self, d: Decision) -> bool:
        """Record an entry in log order; returns False if ``k`` was already decided."""
        if d.k in self._first:
            self.ignored += 1
            return False
        self._first[d.k] = d
        self.max_k = max(self.max_k, d.k)
        return True

    def get(self, k: int) -> Decision | None:
        """The decision that holds for batch ``k``, if any has been read."""
        return self._first.get(k)


class DecisionLog:
    """The one-partition decision topic: append (leader) and consume (everyone).

    Args:
        bootstrap: Kafka ``host:port``.
        topic: the decision topic (created with one partition if missing).
        replica: this replica's index (client ids).
        role: told apart in client ids (the decider's own client: ``decider``).
    """

    def __init__(self, bootstrap: str, topic: str, replica: int = 0, role: str = "") -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        client = f"arfl-decisions-r{replica}" + (f"-{role}" if role else "")

        self.bootstrap = bootstrap
        self.topic = topic
        ensure_decision_topic(bootstrap, topic)
        self.book = DecisionBook()
        self._lock = threading.Lock()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
            }
        )
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": client,
                "client.id": client,
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 5,
                "isolation.level": "read_committed",
            }
        )
        self._tp = TopicPartition(topic, 0, 0)
        self._consumer.assign([self._tp])
        self._position = 0
        self.bad_records = 0

    def poll(self, timeout_s: float = 0.0) -> int:
        """Read what is available (waiting up to ``timeout_s`` for the first record).

        Returns:
            How many entries were read.
        """
        n = 0
        with self._lock:
            # poll() returns as soon as one record is there (consume(n) would wait for n).
            first = self._consumer.poll(timeout_s)
            msgs = [first] if first is not None else []
            while msgs:
                for m in msgs:
                    if m.error() is not None:
                        continue
                    self._position = (m.offset() or 0) + 1
                    n += 1
                    try:
                        self.book.add(Decision.from_json(m.value() or b""))
                    except ValueError as e:
                        self.bad_records += 1
                        log.warning("decision log %s@%d: %s", self.topic, m.offset(), e)
                msgs = self._consumer.consume(1000, timeout=0)
        return n

    def end_offset(self) -> int:
        """The decision topic's current log end (asked from the broker)."""
        from arfl.stack.topics import watermarks

        _, hi = retry(lambda: watermarks(self._consumer, self.topic, [0], REQUEST_TIMEOUT_S)[0])
        return hi

    def catch_up(self, timeout_s: float = DECISION_WAIT_S) -> None:
        """Read the log to its current end.

        Raises:
            DeployError: the end was not reached within ``timeout_s``.
        """
        target = self.end_offset()

        def at_end() -> bool:
            if self._position >= target:
                return True
            self.poll(0.05)  # blocks up to 50 ms: the wait's pause
            return False

        wait_until(
            at_end,
            timeout_s=timeout_s,
            interval_s=0,
            error=lambda: DeployError(
                f"kafka at {self.bootstrap}: decision log {self.topic!r} not readable to its "
                f"end ({self._position}/{target}) within {timeout_s:.0f}s"
            ),
        )

    def append(self, d: Decision) -> None:
        """Append a proposal and wait for the broker's acknowledgement (all replicas in sync).

        Raises:
            DeployError: the broker did not acknowledge it.
        """
        errors: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        self._producer.produce(self.topic, value=d.to_json(), partition=0, on_delivery=on_delivery)
        left = self._producer.flush(DECISION_WAIT_S)
        if left or errors:
            raise DeployError(
                f"kafka at {self.bootstrap}: decision {d.k} not acknowledged by "
                f"{self.topic!r}: {errors[0] if errors else 'timed out'}"
            )

    def wait_for(self, k: int, timeout_s: float) -> Decision | None:
        """Poll until the decision for ``k`` has been read, or the timeout passes."""

        def read() -> Decision | None:
            d = self.book.get(k)
            if d is None:
                self.poll(0.05)  # blocks up to 50 ms: the wait's pause
            return d

        try:
            return wait_until(read, timeout_s=timeout_s, interval_s=0)
        except TimeoutError:
            return None

    def close(self) -> None:
        """Flush and close the clients (idempotent)."""
        with contextlib.suppress(RuntimeError):
            self._producer.flush(2)
            self._producer.close()
        with self._lock, contextlib.suppress(RuntimeError):
            self._consumer.close()


def ensure_decision_topic(bootstrap: str, topic: str) -> None:
    """Create the one-partition decision topic unless it exists.

    Raises:
        DeployError: it exists with more than one partition, or cannot be created.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    t = md.topics.get(topic)
    if t is not None and t.error is None:
        if len(t.partitions) != 1:
            raise DeployError(
                f"kafka at {bootstrap}: decision topic {topic!r} has {len(t.partitions)} "
                "partitions; it needs exactly one (a single order) — delete it or pick another"
            )
        return
    brokers = max(1, len(md.brokers))
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=min(3, brokers))],
        operation_timeout=REQUEST_TIMEOUT_S,
    )[topic]
    try:
        fut.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as e:
        if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return  # another replica created it first
        raise DeployError(
            f"kafka at {bootstrap}: cannot create decision topic {topic!r}: {e}"
        ) from None
