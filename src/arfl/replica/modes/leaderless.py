"""active-leaderless (LiveRobin on Spark): batch boundaries from epoch cuts in Kafka's log.

Time is cut into epochs of ``interval``; epoch boundary ``T_j = j * interval`` (epoch ms).
The **cut** of ``T_j`` in partition ``p`` is the first offset whose record timestamp is
``>= T_j`` — Kafka's time index answers it in one ListOffsets request for all partitions. Input
topics use ``message.timestamp.type=LogAppendTime``, so timestamps are the broker's and never
decrease within a partition: the cut is a function of the log alone, and it is **final** once
some record with timestamp ``>= T_j`` exists in every partition. Each replica's
:class:`HeartbeatTicker` writes a marker into partitions that got no record since the boundary,
so idle partitions finalise every boundary within about one grace period.

Batches end only at **aligned** boundaries: ``j`` a multiple of ``G`` = ``batch_interval /
heartbeat_interval`` (``batch_epochs``). The batch after a cut at ``T_e`` ends at the *smallest*
aligned ``j > e`` whose cut differs from the start and is final (empty groups are skipped by a
binary search over the time index, not one probe per group). Every replica therefore runs
exactly the same sequence of batches, whatever its trigger timing or lag — a replica that fell
behind (restart, GC pause, slow batch) runs the same batches, only faster — so watermarks,
late-data drops and window emission agree too. The price: a replica whose batches take longer
than ``batch_interval`` falls further and further behind, so ``batch_interval`` must exceed the
batch time (``replication.batch_interval``, default :attr:`Spec.agreed_batch_interval`), unless
it merges ready agreed batches (``catch_up``, below).

``max_epochs_per_batch = 0`` ends a batch at the *newest* final aligned boundary instead:
every boundary is still an agreed cut, but which cuts a replica uses depends on when it
triggers, so replicas group epochs differently (``n`` > 1: at most ``n`` groups). The mode
uses it where results cannot depend on the grouping (``replication.catch_up = "auto"``,
:attr:`arfl.configs.spec.Spec.merges_agreed_batches`: filters, selects and windows, whose late
rows the agreed watermark drops alike, :mod:`arfl.replica.source.late`; a merged batch then
names where each group began): a replica behind then catches up in one batch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import ModeBase, ReplicaContext, arfl_source_options
from arfl.replica.source import read_stream
from arfl.replica.source.kafka import PartitionLog, TopicLog
from arfl.replica.source.markers import heartbeat
from arfl.replica.source.offsets import AgreedGroup, BatchOffset
from arfl.replica.source.options import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    SourceOptions,
)
from arfl.units import format_duration

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

Clock = Callable[[], int]
"""Returns the current time in epoch ms."""


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def batch_epochs(batch_interval_s: float, heartbeat_interval_s: float) -> int:
    """``G``: epochs per (aligned) batch, at least 1."""
    return max(1, round(batch_interval_s / heartbeat_interval_s))


def epoch_of(ts_ms: int, interval_ms: int) -> int:
    """The epoch a timestamp falls in: ``floor(ts / interval)``."""
    return ts_ms // interval_ms


@dataclass(frozen=True, slots=True)
class Probe:
    """The cut of one epoch boundary as the log shows it now.

    Attributes:
        epoch: ``j`` (boundary ``T_j = j * interval``).
        cut: partition -> first offset with timestamp ``>= T_j`` (meaningful only if final).
        final: every partition has a record at or after ``T_j`` (the cut can no longer move).
    """

    epoch: int
    cut: dict[int, int]
    final: bool


class EpochCuts:
    """Finds the next batch end from the time index (no I/O beyond :class:`PartitionLog`).

    Args:
        log: the input topic.
        interval_ms: epoch length.
        clock: epoch-ms clock (bounds the search; boundaries in the future are never final).
        max_epochs: aligned groups per batch at most; 1 = one group (identical batches
            everywhere, the default), 0 = up to the newest final aligned boundary (catch up;
            not deterministic).
        group: ``G``, epochs per group: batches end only at boundaries ``j`` with
            ``j % G == 0``.
        max_records: a batch that merges groups stops before the group that would take it
            past this many log positions (its first group is always whole).
        with_groups: a batch that merges groups names where each further group begins
            (``BatchOffset.groups``; one more probe per group), for the agreed watermark.
    """

    def __init__(
        self,
        log: PartitionLog,
        interval_ms: int,
        clock: Clock = now_ms,
        max_epochs: int = 1,
        group: int = 1,
        max_records: int | None = None,
        with_groups: bool = False,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"epoch interval must be positive, got {interval_ms} ms")
        if max_epochs < 0:
            raise ValueError(f"max_epochs_per_batch must be >= 0, got {max_epochs}")
        if group < 1:
            raise ValueError(f"batch_epochs must be >= 1, got {group}")
        self._log = log
        self.interval_ms = interval_ms
        self.max_epochs = max_epochs
        self.group = group
        self.max_records = max_records
        self.with_groups = with_groups
        self._clock = clock
        self.probes = 0
        # (start, j): every boundary < j is final and its cut equals start (nothing to read).
        self._known_empty: tuple[BatchOffset, int] | None = None

    def probe(self, j: int, start: BatchOffset) -> Probe:
        """Ask the time index for boundary ``T_j`` (one request for all partitions).

        Where the cut is not final its value does not matter (no batch ends there yet); the
        start offset stands in for it.
        """
        self.probes += 1
        found = self._log.offsets_for_time(j * self.interval_ms)
        cut: dict[int, int] = {}
        final = True
        for p, s in start.offsets.items():
            off = found.get(p)
            if off is None:
                final = False
                off = s
            # A user-given start may lie past an early boundary's cut: never end before start.
            cut[p] = max(off, s)
        return Probe(j, cut, final)

    def next_end(self, start: BatchOffset) -> BatchOffset:
        """The end of the batch starting at ``start``: the first final, non-empty cut after it.

        Returns ``start`` itself (no batch) while that cut is not final yet. The search runs
        over group indices ``m`` (boundary ``j = m * G``).
        """
        g = self.group
        # The first aligned boundary after the start (a start off the grid, e.g. a user-given
        # one, ends at the next aligned boundary).
        lo = max(start.batch // g + 1, 0)
        if self._known_empty is not None and self._known_empty[0] == start:
            lo = max(lo, self._known_empty[1])
        hi = epoch_of(self._clock(), self.interval_ms) // g
        if lo > hi:
            return start
        first = self.probe(lo * g, start)
        if not first.final:
            return start
        if first.cut != dict(start.offsets):
            return self._extend(first, start, hi)
        # Boundary lo is final and empty: find the smallest m in (lo, hi] that is non-empty or
        # not final. Both properties only ever switch on as m grows, so bisect.
        best: Probe | None = None
        left, right = lo + 1, hi
        while left <= right:
            mid = (left + right) // 2
            pr = self.probe(mid * g, start)
            if pr.cut != dict(start.offsets) or not pr.final:
                best = pr
                right = mid - 1
            else:
                left = mid + 1
        if best is None:
            self._known_empty = (start, hi + 1)
            return start
        self._known_empty = (start, best.epoch // g)
        if best.final:
            return self._extend(best, start, hi)
        return start

    def _extend(self, first: Probe, start: BatchOffset, hi: int) -> BatchOffset:
        """End at ``first``, or (catch-up) at the newest final aligned boundary within the caps
        of groups and records (``hi`` and the search are group indices)."""
        g = self.group
        first_m = first.epoch // g
        upper = hi if self.max_epochs == 0 else min(hi, first_m + self.max_epochs - 1)
        best = first
        left, right = first_m + 1, upper
        while left <= right:
            # Finality and the record cap only switch off as m grows: bisect for the last one,
            # trying the top first (the common case when catching up is "all of it").
            mid = right if best is first and right == upper else (left + right) // 2
            pr = self.probe(mid * g, start)
            if pr.final and self._within(start, pr):
                best = pr
                left = mid + 1
            else:
                right = mid - 1
        if not self.with_groups or best is first:
            return BatchOffset(best.epoch, best.cut)
        # Where each merged group begins: the first's end, then every aligned boundary up to the
        # last group's start (an empty group begins where the next does: harmless).
        starts = [first.cut]
        starts += [self.probe(m * g, start).cut for m in range(first_m + 1, best.epoch // g)]
        return BatchOffset(best.epoch, best.cut, groups=tuple(AgreedGroup(c) for c in starts))

    def _within(self, start: BatchOffset, pr: Probe) -> bool:
        """The batch from ``start`` to ``pr`` stays within ``max_records`` (cuts only grow)."""
        if self.max_records is None:
            return True
        return start.records_until(BatchOffset(pr.epoch, pr.cut)) <= self.max_records


class HeartbeatTicker:
    """A daemon thread writing epoch markers into the input partitions.

    Shortly after each boundary ``T_k`` (``grace * (replica + 1)``, so replicas stagger), it
    writes marker ``{"__arfl_epoch": k}`` into every partition — or, with ``skip_active``, only
    into those where the time index shows no record at or after ``T_k`` yet (a partition that
    received data needs no heartbeat to finalise the boundary).

    Args:
        bootstrap: Kafka ``host:port``.
        topic: input topic.
        interval_s: epoch length.
        replica: this replica's index (staggering; written into markers).
        grace_s: base delay after a boundary before checking.
        skip_active: only write into partitions that need it.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        interval_s: float,
        replica: int = 0,
        grace_s: float = 0.01,
        skip_active: bool = True,
    ) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.interval_ms = max(1, round(interval_s * 1000))
        self.replica = replica
        self.delay_s = grace_s * (replica + 1)
        self.skip_active = skip_active
        self._log = TopicLog(bootstrap, topic, client_id=f"arfl-ticker-r{replica}")
        self._partitions = self._log.partitions()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"arfl-ticker-r{replica}",
                "linger.ms": 0,
                "acks": "all",
                "enable.idempotence": True,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"arfl-heartbeat-r{replica}", daemon=True
        )
        self.ticks = 0
        self.markers_sent = 0
        self.markers_skipped = 0
        self.errors = 0
        self.last_error = ""

    def start(self) -> HeartbeatTicker:
        """Start ticking; returns self."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            k = epoch_of(now_ms(), self.interval_ms) + 1
            wake = k * self.interval_ms / 1000 + self.delay_s
            if self._stop.wait(max(0.0, wake - time.time())):
                break
            try:
                self.tick(k)
            except Exception as e:  # keep ticking: a broker hiccup must not stop the replica
                self.errors += 1
                self.last_error = str(e)
                log.warning("heartbeat for epoch %d failed: %s", k, e)

    def tick(self, k: int) -> int:
        """Write the markers of boundary ``T_k``; returns how many were written."""
        self.ticks += 1
        targets = list(self._partitions)
        if self.skip_active:
            found = self._log.offsets_for_time(k * self.interval_ms)
            targets = [p for p in targets if found.get(p) is None]
        value, headers = heartbeat(k, self.replica)
        for p in targets:
            self._producer.produce(self.topic, value=value, partition=p, headers=headers)
        self._producer.poll(0)
        if targets:
            self._producer.flush(self.interval_ms / 1000)
        self.markers_sent += len(targets)
        self.markers_skipped += len(self._partitions) - len(targets)
        return len(targets)

    def stats(self) -> dict[str, int]:
        """Counters: ticks, markers sent and skipped (heartbeat traffic), errors."""
        return {
            "ticks": self.ticks,
            "markers_sent": self.markers_sent,
            "markers_skipped": self.markers_skipped,
            "errors": self.errors,
        }

    def stop(self) -> None:
        """Stop the thread and flush/close the clients (idempotent)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with contextlib.suppress(RuntimeError):
            self._producer.flush(2)
            self._producer.close()
        self._log.close()


class LeaderlessPolicy:
    """``active-leaderless``: epoch cuts, plus this replica's heartbeat ticker.

    Args:
        opts: source options (interval, heartbeat settings, replica).
        log: the input topic.
        clock: epoch-ms clock.

    Raises:
        DeployError: the topic does not use broker timestamps (LogAppendTime).
    """

    def __init__(self, opts: SourceOptions, log: PartitionLog, clock: Clock = now_ms) -> None:
        if isinstance(log, TopicLog):
            kind = log.timestamp_type()
            if kind != "LogAppendTime":
                raise DeployError(
                    f"kafka at {opts.bootstrap}: topic {opts.topic!r} has "
                    f"message.timestamp.type={kind}; active-leaderless needs LogAppendTime "
                    "(broker time, monotonic per partition) — recreate the topic with it"
                )
        self.cuts = EpochCuts(
            log,
            max(1, round(opts.heartbeat_interval_s * 1000)),
            clock,
            max_epochs=opts.max_epochs_per_batch,
            group=opts.batch_epochs,
            max_records=opts.max_records_per_batch,
            with_groups=opts.late_rule is not None,
        )
        self.ticker: HeartbeatTicker | None = None
        if opts.heartbeat:
            self.ticker = HeartbeatTicker(
                opts.bootstrap,
                opts.topic,
                opts.heartbeat_interval_s,
                replica=opts.replica,
                grace_s=opts.heartbeat_grace_s,
                skip_active=opts.heartbeat_skip_active,
            ).start()

    def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
        """The next final epoch cut (Spark's read limit is ignored: it would differ per replica)."""
        del max_records
        return self.cuts.next_end(start)

    def close(self) -> None:
        """Stop the ticker."""
        if self.ticker is not None:
            self.ticker.stop()


def source_options(spec: Spec, ctx: ReplicaContext) -> SourceOptions:
    """The reader options of one active-leaderless replica.

    ``replication.heartbeat_interval`` (default 0.5 s) is the epoch length,
    ``replication.batch_interval`` (default :attr:`Spec.agreed_batch_interval`) the length of a
    batch's aligned group of epochs; mode options ``source.<option>`` (e.g.
    ``source.heartbeat_skip_active = "false"``) override the rest.
    """
    interval = spec.replication.heartbeat_interval or DEFAULT_HEARTBEAT_INTERVAL_S
    batch = spec.agreed_batch_interval
    return arfl_source_options(
        spec,
        ctx,
        "active-leaderless",
        heartbeat_interval_s=interval,
        batch_epochs=batch_epochs(batch, interval),
        # Where results cannot depend on the grouping (windows: the agreed watermark), a replica
        # behind catches up by merging.
        max_epochs_per_batch=0 if spec.merges_agreed_batches else 1,
    )


def replication_problems(repl: Any) -> list[tuple[str, str]]:
    """A batch is a group of whole epochs: ``batch_interval`` a multiple of
    ``heartbeat_interval`` (a validated ``Replication``)."""
    if repl.batch_interval is None or repl.batch_interval <= 0:
        return []
    epoch = repl.heartbeat_interval or DEFAULT_HEARTBEAT_INTERVAL_S
    groups = repl.batch_interval / epoch
    if repl.batch_interval < epoch or abs(groups - round(groups)) > 1e-6:
        return [
            (
                "replication.batch_interval",
                f"batch_interval ({format_duration(repl.batch_interval)}) must be a whole "
                f"multiple of heartbeat_interval ({format_duration(epoch)}): batches are groups "
                "of whole epochs",
            )
        ]
    return []


@MODES.register(
    "active-leaderless",
    ModeInfo(
        "R replicas, batches cut at heartbeat epochs found in the input log; no coordination",
        min_replicas=2,
        max_replicas=None,
        options=frozenset({"heartbeat_interval", "batch_interval", "catch_up"}),
        active=True,
        order=4,
        async_progress=True,
        check=replication_problems,
    ),
)
class ActiveLeaderlessReplication(ModeBase):
    """R replicas, batch boundaries at epoch cuts of the input log; no coordination."""

    name = "active-leaderless"

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """The arfl-kafka source with epoch cuts (and this replica's heartbeat ticker)."""
        return read_stream(spark, source_options(spec, ctx))

    def boundary_policy(self, opts: SourceOptions, log: PartitionLog) -> LeaderlessPolicy:
        """See :class:`LeaderlessPolicy`."""
        return LeaderlessPolicy(opts, log)
