"""``build_report(run_dir)``: phases, faults, correctness and SLOs of one run.

Phases (times relative to the input start ``T0``, the injector's event-0 intended send time):

* ``warmup``: ``[T0, T0 + warm-up)``, excluded from every verdict (``workload.warmup``, or
  automatic: :func:`arfl.run.steady.resolve_warmup`);
* ``steady``: from the end of the warm-up to the first fault;
* ``fault-N``: the fault's **impact window** (injection until the faulted replica has caught
  up plus ``report.settle``, capped by the next fault and the end of the input; see
  :mod:`arfl.report.verdicts`, where every verdict is defined);
* ``recovery-N``: from the end of the impact window until the output recovered, or until the
  next fault / the last result when it never recovered;
* ``steady-N``: between a recovery and the next fault, when there is time left;
* ``tail``: after the last recovery until the last result arrived (results of events sent
  before the input ended still arrive after it: the last batches, closing windows, a replay).

``overall`` is everything after the warm-up. Latency numbers come from the 1-s intervals of
``latency.hlog`` whose midpoint lies in the phase (a phase shorter than that gets the intervals
it overlaps), so phase edges are exact to the second.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arfl.coerce import opt_float
from arfl.configs.slo import slo_percentiles
from arfl.errors import ReportError
from arfl.measure.check.hops import HopLatency
from arfl.measure.histogram import (
    INTERVAL_S,
    IntervalHistogram,
    new_histogram,
    values_at_percentiles,
)
from arfl.registry import FAULTS
from arfl.report import correctness as corr
from arfl.report import verdicts
from arfl.report.faults import JournaledFault, journaled_faults
from arfl.report.gaps import RESOLUTION, Gap, find_gaps, longest_in, overlapping
from arfl.report.model import (
    Correctness,
    FaultStats,
    PhaseStats,
    Report,
)
from arfl.report.rundata import Batch, RunData, load_run
from arfl.report.sections import LateDrops, ReplicaLateDrops, Resources, Series, WorkloadSkew
from arfl.report.slo import check_slos
from arfl.run.events import Event
from arfl.run.progress import (
    AGREED_WATERMARK,
    NOT_CATCHING_UP,
    batch_ends,
    peer_batches,
    unreported_batches,
)
from arfl.run.steady import resolve_warmup
from arfl.units import percentile_key

CONTRACT_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
"""Always computed: the ``--json`` contract has a field for each."""


@dataclass(frozen=True)
class _Iv:
    """One latency interval with its numbers (ms)."""

    start: float
    end: float
    hist: Any
    count: int
    p50: float | None
    p99: float | None
    max: float | None

    @property
    def mid(self) -> float:
        return (self.start + self.end) / 2


def _interval_stats(intervals: Sequence[IntervalHistogram]) -> list[_Iv]:
    out: list[_Iv] = []
    for iv in sorted(intervals, key=lambda i: i.start_s):
        n = iv.count
        if n:
            v = values_at_percentiles(iv.histogram, (50.0, 99.0))
            p50: float | None = v[50.0] / 1000.0
            p99: float | None = v[99.0] / 1000.0
            mx: float | None = iv.histogram.get_max_value() / 1000.0
        else:
            p50 = p99 = mx = None
        out.append(_Iv(iv.start_s, iv.end_s, iv.histogram, n, p50, p99, mx))
    return out


def _select(ivs: Sequence[_Iv], mids: Sequence[float], start: float, end: float) -> list[_Iv]:
    """Intervals whose midpoint is in ``[start, end)``; else those overlapping it. ``mids``:
    the intervals' midpoints, in order (``ivs`` sorted by time), found by bisection."""
    chosen = list(ivs[bisect.bisect_left(mids, start) : bisect.bisect_left(mids, end)])
    if chosen or end <= start:
        return chosen
    return [iv for iv in ivs if iv.start < end and iv.end > start]


def _merged(chosen: Sequence[_Iv]) -> Any:
    """One histogram of some intervals."""
    hist = new_histogram()
    for iv in chosen:
        hist.add(iv.hist)
    return hist


class _Builder:
    def __init__(self, data: RunData, t0: float, t_end: float) -> None:
        self.data = data
        self.t0 = t0
        self.t_end = t_end
        self.ivs = _interval_stats(data.intervals)
        self.mids = [iv.mid for iv in self.ivs]
        self.sent_ivs = _interval_stats(data.sent_intervals)
        self._sent_mids = [iv.mid for iv in self.sent_ivs]
        # Results of events sent before the input ended still arrive afterwards (the last
        # batches, windows closing, a replay): the measurement runs until the last of them.
        last = max((iv.end for iv in self.ivs if iv.count), default=t_end)
        self.out_end = max(t_end, last)
        self.gaps: list[Gap] = find_gaps(data.monitor)
        first = data.merger.get("first_output_t")
        if first is None and data.monitor and data.monitor[-1].results:
            first = next(m.t for m in data.monitor if m.results)  # 1-s resolution
        # Waiting for the first result is not a gap to the merger (it reports it as
        # first_output_delay_ms), but in a phase it is time without results all the same.
        wait_end = min(float(first), t_end) if first is not None else t_end
        if wait_end > t0 and (data.monitor or data.merger):
            self.gaps.insert(
                0,
                Gap(
                    t0, (wait_end - t0) * 1000.0, exact=first is not None, closed=first is not None
                ),
            )
        # The spec's, those of the JSON contract (p50_ms ... p999_ms) and any an SLO names.
        self.percentiles = sorted(
            {*data.spec.report.percentiles, *CONTRACT_PERCENTILES,
             *slo_percentiles(data.spec.report.slo)}
        )  # fmt: skip
        self.tolerance = data.spec.report.tolerance

    def stats(
        self, name: str, kind: str, start: float, end: float, fault: int | None = None
    ) -> PhaseStats:
        chosen = _select(self.ivs, self.mids, start, end)
        hist = _merged(chosen)
        count = int(hist.get_total_count())
        covered = sum(iv.end - iv.start for iv in chosen)
        pct = self._percentiles(hist)
        max_ms = round(hist.get_max_value() / 1000.0, 3) if count else None
        sent = (
            self._percentiles(_merged(_select(self.sent_ivs, self._sent_mids, start, end)))
            if self.sent_ivs
            else {}
        )
        gap = longest_in(self.gaps, start, end)
        gap_ms, gap_exact = gap if gap is not None else ((0.0 if chosen else None), True)
        return PhaseStats(
            name=name,
            kind=kind,
            start_s=start - self.t0,
            end_s=end - self.t0,
            percentiles_ms=pct,
            max_ms=max_ms,
            count=count,
            covered_s=covered,
            results_per_s=(count / covered) if covered > 0 else None,
            max_gap_ms=gap_ms,
            max_gap_exact=gap_exact,
            fault=fault,
            sent_percentiles_ms=sent,
        )

    def _percentiles(self, hist: Any) -> dict[str, float | None]:
        """The report's percentiles of a histogram, in ms (None each without a result)."""
        count = int(hist.get_total_count())
        values = values_at_percentiles(hist, self.percentiles) if count else {}
        return {
            percentile_key(p): round(values[p] / 1000.0, 3) if count else None
            for p in self.percentiles
        }

    def p99_over(self, start: float, end: float) -> tuple[float | None, int]:
        """The output's p99 (ms) and result count over ``[start, end)`` (its intervals as a
        phase takes them: :func:`_select`; one interval's p99 as computed once)."""
        chosen = _select(self.ivs, self.mids, start, end)
        if len(chosen) == 1:
            return chosen[0].p99, chosen[0].count
        hist = _merged(chosen)
        count = int(hist.get_total_count())
        if not count:
            return None, 0
        return values_at_percentiles(hist, (99.0,))[99.0] / 1000.0, count

    def intervals(self) -> list[verdicts.Interval]:
        """The latency intervals as the verdicts read them."""
        return [verdicts.Interval(iv.start, iv.end, iv.count, iv.p99) for iv in self.ivs]


def _spec_slo(data: RunData) -> dict[str, object]:
    return dict(data.spec.report.slo)


def build_report(run_dir: Path, *, recompute: bool = False, check: bool = False) -> Report:
    """Analyse one run directory.

    Args:
        run_dir: a directory written by ``arfl deploy``.
        check: run the independent check (no Spark) against the run's Kafka now, instead of
            reading ``check.json``.
        recompute: check correctness by recomputing the expected results from the input topic
            (needs the run's Kafka; starts a Spark batch job) instead of the merger's counts.

    Raises:
        ReportError: not a run directory, the input never started, a file is broken, or an
            SLO names an unknown metric.
    """
    data = load_run(Path(run_dir))
    if recompute:
        return analyse(data, correctness=corr.recomputed(data))
    if check:
        from arfl.measure.check import check_run

        doc = check_run(data.root).to_dict()
        checked = corr.from_check(doc, corr.from_merger(data))
        return analyse(dataclasses.replace(data, check=doc), correctness=checked)
    return analyse(data)


def analyse(data: RunData, correctness: Correctness | None = None) -> Report:
    """:func:`build_report` on already loaded run data (and optionally known correctness)."""
    warnings: list[str] = []
    t0 = data.input_start
    if t0 is None:
        raise ReportError(
            f"run {data.name} never started its input (no injector_started or "
            f"workload-started in {data.root / 'journal.jsonl'}); nothing to report"
        )
    t_end = data.input_end
    if t_end is None or t_end <= t0:
        t_end = t0 + data.spec.workload.duration
    if not data.events(Event.RUN_FINISHED):
        failed = data.first_event(Event.RUN_FAILED)
        if failed is not None:
            warnings.append(f"the run failed: {failed.get('error')}")
        else:
            warnings.append("the run has not finished (no run-finished event): numbers are partial")
    if not data.intervals:
        warnings.append("no latency.hlog: no latency numbers")
    if data.monitor == []:
        warnings.append("no monitor.jsonl: no output gaps or rates")
    b = _Builder(data, t0, t_end)
    replica_batches = data.replica_batches()
    all_faults = journaled_faults(data.journal, replica_batches)
    injected = [f.started for f in all_faults if f.started is not None]
    warm = resolve_warmup(
        data.spec, t0, data.progress,
        output=[(m.t, m.interval.get("p99")) for m in data.monitor or ()],
        until=min(injected, default=None),
    )  # fmt: skip
    warm_end = min(t0 + warm.seconds, t_end)
    jfaults = [f for f in all_faults if f.started is not None and f.started < t_end]
    failed_faults = [f for f in all_faults if f.started is None]
    late = [f for f in all_faults if f.started is not None and f.started >= t_end]
    if late:
        warnings.append(
            f"{len(late)} fault(s) injected after the input ended are not analysed: "
            + ", ".join(f.description for f in late)
        )
    phases: list[PhaseStats] = []
    first_fault = jfaults[0].started if jfaults else None
    warm_stop = warm_end if first_fault is None else min(warm_end, max(first_fault, t0))
    phases.append(b.stats("warmup", "warmup", t0, warm_stop))
    if first_fault is not None and first_fault < warm_end:
        warnings.append("the first fault came before the end of the warm-up: no steady state")
    steady_end = b.out_end if first_fault is None else max(first_fault, warm_stop)
    steady = b.stats("steady", "steady", warm_stop, steady_end)
    phases.append(steady)
    ref_p99 = steady.percentiles_ms.get("p99") if steady.count else None
    if ref_p99 is None and steady.count:
        ref_p99 = steady.max_ms
    ref = verdicts.reference(
        ref_p99, steady.max_gap_ms, steady.count, steady.end_s - steady.start_s
    )
    tol = data.spec.report.tolerance
    correct = correctness if correctness is not None else corr.default(data)
    fault_phases, fstats = _fault_phases(b, data, jfaults, warm_stop, ref, correct.missing)
    phases.extend(fault_phases)
    for jf in failed_faults:
        fstats.append(_failed(len(fstats) + 1, jf, jf.error or "failed"))
    for jf in late:
        fstats.append(_failed(len(fstats) + 1, jf, "injected after the input ended", t0))
    if jfaults and not ref.usable:
        warnings.append(
            f"no usable steady state ({ref.problem or 'no p99'}): no recovery times, "
            "masking verdicts unknown"
        )
    overall = b.stats("overall", "overall", warm_stop, b.out_end)
    drops = late_drops(data)
    if drops.rows and drops.agreed:
        warnings.append(
            f"{drops.rows:,} row(s) in {drops.batches} batch(es) dropped behind the agreed "
            "watermark (late drops, the same rows in every replica): raise the window's "
            "watermark to keep rows that late"
        )
    elif drops.rows and data.spec.replication.replicas > 1:
        warnings.append(
            f"{drops.rows:,} row(s) in {drops.batches} batch(es) dropped behind the watermark "
            "(late drops): a replica whose batches end elsewhere may have kept them, so the "
            "replicas' results may differ"
        )
    for r, d in sorted(drops.replicas.items()):
        if d is not None and d.unreported_batches:
            ids = ", ".join(str(b) for b in d.unreported_batches)
            warnings.append(
                f"replica {r}: batch{'es' if len(d.unreported_batches) > 1 else ''} {ids} "
                "committed without a progress line (its driver died between the commit and "
                "Spark's progress report): rows dropped behind the watermark there are unknown, "
                f"its late-drop count ({d.rows:,}) is a lower bound"
            )
    warnings += journal_warnings(data)
    slo = check_slos(_spec_slo(data), phases, overall, fstats, correct)
    longest = data.merger.get("longest_gap_ms")
    return Report(
        run=data.name,
        run_dir=str(data.root),
        mode=data.spec.replication.mode,
        replicas=data.spec.replication.replicas,
        input_start=t0,
        input_end_s=t_end - t0,
        warmup_s=warm.seconds,
        warmup_rule=warm.why,
        tolerance=tol,
        percentiles=b.percentiles,
        phases=phases,
        overall=overall,
        faults=fstats,
        correctness=correct,
        slo=slo,
        longest_gap_ms=opt_float(longest),
        gap_resolution=RESOLUTION,
        series=_series(b, data, phases, overall, replica_batches),
        warnings=warnings,
        resources=Resources.from_summary(data.summary),
        late_drops=drops,
        workload=WorkloadSkew.from_check(data.check),
        hops=HopLatency.from_dict(data.check.get("hops")),
    )


def journal_warnings(data: RunData) -> list[str]:
    """Every warning the run journaled (the lag watch's, the merger's, deploy's: once each, with
    how often it came), and a replica still behind the input when the run stopped."""
    counts: dict[str, int] = {}
    for ev in data.events(Event.WARNING):
        text = str(ev.get("message") or ev.get("kind") or "warning")
        if ev.get("component") and ev.get("kind") != NOT_CATCHING_UP:
            text = f"{ev['component']}: {text}"
        counts[text] = counts.get(text, 0) + 1
    out = [t if n == 1 else f"{t} ({n} times)" for t, n in counts.items()]
    out += data.notes
    for ev in data.events(Event.REPLICA_BEHIND_AT_END):
        out.append(
            f"replica {ev.get('replica')} was still {float(ev.get('lag_s', 0)):.0f} s behind the "
            f"input when the run stopped (behind for {float(ev.get('behind_s', 0)):.0f} s): "
            "what it had not processed is missing from its output"
        )
    return out


def late_drops(data: RunData) -> LateDrops:
    """Rows each replica of the spec dropped behind the watermark (progress files and journal;
    :meth:`RunData.late_drops`); ``agreed`` when every drop was the agreed watermark's. For a
    pipeline with a window, the batches a replica ran without a progress line are named (their
    drops are unknown); without one nothing can drop."""
    found = data.late_drops()
    per: dict[int, ReplicaLateDrops | None] = {}
    for r in sorted({*range(data.spec.replication.replicas), *found}):
        ds = found.get(r)
        if ds is None:
            per[r] = None
            continue
        per[r] = ReplicaLateDrops(
            rows=sum(d.rows for d in ds),
            batches=len(ds),
            first_batch=ds[0].batch if ds else None,
            last_batch=ds[-1].batch if ds else None,
            unreported_batches=tuple(
                unreported_batches(
                    data.progress.get(r, ()),
                    peer_batches(
                        e for e in data.events(Event.REPLICA_RESTARTED) if e.get("replica") == r
                    ),
                )
                if data.spec.has_window
                else ()
            ),
        )
    drops = [d for ds in found.values() for d in ds]
    agreed = bool(drops) and all(set(d.operators) == {AGREED_WATERMARK} for d in drops)
    return LateDrops(per, agreed)


def _fault_phases(
    b: _Builder,
    data: RunData,
    jfaults: Sequence[JournaledFault],
    warm_stop: float,
    ref: verdicts.Reference,
    missing: int | None,
) -> tuple[list[PhaseStats], list[FaultStats]]:
    """The phases from the first fault on (``fault-N``, ``recovery-N``, ``steady-N``, ``tail``)
    and each fault's numbers, by the definitions of :mod:`arfl.report.verdicts`."""
    t0, t_end, tol = b.t0, b.out_end, b.tolerance
    settle = verdicts.settle_seconds(data.spec.report.settle, ref)
    ivs = b.intervals()
    phases: list[PhaseStats] = []
    fstats: list[FaultStats] = []
    # The steady phase the lag allowances come from: the warm-up's end to the first fault.
    steady_end = jfaults[0].started if jfaults and jfaults[0].started is not None else t_end
    span = (warm_stop, steady_end)
    # What one latency interval's p99 is held to (recovery), from the same steady phase.
    per_iv = verdicts.stretch_p99(ref, INTERVAL_S, span, b.p99_over) if jfaults else None
    for i, jf in enumerate(jfaults, start=1):
        assert jf.started is not None
        win_start = max(jf.started, warm_stop)
        nxt = jfaults[i].started if i < len(jfaults) else None
        limit = t_end if nxt is None else min(nxt, t_end)
        healthy = verdicts.healthy_at(data.monitor, jf.replica, jf.lifted)
        allowance = (
            None
            if jf.replica is None
            else verdicts.lag_allowance(data.monitor, jf.replica, warm_stop, steady_end)
        )
        caught_up = verdicts.caught_up_at(data.monitor, jf.replica, healthy, allowance, limit)
        caught_up_on = None
        if allowance is not None and jf.replica is not None:
            kept = verdicts.trail_kept(data.monitor, jf.replica, warm_stop, steady_end)
            caught_up_on = "trail" if kept else "lag"
        window = verdicts.impact_window(
            jf.started, healthy, caught_up, allowance is not None, settle, nxt, b.t_end
        )
        closed = window.ended_by != "end of input"
        # An unclosed window takes in the drain: results in flight at the input's end count.
        win_end = min(max(window.end, win_start), limit) if closed else max(limit, win_start)
        fphase = b.stats(f"fault-{i}", "fault", win_start, win_end, fault=i)
        phases.append(fphase)
        whole = overlapping(b.gaps, win_start, win_end)
        fault_gap = None if whole is None else round(whole.length_ms, 3)
        fp99 = fphase.percentiles_ms.get("p99") if fphase.count else None
        held_to = verdicts.stretch_p99(ref, win_end - win_start, span, b.p99_over)
        hit = (jf.started, win_end)
        effect = (
            verdicts.merger_effect(data.journal, hit)
            if jf.kind in FAULTS and FAULTS.info(jf.kind).on == "merger"
            else verdicts.replica_effect(data.monitor, jf.replica, hit, allowance, jf.killed)
        )
        moved = (
            verdicts.clock_moved_ms(data.injector_seconds, win_start, win_end),
            verdicts.clock_moved_ms(data.injector_seconds, *span),
        )
        verdict = verdicts.masked(
            fp99, fault_gap, ref, tol, missing, held_to, win_end - win_start, closed, effect, moved
        )
        if verdict.value and caught_up_on == "lag" and window.ended_by == "caught-up+settle":
            # The window's end rests on the lag: current on one partition, a replica may still
            # replay another (docs/design.md §4, "Caught up").
            verdict = verdicts.Verdict(
                True, verdict.reason + "; caught up judged on the lag (no trail kept)"
            )
        rec_at = verdicts.recovery_at(
            ivs, b.gaps, jf.started, limit, ref, tol, settle, per_iv, win_end
        )
        recovery_s = None if rec_at is None else max(0.0, rec_at - jf.started)
        rec_end = limit if rec_at is None else min(max(rec_at, win_end), limit)
        # A window cut by the input's end runs to the output's end: no recovery or tail after.
        if closed:
            phases.append(b.stats(f"recovery-{i}", "recovery", win_end, rec_end, fault=i))
        if closed and (rec_end < limit or nxt is None):
            if nxt is None:
                phases.append(b.stats("tail", "tail", rec_end, t_end))
            else:
                phases.append(b.stats(f"steady-{i + 1}", "steady", rec_end, limit))
        fstats.append(
            FaultStats(
                index=i,
                kind=jf.kind,
                target=jf.replica,
                at_s=jf.started - t0,
                duration_s=jf.duration_s,
                window_s=win_end - jf.started,
                detect_s=jf.detect_s,
                restored_s=jf.restored_s,
                first_batch_s=jf.first_batch_s,
                caught_up_s=None if caught_up is None else max(0.0, caught_up - jf.started),
                caught_up_lag_ms=allowance,
                recovery_s=recovery_s,
                masked=verdict.value,
                p99_ms=fphase.percentiles_ms.get("p99"),
                max_gap_ms=fault_gap,
                description=jf.description,
                healthy_s=None if healthy is None else max(0.0, healthy - jf.started),
                window_ended_by=window.ended_by,
                verdict=verdict.reason,
                steady_p99_ms=held_to,
                steady_interval_p99_ms=per_iv,
                effect=effect.text,
                effect_seen=effect.seen,
                caught_up_on=caught_up_on,
            )
        )
    return phases, fstats


def _failed(index: int, jf: JournaledFault, error: str, t0: float | None = None) -> FaultStats:
    """A fault that did not take effect (failed, or injected after the input ended)."""
    return FaultStats(
        index=index,
        kind=jf.kind,
        target=jf.replica,
        at_s=None if jf.started is None or t0 is None else jf.started - t0,
        duration_s=None,
        window_s=None,
        detect_s=None,
        restored_s=None,
        recovery_s=None,
        masked=None,
        p99_ms=None,
        max_gap_ms=None,
        description=jf.description,
        error=error,
        verdict=f"no verdict: the fault did not take effect ({error})",
    )


def distribution_percentiles(count: int) -> list[float]:
    """Percentiles for a distribution plot: 10 per decade of ``1/(1-q)`` up to ``1 - 1/count``."""
    if count <= 0:
        return []
    top = math.log10(max(count, 10))
    steps = int(top * 10)
    return [round(100.0 * (1.0 - 10 ** (-k / 10.0)), 6) for k in range(steps + 1)]


def _distribution(b: _Builder, phase: PhaseStats) -> list[tuple[float, float]]:
    chosen = _select(b.ivs, b.mids, phase.start_s + b.t0, phase.end_s + b.t0)
    hist = new_histogram()
    for iv in chosen:
        hist.add(iv.hist)
    count = int(hist.get_total_count())
    qs = distribution_percentiles(count)
    if not qs:
        return []
    values = values_at_percentiles(hist, qs)
    pts = [(q, values[q] / 1000.0) for q in qs]
    pts.append((100.0, hist.get_max_value() / 1000.0))
    return pts


def _series(
    b: _Builder,
    data: RunData,
    phases: Sequence[PhaseStats],
    overall: PhaseStats,
    replica_batches: dict[int, list[Batch]],
) -> Series:
    t_s = [iv.end - b.t0 for iv in b.ivs]
    rate_t: list[float] = []
    out_rate: list[float] = []
    rep_rate: dict[int, list[float]] = {}
    rep_wins: dict[int, list[float]] = {}
    prev: dict[int, tuple[int, int]] = {}
    for snap in data.monitor:
        dt = snap.interval_s if snap.interval_s > 0 else 1.0
        rate_t.append(snap.t - b.t0)
        out_rate.append(snap.output_rate / dt)
        for r, rs in snap.replicas.items():
            received, wins = prev.get(r, (0, 0))
            # Counters are cumulative; a replica first seen late starts with zeros.
            rep_rate.setdefault(r, [0.0] * (len(rate_t) - 1)).append(
                max(0, rs.received - received) / dt
            )
            rep_wins.setdefault(r, [0.0] * (len(rate_t) - 1)).append(max(0, rs.wins - wins) / dt)
            prev[r] = (rs.received, rs.wins)
        for series in (*rep_rate.values(), *rep_wins.values()):
            if len(series) < len(rate_t):
                series.append(0.0)
    dist: dict[str, list[tuple[float, float]]] = {}
    for p in [*phases, overall]:
        if p.kind in ("warmup", "recovery") or not p.count:
            continue
        dist[p.name] = _distribution(b, p)
    return Series(
        t_s=t_s,
        p50_ms=[iv.p50 for iv in b.ivs],
        p99_ms=[iv.p99 for iv in b.ivs],
        max_ms=[iv.max for iv in b.ivs],
        rate_t_s=rate_t,
        output_rate=out_rate,
        replica_rate=rep_rate,
        replica_wins=rep_wins,
        distribution=dist,
        batches={
            r: [(bt.start - b.t0, bt.duration_ms) for bt in bs] for r, bs in replica_batches.items()
        },
        batch_ends={
            r: [t - b.t0 for t in batch_ends(lines)] for r, lines in sorted(data.progress.items())
        },
    )
