"""A standby merger (``[merger] standby = 1``): it reads what the serving merger reads (the
replica topics) and what it writes (the final topic), so that its dedup state is current and
it knows which results the serving merger owes; it writes nothing. It takes over when the
serving merger dies, or when a result it owes is later than the lease (the serving merger is
paused or stuck: the standby kills it first). The lease runs on the broker's clock as well as
the standby's: only while the broker goes on appending the replicas' copies, since a broker that
stalls holds up the serving merger's writes as much as anyone's (a 1-s disk stall of the host's
broker once had a healthy merger killed, docs/benchmarks.md). Design: docs/design.md, "A standby
merger".

The fence is Kafka's: every merger of such a run has the same ``transactional.id``, and the
standby's ``init_transactions`` bumps the producer epoch, aborts the old merger's open
transaction and makes the broker refuse anything it still sends. After that, every record the
old merger will ever have appended is below the final topic's high watermarks: the standby
reads up to them, and forwards exactly the results it saw that are not there.

Every millisecond of a take-over is a result late, so a thread waits on the serving merger's
exit (a pidfd: no polling delay) and fences at once, while the loop goes on reading what the
replicas send: the fence (10-60 ms) overlaps the reading instead of following it
(docs/benchmarks.md). And a result no copy of which was in a replica topic when the serving
merger died cannot have been read by it, so none of its copies can be in flight: once the
standby has read the replica topics up to the high watermarks they had after the death (the
*horizon*), it forwards every new result at once through an idempotent producer of its own,
and only what it owed before waits for the fence.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from arfl.errors import DeployError
from arfl.measure.merger import recovery, transactions
from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.core import MergeCore, Outcome
from arfl.measure.merger.kafka import append_time_s
from arfl.measure.merger.recovery import SinkRecord, Taken
from arfl.processes import await_exit, same_process, wait_until
from arfl.run.records import BadRecord, Result, parse_result

LIVENESS_S = 0.02
"""How often the standby checks that the serving merger pays what it owes (its exit is seen
at once, :func:`arfl.processes.await_exit`)."""
SINK_SLACK = 2
"""Offsets of a final topic partition past the last record read that still count as its end:
the marker of the transaction committed last, and one record in flight."""
STREAM_GAP_MAX_S = 0.5
"""The replica topics' appends count as one unbroken stream while no two are further apart
than this (or half the lease, if less): a longer gap is the broker's, or the input's, pause,
and the lease counts only what the broker appended since."""
LEASE_CAP = 10
"""A result owed this many leases by the standby's clock is late whatever the broker did (an
input that stopped appends nothing: a paused merger is still taken over)."""
FENCE_TIMEOUT_S = 30.0
"""How long fencing (``init_transactions``) and reading the final topic to its end may take."""


@dataclass
class Owed:
    """A result the standby saw first and has not seen in the final topic yet."""

    key: bytes | None
    value: bytes
    arrival: float
    appended: float | None = None
    """Its copy's Kafka timestamp (s; the broker's append on arfl's replica topics)."""


@dataclass
class TakeOver:
    """Why and how fast the standby took over."""

    why: str
    """``died`` (the serving merger's process ended) or ``lease`` (a result it owed was
    later than the lease: it was killed)."""
    detected_at: float
    init_s: float = 0.0
    """From detection to the end of ``init_transactions`` (a kill before it included)."""
    fenced_s: float = 0.0
    """From detection to the fence's end (the final topic read up to its end)."""
    took_s: float = 0.0
    """From detection to the last owed result produced."""
    fresh_s: float | None = None
    """From detection to the horizon read (results forwarded at once from then; None: the
    horizon was not reached before the fence)."""
    fresh: int = 0
    """Results forwarded at once, before the fence ended."""


class Follower:
    """The standby's loop, until it takes over or is stopped."""

    def __init__(
        self,
        config: MergerConfig,
        consumer: Any,
        producer: Any,
        core: MergeCore,
        *,
        stop: threading.Event,
        owner_gone: Callable[[], bool],
        assign: Callable[[], None],
        make_producer: Callable[[], Any],
        make_fresh: Callable[[], tuple[Any, Any]] | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None:
        """Args:
        config: the standby's config (``serving_pid``, ``lease_s``, ``transactional_id``).
        consumer: the merger's consumer; it is given the final topic's partitions too.
        producer: the transactional sink producer (used to fence, then to serve).
        core: the merge state to keep current (its counts are the standby's own).
        stop: set to stop following.
        owner_gone: whether the deploy process is gone.
        assign: assign the replica topics (from the committed positions).
        make_producer: another transactional sink producer (the fence tries several).
        make_fresh: an idempotent, non-transactional sink producer and an admin client, both
            connected: what forwards the results no merger before could have read, and what
            asks the replica topics' horizon (None: every result waits for the fence).
        on_delivery: the sink producers' delivery callback (the merger's count of acks).
        """
        assert config.serving_pid is not None
        self.config = config
        self.consumer = consumer
        self.producer = producer
        self.core = core
        self._stop = stop
        self._owner_gone = owner_gone
        self._assign = assign
        self._serving = (config.serving_pid, config.serving_create_time)
        self.owed: dict[str, Owed] = {}
        """rid -> the copy to forward, oldest first (dicts keep insertion order)."""
        self.tail: deque[SinkRecord] = deque()
        """The final topic's records of the last :data:`recovery.LOOKBACK_S`."""
        self._topic_index = {t: i for i, t in enumerate(config.topics())}
        self._started_ms = 0
        self._fencers: list[Any] = [make_producer() for _ in range(transactions.FENCERS - 1)]
        """More transactional producers for the fence (:func:`transactions.fence`), connected
        ahead."""
        self._serving_seen: float | None = None
        """When the standby first read a record the serving merger forwarded after the
        standby started (no lease is judged before: a merger still starting owes nothing)."""
        self._appended: float | None = None
        """The newest Kafka timestamp read on the replica topics (s): the broker's clock."""
        self._stream_since: float | None = None
        """Where the replica topics' current unbroken stream of appends began (s)."""
        self._stream_gap = min(STREAM_GAP_MAX_S, config.lease_s / 2)
        self._next: dict[int, int] = {}
        """Final topic partition -> the next offset to read."""
        self.stop_reason: str | None = None
        self.took: TakeOver | None = None
        """The take-over, once :meth:`take_over` ran."""
        self._gone_at: float | None = None
        """When the serving merger's exit was seen."""
        self._gone = threading.Event()
        self._fenced = threading.Event()
        self._fence_error: Exception | None = None
        self._watch = threading.Thread(target=self._watch_serving, daemon=True)
        self.fresh_producer: Any = None
        self._admin: Any = None
        if make_fresh is not None:
            self.fresh_producer, self._admin = make_fresh()
        self._on_delivery = on_delivery
        self._horizon: dict[tuple[str, int], Any] | None = None
        """(replica topic, partition) -> the future of its high watermark after the death."""
        self._passed: set[tuple[str, int]] = set()
        """Replica partitions read up to a record appended after the death."""
        self._gone_ms = 0
        """When the serving merger's exit was seen, ms (the broker's clock is the host's)."""
        self._fresh = False
        """Whether the horizon is read: a result seen first from now on is forwarded at once."""
        self.fresh: list[tuple[float, float | None, float]] = []
        """(src_ts, sent_ts, when forwarded) of each result forwarded at once, for the serving
        merger's latency log."""
        self._fresh_rids: set[str] = set()
        """Their ids: the final topic's copies of them are this merger's, not owed nor the
        dead merger's tail."""
        self.past = recovery.Past(config.paths.hlog, config.paths.hlog_sent)
        """The serving merger's interval logs, read as they grow (stitched in after a
        take-over)."""

    def _watch_serving(self) -> None:
        """Wait for the serving merger's exit, then fence at once (unless stopped)."""
        pid, create_time = self._serving
        if not await_exit(pid, create_time, self._stop) or self._stop.is_set():
            return  # stopped: deploy stops the standby before the serving merger
        self._gone_at = time.time()
        self._gone.set()
        try:
            producers, self._fencers = [self.producer, *self._fencers], []
            self.producer = transactions.fence(producers, self.config.sink, FENCE_TIMEOUT_S)
        except Exception as e:  # raised by take_over, in the merger's thread
            self._fence_error = e
        finally:
            self._fenced.set()

    def _start(self, positions: dict[tuple[str, int], int]) -> None:
        """Assign the replica topics and the final topic: from the committed positions and
        :data:`recovery.LOOKBACK_S` before the final topic's newest record when the serving
        merger has committed any (the argument of :mod:`.recovery`), else from the start."""
        from confluent_kafka import TopicPartition

        cfg = self.config
        self._assign()
        meta = self.consumer.list_topics(cfg.sink, timeout=cfg.connect_timeout_s).topics.get(
            cfg.sink
        )
        parts = sorted(meta.partitions) if meta is not None and meta.partitions else []
        for p in parts:
            low, _ = self.consumer.get_watermark_offsets(
                TopicPartition(cfg.sink, p), timeout=cfg.connect_timeout_s
            )
            self._next[p] = low
        if parts and positions:
            self._next.update(recovery.sink_starts(cfg.bootstrap, cfg.sink, cfg.connect_timeout_s))
        if parts:
            self.consumer.incremental_assign(
                [TopicPartition(cfg.sink, p, off) for p, off in self._next.items()]
            )

    def follow(self, positions: dict[tuple[str, int], int]) -> TakeOver | None:
        """Follow until the serving merger dies or misses its lease (the take-over's cause),
        or until stopped (None; :attr:`stop_reason` says why).

        Args:
            positions: the committed positions the replica topics are read from (empty: from
                their start).
        """
        self._started_ms = int(time.time() * 1000)
        self._start(positions)
        self._watch.start()
        core = self.core
        next_check = 0.0
        next_tick = time.time() + 1.0
        while True:
            self._consume()
            if self._gone.is_set():
                assert self._gone_at is not None
                return TakeOver("died", self._gone_at)
            now = time.time()
            if now < next_check:
                continue
            next_check = now + LIVENESS_S
            if self.owed and self._serving_seen is not None:
                # A result seen before the serving merger was seen forwarding is owed from then.
                oldest = next(iter(self.owed.values()))
                since = max(oldest.arrival, self._serving_seen)
                if self.lease_missed(now - since, oldest) and not self._sink_behind():
                    return TakeOver("lease", now)
            if now >= next_tick:
                next_tick = now + 1.0
                core.dedup.expire(now)
                core.keep_trails(now)
                self.past.read()
                gc.collect(1)  # automatic collection is off in a merger (Merger.run)
                if self._owner_gone():
                    self.stop_reason = "orphaned"
                    return None
            if self._stop.is_set():
                self.stop_reason = "signal"
                return None

    def lease_missed(self, late_s: float, oldest: Owed) -> bool:
        """Whether the serving merger missed its lease on ``oldest``, the result it has owed
        for ``late_s`` by the standby's clock: that long, and as long by the broker's, counted
        from the later of the result's append and the start of the replica topics' current
        unbroken stream of appends (a broker that stalled, or was stalled, appended nothing the
        serving merger could have paid it beside); or :data:`LEASE_CAP` leases whatever the
        broker did."""
        lease = self.config.lease_s
        if late_s <= lease:
            return False
        if late_s > LEASE_CAP * lease or oldest.appended is None or self._appended is None:
            return True
        assert self._stream_since is not None  # set with the first timestamp read
        return self._appended - max(oldest.appended, self._stream_since) > lease

    def close(self) -> None:
        """Drop the producers kept for the fence (a standby stopped while following)."""
        self._fencers = []
        self.fresh_producer = self._admin = None

    def _sink_behind(self) -> bool:
        """Whether the standby has final-topic records still to read (its own lag, not the
        serving merger's): the lease is judged only on a final topic read up to its end, within
        :data:`SINK_SLACK` offsets (a transaction's marker takes one and is never delivered)."""
        from confluent_kafka import TopicPartition

        sink = self.config.sink
        for p, nxt in self._next.items():
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(sink, p), cached=True)
            if high is not None and high >= 0 and high - nxt > SINK_SLACK:
                return True
        return False

    def _consume(self) -> None:
        msgs = self.consumer.consume(num_messages=1000, timeout=0)
        if not msgs:
            one = self.consumer.poll(LIVENESS_S)
            msgs = [] if one is None else [one]
        for msg in msgs:
            if msg.error() is not None:
                continue
            if msg.topic() == self.config.sink:
                self._on_sink(msg)
            else:
                self._on_replica(msg)

    def _on_replica(self, msg: Any) -> None:
        arrival = time.time()
        replica = self._topic_index.get(msg.topic(), -1)
        value = msg.value()
        appended = append_time_s(msg)
        if appended is not None:
            newest = self._appended
            if newest is None or appended - newest > self._stream_gap:
                self._stream_since = appended  # the broker appended nothing for a while
            if newest is None or appended > newest:
                self._appended = appended
        outcome, _ = self.core.on_record(replica, value, arrival, msg.partition())
        if outcome is Outcome.MARKER:
            self.core.date_marker(appended)
        if self._horizon and not self._fresh:
            self._passes(msg)
        if outcome is not Outcome.FIRST or value is None:
            return
        if self._fresh:
            self._forward_fresh(msg.key(), value)
        else:
            self.owed[self.core.last_rid] = Owed(msg.key(), value, arrival, appended)

    def _forward_fresh(self, key: bytes | None, value: bytes) -> None:
        """Forward a result no merger before this one can have read. It carries no number
        (:data:`recovery.SEQ_HEADER`): the dead merger's last number is known only after the
        fence, and numbers only need to rise with the monitor lines' counts (those of the
        owed results, forwarded after it, stay below the next line's count)."""
        try:
            r = parse_result(value)
        except BadRecord:
            return
        while True:
            try:
                self.fresh_producer.produce(
                    self.config.sink, value=value, key=key, on_delivery=self._on_delivery
                )
                break
            except BufferError:
                self.fresh_producer.poll(0.005)
        self.fresh_producer.poll(0)
        self.fresh.append((r.src_ts, r.sent_ts, time.time()))
        self._fresh_rids.add(r.rid)

    def _ask_horizon(self) -> None:
        """Ask the replica topics' high watermarks, now that the serving merger is gone: every
        copy it can have read lies below them."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        if self._horizon is not None or self._admin is None:
            return
        sink = self.config.sink
        parts = [
            TopicPartition(tp.topic, tp.partition)
            for tp in self.consumer.assignment()
            if tp.topic != sink
        ]
        if {tp.topic for tp in parts} != set(self.config.topics()):
            self._horizon = {}  # a replica topic not read: its copies are beyond any horizon
            return
        asked = self._admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in parts},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            request_timeout=FENCE_TIMEOUT_S,
        )
        self._horizon = {(tp.topic, tp.partition): f for tp, f in asked.items()}

    def _passes(self, msg: Any) -> None:
        """A replica partition is read past the death once a record the broker appended after
        it (``LogAppendTime``, the replica topics' type) has been read: every record before it
        in the partition was read before it. No round trip: usually sooner than the horizon."""
        from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

        kind, ts = msg.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME and ts > self._gone_ms:
            self._passed.add((msg.topic(), msg.partition()))

    def _check_horizon(self, cause: TakeOver) -> None:
        """Start forwarding at once when every replica partition is read past the death: up to
        its horizon, or up to a record appended after the death (a partition whose horizon
        could not be asked: only the latter)."""
        if self._fresh or not self._horizon:
            return
        left = [k for k in self._horizon if k not in self._passed]
        if not left:
            self._fresh = True
        else:
            ends: dict[tuple[str, int], int] = {}
            for k in left:
                f = self._horizon[k]
                if not f.done() or f.exception() is not None:
                    return
                ends[k] = f.result().offset
            from confluent_kafka import TopicPartition

            at = self.consumer.position([TopicPartition(t, p) for t, p in left])
            self._fresh = all(tp.offset >= ends[(tp.topic, tp.partition)] for tp in at)
        if self._fresh:
            cause.fresh_s = time.time() - cause.detected_at

    def _on_sink(self, msg: Any) -> None:
        value = msg.value() or b""
        ts = int(msg.timestamp()[1])
        if self._serving_seen is None and ts >= self._started_ms:
            self._serving_seen = time.time()
        self._next[msg.partition()] = msg.offset() + 1
        try:
            r: Result | None = parse_result(value)
        except BadRecord:
            r = None
        headers = msg.headers()
        if r is not None and headers is None and r.rid in self._fresh_rids:
            return  # one this merger forwarded at once: not the dead merger's, not owed
        self.tail.append(SinkRecord(msg.partition(), value, ts, recovery.sequence(headers)))
        while self.tail and self.tail[0].timestamp_ms < ts - recovery.LOOKBACK_S * 1000:
            self.tail.popleft()
        if r is None:
            return
        if self.owed.pop(r.rid, None) is None:
            self.core.dedup.remember(r.rid, r.hash, time.time(), msg.partition())

    def take_over(self, cause: TakeOver) -> Taken:
        """Kill a serving merger that missed its lease, fence it, read the final topic up to
        its end; afterwards :attr:`owed` holds exactly the results to forward.

        Raises:
            DeployError: the fence or the read did not finish within :data:`FENCE_TIMEOUT_S`.
        """
        serving = same_process(*self._serving)
        if cause.why == "lease" and serving is not None:
            with contextlib.suppress(psutil.Error):
                serving.kill()
        # The watch fences once the serving merger is gone; what the replicas send meanwhile
        # is read, and owed.
        deadline = time.time() + FENCE_TIMEOUT_S
        while not self._fenced.is_set():
            if time.time() > deadline:
                raise DeployError(
                    f"merger: the serving merger (pid {self._serving[0]}) did not exit, or the "
                    f"fence did not finish, within {FENCE_TIMEOUT_S:.0f}s"
                )
            if self._gone.is_set() and self._horizon is None:
                assert self._gone_at is not None
                self._gone_ms = int(self._gone_at * 1000) + 1
                self._ask_horizon()
            self._consume()
            self._check_horizon(cause)
        if self._fence_error is not None:
            raise self._fence_error
        cause.init_s = time.time() - cause.detected_at
        self._read_to_end(lambda: self._check_horizon(cause))
        cause.fenced_s = time.time() - cause.detected_at
        cause.fresh = len(self.fresh)
        self._fresh = False  # the serving merger's loop forwards from now on
        self.took = cause
        return Taken(tail=list(self.tail))

    def forward(
        self, core: MergeCore, taken: Taken, produce: Callable[[bytes | None, bytes, int], None]
    ) -> int:
        """Forward (``produce(key, value, number)``) what the merger taken over from owed,
        each counted at the moment it is forwarded, numbered on from the highest number in the
        final topic; returns how many."""
        numbered = [r.n for r in taken.tail if r.n is not None]
        if numbered:
            n = max(numbered)
        else:  # nothing forwarded lately: number on from the last count
            counts = recovery.last_counts(self.config.paths.monitor)
            n = counts.results if counts is not None else 0
        forwarded = 0
        for owed in self.owed.values():
            try:
                r = parse_result(owed.value)
            except BadRecord:
                continue
            core.forwarded(r.src_ts, r.sent_ts, time.time())
            n += 1
            forwarded += 1
            produce(owed.key, owed.value, n)
        if self.took is not None:
            self.took.took_s = time.time() - self.took.detected_at
        self.owed.clear()
        return forwarded

    def _read_to_end(self, between: Callable[[], None] = lambda: None) -> None:
        """Read the final topic up to the high watermarks it has after the fence, then leave
        it. A transactional topic ends with a commit or abort marker that no consumer is given,
        but librdkafka moves the position past it: the position, not the last offset read,
        says when the end is reached."""
        from confluent_kafka import TopicPartition

        sink = self.config.sink
        ends = {
            p: self.consumer.get_watermark_offsets(
                TopicPartition(sink, p), timeout=FENCE_TIMEOUT_S
            )[1]
            for p in self._next
        }

        def done() -> bool:
            self._consume()
            between()
            pos = self.consumer.position([TopicPartition(sink, p) for p in ends])
            return all(max(tp.offset, self._next[tp.partition]) >= ends[tp.partition] for tp in pos)

        try:
            wait_until(done, timeout_s=FENCE_TIMEOUT_S, interval_s=0)
        except TimeoutError:
            raise DeployError(
                f"merger: the final topic {sink} not read up to its end within "
                f"{FENCE_TIMEOUT_S:.0f}s after the fence"
            ) from None
        if ends:
            self.consumer.incremental_unassign([TopicPartition(sink, p) for p in ends])
