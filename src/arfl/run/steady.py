"""Where a run's steady state starts: the warm-up, fixed (``workload.warmup``) or automatic.

A replica's first batch boundary after the input started is no steady-state event: the
query's first batch with data ends (a real-time replica's first long batch lasted 44 s against
31.5-33.6 s after it at a 30-s interval, docs/design.md §2.5), and before every replica has
passed one the replicas' boundaries are not yet staggered against each other's. So with
``workload.warmup`` unset the warm-up lasts until every replica has passed its first boundary
after the input started (the next batch has started: its stall is over), plus
:data:`AUTO_MARGIN_S`, and at least :data:`~arfl.configs.defaults.AUTO_WARMUP_FLOOR_S`; a
replica that passed none leaves half the input as warm-up. The report's phases and the
independent check's hop latencies both take it from :func:`resolve_warmup`.

A first boundary can shake the output for seconds after it (a replica's first batch with data
ends, on a host with no core to spare: 4 s of 1-s p99s at 200-355 ms against 13 ms after,
docs/benchmarks.md, "The automatic warm-up waits for the output to settle"), and a steady
phase that starts inside that is no bar: a later kill's real stall looked as good as it. So
the warm-up then goes on until the merged output settled, by MSER-5 (:func:`settled_at`), the
truncation rule of simulation output analysis: cut the leading 5-s batches that minimise the
remaining batch means' marginal standard error, at most :data:`SETTLE_MAX_BATCHES` of them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arfl.configs.defaults import AUTO_WARMUP_FLOOR_S
from arfl.run.progress import batch_ends, batch_timing

if TYPE_CHECKING:
    from arfl.configs.spec import Spec

AUTO_MARGIN_S = 1.0
"""After the last replica's first boundary, how long before the steady state starts (a new
batch's first records, and a boundary's progress line comes after it)."""


MSER_BATCH = 5
"""Seconds of 1-s p99s averaged into one batch mean (MSER-5)."""
SETTLE_MAX_BATCHES = 3
"""At most this many batches (15 s) are cut after the first boundaries: the output settled
within ~5 s of them here, and a run that drifts for longer keeps its steady phase."""
MSER_MIN_BATCHES = 4
"""Fewer batch means than this before the first fault: nothing to judge, nothing cut."""


def settled_at(output: Sequence[tuple[float, float | None]], start: float, end: float) -> float:
    """When the merged output settled after ``start``, by MSER-5 on its 1-s p99s in
    ``[start, end)``: the start of the first second after the batches cut (module docstring);
    ``start`` when none are, or with fewer than :data:`MSER_MIN_BATCHES` batches.

    Args:
        output: ``(end of a 1-s interval, its p99 ms)`` in time order (``monitor.jsonl``);
            seconds without results (p99 None) are left out.
        start, end: epoch seconds.
    """
    kept = [(t, p) for t, p in output if p is not None and start < t <= end]
    ys = [p for _, p in kept]
    n = len(ys) // MSER_BATCH
    if n < MSER_MIN_BATCHES:
        return start
    means = [statistics.fmean(ys[k * MSER_BATCH : (k + 1) * MSER_BATCH]) for k in range(n)]

    def mser(d: int) -> float:
        rest = means[d:]
        m = statistics.fmean(rest)
        return sum((x - m) ** 2 for x in rest) / len(rest) ** 2

    cut = min(range(min(SETTLE_MAX_BATCHES, n // 2) + 1), key=mser)
    # From the start of the first second kept (seconds without results count as time too).
    return start if cut == 0 else max(start, kept[cut * MSER_BATCH][0] - 1.0)


@dataclass(frozen=True)
class WarmUp:
    """The warm-up of one run.

    Attributes:
        seconds: from the input's start.
        auto: decided by the run (``workload.warmup`` unset), not written in the spec.
        why: in words, for the report.
    """

    seconds: float
    auto: bool
    why: str


def first_boundary_passed(lines: Iterable[Mapping[str, Any]], t0: float) -> float | None:
    """When a replica had passed its first batch boundary after ``t0`` (epoch s): the start of
    the batch after the first one that ended after ``t0`` (the boundary's stall is over), or
    that end when no later batch is known; None when no batch ended after ``t0``."""
    lines = list(lines)
    end = next((e for e in batch_ends(lines) if e > t0), None)
    if end is None:
        return None
    starts = sorted(t[0] for t in map(batch_timing, lines) if t is not None)
    return next((s for s in starts if s >= end - 0.001), end)


def resolve_warmup(
    spec: Spec,
    t0: float | None,
    progress: Mapping[int, Iterable[Mapping[str, Any]]],
    *,
    output: Sequence[tuple[float, float | None]] = (),
    until: float | None = None,
) -> WarmUp:
    """The run's warm-up (module docstring).

    Args:
        spec: the run's spec.
        t0: when the input started (epoch s), None if unknown.
        progress: replica index -> its progress lines.
        output: the merged output's 1-s p99s (:func:`settled_at`); empty: not looked at.
        until: the first fault's injection (epoch s): the output is looked at before it only.
    """
    wl = spec.workload
    if wl.warmup is not None:
        return WarmUp(wl.warmup, False, "workload.warmup")
    half = wl.duration / 2
    if t0 is None:
        return WarmUp(AUTO_WARMUP_FLOOR_S, True, "auto: the input's start is unknown, the floor")
    passed: list[float] = []
    for r in range(spec.replication.replicas):
        t = first_boundary_passed(progress.get(r, ()), t0)
        if t is None:
            return WarmUp(
                half, True, f"auto: replica {r} passed no batch boundary after the input started"
            )
        passed.append(t)
    seconds = max(passed) - t0 + AUTO_MARGIN_S
    end = t0 + half if until is None else min(until, t0 + half)
    settled = settled_at(output, t0 + seconds, end) - t0
    why = "auto: every replica past its first batch boundary"
    if settled > seconds:
        seconds = settled
        why += ", and the output settled after it (MSER-5)"
    if seconds > half:
        return WarmUp(
            half, True, "auto: half the input (the replicas' first batch boundaries came later)"
        )
    if seconds <= AUTO_WARMUP_FLOOR_S:
        return WarmUp(AUTO_WARMUP_FLOOR_S, True, "auto: the floor")
    return WarmUp(round(seconds, 1), True, why)


BOUNDARY_STALL_S = 2.0
"""A real-time boundary's stall, about (0.3-2.8 s measured, docs/design.md §2.5)."""


def _auto_guess_s(spec: Spec) -> float:
    """About how long an automatic warm-up of ``spec`` will be: on real-time mode the last
    replica's first boundary comes about one interval after the input starts (staggered
    replicas start their queries before the input does), plus its stall; micro-batches end
    within seconds, so the floor."""
    from arfl.configs.realtime import REALTIME, RTM_MIN_BATCH_S

    if spec.replication.trigger != REALTIME:
        return AUTO_WARMUP_FLOOR_S
    interval = spec.replication.trigger_interval or RTM_MIN_BATCH_S
    guess = interval + BOUNDARY_STALL_S + AUTO_MARGIN_S
    return min(max(guess, AUTO_WARMUP_FLOOR_S), spec.workload.duration / 2)


def expected_warmup_s(spec: Spec) -> float:
    """The warm-up as ``arfl validate`` expects it before the run: ``workload.warmup``, or
    about the automatic one (:func:`_auto_guess_s`)."""
    wl = spec.workload
    return wl.warmup if wl.warmup is not None else _auto_guess_s(spec)


def short_warmup(spec: Spec) -> str | None:
    """A written ``workload.warmup`` that ends before the replicas' first real-time batch
    boundaries will likely have passed (:func:`_auto_guess_s`): the steady state then holds
    those first boundaries, which stall longer than later ones, and every verdict's bar with
    them. None when it does not, or off real-time mode."""
    from arfl.configs.realtime import REALTIME

    wl = spec.workload
    if wl.warmup is None or spec.replication.trigger != REALTIME:
        return None
    auto = _auto_guess_s(spec)
    if wl.warmup >= auto:
        return None
    return (
        f"workload.warmup {wl.warmup:g}s ends before every replica has passed its first batch "
        f"boundary (about {auto:g} s here), which stalls longer than later ones: the steady "
        "state, every verdict's bar, would hold it; leave workload.warmup out (arfl then waits "
        f"for those boundaries) or set it to at least {auto:g}s"
    )
