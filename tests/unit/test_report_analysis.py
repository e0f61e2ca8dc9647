"""Phases, recovery time and masking on small synthetic runs built in memory.

Each run has a latency log of 1-s intervals with known values, so recovery times and verdicts
are known exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.spec import Spec
from arfl.errors import ReportError
from arfl.measure.histogram import IntervalHistogram, new_histogram, record_ms
from arfl.report import analyse
from arfl.report.build import distribution_percentiles
from arfl.report.rundata import RunData
from arfl.run.streams import MonitorSnapshot, ReplicaSnapshot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
T0 = 1_800_000_000.0


def _spec(warmup: str = "2s", tolerance: float = 1.10, slo: dict[str, Any] | None = None) -> Spec:
    d = json.loads((FIXTURES / "sim-active-kill" / "spec.json").read_text())
    d["workload"]["warmup"] = warmup
    d["workload"]["duration"] = "30s"
    d["report"]["tolerance"] = tolerance
    d["report"]["slo"] = slo or {}
    return Spec.model_validate(d)


def _run(
    latency_ms: Sequence[float | None],
    faults: list[dict[str, Any]] | None = None,
    *,
    spec: Spec | None = None,
    per_second: int = 100,
) -> RunData:
    """A run whose second k (from T0) delivered ``per_second`` results of ``latency_ms[k]``
    (None: no result that second).

    Two replicas; each delivers results from the events of the second it is in (its newest
    ``src_ts`` 0.9 s into it: 100 ms before the tick), except that a faulted replica
    delivers nothing from its fault's ``started`` until its ``healthy`` time.
    """
    intervals = []
    monitor = []
    results = 0
    last_output = T0
    src_ts: dict[int, int | None] = {0: None, 1: None}
    for k, lat in enumerate(latency_ms):
        for r in src_ts:
            frozen = any(
                f["replica"] == r and f["started"] <= T0 + k < f["healthy"] for f in faults or []
            )
            if lat is not None and not frozen:
                src_ts[r] = int((T0 + k + 0.9) * 1000)
        h = new_histogram()
        if lat is not None:
            for _ in range(per_second):
                record_ms(h, lat)
            results += per_second
            last_output = T0 + k + 0.99
        intervals.append(IntervalHistogram(T0 + k, T0 + k + 1, h))
        end = T0 + k + 1
        monitor.append(
            MonitorSnapshot(
                t=end, interval_s=1.0, output_rate=per_second if lat is not None else 0,
                received=0, duplicates=0, interval={}, cumulative={},
                longest_gap_ms=0.0, current_gap_ms=round((end - last_output) * 1000, 3),
                input_flowing=True, results=results, duplicates_total=0, divergent=0, bad=0,
                evicted=0,
                replicas={
                    r: ReplicaSnapshot(
                        received=results, wins=0, last_seen_t=end, last_src_ts=ts, lag_ms=None
                    )
                    for r, ts in src_ts.items()
                },
            )
        )  # fmt: skip
    journal: list[dict[str, Any]] = [
        {"t": T0, "event": "injector_started", "t0": T0},
        {"t": T0 + len(latency_ms), "event": "workload-finished"},
        {"t": T0 + len(latency_ms) + 1, "event": "run-finished"},
    ]
    for f in faults or []:
        injected = {k: v for k, v in f.items() if k != "healthy"}
        journal.append({"t": f["started"], "event": "fault-injected", **injected})
        if "ended" in f:
            journal.append(
                {"t": f["ended"], "event": "fault-reverted", "kind": f["kind"],
                 "replica": f["replica"], "started": f["ended"], "ended": f["ended"]}
            )  # fmt: skip
    journal.sort(key=lambda e: e["t"])
    return RunData(
        root=Path("/nonexistent/run-x"),
        spec=spec or _spec(),
        journal=journal,
        intervals=intervals,
        monitor=monitor,
        merger={"first_output_t": T0 + 0.99, "results": results, "divergent": 0, "evicted": 0},
        summary={"produced": results},
    )


def _pause(
    at: float, duration: float, replica: int = 1, healthy: float | None = None
) -> dict[str, Any]:
    """A pause; the replica delivers again ``healthy`` s after T0 (default: when it ends)."""
    return {
        "healthy": T0 + (healthy if healthy is not None else at + duration),
        "kind": "pause",
        "replica": replica,
        "started": T0 + at,
        "ended": T0 + at + duration,
        "duration_s": duration,
        "description": "pause",
    }


def _kill(
    at: float, replica: int | None, healthy: float, kind: str = "kill-replica"
) -> dict[str, Any]:
    """A kill; the replica delivers again ``healthy`` s after T0."""
    return {"healthy": T0 + healthy, "kind": kind, "replica": replica, "started": T0 + at,
            "description": kind}  # fmt: skip


def _died(data: RunData, replica: int, at: float, ready: float) -> None:
    """The runner journaled ``replica``'s driver dead at ``at`` and ready again at ``ready``."""
    data.journal.extend([
        {"t": T0 + at, "event": "replica-died", "replica": replica},
        {"t": T0 + ready, "event": "replica-ready", "replica": replica},
    ])  # fmt: skip
    data.journal.sort(key=lambda e: e["t"])


def test_no_fault_gives_warmup_and_steady_only() -> None:
    rep = analyse(_run([100.0] * 10))
    assert [p.name for p in rep.phases] == ["warmup", "steady"]
    warm, steady = rep.phases
    assert (warm.start_s, warm.end_s) == (0.0, 2.0)
    assert (steady.start_s, steady.end_s) == (2.0, 10.0)
    assert steady.count == 800
    assert steady.results_per_s == pytest.approx(100.0)
    assert steady.percentiles_ms["p99"] == pytest.approx(100.0, rel=1e-3)
    assert rep.faults == []


def test_warmup_latencies_are_excluded_from_steady_and_overall() -> None:
    rep = analyse(_run([5000.0, 5000.0] + [100.0] * 8))
    assert rep.phase("warmup").max_ms == pytest.approx(5000.0, rel=1e-3)
    assert rep.phase("steady").max_ms == pytest.approx(100.0, rel=1e-3)
    assert rep.overall.max_ms == pytest.approx(100.0, rel=1e-3)


def test_recovery_time_is_end_of_last_bad_second() -> None:
    # Fault at 10 s for 2 s; latency bad for seconds 10..14, good from 15 on.
    lat = [100.0] * 10 + [1000.0] * 5 + [100.0] * 10
    rep = analyse(_run(lat, [_pause(10.0, 2.0)]))
    (f,) = rep.faults
    assert f.recovery_s == pytest.approx(5.0)
    assert f.masked is False
    names = [p.name for p in rep.phases]
    assert names == ["warmup", "steady", "fault-1", "recovery-1", "tail"]
    # Impact window: until the paused replica delivered again (its second 12, seen at the
    # 13 s tick) plus the 5 s settle time.
    assert (rep.phase("fault-1").start_s, rep.phase("fault-1").end_s) == (10.0, 18.0)
    assert f.healthy_s == pytest.approx(3.0)
    assert f.window_ended_by == "healthy+settle"
    rec = rep.phase("recovery-1")
    assert (rec.start_s, rec.end_s) == (18.0, 18.0)  # recovered (15 s) inside the window
    assert rep.phase("tail").start_s == 18.0
    assert rep.phase("fault-1").percentiles_ms["p99"] == pytest.approx(1000.0, rel=1e-3)


def test_an_effect_later_than_settle_after_the_injection_is_recovered_from_after_it() -> None:
    # Paused 10..14 s; the output is good until a slow second at 17 s, inside the impact window
    # (healthy at 14 s, seen at the 15 s tick, + 5 s settle) but more than settle after the
    # injection. Recovered only after that second, not "0 s" while the window is not masked.
    lat = [100.0] * 17 + [1000.0] + [100.0] * 12
    rep = analyse(_run(lat, [_pause(10.0, 4.0)]))
    (f,) = rep.faults
    assert f.masked is False
    assert rep.phase("fault-1").end_s >= 18.0  # the slow second is in the window
    assert f.recovery_s == pytest.approx(8.0)


def test_a_short_dip_does_not_count_as_recovered() -> None:
    # Good for 2 s (< the 5 s settle time) in between: recovered after the second bad stretch.
    lat = [100.0] * 10 + [1000.0] * 2 + [100.0] * 2 + [1000.0] * 2 + [100.0] * 10
    rep = analyse(_run(lat, [_pause(10.0, 1.0)]))
    assert rep.faults[0].recovery_s == pytest.approx(6.0)


def test_latency_within_tolerance_is_masked_with_zero_recovery() -> None:
    lat = [100.0] * 10 + [108.0] * 3 + [100.0] * 10
    rep = analyse(_with_lag(_run(lat, [_pause(10.0, 3.0)])))
    (f,) = rep.faults
    assert f.masked is True, f.verdict
    assert f.recovery_s == 0.0
    assert rep.phase("recovery-1").count == 0  # empty: nothing to recover from


def test_latency_beyond_tolerance_is_not_masked() -> None:
    lat = [100.0] * 10 + [115.0] * 3 + [100.0] * 10
    rep = analyse(_run(lat, [_pause(10.0, 3.0)]))
    assert rep.faults[0].masked is False
    # Tolerance from the spec decides: 1.2 accepts +15 %.
    rep = analyse(_with_lag(_run(lat, [_pause(10.0, 3.0)], spec=_spec(tolerance=1.2))))
    assert rep.faults[0].masked is True


def test_seconds_without_results_are_never_recovered_and_not_masked() -> None:
    lat: list[float | None] = [100.0] * 10 + [None] * 15
    rep = analyse(_run(lat, [_pause(10.0, 2.0)]))
    (f,) = rep.faults
    assert f.recovery_s is None
    assert f.masked is False
    assert f.max_gap_ms is not None and f.max_gap_ms >= 14_000
    # The window never closed: it runs to the end, with no recovery or tail phase after it.
    assert [p.name for p in rep.phases][-1] == "fault-1"
    assert rep.phase("fault-1").end_s == 25.0


def test_second_fault_splits_phases_with_a_steady_between() -> None:
    lat = [100.0] * 10 + [1000.0] * 2 + [100.0] * 8 + [1000.0] * 1 + [100.0] * 9
    rep = analyse(_run(lat, [_pause(10.0, 1.0), _pause(20.0, 1.0, replica=0)]))
    names = [p.name for p in rep.phases]
    assert names == [
        "warmup", "steady", "fault-1", "recovery-1", "steady-2", "fault-2", "recovery-2", "tail",
    ]  # fmt: skip
    assert [f.recovery_s for f in rep.faults] == [pytest.approx(2.0), pytest.approx(1.0)]
    assert rep.phase("steady-2").start_s == 17.0  # fault-1's window: healthy at 12 + 5 s
    assert rep.phase("steady-2").end_s == 20.0
    assert [f.target for f in rep.faults] == [1, 0]


def test_no_input_start_is_a_report_error() -> None:
    data = _run([100.0] * 5)
    empty = RunData(data.root, data.spec, [], data.intervals, data.monitor)
    with pytest.raises(ReportError, match="never started its input"):
        analyse(empty)


def test_unfinished_run_is_flagged() -> None:
    data = _run([100.0] * 5)
    journal = [e for e in data.journal if e["event"] != "run-finished"]
    rep = analyse(RunData(data.root, data.spec, journal, data.intervals, data.monitor))
    assert any("not finished" in w for w in rep.warnings)


def test_distribution_percentiles_reach_one_in_count() -> None:
    qs = distribution_percentiles(1000)
    assert qs[0] == 0.0
    assert qs[-1] == pytest.approx(99.9)
    assert qs == sorted(qs)
    assert distribution_percentiles(0) == []


def test_percentiles_named_by_slos_are_computed() -> None:
    spec = _spec(slo={"fault.p95": "1s", "p99.99": "2s", "p75.0": "1s"})
    d = spec.model_dump(mode="json", by_alias=True)
    d["report"]["percentiles"] = [99.0]
    spec = Spec.model_validate(d)
    rep = analyse(_run([100.0] * 10 + [300.0] * 2 + [100.0] * 10, [_pause(10.0, 2.0)], spec=spec))
    assert rep.percentiles == [50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99]
    assert set(rep.overall.percentiles_ms) == {"p50", "p75", "p90", "p95", "p99", "p99.9",
                                               "p99.99"}  # fmt: skip
    assert [c.line for c in rep.slo.checks] == [
        "p95 (fault-1) 300.0 ms <= 1s",
        "p99.99 (overall) 300.0 ms <= 2s",
        "p75 (overall) 100.0 ms <= 1s",
    ]


def test_results_after_the_input_ended_still_count() -> None:
    data = _run([100.0] * 10 + [900.0, 900.0])
    journal = [
        {**e, "t": T0 + 10.0} if e["event"] == "workload-finished" else e for e in data.journal
    ]
    rep = analyse(RunData(data.root, data.spec, journal, data.intervals, data.monitor))
    assert rep.input_end_s == 10.0
    assert rep.phase("steady").end_s == 12.0  # the last results arrived in [11, 12)
    assert rep.overall.max_ms == pytest.approx(900.0, rel=1e-3)


def test_batch_cadence_neither_fakes_nor_prevents_recovery() -> None:
    # ~2-s batches: every other second has no result, in the steady state too. The fault makes
    # three batches slow; recovery is the end of the last slow second, not "never" (empty
    # seconds are not bad by themselves: only gaps beyond the steady state's count).
    steady: list[float | None] = [100.0, None] * 5
    slow: list[float | None] = [1000.0, None] * 3
    lat = steady + slow + [100.0, None] * 7
    rep = analyse(_run(lat, [_pause(10.0, 1.0)]))
    (f,) = rep.faults
    assert rep.phase("steady").max_gap_ms is not None
    assert f.recovery_s == pytest.approx(5.0)  # the slow second at 14 s ended at 15 s
    assert f.masked is False


def test_a_too_short_steady_state_gives_no_verdict() -> None:
    # 3 s of steady state (warm-up 2 s, fault at 5 s): too little to compare with.
    lat = [100.0] * 5 + [108.0] * 3 + [100.0] * 10
    rep = analyse(_run(lat, [_pause(5.0, 3.0)]))
    (f,) = rep.faults
    assert f.masked is None and f.recovery_s is None
    assert f.verdict.startswith("unknown: steady state too small (300 results over 3.0 s")
    assert any("no usable steady state" in w for w in rep.warnings)


def _in_flight(data: RunData, replica: int, src_s: float, ticks: range) -> RunData:
    """The faulted replica delivered one result from input sent ``src_s`` after T0 (in flight
    at the injection) and shows it over the monitor ticks ``T0 + k`` for ``k`` in ``ticks``."""
    for snap in data.monitor:
        if round(snap.t - T0) in ticks:
            r = snap.replicas[replica]
            snap.replicas[replica] = ReplicaSnapshot(
                received=r.received, wins=r.wins, last_seen_t=r.last_seen_t,
                last_src_ts=int((T0 + src_s) * 1000), lag_ms=None,
            )  # fmt: skip
    return data


def test_a_result_in_flight_at_a_pause_does_not_end_the_impact_window() -> None:
    # Paused at 10 s for 5 s; a result from input sent 11 ms after the pause came out before the
    # replica froze. It was in flight, not a sign of health: the replica is healthy once it
    # delivers input sent after the revert (second 16, seen at the 17 s tick).
    lat = [100.0] * 10 + [100.0] * 15
    data = _in_flight(_run(lat, [_pause(10.0, 5.0, healthy=16.0)]), 1, 10.011, range(11, 17))
    (f,) = analyse(data).faults
    assert f.healthy_s == pytest.approx(7.0)
    assert f.window_ended_by == "healthy+settle"


def test_a_killed_replica_is_healthy_only_with_input_sent_after_its_restart() -> None:
    # Replica 1's driver was killed at 10 s; its executor still wrote one result of input sent
    # 11 ms later before it died (the bench saw this under real-time mode). The runner saw it
    # die at 10.1 s and ready again at 14 s; it delivers again from second 15 on.
    lat = [100.0] * 25
    kill = _kill(10.0, 1, healthy=15.0)
    data = _in_flight(_run(lat, [kill]), 1, 10.011, range(11, 16))
    _died(data, 1, 10.1, ready=14.0)
    (f,) = analyse(data).faults
    assert f.restored_s == pytest.approx(4.0)
    assert f.healthy_s == pytest.approx(6.0)  # second 15, seen at the 16 s tick


def test_a_killed_replica_that_never_came_back_is_never_healthy() -> None:
    lat = [100.0] * 25
    kill = _kill(10.0, 1, healthy=99.0)
    data = _in_flight(_run(lat, [kill]), 1, 10.011, range(11, 26))
    data.journal.append({"t": T0 + 10.1, "event": "replica-died", "replica": 1})
    data.journal.sort(key=lambda e: e["t"])
    (f,) = analyse(data).faults
    assert f.healthy_s is None
    assert f.window_ended_by == "end of input"


def test_the_lag_watch_warnings_reach_the_report() -> None:
    data = _run([100.0] * 5)
    t = data.journal[-1]["t"]
    message = "replica 1 is 87 s behind the input and not catching up (41 s 60 s ago)"
    journal = [
        *data.journal,
        {"t": t, "event": "warning", "kind": "not-catching-up", "replica": 1, "message": message},
        {"t": t, "event": "warning", "message": "something else"},
        {"t": t, "event": "replica-behind-at-end", "replica": 1, "lag_s": 78.3, "behind_s": 95.1},
    ]
    rep = analyse(RunData(data.root, data.spec, journal, data.intervals, data.monitor))
    assert message in rep.warnings
    assert "something else" in rep.warnings  # every journal warning reaches the report
    (end,) = [w for w in rep.warnings if "when the run stopped" in w]
    assert end.startswith("replica 1 was still 78 s behind the input") and "95 s" in end
    assert not [w for w in analyse(data).warnings if "behind" in w]


def _lag_tick(t: float, lags: dict[int, float | None], flowing: bool = True) -> MonitorSnapshot:
    reps = {
        r: ReplicaSnapshot(received=1, wins=0, last_seen_t=t, last_src_ts=None, lag_ms=lag)
        for r, lag in lags.items()
    }
    return MonitorSnapshot(
        t=t, interval_s=1.0, output_rate=1, received=1, duplicates=0, interval={},
        cumulative={}, longest_gap_ms=0.0, current_gap_ms=0.0, input_flowing=flowing, results=1,
        duplicates_total=0, divergent=0, bad=0, evicted=0, replicas=reps,
    )  # fmt: skip


def test_lag_allowance_is_the_replicas_own_steady_p90_floored() -> None:
    from arfl.report import verdicts

    # Ten steady ticks of replica 0: 100..1000 ms; p90 (nearest rank) = 900 ms. Ticks outside
    # [start, end), without input, or without a lag do not count; replica 1 has its own.
    ticks = [_lag_tick(T0 + i, {0: 100.0 * i, 1: 5.0}) for i in range(1, 11)]
    ticks += [
        _lag_tick(T0, {0: 50_000.0}),  # before the steady phase
        _lag_tick(T0 + 5.5, {0: 60_000.0}, flowing=False),
        _lag_tick(T0 + 6.5, {0: None}),
        _lag_tick(T0 + 11, {0: 70_000.0}),  # the fault
    ]
    assert verdicts.lag_allowance(ticks, 0, T0 + 1, T0 + 11) == 900.0
    assert verdicts.lag_allowance(ticks, 1, T0 + 1, T0 + 11) == verdicts.CAUGHT_UP_FLOOR_MS
    assert verdicts.lag_allowance(ticks, 0, T0 + 1, T0 + 5) is None  # 4 ticks: too few
    assert verdicts.lag_allowance(ticks, 2, T0 + 1, T0 + 11) is None  # never seen


def test_caught_up_is_the_first_tick_from_healthy_on_within_the_allowance() -> None:
    from arfl.report import verdicts

    # Killed at T0: the dying replica's last results (lag 20 ms) came before it was healthy;
    # healthy at T0 + 6 with its backlog still ahead (lag 4 s), current again at T0 + 8.
    lags = [20.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 4000.0, 800.0, 90.0, 5.0]
    ticks = [_lag_tick(T0 + 0.5 + i, {0: lag}) for i, lag in enumerate(lags)]
    end = T0 + 60
    assert verdicts.caught_up_at(ticks, 0, T0 + 6.5, 100.0, end) == T0 + 8.5
    assert verdicts.caught_up_at(ticks, 0, T0 + 6.5, 1000.0, end) == T0 + 7.5
    assert verdicts.caught_up_at(ticks, 0, T0 + 6.5, 10.0, end) == T0 + 9.5
    assert verdicts.caught_up_at(ticks, 0, T0 + 6.5, 1.0, end) is None  # never
    # Not after the next fault: a catch-up there belongs to that fault's recovery.
    assert verdicts.caught_up_at(ticks, 0, T0 + 6.5, 100.0, T0 + 8.5) is None
    assert verdicts.caught_up_at(ticks, 0, None, 100.0, end) is None  # never healthy
    assert verdicts.caught_up_at(ticks, 0, T0 + 6.5, None, end) is None  # no allowance
    assert verdicts.caught_up_at(ticks, None, T0 + 6.5, 100.0, end) is None  # no replica


def _with_lag(
    data: RunData,
    lag_ms: dict[int, dict[int, float]] | None = None,
    trail_ms: dict[int, dict[int, float]] | None = None,
) -> RunData:
    """Give every monitor tick each replica's lag (tick time minus its newest ``src_ts``), or
    ``lag_ms[replica][k]`` at the tick ``T0 + k`` where given; with ``trail_ms``, a trail too
    (``trail_ms[replica][k]`` where given, else 0)."""
    import dataclasses

    for snap in data.monitor:
        k = round(snap.t - T0)
        for r, rs in list(snap.replicas.items()):
            lag = None if rs.last_src_ts is None else snap.t * 1000.0 - rs.last_src_ts
            lag = (lag_ms or {}).get(r, {}).get(k, lag)
            trail = None if trail_ms is None else trail_ms.get(r, {}).get(k, 0.0)
            snap.replicas[r] = dataclasses.replace(rs, lag_ms=lag, trail_ms=trail)
    return data


def test_the_impact_window_runs_until_the_faulted_replica_has_caught_up() -> None:
    # Replica 1 paused at 10 s for 1 s: it delivers again from second 11 (healthy at the 12 s
    # tick) but stays 6 s behind until the 20 s tick. Meanwhile, at second 17, the survivor
    # alone stalls (a batch boundary): the output shows it. R was not restored then, so the
    # stall belongs to the fault's window: not masked. healthy + settle (17 s) would end the
    # window before it and call the fault masked.
    lat = [100.0] * 17 + [1000.0] + [100.0] * 12
    behind = {1: {k: 6000.0 for k in range(12, 20)}}
    (f,) = analyse(_with_lag(_run(lat, [_pause(10.0, 1.0)]), behind)).faults
    assert f.healthy_s == pytest.approx(2.0)
    assert f.caught_up_s == pytest.approx(10.0)
    assert f.window_ended_by == "caught-up+settle"
    assert f.window_s == pytest.approx(15.0)
    assert f.masked is False
    assert f.verdict.startswith("not masked: p99 1000.")


def test_without_a_caught_up_time_the_window_is_healthy_plus_settle_or_capped() -> None:
    lat = [100.0] * 30
    # Caught up at once: the window ends settle after it, as after healthy.
    (f,) = analyse(_with_lag(_run(lat, [_pause(10.0, 1.0)]))).faults
    assert (f.healthy_s, f.caught_up_s) == (pytest.approx(2.0), pytest.approx(2.0))
    assert f.window_ended_by == "caught-up+settle" and f.window_s == pytest.approx(7.0)
    assert f.masked is True
    # Never caught up before the input ended: the window runs to the end of the input.
    never = {1: {k: 6000.0 for k in range(12, 31)}}
    (f,) = analyse(_with_lag(_run(lat, [_pause(10.0, 1.0)]), never)).faults
    assert f.caught_up_s is None and f.window_ended_by == "end of input"
    assert f.window_s == pytest.approx(20.0)
    # No lag allowance (no steady lags): caught up is unknown, the window is healthy + settle.
    (f,) = analyse(_run(lat, [_pause(10.0, 1.0)])).faults
    assert f.caught_up_s is None and f.window_ended_by == "healthy+settle"
    assert f.window_s == pytest.approx(7.0)


def test_caught_up_is_judged_on_the_trail_where_the_merger_kept_one() -> None:
    import dataclasses

    from arfl.report import verdicts

    # A restarted replica current on one partition (lag 5-20 ms from T0 + 2.5 on) while it
    # still owes the output the other partition's results (trail 4 s, 2 s, then 30 ms).
    lags = [20.0, 3000.0, 10.0, 5.0, 8.0, 5.0]
    trails = [20.0, 3000.0, 4000.0, 2000.0, 30.0, 0.0]
    ticks = [_lag_tick(T0 + 0.5 + i, {0: lag}) for i, lag in enumerate(lags)]
    with_trail = [
        dataclasses.replace(t, replicas={0: dataclasses.replace(t.replicas[0], trail_ms=trail)})
        for t, trail in zip(ticks, trails, strict=True)
    ]
    end = T0 + 60
    assert verdicts.caught_up_at(with_trail, 0, T0 + 1.5, 100.0, end) == T0 + 4.5
    # A run without a trail (one replica, or recorded before it existed): the lag decides.
    assert verdicts.caught_up_at(ticks, 0, T0 + 1.5, 100.0, end) == T0 + 2.5
    # The allowance is taken from the same figure: a steady trail of 500 ms (the replica one
    # batch boundary behind the other) with a lag of 5 ms gives 500 ms.
    steady = [
        dataclasses.replace(
            _lag_tick(T0 + 100 + i, {0: 5.0}),
            replicas={0: dataclasses.replace(_lag_tick(0, {0: 5.0}).replicas[0], trail_ms=500.0)},
        )
        for i in range(10)
    ]
    assert verdicts.lag_allowance(steady, 0, T0 + 100, T0 + 200) == 500.0
    no_trail = [
        dataclasses.replace(s, replicas={0: dataclasses.replace(s.replicas[0], trail_ms=None)})
        for s in steady
    ]
    assert verdicts.lag_allowance(no_trail, 0, T0 + 100, T0 + 200) == verdicts.CAUGHT_UP_FLOOR_MS
    assert with_trail[2].replicas[0].behind_ms == 4000.0
    assert ticks[2].replicas[0].behind_ms == 10.0


def test_the_report_reads_caught_up_from_the_trail_where_the_merger_kept_one() -> None:
    # As in the window test above, but the paused replica's lag is fresh from its first result
    # on (one partition current) while its trail says it still owes 6 s of the other's until
    # the 20 s tick. Judged on the trail: caught up at 10 s after the pause, the survivor's
    # stall at second 17 inside the window, not masked. On the lag it would be caught up at
    # once (2 s) and the stall outside.
    lat = [100.0] * 17 + [1000.0] + [100.0] * 12
    owed = {1: {k: 6000.0 for k in range(12, 20)}}
    (f,) = analyse(_with_lag(_run(lat, [_pause(10.0, 1.0)]), trail_ms=owed)).faults
    assert (f.healthy_s, f.caught_up_s) == (pytest.approx(2.0), pytest.approx(10.0))
    assert f.caught_up_lag_ms == 100.0  # the floor: the steady trail was 0
    assert f.window_ended_by == "caught-up+settle" and f.masked is False
    (g,) = analyse(_with_lag(_run(lat, [_pause(10.0, 1.0)]))).faults
    assert g.caught_up_s == pytest.approx(2.0) and g.masked is True


def test_a_window_is_held_to_the_steady_p99_at_its_own_length() -> None:
    """A steady phase of 118 s with one slow second (0.85 % of its results: its p99 is the
    fast 100 ms) and a 9-s impact window with one such second (11 %: p99 300 ms). Held to
    the whole phase's p99 a fault that did nothing worse than the steady state did on its own
    was "not masked"; the steady state's worst 9-s stretch shows the same 300 ms."""
    lat = [100.0] * 130
    lat[60] = 300.0  # in the steady phase
    lat[123] = 300.0  # in the fault's window
    rep = analyse(_with_lag(_run(lat, [_pause(120.0, 3.0)])))
    (f,) = rep.faults
    assert rep.phase("steady").percentiles_ms["p99"] == pytest.approx(100.0, rel=1e-3)
    assert rep.phase("fault-1").end_s - rep.phase("fault-1").start_s == pytest.approx(9.0)
    assert f.p99_ms == pytest.approx(300.0, rel=1e-3)
    assert f.steady_p99_ms == pytest.approx(300.0, rel=1e-3)
    assert f.masked is True, f.verdict
    assert f.verdict.startswith("masked: p99 300.") and "worst 9-s stretch" in f.verdict
    # Worse than anything the steady state did: not masked, the reference named.
    lat[123] = 400.0
    (f,) = analyse(_run(lat, [_pause(120.0, 3.0)])).faults
    assert f.masked is False
    assert "> 1.1 x steady 300." in f.verdict and "whole steady 100." in f.verdict, f.verdict
    # Without the slow steady second the window's is beyond tolerance, as before.
    lat[60], lat[123] = 100.0, 300.0
    (f,) = analyse(_run(lat, [_pause(120.0, 3.0)])).faults
    assert f.masked is False and f.steady_p99_ms == pytest.approx(100.0, rel=1e-3)
    assert f.verdict.startswith("not masked: p99 300.") and "stretch" not in f.verdict


def test_the_stretch_reference_never_falls_below_the_whole_steady_p99() -> None:
    from arfl.report.verdicts import reference, stretch_p99

    ref = reference(100.0, 500.0, 10_000, 100.0)
    calls: list[tuple[float, float]] = []

    def p99_over(a: float, b: float) -> tuple[float | None, int]:
        calls.append((a, b))
        return (50.0, 1000) if a < 10 else (250.0, 99)  # thin stretches are ignored

    assert stretch_p99(ref, 20.0, (0.0, 100.0), p99_over) == 100.0
    assert calls[0] == (0.0, 20.0) and calls[-1] == (80.0, 100.0) and len(calls) == 81
    calls.clear()  # a phase that is no whole number of steps: its last second is in one too
    stretch_p99(ref, 20.0, (0.5, 100.0), p99_over)
    assert calls[-2] == (79.5, 99.5) and calls[-1] == (80.0, 100.0) and len(calls) == 81
    calls.clear()
    assert stretch_p99(ref, 100.0, (0.0, 100.0), p99_over) == 100.0  # as long: the whole
    assert calls == []
    assert stretch_p99(reference(None, None, 0, 0.0), 20.0, (0.0, 100.0), p99_over) is None


def test_recovery_holds_each_second_to_the_steady_states_worst_second() -> None:
    """Every second of the output has its own p99; a fault-free steady phase has slower seconds
    than its whole p99 (here one of 118 at 140 ms; the phase's p99 is 100 ms). A second as slow
    after a fault is what the steady state does on its own: no recovery needed. Held to the
    whole phase's p99 that second made a fault that changed nothing "recover" only after it."""
    lat = [100.0] * 140
    lat[60] = 140.0
    lat[122] = 140.0  # after the fault: no slower than the steady state's slowest second
    (f,) = analyse(_run(lat, [_pause(120.0, 1.0)])).faults
    assert f.steady_interval_p99_ms == pytest.approx(140.0, rel=1e-3)
    assert f.recovery_s == 0.0
    lat[122] = 200.0  # slower than any steady second: recovered after it
    (f,) = analyse(_run(lat, [_pause(120.0, 1.0)])).faults
    assert f.recovery_s == pytest.approx(3.0)
    lat[60], lat[122] = 100.0, 140.0  # no slow steady second: 140 ms is beyond tolerance
    (f,) = analyse(_run(lat, [_pause(120.0, 1.0)])).faults
    assert f.steady_interval_p99_ms == pytest.approx(100.0, rel=1e-3)
    assert f.recovery_s == pytest.approx(3.0)


def _slow(at: float, duration: float, replica: int = 1) -> dict[str, Any]:
    """A timed fault that leaves the replica's output as it was (say, a CPU quota above what
    it uses): it never stops delivering."""
    return {**_pause(at, duration, replica), "kind": "slow", "healthy": T0 + at,
            "description": "slow"}  # fmt: skip


def test_a_fault_that_did_not_hurt_its_replica_is_no_effect_not_masked() -> None:
    lat = [100.0] * 30
    (f,) = analyse(_with_lag(_run(lat, [_slow(10.0, 5.0)]))).faults
    assert f.masked is None and f.outcome == "no effect", f.verdict
    assert f.verdict.startswith("no effect: replica 1 stayed within")
    assert f.effect_seen is False
    # The same window with the replica silent for the 5 s: the effect shows, the output was
    # as good as steady: masked.
    (g,) = analyse(_with_lag(_run(lat, [_pause(10.0, 5.0)]))).faults
    assert g.effect_seen is True and g.effect.startswith("replica 1 fell 5.1 s behind")
    assert g.masked is True, g.verdict
    # A masked = true SLO fails on "no effect", naming it.
    slo = analyse(_with_lag(_run(lat, [_slow(10.0, 5.0)], spec=_spec(slo={"masked": True}))))
    (check,) = slo.slo.checks
    assert check.passed is False and "no effect" in check.line


def test_without_what_the_merger_saw_of_the_replica_the_effect_and_masking_are_unknown() -> None:
    # A second fault closes the first one's window (healthy again cannot be seen either).
    data = _run([100.0] * 30, [_pause(10.0, 5.0), _pause(20.0, 1.0, replica=0)])
    for snap in data.monitor:
        snap.replicas.clear()
    f = analyse(data).faults[0]
    assert f.effect_seen is None
    assert f.masked is None and f.outcome == "unknown"
    assert f.verdict.startswith("unknown: the fault's effect cannot be seen")


def test_a_fault_whose_window_meets_the_input_end_is_unjudged_and_its_tail_counts() -> None:
    # Replica 1 killed at 26 s of a 30-s input, never back: its impact window cannot close
    # while input comes. The output looks steady up to the input's end, so the verdict is
    # unjudged, never masked.
    lat = [100.0] * 30
    kill = _kill(26.0, 1, healthy=99.0)
    (f,) = analyse(_with_lag(_run(lat, [kill]))).faults
    assert f.window_ended_by == "end of input"
    assert f.masked is None and f.outcome == "unjudged", f.verdict
    assert f.verdict.startswith("unjudged: the input ended first")
    # Results still in flight at the input's end land after it: 20 s late, they make the
    # window "not masked" (the window runs on to the output's end).
    data = _with_lag(_run([*lat, None, 20_000.0], [kill]))
    for e in data.journal:
        if e["event"] == "workload-finished":
            e["t"] = T0 + 30.0
    late = analyse(data).faults[0]
    assert late.masked is False and late.p99_ms is not None and late.p99_ms > 19_000


def test_a_merger_fault_has_an_effect_when_the_merger_was_replaced() -> None:
    lat = [100.0] * 30
    kill = _kill(10.0, None, healthy=10.0, kind="kill-merger")
    data = _with_lag(_run(lat, [kill]))
    (f,) = analyse(data).faults
    assert f.effect_seen is False and f.outcome == "no effect", f.verdict
    data.journal.append({"t": T0 + 10.05, "event": "merger-took-over", "detected": T0 + 10.01})
    data.journal.sort(key=lambda e: e["t"])
    (g,) = analyse(data).faults
    assert g.effect_seen is True and "a standby took over" in g.effect
    assert g.masked is True, g.verdict


def test_a_corrupt_journal_line_is_an_error_naming_it_and_a_torn_last_line_a_warning(
    tmp_path: Path,
) -> None:
    import shutil

    from arfl.report import build_report

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "sim-active-kill", run)
    journal = run / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    faults = [n for n, line in enumerate(lines) if '"fault-injected"' in line]
    assert faults
    # A whole line that does not parse would have taken its fault out of the report unseen.
    broken = [*lines]
    broken[faults[0]] = broken[faults[0]][:30] + "\n"
    journal.write_text("".join(broken))
    with pytest.raises(ReportError, match=rf"journal.jsonl:{faults[0] + 1}: not JSON"):
        build_report(run)
    # A last line cut off (its writer killed mid-line) is left out, and the report says so.
    journal.write_text("".join(lines) + '{"t": 1, "event": "fault-inj')
    rep = build_report(run)
    assert any("its last line is torn" in w for w in rep.warnings)
    assert len(rep.faults) == len(build_report(FIXTURES / "sim-active-kill").faults)


def test_a_check_that_failed_at_deploy_leaves_completeness_unknown_with_its_reason() -> None:
    data = _run([100.0] * 10)
    assert analyse(data).correctness.missing == 0
    data.journal.append({"t": T0 + 11, "event": "warning", "kind": "check-failed",
                         "message": "independent check not run: broker gone"})  # fmt: skip
    rep = analyse(data)
    assert rep.correctness.missing is None and rep.correctness.complete is None
    assert rep.correctness.notes[0].startswith("complete unknown: independent check not run")
    assert "independent check not run: broker gone" in rep.warnings


def test_caught_up_says_what_it_was_judged_on_and_a_masked_verdict_on_the_lag_says_so() -> None:
    lat = [100.0] * 30
    (f,) = analyse(_with_lag(_run(lat, [_pause(10.0, 3.0)]))).faults
    assert f.caught_up_on == "lag" and f.masked is True, f.verdict
    assert f.verdict.endswith("; caught up judged on the lag (no trail kept)")
    trail = {1: {11: 1000.0, 12: 2000.0, 13: 3000.0}}  # behind while paused, else 0
    (g,) = analyse(_with_lag(_run(lat, [_pause(10.0, 3.0)]), trail_ms=trail)).faults
    assert g.caught_up_on == "trail" and g.masked is True, g.verdict
    assert "judged on the lag" not in g.verdict


def test_repeated_journal_warnings_are_counted_once_with_their_source() -> None:
    data = _run([100.0] * 5)
    for _ in range(3):
        data.journal.append({"t": T0 + 5, "event": "warning", "component": "merger",
                             "message": "consumer error: broker down"})  # fmt: skip
    assert "merger: consumer error: broker down (3 times)" in analyse(data).warnings


def test_a_kill_the_journal_saw_land_has_an_effect_however_little_the_lag_rose() -> None:
    # The standby took the killed driver's place within the second: the lag never rose.
    lat = [100.0] * 30
    kill = _kill(10.0, 1, healthy=10.0)
    data = _with_lag(_run(lat, [kill]))
    (f,) = analyse(data).faults
    assert f.effect_seen is False and f.outcome == "no effect", f.verdict
    _died(data, 1, 10.1, ready=10.4)
    (g,) = analyse(data).faults
    assert g.effect_seen is True and g.effect.startswith("replica 1: its driver died (journal)")
    assert g.masked is True, g.verdict


def _clock(data: RunData, moves: dict[int, float]) -> RunData:
    """The injector's per-second lines, each with how far the wall clock had moved against the
    monotonic one by ``T0 + k`` (``moves[k]``, carried forward; 0 before the first)."""
    import dataclasses

    lines, moved = [], 0.0
    for k in range(1, 31):
        moved = moves.get(k, moved)
        lines.append({"type": "second", "t": T0 + k, "t0": T0, "sent": 100, "target": 100,
                      "behind_ms": 0.0, "total": 100 * k, "clock_ms": moved})  # fmt: skip
    return dataclasses.replace(data, injector_seconds=lines)


def test_a_p99_nearer_its_bar_than_the_wall_clock_moved_is_unjudged() -> None:
    # The window's p99 108 ms, its bar 110 ms: masked with a steady clock, but the wall clock
    # moved 5 ms against the monotonic one in the window: either side of the bar is possible.
    lat = [100.0] * 10 + [108.0] * 3 + [100.0] * 10
    data = _with_lag(_run(lat, [_pause(10.0, 3.0)]))
    (steady,) = analyse(_clock(data, {})).faults
    assert steady.masked is True, steady.verdict
    (moved,) = analyse(_clock(data, {11: 2.0, 12: 5.0})).faults
    assert moved.masked is None and moved.outcome == "unjudged", moved.verdict
    assert "wall clock moved 5.0 ms" in moved.verdict
    # A move before the window, in the steady phase the bar comes from, counts too.
    (early,) = analyse(_clock(data, {5: 3.0})).faults
    assert early.outcome == "unjudged", early.verdict
    # Far from the bar the move decides nothing: 150 ms is not masked either way.
    far = _with_lag(_run([100.0] * 10 + [150.0] * 3 + [100.0] * 10, [_pause(10.0, 3.0)]))
    (f,) = analyse(_clock(far, {11: 2.0, 12: 5.0})).faults
    assert f.masked is False, f.verdict
