"""``build_report`` and ``compare`` on the recorded run directories in ``tests/fixtures/runs``.

``real-none-noresults`` is a real run (mode none, input ran 20 s, no result reached the merger);
``real-none-window`` and ``real-active-leaderless`` real ``arfl deploy`` runs (windows; monitor
lines from before the input dropped to keep them small); ``real-active-rtm-kill-replica`` a real
``bench/realtime.py`` run (active, real-time mode, R=2 + standby, replica 0 killed at 100 s;
monitor lines from 10 s before the input, without the fields the report does not read);
``sim-*`` are simulated runs written by arfl's real merger code (see ``make_fixtures.py``):

* ``sim-passive-kill``: one passive replica, driver killed at 15.0 s (journal: died at 15.3 s,
  ready at 19.0 s), first batch after the restart starts at 25.5 s (progress file), then a
  backlog capped at 1000 events per batch;
* ``sim-active-kill``: two active replicas, replica 0 killed at 15.0 s, replica 1 paused
  30.0-33.0 s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from arfl.report import Report, build_report, compare

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


@pytest.fixture(scope="module")
def passive() -> Report:
    return build_report(RUNS / "sim-passive-kill")


@pytest.fixture(scope="module")
def active() -> Report:
    return build_report(RUNS / "sim-active-kill")


def test_fixtures_stay_small() -> None:
    for run in RUNS.iterdir():
        if run.is_dir():
            size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
            # Real runs carry two latency logs (intended and actual send time) and check.json.
            assert size < 320_000, f"{run.name} is {size} bytes"


def test_passive_phases(passive: Report) -> None:
    names = [p.name for p in passive.phases]
    assert names == ["warmup", "steady", "fault-1", "recovery-1", "tail"]
    bounds = {p.name: (p.start_s, p.end_s) for p in passive.phases}
    assert bounds["warmup"] == (0.0, 5.0)
    assert bounds["steady"] == (5.0, 15.0)
    # The impact window: the kill until the restarted replica had caught up, plus 5 s settle.
    # Healthy first: it delivered a result from input sent after the kill (its first batch,
    # seen at the next monitor tick); its lag was back within its steady allowance one tick
    # later.
    f = passive.faults[0]
    first_batch = f.first_batch_s
    assert first_batch is not None and 10.5 < first_batch < 11.5
    assert f.healthy_s is not None and first_batch <= f.healthy_s <= first_batch + 1.0
    assert f.caught_up_s == pytest.approx(f.healthy_s + 1.0)
    assert f.window_ended_by == "caught-up+settle"
    assert bounds["fault-1"] == pytest.approx((15.0, 15.0 + f.caught_up_s + 5.0))
    assert bounds["recovery-1"][0] == pytest.approx(15.0 + f.caught_up_s + 5.0)
    # The input ended at 40 s; the tail runs on until the last results arrived (the 1-s
    # latency interval that held them).
    assert passive.input_end_s == pytest.approx(40.0, abs=0.01)
    assert 40.0 < bounds["tail"][1] <= 42.0
    assert bounds["tail"][1] == passive.overall.end_s
    # The backlog batch's results (the oldest waited ~11 s) and the first 5 s after it.
    fault = passive.phase("fault-1")
    assert fault.count > 1000
    assert fault.percentiles_ms["p99"] is not None and fault.percentiles_ms["p99"] > 10_000


def test_passive_kill_is_detected_recovered_late_and_not_masked(passive: Report) -> None:
    (f,) = passive.faults
    assert (f.kind, f.target, f.at_s, f.duration_s) == ("kill-replica", 0, 0.0 + 15.0, None)
    assert f.detect_s == pytest.approx(0.3)
    assert f.restored_s == pytest.approx(4.0)
    # Output resumes at 25.5 s at the earliest (restart + 9.2 s to the first batch), with the
    # backlog's latencies: recovery cannot be earlier than that.
    assert f.recovery_s is not None and 10.5 < f.recovery_s < 15.0
    # It recovered inside the impact window: no recovery phase after it.
    rec = passive.phase("recovery-1")
    assert rec.start_s == rec.end_s == pytest.approx(15.0 + (f.caught_up_s or 0) + 5.0)
    assert f.masked is False
    assert f.verdict.startswith("not masked: p99 ")
    # The gap runs from the last result before the kill to the first after the restart.
    assert f.max_gap_ms is not None and 10_500 < f.max_gap_ms < 11_600
    assert f.max_gap_ms == passive.longest_gap_ms  # the run's record, exact from the merger
    assert passive.phase("tail").percentiles_ms["p99"] is not None


def test_passive_steady_state_is_unaffected_by_the_fault(passive: Report) -> None:
    steady, tail = passive.phase("steady"), passive.phase("tail")
    assert steady.percentiles_ms["p99"] is not None and steady.percentiles_ms["p99"] < 800
    assert tail.percentiles_ms["p99"] is not None and tail.percentiles_ms["p99"] < 800
    assert steady.max_gap_ms is not None and steady.max_gap_ms < 1000
    assert steady.results_per_s == pytest.approx(200, rel=0.05)


def test_passive_slos_breached(passive: Report) -> None:
    assert not passive.slo.passed
    assert [c.key for c in passive.slo.breaches] == ["p99", "max_gap", "masked"]


def test_active_faults_masked(active: Report) -> None:
    # The kill's impact window runs into the pause (the killed replica delivered again only
    # ~11 s later + 5 s settle): no steady state between the two faults.
    assert [p.name for p in active.phases] == [
        "warmup", "steady", "fault-1", "recovery-1", "fault-2", "recovery-2", "tail",
    ]  # fmt: skip
    kill, pause = active.faults
    assert (kill.kind, kill.target, kill.masked, kill.recovery_s) == ("kill-replica", 0, True, 0)
    assert (pause.kind, pause.target, pause.masked, pause.recovery_s) == ("pause", 1, True, 0)
    assert pause.duration_s == 3.0
    assert pause.detect_s is None  # nothing reacts to a pause
    # Impact windows: the kill's is cut by the pause at 30 s; the paused replica delivered again
    # ~1 s after SIGCONT at 33 s and was caught up at the same tick, plus 5 s settle.
    assert active.phase("fault-1").end_s == pytest.approx(30.0)
    assert kill.window_ended_by == "next fault"
    assert active.phase("fault-2").start_s == pytest.approx(30.0)
    assert pause.healthy_s is not None and 3.0 <= pause.healthy_s <= 4.5
    assert pause.caught_up_s == pause.healthy_s
    assert pause.window_ended_by == "caught-up+settle"
    assert active.phase("fault-2").end_s == pytest.approx(30.0 + pause.caught_up_s + 5.0)
    assert all(f.max_gap_ms is not None and f.max_gap_ms < 1000 for f in active.faults)
    assert active.slo.passed


def test_active_correctness_from_merger(active: Report) -> None:
    c = active.correctness
    assert (c.basis, c.produced, c.expected, c.results, c.missing, c.duplicates, c.divergent) == (
        "merger", 8000, 8000, 8000, 0, 0, 0,
    )  # fmt: skip


def test_replica_rates_show_the_outage(active: Report) -> None:
    s = active.series
    down = [r for t, r in zip(s.rate_t_s, s.replica_rate[0], strict=True) if 17 <= t <= 24]
    assert down and all(r == 0 for r in down)
    merged = [r for t, r in zip(s.rate_t_s, s.output_rate, strict=True) if 17 <= t <= 24]
    assert all(r > 100 for r in merged)  # replica 1 kept delivering
    wins = [r for t, r in zip(s.rate_t_s, s.replica_wins[1], strict=True) if 17 <= t <= 24]
    assert wins == merged  # ... and won every result meanwhile


def test_real_run_without_results(tmp_path: Path) -> None:
    rep = build_report(RUNS / "real-none-noresults")
    assert [p.name for p in rep.phases] == ["warmup", "steady"]
    steady = rep.phase("steady")
    assert steady.count == 0 and steady.percentiles_ms["p99"] is None
    assert steady.end_s == pytest.approx(20.0, abs=0.01)
    # No result at all while input flowed 20 s: the whole steady state is a gap.
    assert steady.max_gap_ms == pytest.approx(15_000, abs=5)
    assert rep.correctness.results == 0 and rep.correctness.produced == 20_000
    assert [c.line for c in rep.slo.breaches] == [
        "p99 (overall) not measured (no results) - cannot meet 3s"
    ]


def _check_shape(doc: dict[str, Any]) -> None:
    for key in ("run", "phases", "faults", "correctness", "slo"):
        assert key in doc
    for p in doc["phases"]:
        for key in ("name", "start_s", "end_s", "p50_ms", "p90_ms", "p99_ms", "p999_ms",
                    "max_ms", "results_per_s", "max_gap_ms"):  # fmt: skip
            assert key in p, key
        assert isinstance(p["name"], str) and isinstance(p["start_s"], float)
    for f in doc["faults"]:
        for key in ("kind", "target", "at_s", "duration_s", "detect_s", "recovery_s", "masked"):
            assert key in f, key
    for key in ("expected", "missing", "duplicates", "divergent"):
        assert key in doc["correctness"]
    assert isinstance(doc["slo"]["passed"], bool)
    assert isinstance(doc["slo"]["breaches"], list)


def test_json_contract(passive: Report, active: Report) -> None:
    for rep in (passive, active):
        doc = json.loads(json.dumps(rep.to_dict()))
        _check_shape(doc)
    doc = passive.to_dict()
    assert doc["phases"][1]["p999_ms"] == passive.phase("steady").percentiles_ms["p99.9"]
    assert doc["faults"][0]["masked"] is False
    assert doc["slo"]["breaches"][0] == "p99 (overall) 11305.0 ms > 1s"


def test_compare_ratios_to_the_first_run(passive: Report, active: Report) -> None:
    comp = compare([passive, active])
    assert comp.runs == ["sim-passive-kill", "sim-active-kill"]
    row = next(r for r in comp.table("p99") if r.phase == "overall")
    first, second = row.values
    assert isinstance(first, float) and isinstance(second, float)
    assert row.ratios == [1.0, pytest.approx(second / first)]
    assert second / first < 0.1
    fault_rows = comp.table("recovery_s")
    assert [r.phase for r in fault_rows] == ["fault-1", "fault-2"]
    assert fault_rows[1].values == [None, 0.0]  # the passive run had one fault only
    masked = comp.table("masked")
    assert masked[0].values == [False, True] and masked[0].ratios == [None, None]
    assert {r.phase for r in comp.table("p50")} >= {"steady", "fault-1", "tail", "overall"}
    doc = comp.to_dict()
    assert doc["runs"] == comp.runs and len(doc["rows"]) == len(comp.rows)


def test_real_windowed_run_on_a_loaded_machine() -> None:
    # A real deploy (mode none, 1-s windows, 200 ev/s for 30 s) on this 2-core machine under
    # load: its batches took 58, 46, 10 and 5 s, so no result came out while the input
    # flowed and all 599 window results arrived 57-60 s after the input start.
    rep = build_report(RUNS / "real-none-window")
    assert rep.input_end_s == pytest.approx(30.0, abs=0.01)
    assert [p.name for p in rep.phases] == ["warmup", "steady"]
    steady = rep.phase("steady")
    assert steady.count == 599 == rep.correctness.results
    assert steady.end_s > 57.0  # measured until the last result, long after the input ended
    p50 = steady.percentiles_ms["p50"]
    assert p50 is not None and 30_000 < p50 < 60_000
    # The whole input ran without a result: a gap from the warm-up's end to the input end.
    assert steady.max_gap_ms == pytest.approx(28_000, abs=5)
    assert rep.longest_gap_ms == 0.0  # the merger counts the wait for a first result apart
    assert rep.correctness.expected is None  # a window pipeline: unknown without --recompute
    assert [round(d / 1000) for _, d in rep.series.batches[0]] == [58, 46, 10, 5]  # s per batch
    assert rep.faults == [] and rep.slo.passed and rep.slo.checks == []


def test_real_active_run_shows_divergence_and_who_delivered() -> None:
    # A real active-leaderless deploy with two replicas (1-s windows, 200 ev/s for 30 s): the
    # merger journaled 49 divergent copies; first results came ~18.6 s after the input start.
    rep = build_report(RUNS / "real-active-leaderless")
    c = rep.correctness
    assert (c.results, c.divergent, c.duplicates, c.produced) == (593, 49, 0, 6000)
    s = rep.series
    assert sorted(s.replica_rate) == [0, 1]
    wins = [sum(s.replica_wins[r]) for r in (0, 1)]
    assert sum(wins) == 593 and all(w > 0 for w in wins)  # both replicas won some results
    assert sorted(len(b) for b in s.batches.values()) == [10, 13]
    # The wait for the first result (it is not a gap to the merger) counts in the steady state.
    steady = rep.phase("steady")
    assert steady.max_gap_ms is not None and steady.max_gap_ms > (rep.longest_gap_ms or 0)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _recomputed_catch_up(run: Path, healthy: float) -> tuple[float, float]:
    """(allowance ms, seconds from the fault) by docs/design.md's definition of *caught up*,
    recomputed from monitor.jsonl and the journal with plain JSON (not the report's code);
    ``healthy``: the report's ``healthy_s`` (its own test is elsewhere)."""
    journal, monitor = _lines(run / "journal.jsonl"), _lines(run / "monitor.jsonl")
    inj = next(e for e in journal if e["event"] == "fault-injected")
    fault, replica = float(inj["started"]), str(inj["replica"])
    warmup = json.loads((run / "spec.json").read_text())["workload"]["warmup"]
    assert warmup.endswith("s"), warmup
    start = next(e["t"] for e in journal if e["event"] == "injector_started") + float(warmup[:-1])
    lags = sorted(
        m["replicas"][replica]["lag_ms"]
        for m in monitor
        if start <= m["t"] < fault and m["input_flowing"]
        and m["replicas"].get(replica, {}).get("lag_ms") is not None
    )  # fmt: skip
    allowance = max(100.0, lags[math.ceil(0.9 * len(lags)) - 1])
    caught = next(
        m["t"]
        for m in monitor
        if m["t"] >= fault + healthy - 1e-3 and m["replicas"][replica]["lag_ms"] <= allowance
    )
    return allowance, caught - fault


def test_caught_up_is_read_from_the_output_not_the_commits() -> None:
    # A real active real-time run (R=2 + standby, 1,000 ev/s, 30-s batches; replica 0 SIGKILLed
    # at 100 s; `bench/realtime.py ... --fault-at 100s`). The restarted replica's
    # first commit came 34.4 s after the kill (its batch's end), but its output was current
    # again 8.8 s after it: the merger's lag of it went 6,505 -> 4,228 -> 9 ms.
    f = build_report(RUNS / "real-active-rtm-kill-replica").faults[0]
    assert (f.kind, f.target) == ("kill-replica", 0)
    assert f.first_batch_s == pytest.approx(34.44, abs=0.01)
    assert f.healthy_s == pytest.approx(7.76, abs=0.01)
    allowance, caught = _recomputed_catch_up(
        RUNS / "real-active-rtm-kill-replica", healthy=f.healthy_s
    )
    assert allowance == 100.0  # its steady lag was 2-88 ms
    assert caught == pytest.approx(8.76, abs=0.01)
    assert f.caught_up_s == pytest.approx(caught, abs=1e-3)
    assert f.caught_up_lag_ms == allowance
    assert f.to_dict()["caught_up_s"] == pytest.approx(caught, abs=1e-3)


def test_caught_up_of_a_micro_batch_replica_allows_its_own_batch_cadence(
    real_leaderless: Report,
) -> None:
    # Micro-batch windowed replicas lag by their window and batch cadence all the time: the
    # allowance is the replica's own steady lag (p90, here ~9 s), so caught up means "as
    # current as before the fault" -- here at once with its first result of input sent after
    # the executor was replaced.
    f = real_leaderless.faults[0]
    assert f.healthy_s is not None
    allowance, caught = _recomputed_catch_up(
        RUNS / "real-leaderless-kill-executor", healthy=f.healthy_s
    )
    assert allowance > 1000
    assert (f.caught_up_lag_ms, f.caught_up_s) == (allowance, pytest.approx(caught, abs=1e-3))
    assert f.caught_up_s == pytest.approx(f.healthy_s, abs=1e-3)


# Two real runs of `arfl experiment configs/experiment.toml` (2026-11-26, 200 ev/s, 70 s,
# kill-executor of replica 0 at 40 s, warm-up 25 s); copied without logs and checkpoints,
# monitor lines before input start - 10 s dropped and progress lines cut to the fields the
# report reads.
@pytest.fixture(scope="module")
def real_passive() -> Report:
    return build_report(RUNS / "real-passive-kill-executor")


@pytest.fixture(scope="module")
def real_leaderless() -> Report:
    return build_report(RUNS / "real-leaderless-kill-executor")


def test_real_kill_executor_phases_start_at_the_injection(
    real_passive: Report, real_leaderless: Report
) -> None:
    for rep, at, replaced in ((real_passive, 39.530, 0.197), (real_leaderless, 38.590, 0.012)):
        names = [p.name for p in rep.phases]
        # The leaderless run's window was cut by the input's end: it runs to the last result.
        tail = ["recovery-1", "tail"] if rep is real_passive else []
        assert names == ["warmup", "steady", "fault-1", *tail]
        assert rep.phase("steady").start_s == 25.0  # the spec's warm-up
        f = rep.faults[0]
        assert (f.kind, f.target) == ("kill-executor", 0)
        assert f.at_s == pytest.approx(at, abs=1e-3)
        # Spark's replacement executor ran within a second ...
        assert f.detect_s == f.restored_s == pytest.approx(replaced, abs=1e-3)
        # ... but the impact window lasts until the replica delivered a result from input
        # sent after the kill (plus the settle time): a new pid is not a healthy replica.
        assert f.healthy_s is not None and f.healthy_s > 10 * replaced
        assert rep.phase("fault-1").start_s == pytest.approx(at, abs=1e-3)
        assert f.window_s is not None and f.window_s > f.healthy_s


def test_real_executor_kill_verdicts_under_the_impact_window(
    real_passive: Report, real_leaderless: Report
) -> None:
    # Re-recorded with this definition: `arfl experiment configs/experiment.toml` (windowed,
    # 200 ev/s, executor of replica 0 SIGKILLed at ~40 s).
    p, a = real_passive.faults[0], real_leaderless.faults[0]
    # One replica: ~11.7 s without any result; its output is back 14.5 s after the kill.
    assert p.masked is False
    assert p.healthy_s == pytest.approx(14.50, abs=0.01)
    assert p.caught_up_s == pytest.approx(14.50, abs=0.01)  # its first batch was current
    assert p.window_ended_by == "caught-up+settle"
    assert p.window_s == pytest.approx(19.50, abs=0.01)
    assert p.max_gap_ms == pytest.approx(11_729.8, abs=0.1)
    assert p.verdict == "not masked: p99 14819.3 ms > 1.1 x steady 5091.3 ms"
    assert p.recovery_s == pytest.approx(14.50, abs=0.01)
    # Two replicas: replica 1 kept delivering, the killed replica 0 delivered results of input
    # sent after the kill only 29.4 s later, so the impact window is cut by the end of the
    # input and runs on to the output's end (37.4 s): the results still in flight count. Its
    # p99 stays within tolerance, but its longest output gap (2.48 s, batch cadence) exceeds
    # 1.1 x the steady state's (1.89 s over a 14-s steady phase): not masked.
    assert a.healthy_s == pytest.approx(29.36, abs=0.01)
    assert a.window_ended_by == "end of input"
    assert a.window_s == pytest.approx(37.36, abs=0.01)
    assert a.max_gap_ms == pytest.approx(2_479.0, abs=0.1)
    assert a.masked is False
    assert a.verdict == "not masked: output gap 2.48 s > 1.1 x steady 1.89 s"
    steady_p99 = real_leaderless.phase("steady").percentiles_ms["p99"]
    assert a.p99_ms is not None and steady_p99 is not None
    assert a.p99_ms <= steady_p99 * real_leaderless.tolerance
    assert a.recovery_s == pytest.approx(17.36, abs=0.01)
    # Both outputs are complete by the independent check (check.json written by deploy).
    for rep, expected in ((real_passive, 3409), (real_leaderless, 3408)):
        c = rep.correctness
        assert (c.basis, c.expected, c.missing, c.duplicates, c.extra) == (
            "independent", expected, 0, 0, 0,
        )  # fmt: skip
        assert c.complete is True
    # What it cost: twice the replicas, ~1.7x the CPU seconds.
    assert real_leaderless.resources.cpu_s_per_replica == {0: 106.4, 1: 109.7}
    assert real_leaderless.resources.cpu_s / real_passive.resources.cpu_s == pytest.approx(
        1.74, abs=0.01
    )


def test_real_runs_json_and_slo_exit_codes(tmp_path: Path) -> None:
    import shutil

    from arfl.cli.main import main

    for name, code, slo in (
        ("real-passive-kill-executor", 1, {"masked": True, "max_gap": "5s"}),
        ("real-leaderless-kill-executor", 0, {"max_gap": "5s", "p99": "20s"}),
        ("real-leaderless-kill-executor", 1, {"masked": True}),
    ):
        run = tmp_path / name
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(RUNS / name, run)
        spec = json.loads((run / "spec.json").read_text())
        spec["report"]["slo"] = slo
        (run / "spec.json").write_text(json.dumps(spec))
        assert main(["report", str(run), "--json", "--no-html"]) == code, name
    doc = build_report(tmp_path / "real-passive-kill-executor").to_dict()
    assert doc["faults"][0]["window_ended_by"] == "caught-up+settle"
    assert doc["faults"][0]["verdict"].startswith("not masked")
    _check_shape(doc)
    assert sorted(doc["slo"]["breaches"]) == sorted(
        [c["line"] for c in doc["slo"]["checks"] if not c["passed"]]
    )
    assert len(doc["slo"]["breaches"]) == 2
