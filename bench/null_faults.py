"""How often does a fault that changed nothing get called "not masked"?

Reads fault-free stretches of recorded runs and places a *null fault* (nothing injected) at
every second T after the warm-up + ``--steady`` seconds: its steady phase is the ``--steady``
seconds before T, its impact window the ``--window`` seconds after T. A verdict that means what
it says calls such a window masked; every "not masked" here is a false alarm. Two readings of
the p99 part of the masked verdict (the gap and completeness parts are left out: a null fault
loses nothing):

* ``whole``: window p99 <= tolerance x the steady phase's p99;
* ``stretch``: window p99 <= tolerance x the highest p99 of the steady phase's stretches as
  long as the window, at least the whole phase's (``arfl.report.verdicts.stretch_p99``).

And the p99 part of the recovery time (the first T from the null fault on such that every
1-s interval of ``[T, T + settle)`` has p99 within tolerance; a null fault should need 0 s):
held to the whole steady phase's p99 (``whole``) or to its worst 1-s
interval's (``stretch``); ``window``: held to the worst 1-s interval's and good through the
impact window too, not only for ``settle`` (arfl's reading: an effect later than settle
after the injection is recovered from after it).

Independent of arfl's report code: the intervals come from ``latency.hlog`` through hdrh's own
``HistogramLogReader``, an interval belongs to a span when it starts in it, and the input
start is the injector's ``t0`` in ``injector.jsonl``. Only the run's output before its first
fault (``fault-injected`` in the journal) is used.

    .venv/bin/python bench/null_faults.py /tmp/s23/nofault/<run> [<run> ...] [--window 15]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

HIGHEST_US = 3_600_000_000


def _new() -> HdrHistogram:
    return HdrHistogram(1, HIGHEST_US, 3)


def intervals(hlog: Path) -> list[tuple[float, HdrHistogram]]:
    """``(start epoch s, histogram)`` of every non-empty interval of an HdrHistogram log."""
    reader = HistogramLogReader(str(hlog), _new())
    out: list[tuple[float, HdrHistogram]] = []
    while (h := reader.get_next_interval_histogram()) is not None:
        if h.get_total_count():
            start = h.get_start_time_stamp() / 1000.0  # epoch ms (the log's base added)
            copy = _new()
            copy.add(h)
            out.append((start, copy))
    reader.close()
    return out


def p99(ivs: list[tuple[float, HdrHistogram]], a: float, b: float) -> tuple[float | None, int]:
    """p99 (ms) and count of the intervals starting in ``[a, b)``."""
    h = _new()
    for start, iv in ivs:
        if a <= start < b:
            h.add(iv)
    n = int(h.get_total_count())
    return (h.get_value_at_percentile(99.0) / 1000.0 if n else None), n


def _seconds(a: float, b: float) -> list[float]:
    """Starts of the 1-s steps from ``a`` while a whole second fits before ``b``."""
    out = []
    while a + 1.0 <= b + 1e-6:
        out.append(a)
        a += 1.0
    return out


def recovery(
    per_iv: list[tuple[float, float]],
    t: float,
    end: float,
    settle_s: float,
    limit: float,
    through: float | None = None,
) -> float | None:
    """Seconds from ``t`` to the first T (``t``, or the end of a slow interval) from which every
    interval starting in ``[T, max(T + settle_s, through))`` has p99 <= ``limit``; None when
    none before ``end``. ``per_iv``: ``(start, p99 ms)`` of every interval; ``through``: the
    impact window's end (None: settle only)."""
    bad = [s for s, v in per_iv if t <= s < end and v > limit]
    for cand in [t] + [b + 1.0 for b in bad]:
        if cand + settle_s > end:
            return None
        stop = cand + settle_s if through is None else max(cand + settle_s, through)
        if not any(cand <= b < stop for b in bad):
            return round(cand - t, 1)
    return None


def _journal(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines() if line]


def null_faults(
    run: Path,
    steady_s: float,
    window_s: float,
    tolerance: float,
    warmup_s: float,
    settle_s: float = 5.0,
) -> list[dict[str, Any]]:
    """One row per null fault of ``run``: its time, p99s and both verdicts."""
    t0 = next(
        json.loads(line)["t0"]
        for line in (run / "injector.jsonl").read_text().splitlines()
        if '"t0"' in line
    )
    journal = _journal(run)
    faults = [e["started"] for e in journal if e["event"] == "fault-injected"]
    done = [e["t"] for e in journal if e["event"] in ("workload-finished", "run-finished")]
    end = min(faults) if faults else (min(done) if done else float("inf"))
    ivs = intervals(run / "latency.hlog")
    end = min(end, max(s for s, _ in ivs) + 1.0)
    per_iv = [(s, h.get_value_at_percentile(99.0) / 1000.0) for s, h in ivs]
    rows = []
    t = t0 + warmup_s + steady_s
    while t + window_s <= end:
        s_from = t - steady_s
        whole, n_steady = p99(ivs, s_from, t)
        win, _ = p99(ivs, t, t + window_s)
        if whole is None or win is None or n_steady < 100:
            t += 1.0
            continue
        worst = whole
        starts = _seconds(s_from, t - window_s + 1.0)
        if not starts or starts[-1] + window_s < t - 1e-6:
            starts.append(t - window_s)  # the last stretch ends where the steady phase does
        for a in starts:
            v, n = p99(ivs, a, a + window_s)
            if v is not None and n >= 100:
                worst = max(worst, v)
        seconds = [p99(ivs, a, a + 1.0) for a in _seconds(s_from, t)]
        worst_second = max((v for v, n in seconds if v is not None and n >= 100), default=0.0)
        rec_whole = recovery(per_iv, t, end, settle_s, tolerance * whole)
        rec_stretch = recovery(per_iv, t, end, settle_s, tolerance * max(whole, worst_second))
        rec_window = recovery(
            per_iv, t, end, settle_s, tolerance * max(whole, worst_second), t + window_s
        )
        rows.append(
            {
                "t_s": round(t - t0, 1),
                "recovery_whole_s": rec_whole,
                "recovery_stretch_s": rec_stretch,
                "recovery_window_s": rec_window,
                "steady_p99": round(whole, 1),
                "stretch_p99": round(worst, 1),
                "window_p99": round(win, 1),
                "whole_masked": win <= tolerance * whole,
                "stretch_masked": win <= tolerance * worst,
            }
        )
        t += 1.0
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--steady", type=float, default=40.0, help="steady phase, s (demo: 40)")
    ap.add_argument("--window", type=float, default=15.0, help="impact window, s (demo: 11-17)")
    ap.add_argument("--tolerance", type=float, default=1.10)
    ap.add_argument("--warmup", type=float, default=35.0)
    ap.add_argument("--settle", type=float, default=5.0, help="recovery's settle time, s")
    ap.add_argument("--rows", action="store_true", help="print every null fault")
    args = ap.parse_args(argv)
    total = {"n": 0, "whole": 0, "stretch": 0}
    for run in args.runs:
        rows = null_faults(run, args.steady, args.window, args.tolerance, args.warmup, args.settle)
        if args.rows:
            for r in rows:
                print(json.dumps(r))
        n = len(rows)
        fa_whole = sum(not r["whole_masked"] for r in rows)
        fa_stretch = sum(not r["stretch_masked"] for r in rows)
        for kind in ("whole", "stretch", "window"):
            rec = [r[f"recovery_{kind}_s"] for r in rows]
            done = sorted(x for x in rec if x is not None)
            print(
                f"{run.name}: recovery ({kind}): 0 s in {sum(x == 0 for x in done)} of {n}, "
                f"never {sum(x is None for x in rec)}, median "
                f"{done[len(done) // 2] if done else '-'} s, max {done[-1] if done else '-'} s"
            )
        total["n"] += n
        total["whole"] += fa_whole
        total["stretch"] += fa_stretch
        print(
            f"{run.name}: {n} null faults; called not masked: whole {fa_whole} "
            f"({100 * fa_whole / max(n, 1):.0f}%), stretch {fa_stretch} "
            f"({100 * fa_stretch / max(n, 1):.0f}%)"
        )
    n = max(total["n"], 1)
    print(
        f"all: {total['n']} null faults (steady {args.steady:g} s, window {args.window:g} s, "
        f"tolerance {args.tolerance:g}); false 'not masked': whole {total['whole']} "
        f"({100 * total['whole'] / n:.0f}%), stretch {total['stretch']} "
        f"({100 * total['stretch'] / n:.0f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
