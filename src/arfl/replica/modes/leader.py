"""active-leader (KaZoo on Spark): a ZooKeeper-elected leader decides, a Kafka log decides order.

The leader (kazoo ``Election`` at the run's election path, identifier = replica index) decides
where batch ``k`` ends — the input's high watermarks, capped at ``max_records_per_batch`` — and
appends ``{"k", "epoch", "leader", "start", "end"}`` to a one-partition decision topic with an
idempotent, ``acks=all`` producer. Every replica, the leader included, consumes that log and
applies the **first** entry for each ``k`` (:class:`DecisionBook`). Consistency comes from the
single log, not from a single leader: a deposed leader that still appends a decision for ``k``
is harmless, because everyone ignores every entry for ``k`` after the first. A new leader reads
the log to its end before proposing.

The leader decides on **its own clock**, apart from its Spark query: a :class:`Decider` thread
appends one decision per ``batch_interval`` (aligned to wall-clock multiples of it). Its own
query applies the decisions like any follower's, so a leader whose Spark is slow (an executor
lost, CPU throttled) does not pace the followers (a leader that proposed inside its own
``latestOffset`` would make every follower wait for its batches).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import ModeBase, ReplicaContext, arfl_source_options
from arfl.replica.source import read_stream
from arfl.replica.source.kafka import REQUEST_TIMEOUT_S, PartitionLog, retry
from arfl.replica.source.offsets import AgreedGroup, BatchOffset
from arfl.replica.source.options import (
    DEFAULT_SESSION_TIMEOUT_S,
    SourceOptions,
)
from arfl.replica.source.policy import cap_ends, initial_offsets
from arfl.run.names import decision_topic, leader_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
        deadline = time.monotonic() + timeout_s
        while self._position < target:
            self.poll(0.05)
            if time.monotonic() > deadline:
                raise DeployError(
                    f"kafka at {self.bootstrap}: decision log {self.topic!r} not readable to its "
                    f"end ({self._position}/{target}) within {timeout_s:.0f}s"
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
        deadline = time.monotonic() + timeout_s
        while True:
            d = self.book.get(k)
            if d is not None:
                return d
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.poll(min(left, 0.05))

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


class LeaderElection:
    """This replica's candidacy at the run's election path (kazoo ``Election``).

    ``Election(zk, path).contenders()[0]`` is the current leader's replica index (a string).
    Leadership is given up as soon as the session is suspended or lost; the candidacy is
    renewed automatically when a new session is established.

    Args:
        zookeeper: ZooKeeper ``host:port``.
        path: the run's election path (:func:`arfl.run.names.leader_path`).
        replica: this replica's index (the identifier).
        session_timeout_s: requested ZooKeeper session timeout (the server clamps it to
            ``[2, 20] * tickTime``).
    """

    def __init__(
        self, zookeeper: str, path: str, replica: int, session_timeout_s: float = 2.0
    ) -> None:
        from kazoo.client import KazooClient

        if not path:
            raise DeployError("active-leader: no election path (source option election_path)")
        self.path = path
        self.replica = replica
        self._zk = KazooClient(hosts=zookeeper, timeout=session_timeout_s)
        try:
            self._zk.start(timeout=REQUEST_TIMEOUT_S)
        except Exception as e:
            with contextlib.suppress(Exception):
                self._zk.stop()
                self._zk.close()
            raise DeployError(
                f"zookeeper at {zookeeper} not reachable: {e}; run 'arfl stack up' or set "
                "stack.zookeeper"
            ) from None
        self._zk.add_listener(self._on_state)
        self._election = self._zk.Election(self.path, identifier=str(replica))
        self._leading = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._resign = threading.Event()
        self._stop = threading.Event()
        self.epoch = -1
        self.terms = 0
        self._thread = threading.Thread(
            target=self._run, name=f"arfl-election-r{replica}", daemon=True
        )
        self._thread.start()

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the election node on a live session."""
        return self._leading.is_set() and self._connected.is_set()

    def contenders(self) -> list[str]:
        """Identifiers of all candidates, the leader first."""
        return [str(c) for c in self._election.contenders()]

    def _on_state(self, state: str) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
            if state == KazooState.LOST:
                self._resign.set()

    def _lead(self) -> None:
        node = getattr(self._election.lock, "node", None) or ""
        m = re.search(r"(\d+)$", str(node))
        self.epoch = int(m.group(1)) if m else self.terms
        self.terms += 1
        self._resign.clear()
        self._leading.set()
        log.info("replica %d leads %s (epoch %d)", self.replica, self.path, self.epoch)
        try:
            while not (self._stop.is_set() or self._resign.is_set()):
                self._stop.wait(0.1)
        finally:
            self._leading.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._election.run(self._lead)
            except Exception as e:  # session lost mid-election: retry on the next session
                if self._stop.is_set():
                    break
                log.info("election at %s interrupted (%s); running again", self.path, e)
                self._stop.wait(0.2)

    def close(self) -> None:
        """Withdraw and close the session (its ephemeral nodes vanish immediately)."""
        self._stop.set()
        with contextlib.suppress(Exception):
            self._election.cancel()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._zk.stop()
            self._zk.close()


class Decider:
    """The leader's decisions, made on its own clock (a thread), apart from its Spark query.

    While this replica holds the election, every ``interval_s`` (aligned to wall-clock
    multiples) it reads the decision log to its end and appends the next decision: batch
    ``k = last decided + 1`` from the last decision's end (or the run's initial offsets) to the
    input's high watermarks, capped at ``max_records_per_batch``; nothing when no input arrived.

    Args:
        opts: source options (replica, cap, ``batch_interval_s``).
        log: the input topic.
        decisions: its own decision log client (a Kafka consumer is not shared between
            threads).
        election: the replica's candidacy.
        initial: partition -> the first batch's start (every replica's initial offset).
    """

    def __init__(
        self,
        opts: SourceOptions,
        log: PartitionLog,
        decisions: DecisionLog,
        election: LeaderElection,
        initial: Mapping[int, int],
    ) -> None:
        self._opts = opts
        self._input = log
        self.decisions = decisions
        self.election = election
        self.initial = dict(initial)
        self.interval_s = max(0.01, opts.batch_interval_s)
        self.proposed = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Decider:
        """Decide in a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._run, name=f"arfl-decider-r{self._opts.replica}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while True:
                now = time.time()
                wake = (int(now / self.interval_s) + 1) * self.interval_s
                if self._stop.wait(max(0.0, wake - now)):
                    return
                if not self.election.is_leader:
                    continue
                try:
                    self.decide_once()
                except Exception as e:  # keep deciding: a broker hiccup must not stop it
                    self.errors += 1
                    log.warning("decision failed: %s", e)
        finally:
            # Closed by the thread that uses it: never under a decision in progress.
            self.decisions.close()

    def decide_once(self) -> Decision | None:
        """Append the next decision if input arrived since the last one; returns it (the one
        that holds for its ``k``: another leader's, if that one came first)."""
        self.decisions.catch_up()
        k = self.decisions.book.max_k + 1
        prev = self.decisions.book.get(k - 1) if k > 0 else None
        start = dict(prev.end) if prev is not None else dict(self.initial)
        end = cap_ends(start, self._input.high_watermarks(), self._opts.max_records_per_batch)
        if end == start:
            return None  # nothing new: no decision, no batch
        self.decisions.append(Decision(k, self.election.epoch, self._opts.replica, start, end))
        self.proposed += 1
        return self.decisions.wait_for(k, DECISION_WAIT_S)

    def close(self) -> None:
        """Stop the thread (it closes its decision log client on its way out)."""
        self._stop.set()
        if self._thread is None:
            self.decisions.close()
        elif self._thread is not threading.current_thread():
            self._thread.join(timeout=DECISION_WAIT_S)


class LeaderPolicy:
    """``active-leader``: the next batch is the first decision for it in the log.

    Args:
        opts: source options (zookeeper, decision_topic, session timeout, cap, replica).
        log: the input topic.
        decisions: the decision log (default: a :class:`DecisionLog` on ``decision_topic``).
        election: the candidacy (default: a :class:`LeaderElection` in ``zookeeper``).
        decider: the leader's decisions (default: a :class:`Decider` thread with its own
            decision log client; tests pass one and call ``decide_once``).
    """

    def __init__(
        self,
        opts: SourceOptions,
        log: PartitionLog,
        decisions: DecisionLog | None = None,
        election: LeaderElection | None = None,
        decider: Decider | None = None,
    ) -> None:
        self._input = log
        self._opts = opts
        self.decisions = decisions or DecisionLog(opts.bootstrap, opts.decision_topic, opts.replica)
        self.decider: Decider | None = None
        try:
            self.election = election or LeaderElection(
                opts.zookeeper, opts.election_path, opts.replica, opts.session_timeout_s
            )
            if decider is None:
                own = DecisionLog(opts.bootstrap, opts.decision_topic, opts.replica, "decider")
                try:
                    decider = Decider(opts, log, own, self.election, initial_offsets(opts, log))
                except BaseException:
                    own.close()
                    raise
                decider.start()
            self.decider = decider
        except BaseException:
            self.close()
            raise

    def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
        """The decided end of batch ``start.batch + 1``; ``start`` while none is decided. With
        ``merge_decisions`` (``Spec.merges_agreed_batches``) the end of the newest decision
        that continues it without a gap, within ``max_records_per_batch`` (the batch index is
        that decision's).

        Raises:
            DeployError: the decision's start differs from ours (a different initial offset or
                a checkpoint from another run: the replicas would diverge).
        """
        del max_records  # the leader's cap is in the decision; Spark's would differ per replica
        k = start.batch + 1
        self.decisions.poll(0)
        d = self.decisions.book.get(k)
        if d is None:
            d = self.decisions.wait_for(k, self._opts.follower_wait_s)
        if d is None:
            return start
        if dict(d.start) != dict(start.offsets):
            raise DeployError(
                f"decision {k} in {self.decisions.topic!r} starts at {dict(d.start)} but this "
                f"replica is at {dict(start.offsets)}: replicas disagree on their start; use "
                "the same starting offsets and a fresh decision topic per run"
            )
        if not self._opts.merge_decisions:
            return BatchOffset(k, d.end)
        # Catch up (Spec.merges_agreed_batches): every further decision that is here and
        # continues this one joins the batch, up to the per-batch cap; where each begins is
        # kept (the agreed watermark of a windowed pipeline is per decision).
        merged = BatchOffset(k, d.end)
        while (nxt := self.decisions.book.get(merged.batch + 1)) is not None and dict(
            nxt.start
        ) == dict(merged.offsets):
            longer = BatchOffset(
                nxt.k, nxt.end, groups=(*merged.groups, AgreedGroup(dict(nxt.start)))
            )
            if start.records_until(longer) > self._opts.max_records_per_batch:
                break
            merged = longer
        return merged

    @property
    def proposed(self) -> int:
        """Decisions this replica's decider appended."""
        return 0 if self.decider is None else self.decider.proposed

    def close(self) -> None:
        """Stop the decider, leave the election and close the decision log."""
        try:
            if self.decider is not None:
                self.decider.close()
        finally:
            try:
                election = getattr(self, "election", None)
                if election is not None:
                    election.close()
            finally:
                self.decisions.close()


def source_options(spec: Spec, ctx: ReplicaContext) -> SourceOptions:
    """The reader options of one active-leader replica.

    Mode options: ``zookeeper`` (required, ``host:port``), ``run_id`` (names the decision
    topic and the election path; the same for all replicas of a run), ``source.<option>``
    overrides.

    Raises:
        DeployError: no ZooKeeper address was given.
    """
    zk = ctx.options.get("zookeeper", "")
    run_id = ctx.options.get("run_id", "run")
    if not zk:
        raise DeployError(
            "mode 'active-leader' needs a ZooKeeper address (mode option 'zookeeper'); "
            "run 'arfl stack up' or set stack.zookeeper"
        )
    return arfl_source_options(
        spec,
        ctx,
        "active-leader",
        zookeeper=zk,
        session_timeout_s=spec.replication.session_timeout or DEFAULT_SESSION_TIMEOUT_S,
        decision_topic=decision_topic(spec.name, run_id),
        election_path=leader_path(spec.name, run_id),
        batch_interval_s=spec.agreed_batch_interval,
        merge_decisions=spec.merges_agreed_batches,
    )


@MODES.register(
    "active-leader",
    ModeInfo(
        "R replicas applying a ZooKeeper-elected leader's batch decisions from a Kafka log",
        min_replicas=2,
        max_replicas=None,
        options=frozenset({"session_timeout", "batch_interval", "catch_up"}),
        active=True,
        leader=True,
        order=3,
        async_progress=True,
    ),
)
class ActiveLeaderReplication(ModeBase):
    """R replicas applying the first decision per batch from a leader-written log."""

    name = "active-leader"

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """The arfl-kafka source following the decision log (and running for leader)."""
        return read_stream(spark, source_options(spec, ctx))

    def boundary_policy(self, opts: SourceOptions, log: PartitionLog) -> LeaderPolicy:
        """See :class:`LeaderPolicy`."""
        return LeaderPolicy(opts, log)
