"""Output gaps reconstructed from the merger's 1-s monitor ticks.

An output gap is time without a new result (first copy) while input kept flowing. The merger
measures it exactly (to 1 ms, clipped to the input window) but publishes only, once a second:

* ``current_gap_ms``: the time since the last new result at the tick (the open gap), and
* ``longest_gap_ms``: the run-wide longest gap so far (the open one included).

From these, a gap is known as follows (this is the report's **resolution**):

* every gap that spans at least one tick (so every gap of 1 s or more) is seen; its start is
  exact (tick time minus ``current_gap_ms``); its length is exact when the run-wide record rose
  in the second it closed (the longest gap is always such a record), otherwise the open time at
  its last tick is a lower bound (at most 1 s short);
* a gap shorter than 1 s that spans no tick is seen only when it set a new run-wide record.

A phase's longest gap is the longest stretch without a new result *inside* the phase (gaps
clipped to its bounds); a fault's gap is the longest whole gap overlapping its window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arfl.run.streams import MonitorSnapshot

RESOLUTION = (
    "gaps from the merger's 1-s ticks: every gap >= 1 s is seen with its exact start; its "
    "length is exact (1 ms) when it set a run-wide record, else a lower bound at most 1 s "
    "short; gaps < 1 s are seen only when they set a run-wide record"
)
_SAME_START_S = 0.003
"""Tick times and open gaps are rounded to 1 ms each: starts this close are one gap."""


@dataclass(frozen=True)
class Gap:
    """One output gap.

    Attributes:
        start: epoch seconds of the last result before the gap.
        length_ms: its length (exact when ``exact``, else a lower bound).
        exact: whether ``length_ms`` is exact to the millisecond.
        closed: False when no result came after it before the monitor stopped.
    """

    start: float
    length_ms: float
    exact: bool
    closed: bool = True

    @property
    def end(self) -> float:
        """Epoch seconds of the first result after the gap (approximate unless ``exact``)."""
        return self.start + self.length_ms / 1000.0


def find_gaps(ticks: Sequence[MonitorSnapshot]) -> list[Gap]:
    """Reconstruct the output gaps from monitor lines (see the module docstring).

    Args:
        ticks: monitor lines in time order.

    Returns:
        Gaps in time order; tiny gaps between results inside a busy second are not listed.
    """
    gaps: list[Gap] = []
    prev_record = 0.0
    open_start: float | None = None
    open_ms = 0.0
    for tick in ticks:
        cur = tick.current_gap_ms
        record = tick.longest_gap_ms
        start = tick.t - cur / 1000.0 if cur > 0 else None
        continues = (
            open_start is not None
            and start is not None
            and abs(start - open_start) <= _SAME_START_S
        )
        if open_start is not None and not continues:
            # The open gap closed during this second.
            if record > prev_record + 0.5 and record >= open_ms:
                gaps.append(Gap(open_start, record, exact=True))
            else:
                gaps.append(Gap(open_start, open_ms, exact=False))
        elif open_start is None and record > prev_record + 0.5 and (cur <= 0 or record > cur):
            # A sub-second gap that set a record and closed within this second.
            gaps.append(Gap(tick.t - tick.interval_s, record, exact=True))
        if start is not None:
            if not continues:
                open_start = start
            open_ms = cur
        else:
            open_start = None
            open_ms = 0.0
        prev_record = max(prev_record, record)
    if open_start is not None:
        gaps.append(Gap(open_start, open_ms, exact=False, closed=False))
    return [g for g in gaps if g.length_ms > 0]


def longest_in(gaps: Sequence[Gap], start: float, end: float) -> tuple[float, bool] | None:
    """The longest time without a new result inside ``[start, end)`` (epoch seconds).

    Gaps are clipped to the range, so a gap that began before a phase counts in it only from
    the phase's start.

    Returns:
        ``(milliseconds, exact)``, or None when no gap overlaps the range.
    """
    best: tuple[float, bool] | None = None
    for g in gaps:
        lo, hi = max(g.start, start), min(g.end, end)
        if hi <= lo:
            continue
        clipped_end = hi < g.end
        ms = round((hi - lo) * 1000.0, 3)
        exact = g.exact or clipped_end
        if best is None or ms > best[0]:
            best = (ms, exact)
    return best


def overlapping(gaps: Sequence[Gap], start: float, end: float) -> Gap | None:
    """The longest gap (whole, not clipped) that overlaps ``[start, end]``."""
    inside = [g for g in gaps if g.start <= end and g.end >= start]
    if not inside:
        return None
    return max(inside, key=lambda g: g.length_ms)
