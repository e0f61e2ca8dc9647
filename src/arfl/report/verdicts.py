"""The verdicts, defined once: steady reference, impact window, masked, recovered.

Every figure is measured on the **user-visible output** (the merger's first copies):

* **Steady reference** (:func:`reference`): the steady phase (end of warm-up to the first
  fault) gives the reference p99 and the reference longest gap. It must hold at least
  :data:`MIN_STEADY_RESULTS` results over at least :data:`MIN_STEADY_S` seconds; otherwise every
  verdict that compares with it is *unknown* (None), never "masked".
* **Healthy again** (:func:`healthy_at`): the faulted replica delivered a result derived from
  input sent *after the fault stopped acting on it* (its ``last_src_ts`` in the merger's monitor
  passed that moment, :func:`arfl.report.faults.lifted_at`: a killed replica's restart, a
  killed executor's replacement, a timed fault's revert) — a result of its own, not a new pid
  or executor id, and not one computed by a dying replica or in flight at the injection (at
  millisecond latency a killed driver's executors still deliver input sent after the kill).
  A killed replica that never came back is never healthy.
* **Caught up** (:func:`caught_up_at`): from the tick it was healthy on, and before the next
  fault, the first monitor tick at which the faulted replica's **trail**
  (``ReplicaSnapshot.behind_ms``: the age of the oldest result the output has that this
  replica has not delivered yet, and is not past) is within its **lag allowance**
  (:func:`lag_allowance`): the p90 of that replica's own trail over the steady phase, at
  least :data:`CAUGHT_UP_FLOOR_MS`. Healthy says it delivers again; caught up says it owes the
  output nothing older than it did before the fault, on every partition, so R is restored.
  Its newest result being fresh is not enough: a restarted real-time replica is current on
  one partition while it still replays another (a bench run: lag 7 ms while it still had an
  estimated ~2,000 results to replay). Runs without a trail (one replica, window results,
  recorded before the merger kept it) use the lag (tick time minus the newest ``src_ts`` it
  delivered) instead. Read from
  the output, not from the replica's commits: a real-time replica commits at its batch's
  end, often tens of seconds after its output caught up.
* **Impact window** (:func:`impact_window`): from the injection until the faulted replica has
  caught up plus ``report.settle``, capped by the next fault and by the end of the input: until
  then R is not restored, and what the survivors do alone (a batch boundary's stall) is the
  fault's impact. When caught up is unknown (no lag allowance, or no known target) the window
  ends at healthy again plus ``report.settle``; a replica that was healthy but did not catch up
  before the cap keeps the window open to the cap.
* **Effect** (:func:`replica_effect`, :func:`merger_effect`): masking is a claim about two
  things, that the faulted replica was hurt and the user's output was not. Hurt: what a kill
  aimed at died (the journal's ``replica-died``, a replaced executor), or, as the merger saw
  it, the faulted replica's ``behind_ms`` (trail, else lag) rose while input flowed to more
  than twice its steady p90 (at least :data:`CAUGHT_UP_FLOOR_MS`): a pause or partition stops
  its output, a slow or delayed replica falls behind; for a fault on the merger, a merger died
  or a standby took over. A closed window without harm whose fault had no visible effect is
  **no effect**, not masked; one whose effect cannot be seen (no target, no steady lag) is
  unknown.
* **Unjudged**: an impact window cut by the end of the input (``end of input``) runs on to the
  output's end (the results still in flight count) and can show harm ("not masked"), never
  its absence: a window without harm is *unjudged: the input ended first*, not masked.
* **Clock moves** (:func:`clock_moved_ms`): every latency is a difference of wall-clock
  readings while the injector keeps its schedule on the monotonic clock, so a wall clock
  adjusted during a run (NTP, the hypervisor: ~20 ms over 4 s on this kind of host) is an error
  in every latency across the adjustment. The injector records how far the wall clock moved
  against the monotonic one each second (``clock_ms``); a p99 that lies within the moves of the
  window and of the steady phase of its bar decides nothing: *unjudged: the wall clock moved*.
* **Masked** (:func:`masked`): over the whole impact window, p99 <= tolerance x the steady
  p99 **at the window's length** (:func:`stretch_p99`), longest gap <= tolerance x reference
  gap (floored at the gap resolution, 1 s), and no result missing from the run. Otherwise not
  masked, with the figure that failed; unknown when the reference or the completeness is
  unknown. The steady p99 at the window's length is the highest p99 of any stretch of the
  steady phase as long as the window (and never below the whole phase's): a p99 over 15 s of
  output scatters more than one over 40 s, and held to the longer phase's a fault that changed
  nothing was "not masked" about as often as not (measured in docs/benchmarks.md).
  Masked says the window was no worse than the steady state itself over as long a stretch.
* **Recovered** (:func:`recovery_at`): the first time T from the injection on such that over
  ``[T, max(T + settle, end of the impact window)]`` every 1-s interval with results has p99 <=
  tolerance x the steady p99 **at an interval's length** (:func:`stretch_p99` of 1 s: the steady
  phase's worst 1-s interval, never below the whole phase's p99) and no output gap is longer
  than tolerance x reference gap — empty seconds count only through the gaps, so a batch cadence
  that leaves empty seconds in the steady state itself does not fake or prevent a recovery.
  ``settle`` is at least twice the reference gap. Held to the whole phase's p99, one second's
  p99 is above it in many a fault-free second: a fault that changed nothing "recovered" after a
  median of 2.6 s, up to 39.6 s, or never (11 of 111 null faults; docs/benchmarks.md, "Verdicts
  held to the steady state at their own length"). The output must stay good through the impact
  window: an effect that shows later than ``settle`` after the injection (a survivor's batch
  boundary while the faulted replica is away) is recovered from after it, not at the injection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arfl.measure.check.hops import nearest_rank
from arfl.measure.histogram import INTERVAL_S
from arfl.report.gaps import Gap
from arfl.run.events import Event
from arfl.run.streams import MonitorSnapshot

MIN_STEADY_RESULTS = 100
"""Fewer results than this give no meaningful p99 (the 99th percentile of 100 is one result)."""
MIN_STEADY_S = 5.0
"""A shorter steady phase cannot show the pipeline's own gaps (batch cadence)."""
CAUGHT_UP_FLOOR_MS = 100.0
"""A lag allowance below this would hold a replica to the monitor's noise (a tick may fall
between two results), not to its backlog."""
CAUGHT_UP_QUANTILE = 0.9
"""The allowance is this quantile of the replica's steady lag: a rare boundary stall in the
steady phase does not widen it."""
MIN_LAG_SAMPLES = 5
"""Fewer steady ticks of a replica give no allowance (caught up unknown)."""
GAP_FLOOR_MS = 1000.0
"""Gaps shorter than this may go unseen (the monitor's tick), so verdicts tolerate them."""


@dataclass(frozen=True)
class Reference:
    """The steady state the verdicts compare with.

    Attributes:
        p99_ms: its p99 (None without results).
        gap_ms: its longest output gap, floored at :data:`GAP_FLOOR_MS`.
        results: results in it.
        seconds: its length.
        problem: why it cannot serve as a reference (None when it can).
    """

    p99_ms: float | None
    gap_ms: float
    results: int
    seconds: float
    problem: str | None

    @property
    def usable(self) -> bool:
        """True when verdicts may compare with it."""
        return self.problem is None and self.p99_ms is not None


def reference(
    p99_ms: float | None, gap_ms: float | None, results: int, seconds: float
) -> Reference:
    """The steady reference from the steady phase's figures."""
    problem = None
    if results < MIN_STEADY_RESULTS or seconds < MIN_STEADY_S:
        problem = (
            f"steady state too small ({results} results over {seconds:.1f} s; a verdict needs "
            f">= {MIN_STEADY_RESULTS} results over >= {MIN_STEADY_S:.0f} s)"
        )
    return Reference(
        p99_ms=p99_ms,
        gap_ms=max(gap_ms or 0.0, GAP_FLOOR_MS),
        results=results,
        seconds=seconds,
        problem=problem,
    )


def settle_seconds(configured_s: float, ref: Reference) -> float:
    """How long the output must stay good: the spec's ``report.settle``, at least two
    reference gaps (one good stretch between two batches proves nothing)."""
    return max(configured_s, 2.0 * ref.gap_ms / 1000.0)


def healthy_at(
    monitor: Sequence[MonitorSnapshot], replica: int | None, lifted: float | None
) -> float | None:
    """When the faulted replica first delivered a result from input sent after the fault
    stopped acting on it.

    Args:
        monitor: the merger's 1-s lines.
        replica: the faulted replica (None: any replica, i.e. the output as a whole).
        lifted: epoch seconds when the fault stopped acting (None: never, e.g. a killed
            replica that did not come back).

    Returns:
        Epoch seconds of the first monitor tick that shows it (the result arrived in the
        second before), or None if it never did.
    """
    if lifted is None:
        return None
    cut_ms = lifted * 1000.0
    for tick in monitor:
        if tick.t < lifted:
            continue
        if replica is None:
            seen = [r.last_src_ts for r in tick.replicas.values() if r.last_src_ts is not None]
            if seen and max(seen) >= cut_ms:
                return tick.t
            continue
        snap = tick.replicas.get(replica)
        if snap is not None and snap.last_src_ts is not None and snap.last_src_ts >= cut_ms:
            return tick.t
    return None


def lag_allowance(
    monitor: Sequence[MonitorSnapshot], replica: int, start: float, end: float
) -> float | None:
    """The lag (ms, ``ReplicaSnapshot.behind_ms``) within which ``replica`` counts as caught
    up.

    Args:
        monitor: the merger's 1-s lines.
        replica: the faulted replica.
        start, end: the steady phase (epoch seconds).

    Returns:
        The :data:`CAUGHT_UP_QUANTILE` (nearest rank) of its lag at the monitor ticks in
        ``[start, end)`` while input flowed, at least :data:`CAUGHT_UP_FLOOR_MS`; None with
        fewer than :data:`MIN_LAG_SAMPLES` such ticks.
    """
    lags = sorted(
        lag
        for tick in monitor
        if start <= tick.t < end and tick.input_flowing
        and (snap := tick.replicas.get(replica)) is not None
        and (lag := snap.behind_ms) is not None
    )  # fmt: skip
    if len(lags) < MIN_LAG_SAMPLES:
        return None
    return max(CAUGHT_UP_FLOOR_MS, nearest_rank(lags, CAUGHT_UP_QUANTILE))


def trail_kept(monitor: Sequence[MonitorSnapshot], replica: int, start: float, end: float) -> bool:
    """Whether the merger kept ``replica``'s trail over ``[start, end)`` (else caught up is
    judged on its lag: :attr:`arfl.run.streams.ReplicaSnapshot.behind_ms`)."""
    return any(
        start <= tick.t < end
        and (snap := tick.replicas.get(replica)) is not None
        and snap.trail_ms is not None
        for tick in monitor
    )


def caught_up_at(
    monitor: Sequence[MonitorSnapshot],
    replica: int | None,
    healthy: float | None,
    allowance_ms: float | None,
    until: float,
) -> float | None:
    """When the faulted replica had caught up: the first monitor tick from ``healthy`` on, and
    before ``until`` (the next fault, or the end of the output), at which its lag is within
    ``allowance_ms`` (:func:`lag_allowance`, on ``ReplicaSnapshot.behind_ms``).

    Returns:
        Epoch seconds of that tick; None when the replica is unknown, never healthy, has no
        allowance, or did not catch up before ``until``.
    """
    if replica is None or healthy is None or allowance_ms is None:
        return None
    for tick in monitor:
        snap = tick.replicas.get(replica)
        if (
            healthy <= tick.t < until
            and snap is not None
            and (lag := snap.behind_ms) is not None
            and lag <= allowance_ms
        ):
            return tick.t
    return None


@dataclass(frozen=True)
class ImpactWindow:
    """Where a fault's verdict is judged.

    Attributes:
        start: the injection (epoch seconds).
        end: caught up (or healthy, when caught up is unknown) + settle, capped.
        healthy: when the faulted replica was healthy again (None: not before the cap).
        ended_by: ``caught-up+settle``, ``healthy+settle``, ``next fault`` or ``end of input``.
    """

    start: float
    end: float
    healthy: float | None
    ended_by: str


def impact_window(
    injected: float,
    healthy: float | None,
    caught_up: float | None,
    caught_up_known: bool,
    settle_s: float,
    next_fault: float | None,
    input_end: float,
) -> ImpactWindow:
    """The impact window of a fault (see the module docstring).

    Args:
        injected: the injection (epoch seconds).
        healthy: :func:`healthy_at` (None: never).
        caught_up: :func:`caught_up_at` (None: not before the cap, or unknown).
        caught_up_known: whether caught up can be judged at all (a known target with a lag
            allowance); without it the window ends at ``healthy + settle_s``.
        settle_s: :func:`settle_seconds`.
        next_fault: the next fault's injection (None: none).
        input_end: the end of the input.
    """
    cap, capped_by = input_end, "end of input"
    if next_fault is not None and next_fault < cap:
        cap, capped_by = next_fault, "next fault"
    restored, label = (caught_up, "caught-up") if caught_up_known else (healthy, "healthy")
    if healthy is not None and restored is not None and restored + settle_s <= cap:
        return ImpactWindow(
            injected, max(injected, restored + settle_s), healthy, f"{label}+settle"
        )
    return ImpactWindow(injected, max(injected, cap), healthy, capped_by)


def stretch_p99(
    ref: Reference,
    window_s: float,
    steady: tuple[float, float],
    p99_over: Callable[[float, float], tuple[float | None, int]],
    step_s: float = INTERVAL_S,
) -> float | None:
    """The steady p99 a window of ``window_s`` seconds is held to: the highest p99 of the
    stretches ``[t, t + window_s)`` of the steady phase (``t`` from its start by ``step_s``,
    and the last one ending at its end; each holding at least :data:`MIN_STEADY_RESULTS`
    results), never below the whole phase's
    (``ref.p99_ms``). A window at least as long as the steady phase gets the whole phase's.

    Args:
        ref: the steady reference.
        window_s: the impact window's length.
        steady: the steady phase (epoch seconds).
        p99_over: p99 (ms) and result count of the output over ``[a, b)``.
        step_s: how far apart stretches start (the latency intervals' length).

    Returns:
        None when the reference is not usable.
    """
    if not ref.usable:
        return None
    assert ref.p99_ms is not None
    start, end = steady
    worst = ref.p99_ms
    if window_s <= 0 or window_s >= end - start:
        return worst
    starts = []
    t = start
    while t + window_s <= end + 1e-6:
        starts.append(t)
        t += step_s
    if not starts or starts[-1] + window_s < end - 1e-6:
        starts.append(end - window_s)  # the last stretch ends where the phase does
    for t in starts:
        p99, n = p99_over(t, t + window_s)
        if p99 is not None and n >= MIN_STEADY_RESULTS:
            worst = max(worst, p99)
    return worst


@dataclass(frozen=True)
class Effect:
    """What a fault did to what it hit (module docstring, "Effect").

    Attributes:
        seen: True when the effect showed, False when it did not, None when it cannot be seen.
        text: the evidence in words (the report's fault line and the verdict name it).
    """

    seen: bool | None
    text: str


def replica_effect(
    monitor: Sequence[MonitorSnapshot],
    replica: int | None,
    window: tuple[float, float],
    allowance_ms: float | None,
    killed: str | None = None,
) -> Effect:
    """Whether the fault hurt ``replica`` during ``window`` (module docstring, "Effect"): the
    journal saw what it killed die (``killed``), or it fell behind the output, while input
    flowed, to more than twice its lag allowance (:func:`lag_allowance`: its steady p90).

    Args:
        monitor: the merger's 1-s lines.
        replica: the faulted replica (None: unknown, so no effect can be seen).
        window: the impact window (epoch seconds).
        allowance_ms: :func:`lag_allowance` over the steady phase (None: too few samples).
        killed: what the journal saw die (``its driver``, ``an executor``), None: nothing.
    """
    died = None if killed is None else f"replica {replica}: {killed} died (journal)"
    # After the input's end every lag grows: only ticks while input flowed count.
    during = [
        lag
        for tick in monitor
        if window[0] <= tick.t <= window[1] and tick.input_flowing
        and replica is not None and (snap := tick.replicas.get(replica)) is not None
        and (lag := snap.behind_ms) is not None
    ]  # fmt: skip
    if replica is None or allowance_ms is None or not during:
        if died is not None:
            return Effect(True, died)
        return Effect(None, f"replica {replica}'s lag was not recorded (steady or in the window)")
    peak = max(during)
    fell = peak > 2.0 * allowance_ms
    how = "fell" if fell else "stayed within"
    text = f"{how} {_dur(peak)} behind (steady p90 {_dur(allowance_ms)})"
    return Effect(
        fell or died is not None, f"{died}; {text}" if died else f"replica {replica} {text}"
    )


def merger_effect(journal: Sequence[Mapping[str, Any]], window: tuple[float, float]) -> Effect:
    """Whether the serving merger died or a standby took over during ``window``."""
    for e in journal:
        if e.get("event") in (Event.MERGER_DIED, Event.MERGER_TOOK_OVER) and (
            window[0] - 0.5 <= float(e.get("t", 0.0)) <= window[1]
        ):
            what = "a standby took over" if e.get("event") == Event.MERGER_TOOK_OVER else "died"
            return Effect(True, f"the serving merger was replaced ({what})")
    return Effect(False, "the serving merger was neither replaced nor seen to die")


def _dur(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


@dataclass(frozen=True)
class Verdict:
    """A verdict with the figure that decided it."""

    value: bool | None
    reason: str


def clock_moved_ms(
    injector_seconds: Sequence[Mapping[str, Any]], start: float, end: float
) -> float | None:
    """How far the host's wall clock moved against its monotonic clock from ``start`` to
    ``end`` (epoch seconds), ms: the spread of the injector's ``clock_ms`` from its last line
    at or before ``start`` to its first at or after ``end`` (a line gives the move at its
    ``t``). None when the injector recorded none (a run recorded before it did)."""
    lines = [
        (float(d["t"]), float(d["clock_ms"]))
        for d in injector_seconds
        if d.get("clock_ms") is not None and d.get("t") is not None
    ]
    if not lines:
        return None
    lines.sort()
    first = max((i for i, (t, _) in enumerate(lines) if t <= start), default=0)
    last = min((i for i, (t, _) in enumerate(lines) if t >= end), default=len(lines) - 1)
    moves = [c for _, c in lines[first : last + 1]]
    return max(moves) - min(moves) if moves else None


def masked(
    p99_ms: float | None,
    gap_ms: float | None,
    ref: Reference,
    tolerance: float,
    missing: int | None,
    held_to_ms: float | None,
    window_s: float,
    closed: bool,
    effect: Effect,
    clock_moved: tuple[float | None, float | None] = (None, None),
) -> Verdict:
    """Masked over an impact window (see the module docstring).

    Args:
        p99_ms: the window's p99 (None: no result in it).
        gap_ms: the longest output gap overlapping the window (None: none).
        ref: the steady reference.
        tolerance: ``report.tolerance``.
        missing: results missing from the run (None: unknown).
        held_to_ms: the steady p99 at the window's length (:func:`stretch_p99`; None only
            when the reference is unusable).
        window_s: the window's length (named in the verdict).
        closed: False when the input ended before the window did (:func:`impact_window`
            ``end of input``): a window that shows harm is still "not masked", one that does
            not is **unjudged** (None): the replica was not restored while input still came.
        effect: what the fault did (:func:`replica_effect`, :func:`merger_effect`); a window
            without harm is masked only when the effect showed.
        clock_moved: how far the wall clock moved (:func:`clock_moved_ms`) in the window and
            in the steady phase its bar comes from (None: not recorded). A p99 closer to its
            bar than the window's move plus ``tolerance`` x the steady phase's is unjudged.
    """

    def judged() -> Verdict:
        """p99, gap and completeness (the module docstring's three conditions)."""
        if not ref.usable:
            return Verdict(None, f"unknown: {ref.problem or 'no steady p99'}")
        assert ref.p99_ms is not None and held_to_ms is not None
        p99_limit, gap_limit = tolerance * held_to_ms, tolerance * ref.gap_ms
        stretch = held_to_ms > ref.p99_ms
        steady = f"steady {held_to_ms:.1f} ms"
        if stretch:
            steady += f" (its worst {window_s:.0f}-s stretch; whole steady {ref.p99_ms:.1f} ms)"
        if p99_ms is None:
            return Verdict(False, "not masked: no result in the impact window")
        moved_win, moved_steady = (m or 0.0 for m in clock_moved)
        clock_err = moved_win + tolerance * moved_steady
        undecided = abs(p99_ms - p99_limit) < clock_err
        if p99_ms > p99_limit and not undecided:
            return Verdict(False, f"not masked: p99 {p99_ms:.1f} ms > {tolerance:g} x {steady}")
        if gap_ms is not None and gap_ms > gap_limit:
            return Verdict(
                False,
                f"not masked: output gap {gap_ms / 1000:.2f} s > {tolerance:g} x steady "
                f"{ref.gap_ms / 1000:.2f} s",
            )
        if missing is None:
            return Verdict(None, "unknown: latency and gaps within tolerance, completeness unknown")
        if missing > 0:
            return Verdict(False, f"not masked: {missing} result(s) missing from the run")
        if undecided:
            return Verdict(
                None,
                f"unjudged: the wall clock moved: p99 {p99_ms:.1f} ms against {p99_limit:.1f} "
                f"ms = {tolerance:g} x {steady}, but the host's wall clock moved "
                f"{moved_win:.1f} ms against its monotonic clock in the window and "
                f"{moved_steady:.1f} ms in the steady phase (NTP or the hypervisor), an error "
                "in every latency across it",
            )
        return Verdict(
            True,
            f"masked: p99 {p99_ms:.1f} ms <= {p99_limit:.1f} ms"
            + (f" = {tolerance:g} x {steady}" if stretch else "")
            + ", longest gap "
            f"{(gap_ms or 0) / 1000:.2f} s <= {gap_limit / 1000:.2f} s, nothing missing",
        )

    verdict = judged()
    if verdict.value is not True:
        return verdict
    if not closed:
        return Verdict(
            None,
            "unjudged: the input ended first (the faulted replica was not back before it; "
            f"{verdict.reason.removeprefix('masked: ')} over the {window_s:.0f} s to the "
            "output's end)",
        )
    if effect.seen is not True:
        if effect.seen is False:
            return Verdict(None, f"no effect: {effect.text}; the output was as good as steady")
        return Verdict(None, f"unknown: the fault's effect cannot be seen ({effect.text})")
    return verdict


@dataclass(frozen=True)
class Interval:
    """One 1-s latency interval: its bounds (epoch seconds), result count and p99 (ms)."""

    start: float
    end: float
    count: int
    p99_ms: float | None


def recovery_at(
    intervals: Sequence[Interval],
    gaps: Sequence[Gap],
    injected: float,
    limit: float,
    ref: Reference,
    tolerance: float,
    settle_s: float,
    interval_ref_ms: float | None,
    through: float,
) -> float | None:
    """When the output was back within tolerance and stayed there for ``settle_s``.

    Args:
        intervals: the latency intervals, in time order.
        gaps: the output gaps.
        injected: the injection (epoch seconds).
        limit: the next fault or the end of the output: recovery must show before it.
        ref: the steady reference (unusable: None).
        tolerance: ``report.tolerance``.
        settle_s: how long the output must stay good.
        interval_ref_ms: the steady p99 at an interval's length (:func:`stretch_p99`; None
            only when the reference is unusable).
        through: the impact window's end: the output must stay good until then too.

    Returns:
        Epoch seconds, ``injected`` when the output never left tolerance, or None when it did
        not recover (observably) before ``limit``.
    """
    if not ref.usable:
        return None
    assert interval_ref_ms is not None
    p99_limit, gap_limit = tolerance * interval_ref_ms, tolerance * ref.gap_ms / 1000.0

    def bad_iv(iv: Interval) -> bool:
        return iv.count > 0 and iv.p99_ms is not None and iv.p99_ms > p99_limit

    # Candidate starts: the injection, and the end of every bad interval or long gap after it.
    candidates = [injected]
    candidates += [iv.end for iv in intervals if iv.end > injected and bad_iv(iv)]
    candidates += [g.end for g in gaps if g.end > injected and g.length_ms / 1000 > gap_limit]
    for t in sorted(set(candidates)):
        if t + settle_s > limit:
            return None
        stop = max(t + settle_s, through)
        if any(bad_iv(iv) for iv in intervals if iv.end > t and iv.start < stop):
            continue
        if any(_gap_in(g, t, stop) > gap_limit for g in gaps):
            continue
        return t
    return None


def _gap_in(g: Gap, start: float, end: float) -> float:
    """Seconds of a gap (whole, as the output saw it) if it overlaps ``[start, end]``."""
    if g.start < end and g.end > start:
        return g.length_ms / 1000.0
    return 0.0
