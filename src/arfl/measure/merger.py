"""The merger: first copy of each result wins; end-to-end latency is measured here.

It reads every partition of every replica's output topic (``records.replica_topic(sink, i)``)
from its beginning, by explicit assignment: no consumer group, so no rebalance can ever make it
re-read. It keeps the **first** copy of each result id and writes it unchanged to the final
sink topic. For every first copy it records two latencies into per-second HdrHistograms:

* ``receive wall time - src_ts`` (the newest contributing event's *intended* send time), the
  headline reading, written to ``latency.hlog``;
* ``receive wall time - sent_ts`` (its *actual* send time), written to ``latency-sent.hlog``;
  results without ``sent_ts`` are not recorded there, only counted.

Once a second it appends a line to ``monitor.jsonl`` (format in :mod:`arfl.run.streams`).

Dedup state remembers every result id for the whole run by default, bounded only by
``max_entries`` (oldest-first beyond it, about 0.4 KB per id). A restarted replica catches up
for minutes and re-emits results the others delivered long ago, so any age limit shorter than
the run would forward those copies again. ``horizon_s`` sets such a limit anyway; ids forgotten
either way are counted as ``evicted``.

Given the pid and create time of its owner (the deploy process), the merger ends by itself
(flushes, writes ``merger.json``, journals ``merger-orphaned``) within about a second of the
owner's death, so that a ``kill -9`` of arfl never leaves it running.

Copies of one id with different content hashes are **divergent**: counted, and journaled
(``divergence`` events, the first :data:`MAX_JOURNALED_DIVERGENCES` of them). Records that
are not result records are counted as ``bad`` and skipped.

The core (:class:`MergeCore`) is pure: Kafka I/O lives in :class:`Merger`. Run as a process::

    python -m arfl.measure.merger --bootstrap 127.0.0.1:9092 --sink clicks.out \\
        --replicas 2 --run-dir runs/clicks-20261125-213000 --input-stats runs/.../injector.jsonl
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, Protocol

from arfl.configs.defaults import MERGER_FETCH_WAIT_MS, MERGER_LINGER_MS
from arfl.errors import ArflError, DeployError
from arfl.measure import frontier as frontier_file
from arfl.measure.frontier import PER_RECORD_RID, Frontier
from arfl.measure.histogram import (
    DEFAULT_PERCENTILES,
    INTERVAL_S,
    IntervalHistogram,
    IntervalRecorder,
    LatencyLogWriter,
    percentiles_ms,
)
from arfl.processes import same_process, stop_on_termination
from arfl.run.records import BadRecord, parse_result, replica_topic
from arfl.run.rundir import Journal, RunPaths, write_json_atomic
from arfl.run.streams import InjectorStatsTail

if TYPE_CHECKING:
    from arfl.stack.clients import Producer

MAX_JOURNALED_DIVERGENCES = 100
"""Beyond this many, divergences are only counted (one ``divergence_suppressed`` event)."""
DEFAULT_HORIZON_S: float | None = None
"""Remember result ids for the whole run (only ``max_entries`` bounds the memory)."""
DEFAULT_MAX_ENTRIES = 2_000_000
"""About 0.8 GB of dedup memory (measured ~370-400 bytes per id with 64-hex-digit hashes)."""
SENT_HLOG = RunPaths(Path(".")).hlog_sent.name
"""The interval log of latencies measured from the actual send time (``sent_ts``)."""
OWNER_CHECK_S = 1.0
"""How often the merger checks that its owner (the deploy process) still runs."""
DATA_MEMORY = 10_000
"""The content of this many newest first copies is kept to show both values of a divergence."""
STATS_STALE_S = 2.5
"""An injector stats file silent this long (and without a summary) means input stopped."""


# --------------------------------------------------------------------------- pure core


class Outcome(Enum):
    """What the merger did with one record."""

    FIRST = "first"
    DUPLICATE = "duplicate"
    BAD = "bad"


@dataclass(frozen=True)
class Divergence:
    """Two copies of one result id with different content hashes."""

    rid: str
    first_replica: int
    first_hash: str
    replica: int
    hash: str
    first_data: dict[str, Any] | None = None
    """The first copy's content, while it is still remembered (see :data:`DATA_MEMORY`)."""
    data: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Journal fields: both hashes and both values."""
        return {
            "rid": self.rid,
            "first_replica": self.first_replica,
            "first_hash": self.first_hash,
            "first_data": self.first_data,
            "replica": self.replica,
            "hash": self.hash,
            "data": self.data,
        }


class DedupState:
    """First-copy-wins memory of result ids, bounded by size and optionally by age."""

    def __init__(
        self,
        horizon_s: float | None = DEFAULT_HORIZON_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        replicas: int = 1,
    ) -> None:
        """Args:
        horizon_s: forget an id this long after its first copy arrived; None: never by age.
        max_entries: forget the oldest ids beyond this many.
        replicas: how many replicas deliver copies (indices ``0 .. replicas-1``); with two or
            more, each one's trail is kept (:meth:`trail_s`).
        """
        if (horizon_s is not None and horizon_s <= 0) or max_entries < 1:
            raise ValueError("horizon_s must be positive and max_entries at least 1")
        self.horizon_s = horizon_s
        self.max_entries = max_entries
        # rid -> (first arrival epoch s, replica, hash, bit mask of the replicas that delivered
        # it); insertion order == arrival order.
        self._seen: OrderedDict[str, tuple[float, int, str, int]] = OrderedDict()
        # Per replica, in arrival order, the ids the output had before that replica delivered
        # them; an id leaves (lazily, in trail_s) once delivered, forgotten or passed. Emptied
        # for good at the first id that is not per-record (see trail_s).
        self._owed: dict[int, deque[str]] = (
            {r: deque() for r in range(replicas)} if replicas >= 2 else {}
        )
        self._data: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, rid: object) -> bool:
        return rid in self._seen

    def offer(
        self,
        rid: str,
        replica: int,
        content_hash: str,
        arrival_s: float,
        data: dict[str, Any] | None = None,
    ) -> tuple[bool, Divergence | None]:
        """Offer one copy (``data``: its content, remembered to report a divergence).

        Returns:
            ``(True, None)`` for the first copy of ``rid``; ``(False, divergence)`` for a later
            copy, where ``divergence`` is set when its hash differs from the first copy's.
        """
        prev = self._seen.get(rid)
        bit = 1 << replica if replica >= 0 else 0
        if prev is None:
            self._seen[rid] = (arrival_s, replica, content_hash, bit)
            if self._owed:
                if PER_RECORD_RID.match(rid) is None:
                    self._owed = {}
                else:
                    for r, owed in self._owed.items():
                        if r != replica:
                            owed.append(rid)
            if data is not None:
                self._data[rid] = data
                if len(self._data) > DATA_MEMORY:
                    self._data.popitem(last=False)
            if len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
                self.evicted += 1
            return True, None
        if self._owed and not prev[3] & bit:
            self._seen[rid] = (prev[0], prev[1], prev[2], prev[3] | bit)
        if prev[2] != content_hash:
            return False, Divergence(
                rid, prev[1], prev[2], replica, content_hash, self._data.get(rid), data
            )
        return False, None

    def evict(self, now_s: float) -> int:
        """Forget ids whose first copy arrived more than ``horizon_s`` before ``now_s``.

        Returns:
            How many were forgotten by this call (always 0 without a horizon).
        """
        if self.horizon_s is None:
            return 0
        cutoff = now_s - self.horizon_s
        n = 0
        seen = self._seen
        while seen:
            rid, (arrived, *_rest) = next(iter(seen.items()))
            if arrived >= cutoff:
                break
            del seen[rid]
            self._data.pop(rid, None)
            n += 1
        self.evicted += n
        return n

    def trail_s(
        self, replica: int, now_s: float, passed: Callable[[str], bool] | None = None
    ) -> float | None:
        """How far ``replica`` trails the output: the age at ``now_s`` of the oldest first copy
        (still remembered) it has not delivered a copy of and is not past (``passed(rid)``:
        it resumed beyond it, :meth:`arfl.measure.frontier.Frontier.passed`); 0 when it owes
        none.

        None with fewer than two replicas (nothing to trail), for a replica index beyond those
        given at construction, and once any result was not per-record (its id not
        ``partition:offset``): a window that one replica dropped as late (its watermark moved
        at other batch ends) is never delivered by it, and nothing tells the merger so; such a
        result would stay owed for the rest of the run. An id forgotten (``max_entries``,
        ``horizon_s``) and offered again is owed anew by the replicas that delivered it before,
        until they are past it."""
        owed = self._owed.get(replica)
        if owed is None:
            return None
        bit = 1 << replica
        seen = self._seen
        while owed:
            entry = seen.get(owed[0])
            if entry is None or entry[3] & bit or (passed is not None and passed(owed[0])):
                owed.popleft()
                continue
            return max(0.0, now_s - entry[0])
        return 0.0


@dataclass
class InputWindow:
    """When input was flowing (epoch seconds); ``end=None`` while it still flows.

    ``start=None`` means unknown: then only gaps between two outputs are measured, never an
    open gap (no output yet / since the last one).
    """

    start: float | None = None
    end: float | None = None

    @property
    def known(self) -> bool:
        """Whether a start time is known."""
        return self.start is not None

    def flowing(self, t: float) -> bool:
        """Whether input was flowing at ``t``."""
        if self.start is None:
            return False
        return self.start <= t and (self.end is None or t <= self.end)

    def overlap(self, a: float, b: float) -> float:
        """Seconds of ``[a, b]`` during which input was flowing (everything if unknown)."""
        if self.start is None:
            return max(0.0, b - a)
        hi = b if self.end is None else min(b, self.end)
        return max(0.0, hi - max(a, self.start))


class GapTracker:
    """Longest time without a new result while input kept flowing.

    Measured between consecutive first-copy arrivals, clipped to the input window. The wait
    for the very first output (start-up) is not a gap; it is reported as
    ``first_output_delay_ms`` instead.
    """

    def __init__(self) -> None:
        self.last_output: float | None = None
        self.first_output: float | None = None
        self.longest_s = 0.0

    def on_output(self, t: float, window: InputWindow) -> None:
        """A new result arrived at ``t``."""
        if self.last_output is None:
            self.first_output = t
        else:
            gap = window.overlap(self.last_output, t)
            if gap > self.longest_s:
                self.longest_s = gap
        self.last_output = t

    def current_s(self, now: float, window: InputWindow) -> float:
        """The open gap since the last output (0 without a known input window)."""
        if self.last_output is None or not window.known:
            return 0.0
        return window.overlap(self.last_output, now)

    def longest_so_far_s(self, now: float, window: InputWindow) -> float:
        """The longest gap, counting the one still open."""
        return max(self.longest_s, self.current_s(now, window))


@dataclass
class ReplicaCounters:
    """What the merger saw from one replica topic."""

    received: int = 0
    wins: int = 0
    bad: int = 0
    last_seen_t: float | None = None
    last_src_ts: int | None = None

    def snapshot(self, now_s: float, trail_s: float | None = None) -> dict[str, Any]:
        """The ``replicas`` entry of a monitor line (``trail_s``: :meth:`DedupState.trail_s`)."""
        lag = None if self.last_src_ts is None else round(now_s * 1000 - self.last_src_ts, 3)
        return {
            "received": self.received,
            "wins": self.wins,
            "bad": self.bad,
            "last_seen_t": None if self.last_seen_t is None else round(self.last_seen_t, 3),
            "last_src_ts": self.last_src_ts,
            "lag_ms": lag,
            "trail_ms": None if trail_s is None else round(trail_s * 1000, 3),
        }


class Tick(NamedTuple):
    """One closed 1-s interval: both latency readings and the monitor line."""

    interval: IntervalHistogram
    """Latency from the intended send time (``latency.hlog``)."""
    line: dict[str, Any]
    """The ``monitor.jsonl`` line."""
    sent_interval: IntervalHistogram
    """Latency from the actual send time (``latency-sent.hlog``), same start and end."""


@dataclass
class _Second:
    received: int = 0
    first: int = 0
    duplicates: int = 0


class MergeCore:
    """Dedup, latency, gaps, divergence and counters, with no I/O."""

    def __init__(
        self,
        replicas: int,
        start_s: float,
        *,
        horizon_s: float | None = DEFAULT_HORIZON_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        percentiles: Sequence[float] = DEFAULT_PERCENTILES,
        window: InputWindow | None = None,
    ) -> None:
        """Args:
        replicas: how many replica topics (indices ``0 .. replicas-1``).
        start_s: epoch seconds of the first interval's start.
        horizon_s: dedup horizon (see :class:`DedupState`); None: the whole run.
        max_entries: dedup size bound.
        percentiles: shown in monitor lines and the final counts.
        window: when input flows (for gaps); updated by the caller as it learns more.
        """
        self.dedup = DedupState(horizon_s, max_entries, replicas)
        self.recorder = IntervalRecorder(start_s)
        self.sent_recorder = IntervalRecorder(start_s)
        """Latency of first copies from their actual send time (those that carry one)."""
        self.percentiles = tuple(percentiles)
        self.window = window or InputWindow()
        self.gaps = GapTracker()
        self.replicas = {i: ReplicaCounters() for i in range(replicas)}
        self.start_s = start_s
        self.results = 0
        self.duplicates = 0
        self.divergent = 0
        self.bad = 0
        self.received = 0
        self.without_sent_ts = 0
        """First copies without ``sent_ts``: in ``latency.hlog`` but not ``latency-sent.hlog``."""
        self._second = _Second()
        self.frontier = Frontier()
        """Where a restarted stateless replica may resume (:mod:`arfl.measure.frontier`)."""

    def on_record(
        self,
        replica: int,
        value: bytes | None,
        arrival_s: float,
        out_partition: int | None = None,
    ) -> tuple[Outcome, Divergence | None]:
        """Process one record read from replica ``replica``'s topic (partition
        ``out_partition``, when known) at ``arrival_s``.

        Returns:
            The outcome and, for a divergent copy, the divergence.
        """
        rc = self.replicas.get(replica)
        if rc is None:
            rc = self.replicas[replica] = ReplicaCounters()
        rc.received += 1
        rc.last_seen_t = arrival_s
        self.received += 1
        self._second.received += 1
        try:
            rec = parse_result(value)
        except BadRecord:
            rc.bad += 1
            self.bad += 1
            return Outcome.BAD, None
        if rc.last_src_ts is None or rec.src_ts > rc.last_src_ts:
            rc.last_src_ts = rec.src_ts
        if out_partition is not None:
            self.frontier.offer(replica, out_partition, rec.rid)
        first, div = self.dedup.offer(rec.rid, replica, rec.hash, arrival_s, rec.data)
        if first:
            rc.wins += 1
            self.results += 1
            self._second.first += 1
            self.recorder.record_ms(arrival_s * 1000.0 - rec.src_ts)
            if rec.sent_ts is None:
                self.without_sent_ts += 1
            else:
                self.sent_recorder.record_ms(arrival_s * 1000.0 - rec.sent_ts)
            self.gaps.on_output(arrival_s, self.window)
            return Outcome.FIRST, None
        self.duplicates += 1
        self._second.duplicates += 1
        if div is not None:
            self.divergent += 1
        return Outcome.DUPLICATE, div

    def tick(self, now_s: float) -> Tick:
        """Close the current interval at ``now_s``.

        Returns:
            The closed interval histograms (for ``latency.hlog`` and ``latency-sent.hlog``)
            and the monitor line.
        """
        self.dedup.evict(now_s)
        interval = self.recorder.roll(now_s)
        sent_interval = self.sent_recorder.roll(now_s)
        sec, self._second = self._second, _Second()
        line: dict[str, Any] = {
            "t": round(now_s, 3),
            "interval_s": round(interval.end_s - interval.start_s, 3),
            "output_rate": sec.first,
            "received": sec.received,
            "duplicates": sec.duplicates,
            "interval": interval.percentiles_ms(self.percentiles),
            "cumulative": percentiles_ms(self.recorder.cumulative, self.percentiles),
            # Only the interval: each percentile set costs ~2 ms of the merger's loop.
            "interval_sent": sent_interval.percentiles_ms(self.percentiles),
            "results_without_sent_ts": self.without_sent_ts,
            "longest_gap_ms": round(self.gaps.longest_so_far_s(now_s, self.window) * 1000, 3),
            "current_gap_ms": round(self.gaps.current_s(now_s, self.window) * 1000, 3),
            "input_flowing": self.window.flowing(now_s),
            "results": self.results,
            "duplicates_total": self.duplicates,
            "divergent": self.divergent,
            "bad": self.bad,
            "evicted": self.dedup.evicted,
            "dedup_entries": len(self.dedup),
            "replicas": self._replica_lines(now_s),
        }
        return Tick(interval, line, sent_interval)

    def _replica_lines(self, now_s: float) -> dict[str, Any]:
        return {
            str(i): rc.snapshot(
                now_s, self.dedup.trail_s(i, now_s, functools.partial(self.frontier.passed, i))
            )
            for i, rc in sorted(self.replicas.items())
        }

    def final(self, now_s: float) -> dict[str, Any]:
        """The counts for ``merger.json``."""
        first = self.gaps.first_output
        delay = (
            None
            if first is None or self.window.start is None
            else round((first - self.window.start) * 1000, 3)
        )
        return {
            "start": round(self.start_s, 3),
            "end": round(now_s, 3),
            "results": self.results,
            "received": self.received,
            "duplicates": self.duplicates,
            "divergent": self.divergent,
            "bad": self.bad,
            "evicted": self.dedup.evicted,
            "latency_ms": percentiles_ms(self.recorder.cumulative, self.percentiles),
            "latency_sent_ms": percentiles_ms(self.sent_recorder.cumulative, self.percentiles),
            "results_without_sent_ts": self.without_sent_ts,
            "longest_gap_ms": round(self.gaps.longest_so_far_s(now_s, self.window) * 1000, 3),
            "first_output_t": None if first is None else round(first, 3),
            "last_output_t": (
                None if self.gaps.last_output is None else round(self.gaps.last_output, 3)
            ),
            "first_output_delay_ms": delay,
            "input_start": self.window.start,
            "input_end": self.window.end,
            "replicas": self._replica_lines(now_s),
        }


# --------------------------------------------------------------------------- Kafka I/O


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


def consumer_config(
    bootstrap: str, group_id: str, fetch_wait_ms: int = MERGER_FETCH_WAIT_MS
) -> dict[str, Any]:
    """Low-latency consumer settings: short fetch wait, never commit.

    The merger assigns partitions itself (see :class:`Consumer`); ``group.id`` is set only
    because librdkafka's Python client refuses to build a consumer without one. No group is
    joined and no offset is committed under it.
    """
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": "arfl-merger",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": fetch_wait_ms,
        "fetch.min.bytes": 1,
        "topic.metadata.refresh.interval.ms": 1000,
        "allow.auto.create.topics": False,
    }


def sink_producer_config(bootstrap: str, linger_ms: float = MERGER_LINGER_MS) -> dict[str, Any]:
    """Producer settings for the final topic: idempotent, short linger."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "arfl-merger",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "queue.buffering.max.messages": 1_000_000,
        # A missing topic is a deploy error, not something to create with broker defaults.
        "allow.auto.create.topics": False,
    }


def _kafka_consumer(bootstrap: str, group_id: str, fetch_wait_ms: int) -> Any:
    from confluent_kafka import Consumer as KafkaConsumer

    return KafkaConsumer(consumer_config(bootstrap, group_id, fetch_wait_ms))


def _kafka_producer(bootstrap: str, sink: str, timeout_s: float, linger_ms: float) -> Any:
    """The sink producer, after checking the broker answers and the sink topic exists.

    Raises:
        DeployError: Kafka unreachable, or no sink topic.
    """
    from confluent_kafka import Producer as KafkaProducer

    from arfl.stack.topics import require_topic

    producer = KafkaProducer(sink_producer_config(bootstrap, linger_ms))
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


@dataclass(frozen=True)
class MergerConfig:
    """Where to read, write and report.

    Attributes:
        bootstrap: Kafka ``host:port[,...]``.
        sink: the final sink topic; replica ``i`` writes ``replica_topic(sink, i)``.
        replicas: how many replicas.
        run_dir: the run directory (``latency.hlog``, ``monitor.jsonl``, ``merger.json``,
            ``journal.jsonl`` go there).
        horizon_s: dedup horizon in seconds; None (the default) remembers ids for the whole
            run, bounded by ``max_entries``.
        max_entries: dedup size bound.
        input_stats: the injector's stats file (gives the input window for gaps).
        input_start: epoch seconds input starts (instead of / overriding ``input_stats``).
        input_end: epoch seconds input ends.
        until: stop at this epoch time.
        idle_s: stop after this long without records, once input has ended (or, with no input
            information, once something was received).
        percentiles: shown in monitor lines and ``merger.json``.
        group_id: ``group.id`` of the consumer (default: a fresh one per run). The merger
            never joins the group nor commits under it.
        connect_timeout_s: how long to wait for the broker at start.
        owner_pid: the process the merger belongs to (the deploy process): when it is gone,
            the merger flushes, writes ``merger.json`` and exits.
        owner_create_time: the owner's psutil create time, so that a recycled pid is not
            mistaken for the owner.
        fetch_wait_ms: the consumer's ``fetch.wait.max.ms``.
        linger_ms: the sink producer's ``linger.ms``.
    """

    bootstrap: str
    sink: str
    replicas: int
    run_dir: Path
    horizon_s: float | None = DEFAULT_HORIZON_S
    max_entries: int = DEFAULT_MAX_ENTRIES
    input_stats: Path | None = None
    input_start: float | None = None
    input_end: float | None = None
    until: float | None = None
    idle_s: float | None = None
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    group_id: str | None = None
    connect_timeout_s: float = 15.0
    owner_pid: int | None = None
    owner_create_time: float | None = None
    fetch_wait_ms: int = MERGER_FETCH_WAIT_MS
    linger_ms: float = MERGER_LINGER_MS

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise DeployError(f"merger: replicas must be >= 1, got {self.replicas}")
        if (self.horizon_s is not None and self.horizon_s <= 0) or self.max_entries < 1:
            raise DeployError("merger: horizon must be positive and max entries at least 1")
        if self.owner_create_time is not None and self.owner_pid is None:
            raise DeployError("merger: an owner create time needs the owner's pid")
        if self.fetch_wait_ms < 0 or self.linger_ms < 0:
            raise DeployError("merger: fetch wait and linger must be >= 0 ms")

    @property
    def paths(self) -> RunPaths:
        """Named paths in the run directory."""
        return RunPaths(self.run_dir)

    @property
    def result_path(self) -> Path:
        """Where the final counts go."""
        return self.run_dir / "merger.json"

    def topics(self) -> list[str]:
        """The replica topics consumed."""
        return [replica_topic(self.sink, i) for i in range(self.replicas)]

    def command(self, python: str | None = None) -> list[str]:
        """The command line to run this as a process (``python -m arfl.measure.merger``).

        Args:
            python: the interpreter (default: the current one).
        """
        return [python or sys.executable, "-m", "arfl.measure.merger", *self.argv()]

    def argv(self) -> list[str]:
        """Command-line arguments for ``python -m arfl.measure.merger``."""
        args = [
            "--bootstrap", self.bootstrap, "--sink", self.sink,
            "--replicas", str(self.replicas), "--run-dir", str(self.run_dir),
            "--max-entries", str(self.max_entries),
            "--percentiles", ",".join(repr(p) for p in self.percentiles),
            "--connect-timeout", repr(self.connect_timeout_s),
            "--fetch-wait-ms", str(self.fetch_wait_ms), "--linger-ms", repr(self.linger_ms),
        ]  # fmt: skip
        for flag, val in (
            ("--input-stats", self.input_stats), ("--input-start", self.input_start),
            ("--input-end", self.input_end), ("--until", self.until),
            ("--idle", self.idle_s), ("--group-id", self.group_id),
            ("--horizon-s", self.horizon_s), ("--owner-pid", self.owner_pid),
            ("--owner-create-time", self.owner_create_time),
        ):  # fmt: skip
            if val is not None:
                # str() of a float round-trips exactly (a create time must survive as is).
                args += [flag, val if isinstance(val, str) else str(val)]
        return args


class Merger:
    """Runs :class:`MergeCore` against Kafka and writes the run directory's files."""

    def __init__(
        self,
        config: MergerConfig,
        consumer: Consumer | None = None,
        producer: Producer | None = None,
    ) -> None:
        """Args:
        config: what to merge.
        consumer: a confluent-kafka ``Consumer`` (default: one with :func:`consumer_config`).
        producer: a confluent-kafka ``Producer`` for the sink (default: a new one).
        """
        self.config = config
        self._stop = threading.Event()
        group = config.group_id or f"arfl-merger-{uuid.uuid4().hex[:12]}"
        self._consumer: Consumer = consumer or _kafka_consumer(
            config.bootstrap, group, config.fetch_wait_ms
        )
        self._producer: Producer = producer or _kafka_producer(
            config.bootstrap, config.sink, config.connect_timeout_s, config.linger_ms
        )
        self._topic_index = {t: i for i, t in enumerate(config.topics())}
        self._unassigned: list[str] = config.topics()
        self.core: MergeCore | None = None
        self.delivery_failures = 0
        self.consumer_errors = 0
        self.stop_reason: str | None = None
        self._first_delivery_error: str | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to finish (thread-safe); it flushes and writes ``merger.json``."""
        self._stop.set()

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.delivery_failures += 1
            if self._first_delivery_error is None:
                self._first_delivery_error = str(err)

    def _assign(self, journal: Journal | None, timeout_s: float) -> None:
        """Assign, from their beginning, the partitions of replica topics not assigned yet.

        The first call sets the assignment (possibly empty); later calls only add partitions
        of topics that appeared meanwhile, so a partition already being read is never reset to
        its beginning. A topic missing at the first call is journaled (with ``journal``).
        """
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        first = len(self._unassigned) == len(self._topic_index)
        new: list[Any] = []
        missing: list[str] = []
        for topic in self._unassigned:
            try:
                meta = self._consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            except KafkaException:
                meta = None
            if meta is None or meta.error is not None or not meta.partitions:
                missing.append(topic)
                continue
            new += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
            if self.core is not None:
                self.core.frontier.set_partitions(self._topic_index[topic], len(meta.partitions))
        self._unassigned = missing
        if first:
            self._consumer.assign(new)
            if missing and journal is not None:
                journal.write(
                    "warning",
                    component="merger",
                    message=f"replica topics {', '.join(missing)} do not exist yet at "
                    f"{self.config.bootstrap}; reading them from their beginning once they do",
                )
        elif new:
            self._consumer.incremental_assign(new)

    def _owner_gone(self) -> bool:
        cfg = self.config
        return cfg.owner_pid is not None and (
            same_process(cfg.owner_pid, cfg.owner_create_time) is None
        )

    def _update_window(
        self, window: InputWindow, tail: InjectorStatsTail | None, now: float
    ) -> None:
        cfg = self.config
        if tail is not None:
            tail.poll()
            if tail.t0 is not None:
                window.start = tail.t0
            if tail.summary is not None:
                window.end = tail.summary.end
            elif tail.latest is not None and now - tail.latest.t > STATS_STALE_S:
                window.end = tail.latest.t  # the injector went silent: input stopped
            else:
                window.end = None
        if cfg.input_start is not None:
            window.start = cfg.input_start
        if cfg.input_end is not None:
            window.end = cfg.input_end

    def _should_stop(
        self, now: float, last_record: float | None, window: InputWindow, started: float
    ) -> str | None:
        """Why the merger should stop now (``merger.json``'s ``stop_reason``), or None."""
        cfg = self.config
        if self._stop.is_set():
            return "signal"
        if cfg.until is not None and now >= cfg.until:
            return "until"
        if cfg.idle_s is not None:
            input_over = (
                (window.end is not None and now > window.end)
                if (
                    cfg.input_stats is not None
                    or cfg.input_start is not None
                    or cfg.input_end is not None
                )
                else last_record is not None
            )
            quiet_since = last_record if last_record is not None else started
            if input_over and now - quiet_since >= cfg.idle_s:
                return "idle"
        return None

    def run(self) -> dict[str, Any]:
        """Merge until stopped (:meth:`stop`, ``until``, ``idle_s`` or the owner's death).

        Returns:
            The final counts (also written to ``merger.json``).
        """
        cfg = self.config
        paths = cfg.paths
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        journal = Journal(paths.journal)
        started = time.time()
        # Intervals end on whole wall-clock seconds so runs line up with each other.
        start_s = started
        next_tick = math.floor(started) + INTERVAL_S
        next_owner_check = started
        next_frontier = started
        frontier_path = frontier_file.path_in(cfg.run_dir)
        window = InputWindow()
        tail = InjectorStatsTail(cfg.input_stats) if cfg.input_stats else None
        self._update_window(window, tail, started)
        core = self.core = MergeCore(
            cfg.replicas, start_s, horizon_s=cfg.horizon_s, max_entries=cfg.max_entries,
            percentiles=cfg.percentiles, window=window,
        )  # fmt: skip
        hlog = LatencyLogWriter(
            paths.hlog, start_s,
            comment=f"arfl merger: end-to-end latency (us) of first copies from their intended "
            f"send time, sink {cfg.sink}",
        )  # fmt: skip
        sent_hlog = LatencyLogWriter(
            cfg.run_dir / SENT_HLOG, start_s,
            comment=f"arfl merger: end-to-end latency (us) of first copies from their actual "
            f"send time, sink {cfg.sink}",
        )  # fmt: skip
        monitor: IO[str] = open(paths.monitor, "a", encoding="utf-8")  # noqa: SIM115
        journal.write(
            "merger_started",
            sink=cfg.sink,
            replicas=cfg.replicas,
            topics=cfg.topics(),
            horizon_s=cfg.horizon_s,
            max_entries=cfg.max_entries,
            owner_pid=cfg.owner_pid,
            fetch_wait_ms=cfg.fetch_wait_ms,
            linger_ms=cfg.linger_ms,
        )
        journaled = 0
        size_evictions_journaled = False
        error_codes: set[str] = set()
        last_record: float | None = None
        consumer, producer, sink = self._consumer, self._producer, cfg.sink
        topic_index = self._topic_index
        self.stop_reason = "error"  # unless the loop ends normally
        try:
            self._assign(journal, min(cfg.connect_timeout_s, 5.0))
            while True:
                # consume() waits for num_messages *or* the timeout, which would add up to
                # the timeout to every latency at low rates: drain what is queued without
                # waiting, and block in poll() (returns on the first message) only if idle.
                msgs = consumer.consume(num_messages=1000, timeout=0)
                if not msgs:
                    one = consumer.poll(0.05)
                    msgs = [] if one is None else [one]
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        self.consumer_errors += 1
                        code = str(err.name() if hasattr(err, "name") else err)
                        if code not in error_codes:  # journal each kind once
                            error_codes.add(code)
                            journal.write(
                                "warning",
                                component="merger",
                                message=f"consumer error: {err}",
                                code=code,
                            )
                        continue
                    arrival = time.time()
                    last_record = arrival
                    replica = topic_index.get(msg.topic(), -1)
                    value = msg.value()
                    outcome, div = core.on_record(replica, value, arrival, msg.partition())
                    if outcome is Outcome.FIRST:
                        self._produce(sink, msg.key(), value)
                    elif div is not None:
                        journaled += 1
                        if journaled <= MAX_JOURNALED_DIVERGENCES:
                            journal.write("divergence", **div.to_dict())
                        elif journaled == MAX_JOURNALED_DIVERGENCES + 1:
                            journal.write(
                                "divergence_suppressed",
                                message=f"more than {MAX_JOURNALED_DIVERGENCES} divergent "
                                "copies; only counting from now on (see merger.json)",
                            )
                if msgs:
                    producer.poll(0)
                now = time.time()
                if now >= next_frontier and core.frontier.changed:
                    next_frontier = now + frontier_file.WRITE_INTERVAL_S
                    core.frontier.changed = False
                    frontier_file.write_frontier(frontier_path, core.frontier.safe(), now)
                if now >= next_tick:
                    self._update_window(window, tail, now)
                    while now >= next_tick:
                        tick = core.tick(next_tick)
                        hlog.write(tick.interval)
                        sent_hlog.write(tick.sent_interval)
                        monitor.write(json.dumps(tick.line) + "\n")
                        next_tick += INTERVAL_S
                    monitor.flush()
                    if self._unassigned:
                        self._assign(None, 0.5)
                    if core.dedup.evicted and not size_evictions_journaled:
                        size_evictions_journaled = True
                        journal.write(
                            "warning",
                            component="merger",
                            message=f"dedup memory forgot result ids (horizon "
                            f"{cfg.horizon_s} s, at most {cfg.max_entries} ids): a copy "
                            "arriving after its id was forgotten is forwarded again",
                        )
                if now >= next_owner_check:
                    next_owner_check = now + OWNER_CHECK_S
                    if self._owner_gone():
                        self.stop_reason = "orphaned"
                        journal.write(
                            "merger-orphaned",
                            owner_pid=cfg.owner_pid,
                            owner_create_time=cfg.owner_create_time,
                            message=f"the process that started the merger (pid "
                            f"{cfg.owner_pid}) is gone; flushing and exiting",
                        )
                        break
                reason = self._should_stop(now, last_record, window, started)
                if reason is not None:
                    self.stop_reason = reason
                    break
        finally:
            end = time.time()
            self._update_window(window, tail, end)
            if end > core.recorder.interval_start_s:
                tick = core.tick(end)
                hlog.write(tick.interval)
                sent_hlog.write(tick.sent_interval)
                monitor.write(json.dumps(tick.line) + "\n")
            hlog.close()
            sent_hlog.close()
            monitor.close()
            # Records still queued after the flush were never acknowledged: lost writes too.
            remaining = producer.flush(30.0)
            consumer.close()
            final = core.final(end)
            final["delivery_failures"] = self.delivery_failures + remaining
            final["complete_output"] = final["delivery_failures"] == 0
            final["consumer_errors"] = self.consumer_errors
            final["stop_reason"] = self.stop_reason
            final["horizon_s"] = cfg.horizon_s
            final["max_entries"] = cfg.max_entries
            final["sink"] = sink
            write_json_atomic(cfg.result_path, final)
            journal.write("merger_finished", **{k: final[k] for k in (
                "results", "duplicates", "divergent", "bad", "evicted", "longest_gap_ms",
                "delivery_failures", "complete_output", "stop_reason",
            )})  # fmt: skip
            if final["delivery_failures"]:
                journal.write(
                    "warning",
                    component="merger",
                    message=f"{final['delivery_failures']} results not written to "
                    f"{sink}: {self._first_delivery_error or 'flush timed out'}",
                )
        return final

    def _produce(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                return
            except BufferError:
                self._producer.poll(0.005)


# --------------------------------------------------------------------------- entry point


def _percentile_list(s: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 50,99,99.9, got {s!r}") from None
    if not out or any(not 0 < p <= 100 for p in out):
        raise argparse.ArgumentTypeError(f"percentiles must be in (0, 100], got {s!r}")
    return out


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m arfl.measure.merger`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m arfl.measure.merger",
        description="Merge replica outputs (first copy wins) and measure end-to-end latency.",
    )
    p.add_argument("--bootstrap", required=True, help="Kafka host:port[,host:port]")
    p.add_argument("--sink", required=True, help="final sink topic (replica i writes SINK.rI)")
    p.add_argument("--replicas", type=int, required=True, help="number of replicas")
    p.add_argument("--run-dir", type=Path, required=True, help="run directory")
    p.add_argument(
        "--horizon-s",
        "--horizon",
        dest="horizon_s",
        type=float,
        default=DEFAULT_HORIZON_S,
        help="forget result ids this many seconds after their first copy (default: never, "
        "only --max-entries bounds the memory)",
    )
    p.add_argument("--max-entries", type=int, default=DEFAULT_MAX_ENTRIES, help="dedup size bound")
    p.add_argument(
        "--fetch-wait-ms",
        type=int,
        default=MERGER_FETCH_WAIT_MS,
        help="the consumer's fetch.wait.max.ms",
    )
    p.add_argument(
        "--linger-ms", type=float, default=MERGER_LINGER_MS, help="the sink producer's linger.ms"
    )
    p.add_argument(
        "--input-stats",
        type=Path,
        default=None,
        help="the injector's stats JSONL (input window for gap measurement)",
    )
    p.add_argument("--input-start", type=float, default=None, help="input start, epoch s")
    p.add_argument("--input-end", type=float, default=None, help="input end, epoch s")
    p.add_argument("--until", type=float, default=None, help="stop at this epoch time")
    p.add_argument(
        "--idle",
        type=float,
        default=None,
        help="stop after this many seconds without records once input ended",
    )
    p.add_argument(
        "--percentiles",
        type=_percentile_list,
        default=DEFAULT_PERCENTILES,
        help="comma-separated, default 50,90,99,99.9",
    )
    p.add_argument(
        "--group-id",
        default=None,
        help="consumer group.id (default: fresh per run; never joined, nothing committed)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=15.0,
        help="seconds to wait for the broker at start",
    )
    p.add_argument(
        "--owner-pid",
        type=int,
        default=None,
        help="exit (after writing merger.json) once this process is gone",
    )
    p.add_argument(
        "--owner-create-time",
        type=float,
        default=None,
        help="the owner's create time (psutil), so that a reused pid is not taken for it",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Process entry: merge until SIGTERM/SIGINT, ``--until``, ``--idle`` or the owner's death.

    Returns:
        0, or 4 (deploy error) when results could not be written to the sink
        (``merger.json``: ``complete_output`` false).
    """
    args = build_parser().parse_args(argv)
    try:
        cfg = MergerConfig(
            bootstrap=args.bootstrap, sink=args.sink, replicas=args.replicas,
            run_dir=args.run_dir, horizon_s=args.horizon_s, max_entries=args.max_entries,
            input_stats=args.input_stats, input_start=args.input_start,
            input_end=args.input_end, until=args.until, idle_s=args.idle,
            percentiles=args.percentiles, group_id=args.group_id,
            connect_timeout_s=args.connect_timeout, owner_pid=args.owner_pid,
            owner_create_time=args.owner_create_time, fetch_wait_ms=args.fetch_wait_ms,
            linger_ms=args.linger_ms,
        )  # fmt: skip
        merger = Merger(cfg)
    except ArflError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(e.exit_code)

    stop_on_termination(merger.stop)
    final = merger.run()
    print(
        json.dumps(
            {
                k: final[k]
                for k in ("results", "duplicates", "divergent", "bad", "evicted", "latency_ms")
            }
        ),
        flush=True,
    )
    if final["delivery_failures"]:
        print(
            f"error: merger: {final['delivery_failures']} results not written to "
            f"{cfg.sink} at {cfg.bootstrap}",
            file=sys.stderr,
        )
        return int(DeployError.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
