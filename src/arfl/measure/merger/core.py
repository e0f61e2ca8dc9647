"""The merger's pure core: first copy of each result wins, latency, gaps, divergence.

:class:`MergeCore` takes records as the Kafka layer hands them over (bytes, topic index, receive
time) and decides what is forwarded; it does no I/O of its own but through the writers it is
given, so tests and ``bench/merge_core.py`` drive it without a broker. The process around it is
:mod:`arfl.measure.merger.process`.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from arfl.measure.frontier import PER_RECORD_RID, Frontier
from arfl.measure.histogram import (
    DEFAULT_PERCENTILES,
    IntervalHistogram,
    IntervalRecorder,
    percentiles_ms,
)
from arfl.run.records import BadRecord, parse_result

MAX_JOURNALED_DIVERGENCES = 100
"""Beyond this many, divergences are only counted (one ``divergence_suppressed`` event)."""
DEFAULT_HORIZON_S: float | None = None
"""Remember result ids for the whole run (only ``max_entries`` bounds the memory)."""
DEFAULT_MAX_ENTRIES = 2_000_000
"""About 0.8 GB of dedup memory (measured ~370-400 bytes per id with 64-hex-digit hashes)."""
DATA_MEMORY = 10_000
"""The content of this many newest first copies is kept to show both values of a divergence."""


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
