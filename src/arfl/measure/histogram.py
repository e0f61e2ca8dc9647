"""HdrHistogram helpers: one recorder per 1-second interval and the standard interval log.

Latencies are recorded in **microseconds** (1 us .. 1 h, 3 significant digits) and shown in
milliseconds. ``latency.hlog`` uses HdrHistogram's interval-log format (version 1.2, the one
``HistogramLogProcessor`` and ``hdrh.log.HistogramLogReader`` read)::

    #[Histogram log format version 1.2]
    #[StartTime: 1764106200.000 (seconds since epoch), 2026-11-25 21:30:00]
    #[BaseTime: 1764106200.000 (seconds since epoch)]
    "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
    0.000,1.000,12.000,HISTFAAAA...

Interval start times are relative to ``BaseTime``; ``Interval_Max`` is in milliseconds.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter

from arfl.errors import ReportError
from arfl.units import percentile_key

LOWEST_TRACKABLE_US = 1
HIGHEST_TRACKABLE_US = 3_600_000_000
"""One hour in microseconds: anything slower is clamped (and still counted)."""
SIGNIFICANT_DIGITS = 3
INTERVAL_S = 1.0
"""The length of the merger's latency intervals (``latency.hlog``) and monitor ticks."""
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
_US_PER_MS = 1000.0


def acyclic(histogram: Any) -> Any:
    """``histogram``, freed by its last reference going away: hdrh's histogram and its encoder
    refer to each other, so that each histogram (~190 KB) otherwise waits for a full garbage
    collection, which the merger does not run (``arfl.measure.merger.process.main``)."""
    histogram.encoder.histogram = weakref.proxy(histogram)
    return histogram


def new_histogram() -> Any:
    """An empty latency histogram (microseconds, 1 us .. 1 h, 3 significant digits)."""
    return acyclic(HdrHistogram(LOWEST_TRACKABLE_US, HIGHEST_TRACKABLE_US, SIGNIFICANT_DIGITS))


def record_ms(histogram: Any, latency_ms: float) -> None:
    """Record one latency given in milliseconds (clamped to the histogram's range).

    Negative latencies (clock skew between hosts, or a ``src_ts`` in the future) are recorded
    as the lowest value rather than dropped, so counts always match the records seen.
    """
    us = int(latency_ms * _US_PER_MS)
    if us < LOWEST_TRACKABLE_US:
        us = LOWEST_TRACKABLE_US
    elif us > HIGHEST_TRACKABLE_US:
        us = HIGHEST_TRACKABLE_US
    histogram.record_value(us)


def percentiles_ms(
    histogram: Any, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, float | None]:
    """Percentiles and max of a histogram in milliseconds.

    Args:
        histogram: an ``HdrHistogram`` holding microseconds.
        percentiles: which percentiles, e.g. ``(50, 99.9)``.

    Returns:
        ``{"p50": 1.234, "p99.9": 5.0, "max": 7.1, "count": n}`` with ``None`` values when the
        histogram is empty (``count`` is always a number). Keys: ``p`` + the percentile
        without a trailing ``.0``.
    """
    count = int(histogram.get_total_count())
    values = values_at_percentiles(histogram, percentiles) if count else {}
    out: dict[str, float | None] = {}
    for p in percentiles:
        out[percentile_key(p)] = round(values[p] / _US_PER_MS, 3) if count else None
    out["max"] = round(histogram.get_max_value() / _US_PER_MS, 3) if count else None
    out["count"] = float(count)
    return out


def values_at_percentiles(histogram: Any, percentiles: Sequence[float]) -> dict[float, int]:
    """Raw values (us) at several percentiles, from one pass over the counts.

    Gives exactly what ``histogram.get_value_at_percentile(p)`` gives, but hdrh's version
    walks the counts array in Python once per percentile (~10 ms each for a 1 us..1 h
    histogram): in the merger's loop that stalled the very records being measured.
    """
    n = min(int(histogram.counts_len), int(histogram.encoder.payload.counts_len))
    # numpy over hdrh's own counts array: a Python pass over its ~23,500 counts took 0.74 ms,
    # this whole lookup with numpy 0.20 ms; three times a second in the merger's loop
    # (docs/benchmarks.md, "The merger's own Python work, cut").
    cumulative = np.cumsum(np.ctypeslib.as_array(histogram.counts)[:n])
    out: dict[float, int] = {}
    for p in percentiles:
        target = histogram.get_target_count_at_percentile(p)
        index = int(np.searchsorted(cumulative, target, side="left"))
        if index >= n:
            out[p] = 0
            continue
        value = histogram.get_value_from_index(index)
        out[p] = int(
            histogram.get_highest_equivalent_value(value)
            if p
            else histogram.get_lowest_equivalent_value(value)
        )
    return out


class IntervalRecorder:
    """Records latencies into the current interval and a cumulative histogram.

    ``roll(now)`` closes the current interval (returning it with its start/end times) and
    starts the next one; the cumulative histogram keeps everything since the start.
    """

    def __init__(self, start_s: float) -> None:
        """Args:
        start_s: epoch seconds when the first interval starts.
        """
        self._interval = new_histogram()
        self.cumulative = new_histogram()
        self.interval_start_s = start_s

    @property
    def current(self) -> Any:
        """The open interval's histogram."""
        return self._interval

    def record_ms(self, latency_ms: float) -> None:
        """Record one latency (milliseconds) into the open interval."""
        record_ms(self._interval, latency_ms)

    def roll(self, end_s: float) -> IntervalHistogram:
        """Close the open interval at ``end_s`` and start a new one there.

        Returns:
            The closed interval (its histogram is no longer touched by the recorder).
        """
        closed = IntervalHistogram(self.interval_start_s, end_s, self._interval)
        self.cumulative.add(self._interval)
        self._interval = new_histogram()
        self.interval_start_s = end_s
        return closed


@dataclass(frozen=True)
class IntervalHistogram:
    """One interval of the latency log: ``[start_s, end_s)`` epoch seconds and its histogram."""

    start_s: float
    end_s: float
    histogram: Any

    @property
    def count(self) -> int:
        """How many latencies the interval holds."""
        return int(self.histogram.get_total_count())

    def percentiles_ms(
        self, percentiles: Sequence[float] = DEFAULT_PERCENTILES
    ) -> dict[str, float | None]:
        """See :func:`percentiles_ms`."""
        return percentiles_ms(self.histogram, percentiles)


class LatencyLogWriter:
    """Writes interval histograms to an HdrHistogram interval log, flushing each line."""

    def __init__(
        self, path: Path, start_s: float, comment: str | None = None, *, resume: bool = False
    ) -> None:
        """Open ``path`` (truncating it) and write the header.

        Args:
            path: the log file (``latency.hlog`` in a run directory).
            start_s: epoch seconds; interval timestamps are written relative to it.
            comment: an optional ``#`` comment line (e.g. what was measured).
            resume: append to an existing log instead, relative to its own base time (a
                restarted merger continues the one log); a torn last line is cut.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        base = _base_time_s(path) if resume else None
        if base is not None:
            self.base_s = base
            text = path.read_text(encoding="utf-8")
            if text and not text.endswith("\n"):
                path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
            self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._writer = HistogramLogWriter(self._file)
            return
        # Floor to a whole millisecond: the header is written with 3 decimals, and a header
        # rounded *up* past the first interval's start makes hdrh's reader skip that interval.
        start_s = math.floor(start_s * 1000) / 1000
        self.base_s = start_s
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._writer = HistogramLogWriter(self._file)
        if comment:
            self._writer.output_comment(comment)
        self._writer.output_log_format_version()
        # hdrh's output_start_time() is broken (calls datetime.iso_format); write it ourselves.
        stamp = datetime.fromtimestamp(start_s).isoformat(" ", timespec="seconds")
        self._file.write(f"#[StartTime: {start_s:.3f} (seconds since epoch), {stamp}]\n")
        self._writer.output_base_time(start_s * 1000.0)
        self._writer.output_legend()
        self._file.flush()

    def write(self, interval: IntervalHistogram) -> None:
        """Append one interval (also when empty: a gap in output is data too)."""
        self._writer.output_interval_histogram(
            interval.histogram,
            # hdrh treats 0 as "not given"; an interval starting exactly at the base time
            # would otherwise take the histogram's own (unset) timestamps.
            start_time_stamp_sec=max(interval.start_s - self.base_s, 1e-6),
            end_time_stamp_sec=max(interval.end_s - self.base_s, 2e-6),
            max_value_unit_ratio=_US_PER_MS,
        )
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> LatencyLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _base_time_s(path: Path) -> float | None:
    """The ``#[BaseTime: ...]`` of an existing log, in epoch seconds (None: no such log)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#[BaseTime:"):
                    return float(line.split(":", 1)[1].split()[0])
                if not line.startswith("#") and not line.startswith('"'):
                    return None
    except (OSError, ValueError, IndexError):
        return None
    return None


def iter_latency_log(path: Path) -> Iterator[IntervalHistogram]:
    """Read an interval log with hdrh's ``HistogramLogReader`` (:class:`LatencyLogTail`: a
    last line without its newline, torn by a kill, is left out).

    Yields:
        Intervals in file order with absolute epoch-second start/end times.

    Raises:
        ReportError: the file is missing or a line is not a valid interval.
    """
    if not path.exists():
        raise ReportError(f"latency log {path} not found; was the merger running for this run?")
    tail = LatencyLogTail(path)
    try:
        yield from tail.read()
    finally:
        tail.close()


class _WholeLines:
    """A log file for hdrh's reader that hands out whole lines only: a line still being
    written is left for a later read."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb")  # noqa: SIM115

    def readline(self) -> str:
        pos = self._file.tell()
        line = self._file.readline()
        if not line.endswith(b"\n"):
            self._file.seek(pos)
            return ""
        return line.decode("utf-8")

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()


class LatencyLogTail:
    """An interval log read as it grows: each :meth:`read` returns the intervals written, in
    whole lines, since the one before."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._reader: HistogramLogReader | None = None

    def read(self) -> list[IntervalHistogram]:
        """The new intervals (none while the file does not exist).

        Raises:
            ReportError: a line is not a valid interval.
        """
        if self._reader is None:
            if not self.path.exists():
                return []
            self._reader = HistogramLogReader(str(self.path), new_histogram())
            self._reader.input_file.close()
            self._reader.input_file = _WholeLines(self.path)
        out: list[IntervalHistogram] = []
        while True:
            try:
                hist = self._reader.get_next_interval_histogram()
            except (ValueError, TypeError) as e:
                raise ReportError(f"latency log {self.path}: unreadable interval line: {e}") from e
            if hist is None:
                return out
            acyclic(hist)
            out.append(
                IntervalHistogram(
                    hist.get_start_time_stamp() / 1000.0, hist.get_end_time_stamp() / 1000.0, hist
                )
            )

    @property
    def offset(self) -> int:
        """Bytes read so far, in whole lines: a log now shorter than this was rewritten."""
        if self._reader is None:
            return 0
        return int(self._reader.input_file.tell())

    def close(self) -> None:
        """Close the file."""
        if self._reader is not None:
            self._reader.close()


def read_latency_log(path: Path) -> list[IntervalHistogram]:
    """All intervals of an interval log (see :func:`iter_latency_log`)."""
    return list(iter_latency_log(path))


def merge(
    intervals: Sequence[IntervalHistogram], start_s: float = -math.inf, end_s: float = math.inf
) -> Any:
    """One histogram adding every interval that starts within ``[start_s, end_s)``.

    Used for per-phase percentiles (warm-up, before / during / after a fault).
    """
    total = new_histogram()
    for iv in intervals:
        if start_s <= iv.start_s < end_s:
            total.add(iv.histogram)
    return total


def encode(histogram: Any) -> str:
    """The compressed base64 form of a histogram (as in the log)."""
    return str(histogram.encode().decode("ascii"))


def decode(payload: str) -> Any:
    """Inverse of :func:`encode`."""
    return acyclic(HdrHistogram.decode(payload.encode("ascii")))
