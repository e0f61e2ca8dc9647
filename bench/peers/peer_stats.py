"""What the probe's samples say about one run: latency, output gaps, recovery, correctness.

Pure functions of the samples (one per record the probe consumed) and the run's timing, so that
every system is judged by the same arithmetic and a recorded run can be analysed again.

* Latency is arrival - ``ts`` (the event's intended send time): coordinated-omission safe, as
  arfl's merger measures it. The steady phase and the impact window select records by ``ts``
  (what was *sent* then), so input that is delayed past the window still counts against it.
* A gap is a stretch of wall-clock time with no arrival at all.
* Back to steady: the first input second at or after the fault from which ``hold`` seconds in a
  row each have output and a p99 within ``tolerance`` x the worst p99 of the steady phase's
  seconds: no worse than steady state itself was (a bar at the whole phase's p99 is one that
  many of its own seconds fail, which made a system that was never hurt look 14 s away).
* Correctness by ``seq``: every event the filter keeps must arrive (missing otherwise), once
  (duplicates otherwise), and no other (extra: the filter or the id went wrong).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from arfl.measure.histogram import new_histogram, percentiles_ms, record_ms
from arfl.workload.injector import event_count, event_fields

PERCENTILES = (50.0, 99.0, 99.9)


class Sample(NamedTuple):
    """One record at the probe.

    Attributes:
        arrival_ms: the probe's wall clock when it consumed the record (epoch ms).
        ts_ms: the event's intended send time (epoch ms).
        seq: the event's id.
        out_ms: the output record's Kafka timestamp (None: not recorded).
    """

    arrival_ms: float
    ts_ms: int
    seq: int
    out_ms: float | None = None


@dataclass(frozen=True)
class Timing:
    """When a run's phases lie (seconds after the input's first intended send time ``t0_ms``).

    Attributes:
        t0_ms: the input's first intended send time (epoch ms).
        duration_s: how long the input lasts.
        warmup_s: excluded from the steady phase.
        fault_s: when the fault was injected (None: no fault).
        window_s: the impact window's length after the fault.
        in_flight_s: how long before the fault the impact window starts: input sent then may
            still be in flight when it comes (a kill loses it; at-least-once replays back to
            the last commit), so it is the fault's, not the steady state's.
    """

    t0_ms: int
    duration_s: float
    warmup_s: float
    fault_s: float | None
    window_s: float
    in_flight_s: float = 5.0

    def at(self, s: float) -> float:
        """Epoch ms of ``s`` seconds into the input."""
        return self.t0_ms + 1000.0 * s

    @property
    def steady(self) -> tuple[float, float]:
        """The steady phase: from the warm-up's end to the impact window (or the input's end)."""
        end = self.duration_s if self.fault_s is None else self.fault_s - self.in_flight_s
        return self.at(self.warmup_s), self.at(max(self.warmup_s, end))

    @property
    def window(self) -> tuple[float, float] | None:
        """The impact window: from ``in_flight_s`` before the fault to ``window_s`` after it
        (None without one)."""
        if self.fault_s is None:
            return None
        return self.at(self.fault_s - self.in_flight_s), self.at(self.fault_s + self.window_s)


def expected_seqs(
    rate: int, duration_s: float, seed: int, keys: int, min_amount: float | None
) -> set[int]:
    """The ids a correct run delivers: every event of the workload whose amount passes
    ``amount > min_amount`` (None: every event, for a system that does not filter)."""
    total = event_count(rate, duration_s)
    if min_amount is None:
        return set(range(total))
    return {s for s in range(total) if event_fields(seed, s, keys)[1] > min_amount}


def latency(samples: Iterable[Sample], lo_ms: float, hi_ms: float) -> dict[str, float | None]:
    """Percentiles (ms) of the records whose ``ts`` lies in ``[lo_ms, hi_ms)``."""
    h = new_histogram()
    for s in samples:
        if lo_ms <= s.ts_ms < hi_ms:
            record_ms(h, s.arrival_ms - s.ts_ms)
    return percentiles_ms(h, PERCENTILES)


def longest_gap_ms(arrivals: Sequence[float], lo_ms: float, hi_ms: float) -> float | None:
    """The longest stretch without an arrival that overlaps ``[lo_ms, hi_ms]``.

    ``arrivals`` are sorted. A gap that starts before ``lo_ms`` (the output stopped just before
    the fault) or ends after ``hi_ms`` counts whole; output that never resumes counts up to
    ``hi_ms``. None when nothing arrived before ``hi_ms``: there is no output to have a gap.
    """
    i = bisect.bisect_left(arrivals, lo_ms)
    j = bisect.bisect_right(arrivals, hi_ms)
    if i == 0 and j == 0:
        return None
    prev = arrivals[i - 1] if i > 0 else arrivals[0]
    gap = 0.0
    for a in arrivals[i:j]:
        gap = max(gap, a - prev)
        prev = a
    after = arrivals[j] if j < len(arrivals) else hi_ms
    return max(gap, after - prev)


class Second(NamedTuple):
    """The records of one second of input (by ``ts``): second ``s`` covers ``[s, s + 1)``,
    ``n`` records, their p50, p99 and max latency (ms; None without records)."""

    s: int
    n: int
    p50: float | None
    p99: float | None
    max: float | None


def per_second(samples: Iterable[Sample], t0_ms: int, seconds: int) -> list[Second]:
    """One :class:`Second` for each of the input's ``seconds`` (records outside are left out)."""
    hists = [new_histogram() for _ in range(seconds)]
    for s in samples:
        k = math.floor((s.ts_ms - t0_ms) / 1000.0)
        if 0 <= k < seconds:
            record_ms(hists[k], s.arrival_ms - s.ts_ms)
    out = []
    for k, h in enumerate(hists):
        p = percentiles_ms(h, (50.0, 99.0))
        out.append(Second(k, int(p["count"] or 0), p["p50"], p["p99"], p["max"]))
    return out


def back_to_steady_s(
    seconds: Sequence[Second], fault_s: float, bar_ms: float, hold: int
) -> float | None:
    """Seconds from the fault to the start of the first input second (the fault's own one or a
    later one) that begins ``hold`` seconds in a row, each with output and a p99 within
    ``bar_ms``; 0 when the fault's own second does. None when no such run lies in the input."""
    first = max(0, math.floor(fault_s))
    ok = [s.n > 0 and s.p99 is not None and s.p99 <= bar_ms for s in seconds]
    for k in range(first, len(seconds) - hold + 1):
        if all(ok[k : k + hold]):
            return max(0.0, seconds[k].s - fault_s)
    return None


def correctness(seqs: Iterable[int], expected: set[int]) -> dict[str, int]:
    """Counts of results by id against ``expected``."""
    counts = Counter(seqs)
    return {
        "results": sum(counts.values()),
        "distinct": len(counts),
        "missing": len(expected - counts.keys()),
        "duplicates": sum(n - 1 for n in counts.values()),
        "extra": sum(1 for s in counts if s not in expected),
    }


def analyse(
    samples: Sequence[Sample],
    timing: Timing,
    expected: set[int],
    *,
    tolerance: float = 1.1,
    hold: int = 5,
) -> dict[str, Any]:
    """The figures of one run (module docstring), as one flat row for the JSON and the table."""
    arrivals = sorted(s.arrival_ms for s in samples)
    lo, hi = timing.steady
    steady = latency(samples, lo, hi)
    row: dict[str, Any] = {
        "steady_p50": steady["p50"],
        "steady_p99": steady["p99"],
        "steady_p99_9": steady["p99.9"],
        "steady_max": steady["max"],
        "steady_count": int(steady["count"] or 0),
        "steady_gap_ms": longest_gap_ms(arrivals, lo, hi),
        **correctness((s.seq for s in samples), expected),
    }
    row.update(hops(samples, lo, hi))
    seconds = per_second(samples, timing.t0_ms, math.ceil(timing.duration_s))
    row["seconds"] = [list(s) for s in seconds]
    window = timing.window
    if window is None or timing.fault_s is None:
        return row
    w = latency(samples, *window)
    row.update(
        window_p99=w["p99"],
        window_max=w["max"],
        window_count=int(w["count"] or 0),
        window_gap_ms=longest_gap_ms(arrivals, *window),
    )
    worst = steady_second_p99(seconds, timing)
    row["steady_second_p99_ms"] = worst
    row["back_to_steady_s"] = (
        None
        if worst is None
        else back_to_steady_s(seconds, timing.fault_s, tolerance * worst, hold)
    )
    return row


def steady_second_p99(seconds: Sequence[Second], timing: Timing) -> float | None:
    """The worst p99 of the steady phase's whole seconds (None: none has records)."""
    lo, hi = timing.steady
    first, last = math.ceil((lo - timing.t0_ms) / 1000), math.floor((hi - timing.t0_ms) / 1000)
    p99s = [s.p99 for s in seconds[first:last] if s.p99 is not None]
    return max(p99s) if p99s else None


def hops(samples: Iterable[Sample], lo_ms: float, hi_ms: float) -> dict[str, float | None]:
    """Medians over ``ts`` in ``[lo_ms, hi_ms)`` of where the time went: ``process_p50`` from
    the intended send to the output record's Kafka timestamp (input, system, its producer),
    ``deliver_p50`` from there to the probe (broker, commit, consumer)."""
    a, b = new_histogram(), new_histogram()
    for s in samples:
        if s.out_ms is not None and lo_ms <= s.ts_ms < hi_ms:
            record_ms(a, s.out_ms - s.ts_ms)
            record_ms(b, s.arrival_ms - s.out_ms)
    return {
        "process_p50": percentiles_ms(a, (50.0,))["p50"],
        "deliver_p50": percentiles_ms(b, (50.0,))["p50"],
    }


# --------------------------------------------------------------------------- the table

COLUMNS: tuple[tuple[str, str], ...] = (
    ("p50", "steady_p50"),
    ("p99", "steady_p99"),
    ("p99.9", "steady_p99_9"),
    ("window p99", "window_p99"),
    ("gap ms", "window_gap_ms"),
    ("back s", "back_to_steady_s"),
    ("missing", "missing"),
    ("dup", "duplicates"),
    ("CPU s", "cpu_s"),
    ("steady cores", "steady_cores"),
    ("RSS MiB", "rss_peak_mib"),
)
"""The table's figures after the system and fault columns: (title, row key)."""


def cell(v: Any) -> str:
    """A figure as the table shows it: ``-`` for none, integers whole, ms to 3 digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """One markdown line per run: the system, its fault, then :data:`COLUMNS`; a failed run
    says why instead of its figures."""
    head = ["system", "fault", *(title for title, _ in COLUMNS)]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---", "---"] + ["---:"] * len(COLUMNS)) + "|",
    ]
    for r in rows:
        first = [str(r.get("system", "?")), str(r.get("fault") or "none")]
        if "error" in r:
            rest = [f"failed: {str(r['error'])[:80]}"] + [""] * (len(COLUMNS) - 1)
        else:
            rest = [cell(r.get(key)) for _, key in COLUMNS]
        lines.append("| " + " | ".join(s.replace("|", "/") for s in first + rest) + " |")
    return "\n".join(lines)
