"""The benchmark scripts' own arithmetic (they run real deployments; this checks what they
compute from a recorded run)."""

from __future__ import annotations

import itertools
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "runs" / "real-passive-kill-executor"


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))


def test_latency_floor_warmup_counts_from_the_input_start() -> None:
    import latency_floor

    from arfl.measure.histogram import read_latency_log
    from arfl.report.rundata import load_run

    intervals = read_latency_log(RUN / "latency.hlog")
    input_start = load_run(RUN).input_start
    assert input_start is not None
    # The merger logged (empty) intervals for 27 s before the input started: counting the
    # warm-up from the log's first interval would let every warm-up result in.
    assert intervals[0].start_s < input_start - 20
    warmup = 20.0
    after = sum(iv.count for iv in intervals if iv.start_s >= input_start + warmup)
    assert 0 < after < sum(iv.count for iv in intervals)
    got = latency_floor.steady_percentiles(RUN, warmup)
    assert got["count"] == after


def test_realtime_boundary_medians_count_only_the_phase_batches() -> None:
    import realtime

    from arfl.report.build import build_report
    from arfl.run.progress import batch_timing
    from arfl.run.rundir import read_jsonl

    report = build_report(RUN)
    steady = next(p for p in report.phases if p.name == "steady")
    assert report.input_start is not None
    lo, hi = report.input_start + steady.start_s, report.input_start + steady.end_s
    lines = read_jsonl(RUN / "progress" / "replica-0.jsonl")
    inside = [p for p in lines if lo <= datetime.fromisoformat(p["timestamp"]).timestamp() < hi]
    # The fixture's steady phase holds some of its batches, not all: the filter matters.
    assert 2 < len(inside) < len(lines)
    got = realtime.boundary_ms(RUN, report, steady)
    assert got["queryPlanning_ms"] == statistics.median(
        p["durationMs"]["queryPlanning"] for p in inside
    )
    spans = sorted(t for t in map(batch_timing, inside) if t is not None)
    idle = [b[0] - a[0] - a[1] / 1000 for a, b in itertools.pairwise(spans)]
    assert got["between_ms"] == pytest.approx(1000 * statistics.median(idle), abs=0.01)
    assert realtime.boundary_ms(RUN, report, None) == {}


def _progress(start: str, duration_ms: int, **parts: int) -> dict[str, object]:
    return {"timestamp": start, "batchDuration": duration_ms, "durationMs": parts}


def test_survivor_boundary_is_one_whose_stall_runs_at_the_fault_or_the_next_one(
    tmp_path: Path,
) -> None:
    import json

    import realtime

    from arfl.run.rundir import read_jsonl

    (tmp_path / "progress").mkdir()
    lines = {
        # The killed replica's own batch ends just after the kill: not the survivor's.
        0: [_progress("2026-11-28T00:00:00Z", 30_500)],
        # The survivor's: ends at 0:30.2; the next starts at 0:30.6 and launches its tasks
        # 0.3 s later (offsets, offset log, planning), ends at 1:00.8; no line after it.
        1: [
            _progress("2026-11-28T00:00:00Z", 30_200),
            _progress(
                "2026-11-28T00:00:30.6Z", 30_200, latestOffset=100, walCommit=10, queryPlanning=190
            ),
        ],
    }
    for i, ls in lines.items():
        (tmp_path / "progress" / f"replica-{i}.jsonl").write_text(
            "".join(json.dumps(p) + "\n" for p in ls)
        )

    def at(clock: str) -> float:
        return datetime.fromisoformat(f"2026-11-28T00:{clock}+00:00").timestamp()

    def boundary_at(kill_at: str, seen_at: str | None = None) -> float | None:
        kill = at(kill_at)
        journal = [{"event": "fault-injected", "replica": 0, "started": kill}]
        (tmp_path / "journal.jsonl").write_text(json.dumps(journal[0]) + "\n")
        seen = None if seen_at is None else at(seen_at)
        tick = {"t": kill + 0.5, "replicas": {"1": {"last_seen_t": seen}}}
        (tmp_path / "monitor.jsonl").write_text(json.dumps(tick) + "\n")
        return realtime.survivor_boundary_s(tmp_path, read_jsonl(tmp_path / "journal.jsonl"))

    # Killed 0.35 s after the survivor's boundary, before its next batch launched: that
    # boundary, before the kill.
    assert boundary_at("00:30.55") == pytest.approx(-0.35, abs=1e-6)
    # Killed after the launch (0:30.9), or 2.5 s after the boundary: the next one.
    assert boundary_at("00:30.95") == pytest.approx(29.85, abs=1e-6)
    assert boundary_at("00:32.7") == pytest.approx(28.1, abs=1e-6)
    # No line after the boundary at 1:00.8 (the input ended first): the merger's next tick
    # says whether the survivor had delivered since before the kill.
    assert boundary_at("01:01.0", seen_at="01:00.7") == pytest.approx(-0.2, abs=1e-6)
    assert boundary_at("01:01.0", seen_at="01:01.3") is None
    # ... and not when the boundary is more than STALL_LOOKBACK_S before it.
    assert boundary_at("01:04.0", seen_at="01:00.7") is None
    # No fault on one replica (or none at all): nothing to measure.
    journal = read_jsonl(tmp_path / "journal.jsonl")
    assert realtime.survivor_boundary_s(tmp_path, [{**journal[0], "replica": None}]) is None
    assert realtime.survivor_boundary_s(tmp_path, []) is None


def test_offset_table_splits_kills_by_boundary_before_or_after_the_catch_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import realtime

    base = {"pipeline": "per-record", "fault": "kill-replica", "mode": "active", "ratio": 1.0}
    rows = [
        {**base, "survivor_boundary_s": 14.0, "caught_up_s": 9.0, "masked": True},
        {**base, "survivor_boundary_s": 6.0, "caught_up_s": 9.0, "masked": False},
        {**base, "survivor_boundary_s": 7.0, "caught_up_s": None, "masked": False},
        {**base, "survivor_boundary_s": 20.0, "caught_up_s": 10.0, "masked": False},
    ]
    realtime.offset_table(rows)
    out = capsys.readouterr().out
    assert "boundary after the catch-up: masked 1 of 2" in out
    assert "boundary before it (or none): masked 0 of 2" in out


def test_realtime_spec_takes_extra_spark_conf() -> None:
    import realtime

    t = realtime.Timing(60.0, 30.0, 10.0, 30.0)
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file:///tmp/ev"}
    spec = realtime.spec_for("per-record", "active", 1000, t, "kill-replica", spark_conf=conf)
    assert spec.spark.conf["spark.eventLog.enabled"] == "true"
    assert spec.spark.conf["spark.sql.shuffle.partitions"] == "2"  # the bench's own kept
    plain = realtime.spec_for("per-record", "active", 1000, t, "kill-replica")
    assert "spark.eventLog.enabled" not in plain.spark.conf


def test_realtime_build_ahead_variant_and_its_take_over_time(tmp_path: Path) -> None:
    import realtime

    t = realtime.Timing(60.0, 30.0, 10.0, 30.0)
    off = realtime.spec_for("per-record", "active", 1000, t, "kill-replica", standby=1,
                            build_ahead=False)  # fmt: skip
    assert off.spark.flag("arfl.standbyBuildAhead", True) is False
    on = realtime.spec_for("per-record", "active", 1000, t, "kill-replica", standby=1)
    assert "arfl.standbyBuildAhead" not in on.spark.conf
    (tmp_path / "logs").mkdir()
    assert realtime.takeover(tmp_path) == {}
    log = tmp_path / "logs" / "standby-0.log"
    log.write_text(
        "[arfl-driver 20:08:17] take-over: pipeline built ahead, sink added in 0.04s, query "
        "start 0.02s, 0.07s since assigned\n"
    )
    assert realtime.takeover(tmp_path) == {"takeover_s": 0.07, "built_ahead": True}
    log.write_text(
        "[arfl-driver 20:08:17] take-over: pipeline built in 0.34s, query start 0.02s, "
        "0.37s since assigned\n"
    )
    assert realtime.takeover(tmp_path) == {"takeover_s": 0.37, "built_ahead": False}
    row = {"pipeline": "windowed", "fault": "kill-replica", "mode": "active", "standby": 1,
           "build_ahead_off": True}  # fmt: skip
    assert realtime._variant(row) == "windowed kill-replica active+standby no-build-ahead"


def test_realtime_names_the_interval_and_round_of_a_sweep_run() -> None:
    import realtime

    t = realtime.Timing(60.0, 30.0, 10.0, 30.0)
    spec = realtime.spec_for("per-record", "active", 1000, t, None, 150.0, "60s")
    assert spec.replication.trigger_interval == 60.0
    row = {"mode": "active", "rate": 1000, "interval": "60s", "round": 2}
    assert realtime._sweep_variant(row) == "active R=2 1000 ev/s int=60s #2"
    assert realtime._sweep_variant({"mode": "active", "rate": 1000}) == "active R=2 1000 ev/s"
    fault = {"pipeline": "per-record", "fault": "kill-replica", "mode": "active", "interval": "30s"}
    assert realtime._variant(fault) == "per-record kill-replica active int=30s"


def test_realtime_runs_the_leader_design_on_micro_batch_when_asked() -> None:
    import realtime

    t = realtime.Timing(60.0, 30.0, 10.0, 30.0)
    spec = realtime.spec_for("per-record", "active-leader", 1000, t, "kill-executor")
    assert (spec.replication.mode, spec.replication.replicas) == ("active-leader", 2)
    assert spec.replication.trigger == "micro-batch"
    assert [(c.fault, c.replica) for c in spec.chaos] == [("kill-executor", 0)]


def test_null_faults_reads_only_the_fault_free_output_and_judges_both_ways() -> None:
    import null_faults

    from arfl.report import build_report

    run = ROOT / "tests" / "fixtures" / "runs" / "real-active-rtm-kill-replica"
    rows = null_faults.null_faults(run, steady_s=20.0, window_s=15.0, tolerance=1.1, warmup_s=60)
    report = build_report(run)
    kill_s = report.faults[0].at_s
    assert kill_s is not None and rows
    # Every null fault's window ends before the real fault; steady phases start after warm-up.
    assert all(r["t_s"] >= 80.0 and r["t_s"] + 15.0 <= kill_s + 0.5 for r in rows)
    # The worst stretch is a stretch's: recomputed from the intervals (hdrh's reader).
    ivs = null_faults.intervals(run / "latency.hlog")
    start = report.input_start
    assert start is not None
    r = rows[0]
    t = start + r["t_s"]
    stretches = [null_faults.p99(ivs, t - 20.0 + k, t - 5.0 + k)[0] or 0.0 for k in range(6)]
    whole = null_faults.p99(ivs, t - 20.0, t)[0]
    assert whole is not None and r["steady_p99"] == pytest.approx(whole, abs=0.05)
    assert r["stretch_p99"] == pytest.approx(max([whole, *stretches]), abs=0.05)
    assert rows[0]["t_s"] == 80.0  # warm-up 60 s + steady 20 s


def test_the_reports_masked_figures_survive_a_reading_with_hdrhs_own_reader() -> None:
    """The window p99 and the steady p99 at the window's length that decided a real run's
    masked verdict, recomputed from ``latency.hlog`` with hdrh's reader (bench/null_faults.py:
    no report code; an interval belongs to a span when it starts in it, the report takes its
    midpoint, so spans shift by up to half a second)."""
    import null_faults

    from arfl.report import build_report

    run = ROOT / "tests" / "fixtures" / "runs" / "real-active-rtm-kill-replica"
    report = build_report(run)
    (f,) = report.faults
    assert report.input_start is not None and f.at_s is not None and f.window_s is not None
    assert f.p99_ms is not None and f.steady_p99_ms is not None
    ivs = null_faults.intervals(run / "latency.hlog")
    kill = report.input_start + f.at_s
    window, _ = null_faults.p99(ivs, kill, kill + f.window_s)
    steady_from = report.input_start + report.warmup_s
    stretches = [
        null_faults.p99(ivs, a, a + f.window_s)
        for a in null_faults._seconds(steady_from, kill - f.window_s + 1.0)
    ]
    whole, _ = null_faults.p99(ivs, steady_from, kill)
    assert window is not None and whole is not None
    worst = max([whole] + [v for v, n in stretches if v is not None and n >= 100])
    assert window == pytest.approx(f.p99_ms, rel=0.05), (window, f.p99_ms)
    assert worst == pytest.approx(f.steady_p99_ms, rel=0.05), (worst, f.steady_p99_ms)
    assert worst > whole  # the stretch reference is not the whole phase's here
    assert f.masked is (f.p99_ms <= report.tolerance * f.steady_p99_ms)


def test_the_reports_recovery_time_survives_a_reading_with_hdrhs_own_reader() -> None:
    """A real passive run's recovery from an executor kill (its output stopped, then a backlog
    of slow seconds), recomputed with bench/null_faults.py's rule from ``latency.hlog`` read by
    hdrh: the worst steady second as the reference, then the first T after which every second
    is good through the impact window and ``settle`` (5 s). No report code shares the rule."""
    import null_faults

    from arfl.report import build_report

    run = ROOT / "tests" / "fixtures" / "runs" / "real-passive-kill-executor"
    report = build_report(run)
    (f,) = report.faults
    assert report.input_start is not None and f.at_s is not None and f.window_s is not None
    assert f.recovery_s is not None and f.recovery_s > 5.0  # the effect outlasted settle
    ivs = null_faults.intervals(run / "latency.hlog")
    kill = report.input_start + f.at_s
    steady = [
        null_faults.p99(ivs, a, a + 1.0)
        for a in null_faults._seconds(report.input_start + report.warmup_s, kill)
    ]
    whole, _ = null_faults.p99(ivs, report.input_start + report.warmup_s, kill)
    assert whole is not None
    worst = max([whole] + [v for v, n in steady if v is not None and n >= 100])
    assert worst == pytest.approx(f.steady_interval_p99_ms, rel=0.05)
    per_iv = [(s, h.get_value_at_percentile(99.0) / 1000.0) for s, h in ivs if h.total_count]
    end = max(s for s, _ in ivs) + 1.0
    rec = null_faults.recovery(
        per_iv, kill, end, 5.0, report.tolerance * worst, through=kill + f.window_s
    )
    assert rec is not None and rec == pytest.approx(f.recovery_s, abs=1.0), (rec, f.recovery_s)


def test_realtime_runs_without_an_interval(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ``--interval``: every run keeps the spec's default interval (the empty default is not
    parsed as an interval, which would fail before anything ran)."""
    import realtime

    class Parsed(Exception):
        pass

    def up() -> None:
        raise Parsed

    monkeypatch.setattr(realtime.stack, "up", up)
    argv = ["--faults", "", "--sweep", "1000", "--runs", str(tmp_path), "--out", "x.json"]
    with pytest.raises(Parsed):
        realtime.main(argv)
    with pytest.raises(SystemExit):
        realtime.main([*argv, "--interval", "30s,soon"])


def test_realtime_resume_variants_and_placements_are_lists(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--resume checkpoint,peer`` runs each active fault variant with each, at each of
    ``--after-boundary 2s,20s``; an unknown resume or a bad placement is refused before
    anything runs."""
    import realtime

    ran: list[tuple[str, float | None]] = []

    def run(spec: Any, runs: Path) -> Any:
        ran.append((spec.replication.resume, spec.chaos[0].after_boundary))
        raise realtime.ArflError("not here")

    monkeypatch.setattr(realtime.stack, "up", lambda: None)
    monkeypatch.setattr(realtime, "run", run)
    argv = ["--modes", "active", "--pipelines", "windowed", "--faults", "kill-replica"]
    argv += ["--sweep", "", "--runs", str(tmp_path), "--out", str(tmp_path / "x.json")]
    realtime.main([*argv, "--resume", "checkpoint,peer", "--after-boundary", "2s,20s"])
    assert ran == [("checkpoint", 2.0), ("peer", 2.0), ("checkpoint", 20.0), ("peer", 20.0)]
    realtime.main(argv)
    assert ran[4:] == [("auto", None)]
    for bad in (["--resume", "peer,latest"], ["--after-boundary", "2s,soon"]):
        with pytest.raises(SystemExit):
            realtime.main([*argv, *bad])
    assert len(ran) == 5


def test_realtime_places_a_kill_after_the_survivors_boundary_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import realtime

    t = realtime.Timing(145.0, 85.0, 35.0, 30.0)
    spec = realtime.spec_for("per-record", "active", 1000, t, "kill-replica", after_boundary="5s")
    [fault] = spec.chaos
    assert (fault.at, fault.after_boundary) == (85.0, 5.0)
    [plain] = realtime.spec_for("per-record", "active", 1000, t, "kill-replica").chaos
    assert plain.after_boundary is None
    monkeypatch.setattr(realtime.stack, "up", lambda: None)
    with pytest.raises(SystemExit):  # refused before anything is deployed
        realtime.main(["--after-boundary", "soon", "--runs", str(tmp_path), "--out", "x.json"])


def test_rtm_knobs_sets_the_shuffle_flush_of_a_windowed_variant() -> None:
    import realtime
    import rtm_knobs

    t = realtime.Timing(150.0, 150.0, 70.0, 150.0)
    base = realtime.spec_for("windowed", "active", 1000, t, None, 150.0, "30s")
    spec = rtm_knobs.variant_spec(base, rtm_knobs.VARIANTS["shuffle flush 1 ms"])
    assert spec.spark.conf[rtm_knobs.SHUFFLE_FLUSH_CONF] == "1"
    assert spec.spark.conf["spark.sql.shuffle.partitions"] == "2"  # the bench's own kept
    assert spec.has_window and rtm_knobs.SHUFFLE_FLUSH_CONF not in base.spark.conf


def test_rtm_knobs_sets_the_injectors_linger_and_the_mergers_fetch_wait() -> None:
    import realtime
    import rtm_knobs

    t = realtime.Timing(150.0, 150.0, 70.0, 150.0)
    base = realtime.spec_for("per-record", "active", 1000, t, None, 150.0, "30s")
    spec = rtm_knobs.variant_spec(base, rtm_knobs.VARIANTS["injector linger 0 ms"])
    assert spec.workload.linger_ms == 0.0 and base.workload.linger_ms == 2.0
    assert spec.workload.rate == base.workload.rate == 1000  # the rest of [workload] kept
    spec = rtm_knobs.variant_spec(base, rtm_knobs.VARIANTS["merger fetch wait 1 ms"])
    assert spec.merger.fetch_wait_ms == 1 and spec.merger.linger_ms == base.merger.linger_ms
    # a variant value the spec refuses is refused here too, with its key path
    with pytest.raises(ValidationError, match=r"merger\.fetch_wait"):
        rtm_knobs.variant_spec(base, rtm_knobs.Knobs({}, {}, {}, merger={"fetch_wait": 120.0}))


def test_p_masked_places_one_moment_per_stratum_and_bounds_its_share() -> None:
    import p_masked

    moments = p_masked.placements(10, 70.0, 100.0, seed=7)
    assert len(moments) == 10 and moments == sorted(moments)
    assert all(70.0 + 3 * k <= m <= 70.0 + 3 * (k + 1) for k, m in enumerate(moments))
    # The Wilson interval: what 10 placements can say (9/10 is not "at least 0.95").
    lo, hi = p_masked.wilson(9, 10)
    assert lo == pytest.approx(0.596, abs=0.001) and hi == pytest.approx(0.982, abs=0.001)
    assert p_masked.wilson(10, 10)[1] == 1.0 and p_masked.wilson(0, 0) == (0.0, 1.0)


def test_p_masked_reanalyse_judges_an_earlier_outs_runs_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--reanalyse`` runs nothing: each row of an earlier ``--out`` is judged again from its
    run directory (a stale outcome and cause replaced), a failed run's row and one whose run
    directory is gone are kept, the broker's pauses are kept where its GC log no longer reaches
    the window, and the rows are written to ``--out``."""
    import json

    import p_masked

    from arfl.report import build_report

    monkeypatch.setattr(p_masked, "gc_pauses", lambda log, lo, hi: None)  # rotated away
    run = ROOT / "tests" / "fixtures" / "runs" / "real-active-rtm-kill-replica"
    earlier, out = tmp_path / "pm.json", tmp_path / "again.json"
    row = {"fault": "kill-replica", "placement": 0, "at": 20.0, "seed": 5, "run": str(run)}
    rows = [
        {**row, "outcome": "stale", "cause": "stale", "broker_pauses_ms": [12.5]},
        {"fault": "kill-executor", "placement": 0, "at": 21.0, "seed": 5, "outcome": "failed",
         "cause": "failed", "error": "boom"},
        {**row, "at": 22.0, "run": str(tmp_path / "gone"), "outcome": "masked", "cause": ""},
    ]  # fmt: skip
    earlier.write_text(json.dumps(rows))
    assert p_masked.main(["--reanalyse", str(earlier), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    want = build_report(run).faults[0].outcome
    assert "stale" not in captured.out and f"kill-replica     20.0 {want}" in captured.out
    assert "kill-executor    21.0 failed" in captured.out, captured.out
    assert "kill-replica     22.0 masked" in captured.out, captured.out
    assert f"{tmp_path / 'gone'}: not judged again" in captured.err, captured.err
    assert "seed [5], judged again from" in captured.out
    assert "kill-executor: P(masked) = 0/0" in captured.out, captured.out
    again = json.loads(out.read_text())
    assert [r["outcome"] for r in again] == [want, "failed", "masked"]
    assert again[0]["broker_pauses_ms"] == [12.5] and again[0]["run"] == str(run)


def test_the_no_yield_spec_is_the_p_masked_default_with_the_yield_off() -> None:
    """bench/specs/pmasked-no-yield.toml says it is bench/p_masked.py's own spec with one key
    changed: the no-yield tallies compare with the default's only while that holds."""
    import copy
    import tomllib

    import p_masked

    want = copy.deepcopy(p_masked.DEFAULT_SPEC)
    want["replication"]["standby_yield"] = False
    spec = ROOT / "bench" / "specs" / "pmasked-no-yield.toml"
    assert tomllib.loads(spec.read_text()) == want


def test_gc_pauses_reads_g1_and_zgc_pauses_from_the_log_and_its_rotations(tmp_path: Path) -> None:
    from _common import gc_pauses

    log = tmp_path / "kafka-gc.log"
    assert gc_pauses(log, 0.0, 1e12) is None  # no log: nothing known, not "no pauses"
    (tmp_path / "kafka-gc.log.0").write_text(
        "[2026-12-06T04:00:00.000+0000][0.011s] Using G1\n"
        "[2026-12-06T04:02:33.758+0000][469.152s] GC(60) Pause Young (Normal) "
        "(G1 Evacuation Pause) 267M->101M(1024M) 81.339ms\n"
    )
    (tmp_path / "kafka-gc.log.bak").write_text(
        "[2026-12-06T04:03:00.000+0000][1.0s] GC(1) Pause Young (Normal) 5M->1M(1024M) 50.0ms\n"
    )
    log.write_text(
        "[2026-12-06T04:05:05.538+0000][5.066s] GC(3) Pause Relocate Start 0.010ms\n"
        "[2026-12-06T04:05:05.614+0000][5.142s] GC(3) Concurrent Relocate 72.097ms\n"
        "[2026-12-06T04:05:05.614+0000][5.142s] GC(3) Garbage Collection (Warmup) 320M->192M\n"
        "[2026-12-06T04:05:06.000+0000][5.5s] GC(4) Y: Pause Mark Start (Major) 0.020ms\n"
    )
    end = datetime(2026, 12, 6, 4, 2, 33, 758000, tzinfo=UTC).timestamp()
    # A concurrent phase is no pause; another file beside the log is not its rotation.
    assert gc_pauses(log, end - 1, end + 1e4) == [81.339, 0.01, 0.02]
    # A line's time is the pause's end: a pause overlaps a window that ends during it ...
    assert gc_pauses(log, end - 1, end - 0.05) == [81.339]
    # ... and not one that starts after it ended.
    assert gc_pauses(log, end + 0.001, end + 1e4) == [0.01, 0.02]
    assert gc_pauses(log, end - 60, end - 30) == []
    # A window before the log's first line: nothing known (rotated away), not "no pauses".
    assert gc_pauses(log, end - 200, end - 190) is None


def test_p_masked_names_a_broker_pause_long_enough_to_break_the_bar_on_its_own() -> None:
    import p_masked

    row = {"outcome": "not masked", "verdict": "not masked: p99", "window_s": 6.6,
           "caught_up_s": 1.6, "survivor_boundary_s": 54.8, "held_to_ms": 14.3,
           "steady_p50_ms": 6.5, "broker_pauses_ms": [18.6, 13.6]}  # fmt: skip
    assert p_masked.cause(row) == "broker pause"
    # 13.6 ms lifts a 6.5-ms record past 14.3 ms; 7 ms does not, and against a 85-ms bar
    # neither does 18.6 ms.
    assert p_masked.cause({**row, "broker_pauses_ms": [13.6]}) == "broker pause"
    assert p_masked.cause({**row, "broker_pauses_ms": [0.01, 7.0]}) == "p99"
    assert p_masked.cause({**row, "held_to_ms": 85.0}) == "p99"
    assert p_masked.cause({**row, "broker_pauses_ms": None}) == "p99"  # no GC log
    # The replicas' own causes come first.
    assert p_masked.cause({**row, "survivor_boundary_s": 1.0}) == "survivor boundary"
    assert p_masked.cause({**row, "caught_up_s": None}) == "not caught up"
    assert p_masked.cause({**row, "outcome": "masked"}) == ""
    assert p_masked.longest_pause(row) == 18.6 and p_masked.longest_pause({}) is None


def test_p_masked_places_a_merger_fault_without_a_replica_and_blames_no_replica_for_it() -> None:
    import p_masked

    base = {**p_masked.DEFAULT_SPEC, "merger": {"standby": 1}}
    merger = p_masked.with_fault(base, "kill-merger", 101.5, 0).chaos[0]
    assert merger.fault == "kill-merger" and merger.replica is None
    assert p_masked.with_fault(base, "kill-replica", 101.5, 0).chaos[0].replica == 0
    # A merger kill has no catch-up and no survivor: a miss is the broker's or the output's.
    row = {"outcome": "not masked", "verdict": "not masked: p99", "window_s": 6.0,
           "caught_up_s": None, "survivor_boundary_s": 1.0, "held_to_ms": 20.0,
           "steady_p50_ms": 6.0, "broker_pauses_ms": [], "on_merger": True}  # fmt: skip
    assert p_masked.cause(row) == "p99"
    assert p_masked.cause({**row, "broker_pauses_ms": [15.0]}) == "broker pause"
    assert p_masked.cause({**row, "on_merger": False}) == "survivor boundary"


def test_boundary_costs_splits_a_boundary_into_sparks_own_parts(tmp_path: Path) -> None:
    import json

    import boundary_costs

    (tmp_path / "progress").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps({"replication": {"trigger_interval": "30s"}}))
    dur = {"addBatch": 30_120, "queryPlanning": 170, "latestOffset": 20, "walCommit": 1,
           "commitOffsets": 2, "triggerExecution": 30_330}  # fmt: skip
    lines = [
        {"timestamp": "2026-12-04T19:00:00.000Z", "runId": "a", "durationMs": dur},
        {"timestamp": "2026-12-04T19:00:30.370Z", "runId": "a", "durationMs": dur},
        {"timestamp": "2026-12-04T19:01:10.000Z", "runId": "b", "durationMs": dur},
    ]
    (tmp_path / "progress" / "replica-0.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    rows = boundary_costs.rows(tmp_path)
    assert [r["first"] for r in rows] == [True, False, True]
    assert rows[1]["gap"] == pytest.approx(40.0, abs=1.0)  # 30.370 s - 30.330 s
    assert rows[1]["addBatch overrun"] == 120.0 and rows[1]["whole overrun"] == 330.0
    assert rows[1]["queryPlanning"] == 170.0 and rows[2]["gap"] is None


def test_p_masked_runs_a_users_spec_file_with_its_faults_replaced() -> None:
    import p_masked

    base = p_masked.base_of(ROOT / "configs" / "clicks.toml")
    spec = p_masked.with_fault(base, "kill-executor", 77.5, 3)
    assert [(c.fault, c.at, c.after_boundary) for c in spec.chaos] == [
        ("kill-executor", 77.5, None)
    ]
    assert spec.name == "clicks-kill-executor-3" and spec.workload.rate == 1000
    assert spec.replication.standby == 1 and spec.replication.trigger_interval == 60.0


def test_real_outages_places_real_outages_whose_windows_close() -> None:
    import random

    import real_outages

    from arfl.configs.chaos import unjudgeable

    rng = random.Random(3)
    for case in ("lone-pause", "lone-kill", "boundary"):
        for k in range(3):
            spec = real_outages.case_spec(case, k, rng)
            ats = [c.at for c in spec.chaos]
            assert ats == sorted(ats) and not unjudgeable(
                spec.chaos, spec.workload.duration, spec.report.settle
            ), (case, ats)
            lone = case != "boundary"
            assert (spec.replication.replicas, spec.replication.mode == "none") == (
                (1, True) if lone else (2, False)
            )
            gaps = [b - a for a, b in itertools.pairwise(ats)]
            assert all(g >= (10.0 if case == "lone-pause" else 60.0) for g in gaps), gaps
            if case == "boundary":
                (c,) = spec.chaos
                assert c.after_boundary is not None and 29.0 <= c.after_boundary <= 31.0
            assert spec.workload.warmup is None  # automatic, as a user leaves it


def test_real_outages_judges_harm_from_the_hlog_alone() -> None:
    import real_outages

    runs = ROOT / "tests" / "fixtures" / "runs"
    # A kill the report calls masked: no second without results, nothing 5x the steady p99.
    (masked,) = real_outages.analyse("x", runs / "real-active-rtm-kill-replica")
    assert (masked["outcome"], masked["real"], masked["silent_s"]) == ("masked", False, 0)
    assert masked["window_max_ms"] < real_outages.OUTAGE_FACTOR * masked["steady_p99_ms"]
    # A lone passive replica's lost executor: its output stopped for the whole window.
    (lost,) = real_outages.analyse("x", runs / "real-passive-kill-executor")
    assert (lost["outcome"], lost["real"]) == ("not masked", True)
    assert lost["silent_s"] >= real_outages.SILENT_S
