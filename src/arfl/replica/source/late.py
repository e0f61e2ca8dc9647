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

The scan counts an event time wherever Spark could: a JSON object with a numeric ``ts`` and a
numeric event-time field, or an end-of-input marker's ``ts``. It may count more than Spark (a
record Spark refuses as bad), never less, which keeps Spark's threshold at or below this one.
It counts no more than the independent check's lateness model does (every record appended before
a row), so the windows it cuts short are among those the check does not judge.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

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


def event_time(value: bytes | str | None, field: str) -> int | None:
    """The event time a record contributes to the watermark (see the module docstring): a JSON
    object's numeric event-time field, or an end-of-input marker's ``ts``; every record needs a
    numeric ``ts``, as the query's parse does."""
    if value is None:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or not _number(data.get(TS_FIELD)):
        return None
    t = data[TS_FIELD] if data.get(END_OF_INPUT_FIELD) is True else data.get(field)
    return int(t) if _number(t) else None


def _number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


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
            for m in chunk:
                t = event_time(m.value(), field)
                if t is None:
                    continue
                g = bisect.bisect_right(cuts, m.offset()) - 1
                out[g] = _newest(out[g], t)
    return out


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


def row_thresholds(
    offsets: Sequence[int], late: Sequence[tuple[int, int | None]]
) -> list[int | None]:
    """The ``late_before`` value of each row (by offset) given :func:`thresholds`."""
    if not late:
        return [None] * len(offsets)
    firsts = [f for f, _ in late]
    return [late[max(0, bisect.bisect_right(firsts, o) - 1)][1] for o in offsets]
