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
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from arfl.measure.frontier import Frontier
from arfl.measure.histogram import (
    DEFAULT_PERCENTILES,
    IntervalHistogram,
    IntervalRecorder,
    percentiles_ms,
)
from arfl.run.records import BadRecord, Copy, copy_data, parse_copy, split_update

MAX_JOURNALED_DIVERGENCES = 100
"""Beyond this many, divergences are only counted (one ``divergence_suppressed`` event)."""
RECENT_S = 60.0
"""How long a forwarded result's id and content hash stay in exact memory (docs/design.md,
"Bounded dedup"): a later copy is compared with the first while it is there; once it left, the
channel's floor says it is a duplicate."""
ACTIVE_S = 60.0
"""A replica that delivered nothing for this long no longer holds results in exact memory (a
replica that was given up must not make the memory grow for the rest of the run)."""
WINDOW_DISORDER_MS = 60_000
"""How far back of its newest window end (event time) a replica may still emit a window in one
output partition: within one batch, windows come out in no particular order."""
EXPIRE_SLACK = 16
"""Ids :meth:`MergeCore.housekeep` may expire beyond twice the copies just read."""
OWED_MAX_S = 600.0
"""How far back a replica's trail is followed; one that owes older results trails by at
least this much (the memory of what it owes stays bounded while it is down)."""
DATA_MEMORY = 10_000
"""The content of this many newest first copies is kept to show both values of a divergence."""


class Outcome(Enum):
    """What the merger did with one record."""

    FIRST = "first"
    DUPLICATE = "duplicate"
    BAD = "bad"
    MARKER = "marker"
    """A marker copy (:mod:`arfl.run.records`): the replica read an input partition to its
    end. Never forwarded, not counted as received."""


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


class _Key(NamedTuple):
    """Where a result id's copies are ordered: its channel and its place in it."""

    channel: tuple[int, int]
    """``(input partition, output partition)`` of a per-record result; ``(-1, output
    partition)`` of a window result or update."""
    order: int
    """The input offset, or the window's end (ms)."""


def _key(rid: str, out_partition: int | None) -> _Key | None:
    """None for an id of neither form (none of arfl's pipelines makes one)."""
    q = -1 if out_partition is None else out_partition
    # frontier.PER_RECORD_RID's rule without a regular expression: this runs for every copy.
    p, colon, o = rid.partition(":")
    if colon and p.isdecimal() and o.isdecimal():
        return _Key((int(p), q), int(o))
    span = split_update(rid)[0].split(":", 1)[0].split("-")
    if len(span) == 2 and span[0].isdigit() and span[1].isdigit():
        return _Key((-1, q), int(span[1]))
    return None


class DedupState:
    """First copy wins, in memory bounded by channels and by time, not by the run's length.

    A replica emits each channel's results in order: a per-record result's channel is its input
    partition and output partition (one task writes an input partition in offset order, and
    the result's Kafka key, its id, puts every replica's copy on the same output partition); a
    window's is its output partition, in window-end order give or take
    :data:`WINDOW_DISORDER_MS`. A forwarded id stays in exact memory (with its hash, for the
    divergence check) for :data:`RECENT_S`, and until every active replica is past it in its
    channel; then it leaves, raising the channel's floor to its place. A copy is a duplicate if
    its id is in exact memory or its place is at or below its channel's floor. Why that
    forwards no result twice and drops no first copy: docs/design.md, "Bounded dedup".
    """

    def __init__(self, replicas: int = 1, recent_s: float = RECENT_S) -> None:
        """Args:
        replicas: how many replicas deliver copies (indices ``0 .. replicas-1``); with two or
            more, each one's trail is kept (:meth:`trail_s`).
        recent_s: how long a forwarded id stays in exact memory at least.
        """
        if recent_s <= 0:
            raise ValueError("recent_s must be positive")
        self.recent_s = recent_s
        # rid -> (first arrival epoch s, replica, hash, key); insertion order == arrival order.
        self._recent: OrderedDict[str, tuple[float, int, str, _Key]] = OrderedDict()
        self._other: dict[str, tuple[float, int, str]] = {}
        """Ids of no known form, remembered for the run (none of arfl's pipelines makes one)."""
        self._floor: dict[tuple[int, int], int] = {}
        """Channel -> the order at or below which every copy is a duplicate."""
        self._high: dict[tuple[int, tuple[int, int]], int] = {}
        """(replica, channel) -> the highest order it delivered there."""
        self._last: dict[int, float] = {}
        """Replica -> when it last delivered anything."""
        # Per replica, in arrival order, (rid, first arrival, key) of the results the output
        # had before that replica delivered them. Emptied for good at the first id that is not
        # per-record (see trail_s).
        self._owed: dict[int, deque[tuple[str, float, _Key]]] = (
            {r: deque() for r in range(replicas)} if replicas >= 2 else {}
        )
        self._saturated: dict[int, float] = {}
        """Replica -> the first arrival of the oldest result it owed when :data:`OWED_MAX_S`
        made the merger stop following it (its trail is at least that old)."""
        self._data: OrderedDict[str, bytes] = OrderedDict()
        """Rid -> the first copy's record, for a divergence's values (parsed only then)."""
        self.uncompared = 0
        """Duplicates decided by a floor: their first copy's hash was no longer in memory."""

    def __len__(self) -> int:
        return len(self._recent) + len(self._other)

    def __contains__(self, rid: object) -> bool:
        return rid in self._recent or rid in self._other

    @property
    def channels(self) -> int:
        """How many channels have a floor."""
        return len(self._floor)

    def offer(
        self,
        rid: str,
        replica: int,
        content_hash: str,
        arrival_s: float,
        value: bytes | None = None,
        out_partition: int | None = None,
        key: _Key | None = None,
    ) -> tuple[bool, Divergence | None]:
        """Offer one copy read from ``out_partition`` of its replica's topic (``value``: its
        record, remembered to report a divergence's data; ``key``: :func:`_key` of the id,
        when the caller read it already).

        Returns:
            ``(True, None)`` for the first copy of ``rid``; ``(False, divergence)`` for a later
            copy, where ``divergence`` is set when its hash differs from the first copy's.
        """
        if key is None:
            key = _key(rid, out_partition)
        if replica >= 0:
            self._last[replica] = arrival_s
            mine = (replica, key.channel) if key is not None else None
            if mine is not None and key is not None and key.order > self._high.get(mine, -1):
                self._high[mine] = key.order
        prev = self._recent.get(rid) or self._other.get(rid)
        if prev is not None:
            if prev[2] != content_hash:
                return False, Divergence(
                    rid, prev[1], prev[2], replica, content_hash,
                    copy_data(self._data.get(rid)), copy_data(value),
                )  # fmt: skip
            return False, None
        if key is None:
            self._other[rid] = (arrival_s, replica, content_hash)
        elif key.order <= self._floor.get(key.channel, -1):
            self.uncompared += 1
            return False, None
        else:
            self._recent[rid] = (arrival_s, replica, content_hash, key)
        if self._owed:
            if key is None or key.channel[0] < 0:
                self._owed = {}
            else:
                for r, owed in self._owed.items():
                    if r != replica:
                        owed.append((rid, arrival_s, key))
        if value is not None:
            self._data[rid] = value
            if len(self._data) > DATA_MEMORY:
                self._data.popitem(last=False)
        return True, None

    def remember(
        self, rid: str, content_hash: str, arrival_s: float, out_partition: int | None
    ) -> None:
        """Take ``rid`` as forwarded (a restarted merger, from the sink's tail): its copies are
        duplicates from now on."""
        key = _key(rid, out_partition)
        if key is None:
            self._other.setdefault(rid, (arrival_s, -1, content_hash))
        elif rid not in self._recent:
            self._recent[rid] = (arrival_s, -1, content_hash, key)

    def expire(self, now_s: float, limit: int | None = None) -> int:
        """Move ids older than ``recent_s`` that every active replica is past out of exact
        memory into their channels' floors, at most ``limit`` of them (None: all).

        Returns:
            How many left exact memory.
        """
        cutoff = now_s - self.recent_s
        active = [r for r, t in self._last.items() if t >= now_s - ACTIVE_S]
        recent = self._recent
        n = 0
        while recent and (limit is None or n < limit):
            rid, (arrived, _, _, key) = next(iter(recent.items()))
            if arrived >= cutoff or not self._all_past(active, key):
                break
            del recent[rid]
            self._data.pop(rid, None)
            if key.order > self._floor.get(key.channel, -1):
                self._floor[key.channel] = key.order
            n += 1
        return n

    def _all_past(self, active: list[int], key: _Key) -> bool:
        """Every active replica delivered something beyond ``key`` in its channel (a window:
        beyond its end by :data:`WINDOW_DISORDER_MS`), so none will send a first copy of it."""
        margin = WINDOW_DISORDER_MS if key.channel[0] == -1 else 0
        return all(self._high.get((r, key.channel), -1) >= key.order + margin for r in active)

    def trail_s(
        self, replica: int, now_s: float, passed: Callable[[str], bool] | None = None
    ) -> float | None:
        """How far ``replica`` trails the output: the age at ``now_s`` of the oldest first copy
        it has not delivered a copy of and is not past (``passed(rid)``: it resumed beyond it,
        :meth:`arfl.measure.frontier.Frontier.passed`); 0 when it owes none; at least
        :data:`OWED_MAX_S` once it owed something older.

        None with fewer than two replicas (nothing to trail), for a replica index beyond those
        given at construction, and once any result was not per-record (its id not
        ``partition:offset``): a window that one replica dropped as late (its watermark moved
        at other batch ends) is never delivered by it, and nothing tells the merger so; such a
        result would stay owed for the rest of the run."""
        owed = self._owed.get(replica)
        if owed is None:
            return None
        while owed:
            rid, arrived, key = owed[0]
            delivered = self._high.get((replica, key.channel), -1) >= key.order
            if delivered or (passed is not None and passed(rid)):
                owed.popleft()
                continue
            if arrived < now_s - OWED_MAX_S:
                self._saturated.setdefault(replica, arrived)
                owed.popleft()
                continue
            break
        oldest = self._saturated.get(replica)
        if not owed:
            self._saturated.pop(replica, None)
            return 0.0 if oldest is None else max(0.0, now_s - oldest)
        arrived = owed[0][1] if oldest is None else min(oldest, owed[0][1])
        return max(0.0, now_s - arrived)


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
    ended: dict[int, float] = field(default_factory=dict)
    """Input partition -> when this replica's latest marker copy of it was appended to its
    topic (epoch s; when read, for a record without a Kafka timestamp): it had read the
    partition to the end."""

    def snapshot(self, now_s: float, trail_s: float | None = None) -> dict[str, Any]:
        """The ``replicas`` entry of a monitor line (``trail_s``: :meth:`DedupState.trail_s`)."""
        # A tick written late (the first after a take-over) can end before the newest result.
        lag = (
            None
            if self.last_src_ts is None
            else round(max(0.0, now_s * 1000 - self.last_src_ts), 3)
        )
        return {
            "received": self.received,
            "wins": self.wins,
            "bad": self.bad,
            "last_seen_t": None if self.last_seen_t is None else round(self.last_seen_t, 3),
            "last_src_ts": self.last_src_ts,
            "lag_ms": lag,
            "trail_ms": None if trail_s is None else round(trail_s * 1000, 3),
            "ended": {str(p): round(t, 3) for p, t in sorted(self.ended.items())},
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
        percentiles: Sequence[float] = DEFAULT_PERCENTILES,
        window: InputWindow | None = None,
    ) -> None:
        """Args:
        replicas: how many replica topics (indices ``0 .. replicas-1``).
        start_s: epoch seconds of the first interval's start.
        percentiles: shown in monitor lines and the final counts.
        window: when input flows (for gaps); updated by the caller as it learns more.
        """
        self.dedup = DedupState(replicas)
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
        self.last_rid = ""
        """The id of the last first copy :meth:`on_record` saw (a standby owes it)."""
        self.frontier = Frontier()
        """Where a restarted stateless replica may resume (:mod:`arfl.measure.frontier`)."""
        self._marker: tuple[int, int] | None = None
        """(replica, input partition) of the last marker copy :meth:`on_record` took."""

    def date_marker(self, appended_s: float | None) -> None:
        """Date the marker copy :meth:`on_record` just took (``Outcome.MARKER``) by its Kafka
        timestamp, the broker's append on arfl's replica topics (None: it keeps its read
        time). A merger that read it late, paused or restarted behind, would otherwise date an
        old attempt's copy after a restart that came later. Called for marker copies only:
        reading a record's timestamp is no work for every copy."""
        if self._marker is not None and appended_s is not None:
            replica, partition = self._marker
            self.replicas[replica].ended[partition] = appended_s

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
        try:
            copy: Copy | None = parse_copy(value)
        except BadRecord:
            copy = None
        if copy is not None and copy.eoi:
            # A per-record id's channel starts with its input partition (-1: a window's).
            marker = _key(copy.rid, None)
            if marker is not None and marker.channel[0] >= 0:
                rc.ended[marker.channel[0]] = arrival_s  # until :meth:`date_marker`
                self._marker = (replica, marker.channel[0])
                return Outcome.MARKER, None
            copy = None  # a marker copy names its input partition, or it is a bad record
        rc.last_seen_t = arrival_s
        rc.received += 1
        self.received += 1
        self._second.received += 1
        if copy is None:
            rc.bad += 1
            self.bad += 1
            return Outcome.BAD, None
        rid, src_ts, content_hash, sent_ts = copy.rid, copy.src_ts, copy.hash, copy.sent_ts
        if rc.last_src_ts is None or src_ts > rc.last_src_ts:
            rc.last_src_ts = src_ts
        # The id is read once per record, for the frontier and the dedup both.
        key = _key(rid, out_partition)
        if out_partition is not None and key is not None and key.channel[0] >= 0:
            self.frontier.offer_at(replica, out_partition, key.channel[0], key.order)
        first, div = self.dedup.offer(
            rid, replica, content_hash, arrival_s, value, out_partition, key
        )
        if first:
            rc.wins += 1
            self.last_rid = rid
            self.forwarded(src_ts, sent_ts, arrival_s)
            return Outcome.FIRST, None
        self.duplicates += 1
        self._second.duplicates += 1
        if div is not None:
            self.divergent += 1
        return Outcome.DUPLICATE, div

    def forwarded(self, src_ts: float, sent_ts: float | None, t: float) -> None:
        """Count one result forwarded at ``t`` (epoch s): its latency, the output gap."""
        self.results += 1
        self._second.first += 1
        self.recorder.record_ms(t * 1000.0 - src_ts)
        if sent_ts is None:
            self.without_sent_ts += 1
        else:
            self.sent_recorder.record_ms(t * 1000.0 - sent_ts)
        self.gaps.on_output(t, self.window)

    def took_over(self, forwarded: int) -> None:
        """Count results the merger taken over from forwarded and never logged: in the
        current interval's output (its monitor line), as the sink has them."""
        self.results += forwarded
        self._second.first += forwarded

    def housekeep(self, now_s: float, arrived: int) -> None:
        """Expire from the dedup's exact memory a little more than ``arrived`` (the copies
        just read), so that its memory keeps pace with the input in small steps: a second's
        worth at once (~1,000 ids at 1,000 results/s) stalled the loop 5-10 ms at every tick
        (docs/benchmarks.md)."""
        self.dedup.expire(now_s, limit=2 * arrived + EXPIRE_SLACK)

    def keep_trails(self, now_s: float) -> None:
        """Drop from each replica's trail what it delivered since (:meth:`tick` does it too):
        a standby merger, which never ticks, would keep every result of its follow there."""
        self._replica_lines(now_s)

    def tick(self, now_s: float) -> Tick:
        """Close the current interval at ``now_s``.

        Returns:
            The closed interval histograms (for ``latency.hlog`` and ``latency-sent.hlog``)
            and the monitor line.
        """
        self.dedup.expire(now_s)
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
            "dedup_entries": len(self.dedup),
            "dedup_floors": self.dedup.channels,
            "uncompared": self.dedup.uncompared,
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
            "uncompared": self.dedup.uncompared,
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
