"""The agreed watermark: every replica drops the same late rows, however its batches run.

Spark drops a row of a windowed aggregation as late when its window ends at or before the
watermark of the *previous* micro-batch (``window.end <= max event time so far - delay``), so
what is late depends on how the input was cut into batches. The agreed-batch modes cut alike on
every replica, but a replica that catches up by running several agreed batches as one Spark batch
(``replication.catch_up = "auto"``) would keep rows the others dropped. So for windowed
pipelines the source drops late rows itself, by a threshold that depends on the log alone:

    a row of agreed batch ``g`` is aggregated only if its window ends after
    ``W_g = (newest event time of every record before g) - delay``

— the watermark as of the start of the row's agreed batch, the one Spark uses when a no-data
batch ran in between. Spark's own threshold in any batch holding ``g`` is never above ``W_g`` (it
comes from earlier batches, which hold only earlier records), so Spark drops nothing this filter
keeps; every replica aggregates exactly the same rows, in aligned batches or merged ones.

How it works: the reader's ``latestOffset`` scans the records of each new batch on the driver
(:func:`group_maxes`) and writes the newest event time before the end, and before each agreed
batch inside a merged one, into the end offset (:class:`~arfl.replica.source.offsets.BatchOffset`
``event_max``/``groups``, so a restarted driver continues from its checkpoint). Each read task
gets the threshold of every agreed batch in its range (:func:`thresholds`) and emits it per row
as the ``late_before`` column; the window step filters on it (:mod:`arfl.replica.query`) and
counts what it drops in the ``arfl_late`` observed metric.

The scan must count at least every event time Spark counts (else Spark's threshold could pass
this one). It counts a JSON object with a numeric ``ts`` and a numeric event-time field, or an
end-of-input marker's ``ts``, reading the value as Spark's ``from_json`` does: the text the
source hands Spark (invalid UTF-8 replaced), the first JSON value of it, and with the query's
parse set to refuse single-quoted JSON where the agreed watermark is on (Spark's default
accepts it, Python's parser does not; :func:`arfl.replica.query.parse_input`). It may count more
than Spark (a float or an out-of-range number Spark refuses), which only raises the threshold
alike on every replica. It counts no more than the independent check's lateness model (every
record appended before a row) as long as no batch is capped by ``max_records_per_batch`` (which
can cut one partition short while another goes on; docs/correctness.md names that caveat), so
the windows it cuts short are among those the check does not judge.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from arfl.replica.query import TS_FIELD
from arfl.replica.source.fetch import Range, records
from arfl.replica.source.offsets import AgreedGroup, BatchOffset
from arfl.run.records import END_OF_INPUT_FIELD


@dataclass(frozen=True, slots=True)
class LateRule:
    """The agreed watermark of one reader.

    Attributes:
        field: the event-time field of the input's JSON values (epoch ms).
        delay_ms: the window's watermark delay.
    """

    field: str
    delay_ms: int

    def threshold(self, event_max: int | None) -> int | None:
        """``W``: a window must end after this; None when no event came before."""
        return None if event_max is None else event_max - self.delay_ms


INT64_MAX = 2**63 - 1


def event_time(value: bytes | str | None, field: str) -> int | None:
    """The event time a record contributes to the watermark (see the module docstring): a JSON
    object's numeric event-time field, or an end-of-input marker's ``ts``; every record needs a
    numeric ``ts``, as the query's parse does. Read as Spark's ``from_json`` reads it: bytes
    decoded with replacement characters (the source hands Spark the same text), the first JSON
    value of the text (what follows it is ignored), numbers that fit a long. Never raises."""
    if value is None:
        return None
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
    try:
        data, _ = _DECODER.raw_decode(text.lstrip(" \t\n\r"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or _long(data.get(TS_FIELD)) is None:
        return None
    return _long(data[TS_FIELD] if data.get(END_OF_INPUT_FIELD) is True else data.get(field))


_DECODER = json.JSONDecoder()


def _long(v: object) -> int | None:
    """``v`` as a long (a float truncated, as Python's ``int``); None for anything else: bools,
    NaN, infinities, numbers beyond 64 bits."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    n = int(v)
    return n if -INT64_MAX - 1 <= n <= INT64_MAX else None


def _newest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def group_maxes(
    bootstrap: str, topic: str, start: BatchOffset, end: BatchOffset, field: str
) -> list[int | None]:
    """The newest event time in each agreed batch of ``[start, end)``: index 0 from ``start``,
    index ``i`` from ``end.groups[i - 1]`` (None: no event in it)."""
    starts = [dict(start.offsets), *(dict(g.offsets) for g in end.groups)]
    out: list[int | None] = [None] * len(starts)
    for p in sorted(end.offsets):
        lo, hi = start.offsets.get(p, end.offsets[p]), end.offsets[p]
        if hi <= lo:
            continue
        cuts = [s.get(p, lo) for s in starts]
        for chunk in records(Range(bootstrap, topic, p, lo, hi)):
            newest_by_group(((m.offset(), m.value()) for m in chunk), cuts, field, out)
    return out


def newest_by_group(
    rows: Iterable[tuple[int, bytes | str | None]],
    cuts: Sequence[int],
    field: str,
    out: list[int | None],
) -> None:
    """Fold ``(offset, value)`` rows of one partition into ``out[g]``, the newest event time of
    agreed batch ``g``; ``cuts[g]`` is where ``g`` begins in this partition (non-decreasing). A
    row belongs to the last batch beginning at or before it: of several batches beginning at one
    offset (the earlier ones empty here) the last, as
    :func:`arfl.replica.source.fetch.row_thresholds` attributes it."""
    for offset, value in rows:
        t = event_time(value, field)
        if t is not None:
            g = bisect.bisect_right(cuts, offset) - 1
            out[g] = _newest(out[g], t)


def annotate(start: BatchOffset, end: BatchOffset, maxes: Sequence[int | None]) -> BatchOffset:
    """``end`` with the newest event time before it and before each agreed batch inside it.

    Args:
        start: the batch's start (its ``event_max``: before the batch).
        end: the policy's end, ``groups`` holding where each further agreed batch begins.
        maxes: :func:`group_maxes` of the batch.
    """
    running = start.event_max
    groups: list[AgreedGroup] = []
    for i, g in enumerate(end.groups):
        running = _newest(running, maxes[i])
        groups.append(AgreedGroup(dict(g.offsets), running))
    running = _newest(running, maxes[len(end.groups)])
    return dataclasses.replace(end, tracked=True, event_max=running, groups=tuple(groups))


def thresholds(
    rule: LateRule, start: BatchOffset, end: BatchOffset, partition: int
) -> tuple[tuple[int, int | None], ...]:
    """``(first offset, W)`` of every agreed batch of ``[start, end)`` in one Kafka partition,
    in offset order (a row takes the ``W`` of the last entry at or before its offset)."""
    lo = start.offsets.get(partition, end.offsets.get(partition, 0))
    out = [(lo, rule.threshold(start.event_max))]
    for g in end.groups:
        out.append((g.offsets.get(partition, lo), rule.threshold(g.event_max)))
    return tuple(out)
