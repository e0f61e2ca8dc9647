"""Mode ``active`` on Spark's real-time mode: R=2 replicas, no coordination, real executors.

A window aggregation (updates carrying ``window + key + n``) across a replica kill: the
standby starts at a recent window's first events, both replicas' topics hold every update id
with equal hashes, and the merged output equals the offline recomputation; from a peer's
checkpoint likewise. Per record, with an executor kill and a replica kill, the replicas' batch
boundaries are staggered, both emit every result id with equal hashes, the output stays
complete, duplicate-free and equal to the offline recomputation, and the killed replica is
restarted from its checkpoint (an executor loss either is retried inside the replica or fails
its query, which is restarted too; ``resume = "checkpoint"``). With a warm standby and the
default ``resume``, the killed replica starts at the output frontier instead: it replays
nothing below it and emits every result from it; a lost executor hands its replica to the
standby as well. Pause, slow and partition each show their effect on the faulted replica's
output and their revert.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from deploy_checks import (
    both_replicas_agree,
    caught_up_from_topics,
    check_against_offline,
    check_silent_then_resumed,
    journal_events,
    lag_over_time,
    latency_against_topics,
    realtime_spec,
    replica_outputs,
    windowed_spec,
)

from arfl.configs.realtime import SHUFFLE_FLUSH_CONF, SHUFFLE_FLUSH_MS
from arfl.configs.spec import Spec
from arfl.configs.window_start import WINDOW_START_MARGIN_MS
from arfl.errors import ArflError
from arfl.orchestrate.deploy import DeployOptions, DeployResult, deploy
from arfl.orchestrate.standbys import STANDBY_STOP_GRACE_S, YIELD_MAX_S
from arfl.paths import state_dir
from arfl.replica.standby import KAFKA_SOURCE_LOG, KAFKA_SOURCE_LOG_HEADER, REHEARSAL_RECORDS
from arfl.replica.warmup import WARMUP_RECORDS, warmup_topic
from arfl.report import build_report, verdicts
from arfl.run.records import parse_result
from arfl.run.rundir import read_jsonl
from arfl.run.streams import MonitorSnapshot
from arfl.stack import StackInfo
from arfl.stack.topics import read_to_end

pytestmark = pytest.mark.integration

INTERVAL_S = 5.0


def _spark_scratch(home: Path) -> set[str]:
    """What Spark applications left in a SPARK_HOME: ``work/<app>``, ``tmp/<scratch>``."""
    return {
        f"{d}/{p.name}"
        for d in ("work", "tmp")
        if (home / d).is_dir()
        for p in (home / d).iterdir()
    }


def _per_record_spec(name: str, duration: str = "15s", **extra: Any) -> Spec:
    return realtime_spec(name, duration, INTERVAL_S, **extra)


def _check_ok(result: DeployResult) -> dict[str, Any]:
    """The independent check (no Spark, no replica code) found every result, once, right."""
    check: dict[str, Any] = json.loads((result.run_dir / "check.json").read_text())
    assert check["ok"] is True, check
    assert check["missing"] == check["duplicates"] == check["wrong"] == 0, check
    return check


def _resumed_at_the_frontier(
    info: StackInfo, result: DeployResult, killed: int, offsets: dict[str, int]
) -> None:
    """The restarted replica's output is the survivor's, minus results below the frontier it
    never re-read: every result at or above ``offsets`` is in it, and what it emitted twice
    (its last results before the kill, read again) is all at or above them too."""
    outs = replica_outputs(info, result)
    mine, other = outs[killed], outs[1 - killed]

    def offset_ok(rid: str) -> bool:
        p, o = rid.split(":")
        return int(o) >= offsets[p]

    assert set(mine) <= set(other), sorted(set(mine) - set(other))[:3]
    assert not [rid for rid in mine if mine[rid][0].hash != other[rid][0].hash]
    above = {rid for rid in other if offset_ok(rid)}
    assert above and above <= set(mine), sorted(above - set(mine))[:3]
    twice = [rid for rid, copies in mine.items() if len(copies) > 1]
    assert all(offset_ok(rid) for rid in twice), [r for r in twice if not offset_ok(r)][:3]


def _taken_over_at_the_frontier(
    info: StackInfo, spec: Spec, result: DeployResult, replica: int
) -> dict[str, Any]:
    """Replica ``replica`` was restarted once, by standby 0, at the output frontier, and the
    output is complete, duplicate-free, equal to the recomputation and to the survivor's where
    the restarted replica read. Returns its ``replica-restarted`` event."""
    (restarted,) = journal_events(result.run_dir, "replica-restarted")
    assert restarted["replica"] == replica and restarted["standby"] == 0, restarted
    assert restarted["resume"] == "output" and set(restarted["offsets"]) == {"0", "1"}
    assert not journal_events(result.run_dir, "replica-gave-up")
    assert result.summary["divergent"] == 0
    check_against_offline(info, spec, result)
    _check_ok(result)
    _resumed_at_the_frontier(info, result, replica, restarted["offsets"])
    # A standby alive when the run stopped (the successor, started 20 s after the take-over,
    # possibly still starting) was stopped within its grace, not the replicas' 30-s timeout:
    # one still starting acts on SIGTERM once its session is up (a driver that also waited for
    # its warm-up held the stop 28 s).
    # (Within the grace, plus the tree's grace of a standby that exited by itself, 5 s.)
    run = result.run_dir
    started = {e["standby"] for e in journal_events(run, "standby-started")}
    promoted = {e["standby"] for e in journal_events(run, "replica-started") if "standby" in e}
    died = {e["standby"] for e in journal_events(run, "standby-died")}
    stopped = journal_events(run, "standby-stopped")
    assert {e["standby"] for e in stopped} == started - promoted - died, stopped
    for e in stopped:
        assert e["after_s"] <= STANDBY_STOP_GRACE_S + 5.0 + 2.0, e
        assert not (run / "checkpoints" / f"standby-{e['standby']}").exists()
    return restarted


def _hops_measured(
    info: StackInfo, result: DeployResult, check: dict[str, Any], stalled: int
) -> None:
    """The check measured every hop from the topics' timestamps after the warm-up; replica
    ``stalled`` (killed, restarted) shows its outage in its own hop (copies seconds late); over
    the whole run the topics' end-to-end latency is the merger's histogram's."""
    hops = check["hops"]
    assert hops["unsupported"] is None and hops["input_timestamps"] == "LogAppendTime", hops
    assert hops["replica_timestamps"] == "LogAppendTime", "the replicas' topics' broker clock"
    h = hops["hops"]
    assert list(h) == ["late", "append", "replica 0", "replica 1", "merge", "e2e"], h
    assert h["e2e"]["count"] == hops["results"] > 0
    assert h[f"replica {stalled}"]["max"] >= 1000, h
    assert 0 <= h["merge"]["p50"] <= h["e2e"]["p50"], h
    whole = latency_against_topics(info, result)
    assert whole.results > hops["results"], "the warm-up's results are left out of check.json"


def _batch_starts(run: Path, replica: int) -> list[float]:
    return [
        datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        for p in read_jsonl(run / "progress" / f"replica-{replica}.jsonl")
    ]


def _window_updates_as_run(result: DeployResult) -> None:
    """What any active real-time window run shows besides its faults: one update per input
    record that passed the filter, no hop-by-hop latency (and it says why), the streaming
    shuffle flushed after arfl's few ms in every Spark application, the merger and the
    injector ahead of the replicas for the CPU."""
    check = json.loads((result.run_dir / "check.json").read_text())
    assert check["windows"] > 0 and result.summary["results"] > 3 * check["windows"]
    # An update names a window, not an input record: no hop-by-hop latency, and it says so.
    assert check["hops"]["hops"] == {} and "window updates" in check["hops"]["unsupported"]
    # Both replicas' running Spark applications (a promoted standby's too) flush the streaming
    # shuffle after arfl's few ms, not Spark's 50 (read back from each SparkContext into its
    # app file).
    apps = sorted((result.run_dir / "replicas").glob("replica-*.app.json"))
    assert len(apps) == 2, apps
    for app in apps:
        conf = json.loads(app.read_text())["conf"]
        assert conf == {SHUFFLE_FLUSH_CONF: str(SHUFFLE_FLUSH_MS)}, (app, conf)
    # The merger and the injector ran ahead of the replicas for the CPU (root: a negative
    # niceness), their threads and their sessions' groups; the replicas at the default.
    prio = {e["process"]: e for e in journal_events(result.run_dir, "harness-priority")}
    assert set(prio) == {"merger", "injector"}, prio
    if os.geteuid() == 0:
        for e in prio.values():
            assert e["asked"] == e["nice"] < 0 and e["group_nice"] in (None, e["nice"]), e


def test_executor_and_replica_killed_output_complete(stack: StackInfo, tmp_path: Path) -> None:
    spec = _per_record_spec(
        "rtm-kill",
        duration="30s",
        replication={"resume": "checkpoint"},
        chaos=[
            {"at": "6s", "fault": "kill-executor", "replica": 0},
            {"at": "15s", "fault": "kill-replica", "replica": 1},
        ],
    )
    shared = _spark_scratch(state_dir() / "spark-home")
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    s = result.summary
    injected = journal_events(result.run_dir, "fault-injected")
    assert [e["kind"] for e in injected] == ["kill-executor", "kill-replica"]
    # Nothing of its Spark applications is left behind, though a killed JVM cleans nothing up:
    # they ran in the run's own SPARK_HOME (nothing new in the shared one), deleted at the
    # stop, every application's executor logs kept in the run.
    assert _spark_scratch(state_dir() / "spark-home") <= shared
    (removed,) = journal_events(result.run_dir, "spark-home-removed")
    assert Path(removed["home"]).name.startswith(f"{result.run_dir.name}-"), removed
    assert not Path(removed["home"]).exists() and removed["removed_mb"] > 0, removed
    # Every driver ran in a SPARK_HOME of its own (two started in one second get one app id,
    # and in one home their executors would share one log): a log per driver and application,
    # named <driver>.<app id>.<executor id>.<stream>.
    ready = journal_events(result.run_dir, "replica-ready")  # both, and the restarted one
    apps = {(f"replica-{e['replica']}", e["app_id"]) for e in ready}
    logs = [Path(p) for p in removed["executor_logs"]]
    named = {tuple(p.name.split(".")[:2]) for p in logs}
    assert len(ready) >= 3 and named == apps, (apps, logs)
    assert all(p.parent == result.run_dir / "logs" / "executors" and p.stat().st_size for p in logs)
    # The killed driver was restarted from its checkpoint (also when it died before its first
    # commit: drop_incomplete_writes). The executor loss was either retried inside replica 0
    # (Spark 4.3 re-ran the lost real-time tasks on a new executor, measured here) or failed
    # its query, and then the supervisor restarted it as well.
    died = {e["replica"] for e in journal_events(result.run_dir, "replica-died")}
    restarted_events = journal_events(result.run_dir, "replica-restarted")
    assert {e["resume"] for e in restarted_events} == {"checkpoint"}, restarted_events
    restarted = {e["replica"] for e in restarted_events}
    assert 1 in died and died == restarted, (died, restarted)
    assert not journal_events(result.run_dir, "replica-gave-up")
    caught_up = {e["replica"] for e in journal_events(result.run_dir, "replica-caught-up")}
    assert restarted <= caught_up, (restarted, caught_up)
    assert s["divergent"] == 0
    check_against_offline(stack, spec, result)
    check = _check_ok(result)
    both_replicas_agree(stack, result)
    _hops_measured(stack, result, check, stalled=1)
    # Both read from the explicit offsets deploy resolved once (also the restarted one: from its
    # checkpoint, no "latest").
    [offsets] = journal_events(result.run_dir, "starting-offsets")
    assert set(offsets["offsets"]) == {"0", "1"}
    # The executors were warmed up before each replica's first query start (a Kafka write and
    # read back through Spark, on the replica's own warm-up topic), not on the restart. What it
    # buys (a steady state that is no backlog) is measured in docs/benchmarks.md, not here.
    for i in (0, 1):
        log = (result.run_dir / "logs" / f"replica-{i}.log").read_text()
        assert log.count("executors warmed up in") == 1, log
        assert f"(200 records on {spec.sink.topic}" in log and f".r{i}.warmup" in log, log
    # Staggered: replica 1's first batch started about half an interval after replica 0's.
    s0, s1 = _batch_starts(result.run_dir, 0), _batch_starts(result.run_dir, 1)
    assert s0 and s1
    assert s1[0] - s0[0] >= 0.3 * INTERVAL_S, (s0[:2], s1[:2])


def _windowed_kill_spec(name: str, **replication: str) -> Spec:
    """The windowed pipeline, active R=2 and a standby at a 5-s real-time interval, replica 0
    killed 1 s after the survivor's boundary (boundaries interval / 2 apart)."""
    return windowed_spec(
        name,
        mode="active",
        replicas=2,
        duration="25s",
        replication={
            "trigger": "realtime",
            "trigger_interval": f"{INTERVAL_S:g}s",
            "standby": 1,
            **replication,
        },
        chaos=[{"at": "8s", "fault": "kill-replica", "replica": 0, "after_boundary": "1s"}],
    )


def test_a_killed_windowed_replica_resumes_from_its_peers_fresher_checkpoint(
    stack: StackInfo, tmp_path: Path
) -> None:
    """A window's state needs a replay, and the survivor committed more recently than the
    killed replica (boundaries interval / 2 apart, the kill 1 s after the survivor's): the
    standby taking over starts from a copy of the survivor's checkpoint, replays less, and its
    windows' updates are the survivor's."""
    spec = _windowed_kill_spec("rtm-win-peer", resume="peer")
    assert spec.resumes_from_peer
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir
    (aligned,) = journal_events(run, "fault-aligned")
    assert aligned["boundary_replica"] == 1, aligned
    (restarted,) = journal_events(run, "replica-restarted")
    assert restarted["replica"] == 0 and restarted["standby"] == 0, restarted
    # Replica 1 had committed its batch 1 s before the kill, replica 0 about half an interval
    # before that: the copy is ahead of replica 0's own by that many input records (200 ev/s).
    assert restarted["resume"] == "peer" and restarted["peer"] == 1, restarted
    assert restarted["ahead"] > 0 and restarted["copied_files"] > 0, restarted
    copy = run / "checkpoints" / "replica-0.1"
    cfg = json.loads((run / "replicas" / "replica-0.json").read_text())
    assert cfg["checkpoint_dir"] == str(copy)
    # It kept replica 0's query id, and Spark started the new query where the copy's committed
    # batch ended (its first progress line's start offsets), not where replica 0's own did.
    own_id = json.loads((run / "checkpoints" / "replica-0" / "metadata").read_text())["id"]
    assert json.loads((copy / "metadata").read_text())["id"] == own_id
    lines = read_jsonl(run / "progress" / "replica-0.jsonl")
    runs = list(dict.fromkeys(p["runId"] for p in lines))
    assert len(runs) == 2 and {p["id"] for p in lines} == {own_id}, runs
    first_new = next(p for p in lines if p["runId"] == runs[1])
    [source] = first_new["sources"]
    [start] = journal_events(run, "starting-offsets")
    assert source["startOffset"] == {start["topic"]: restarted["offsets"]}, source
    assert first_new["batchId"] == restarted["batch"] + 1, first_new
    # The standby had built each replica's pipeline while it waited; resuming from a
    # checkpoint, the source was the one it built for replica 0: it only added the sink.
    log = (run / "logs" / "standby-0.log").read_text()
    assert log.count("built the pipeline ahead for replicas 0-1 in") == 1, log
    assert log.index("built the pipeline ahead") < log.index("ready: waiting"), log
    assert "take-over: pipeline built ahead, sink added in" in log, log
    # From that state its window updates are the survivor's: every id once in the output,
    # the final values the batch job's, both replicas' updates equal where both emitted them.
    assert not journal_events(run, "replica-gave-up")
    assert result.summary["divergent"] == 0
    check_against_offline(stack, spec, result)
    check = _check_ok(result)
    assert check["final_values_wrong"] == 0 and check["final_values_checked"] == check["windows"]
    both_replicas_agree(stack, result, resumed_ahead=(0, float(aligned["boundary"])))
    caught_up = {e["replica"] for e in journal_events(run, "replica-caught-up")}
    assert 0 in caught_up


def test_a_killed_windowed_replica_resumes_at_a_recent_windows_first_events(
    stack: StackInfo, tmp_path: Path
) -> None:
    """With the default ``resume``, a 1-s tumbling window on generated input: the standby taking
    over starts a fresh query at a window boundary about a second behind the survivor, each
    partition at its first event of that time (arfl.orchestrate.window_resume). It replays a
    second or two of input instead of a checkpoint's interval / 2, and every window from the
    boundary on is read whole: its updates are the survivor's, none diverges."""
    spec = _windowed_kill_spec("rtm-win-start")
    assert spec.resumes_from_window_start and not spec.resumes_from_peer
    # The spec's master declares 1 slot: deploy gives each replica one per partition and
    # shuffle partition (without, Spark refuses every real-time batch).
    assert spec.spark.master == "local-cluster[1,1,1024]"
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir
    [slots] = journal_events(run, "replica-slots")
    assert slots["master"] == "local-cluster[1,4,1024]", slots
    _window_updates_as_run(result)
    (restarted,) = journal_events(run, "replica-restarted")
    assert restarted["replica"] == 0 and restarted["standby"] == 0, restarted
    assert restarted["resume"] == "window", restarted
    start_ms = restarted["window_start"]
    assert start_ms % 1000 == 0, restarted
    # The margin behind the survivor's newest result in the merger's latest monitor line when
    # it was placed (the line just before the restart, or one written meanwhile), rounded down
    # to the window: the kill placed 1 s after the survivor's boundary finds it a stall behind.
    ticks = [d for d in read_jsonl(run / "monitor.jsonl") if d["t"] <= restarted["t"]]
    placed_from = {
        (d["replicas"]["1"]["last_src_ts"] - WINDOW_START_MARGIN_MS) // 1000 * 1000
        for d in ticks[-2:]
    }
    assert start_ms in placed_from, (start_ms, ticks[-2:])
    (killed,) = journal_events(run, "fault-injected")
    assert 0 < killed["t"] * 1000 - start_ms < INTERVAL_S * 1000, (killed, restarted)
    # A fresh checkpoint (a new query) whose Kafka source starts at the placed offsets (the
    # source's initial-offsets log, where Spark reads them from), which are each partition's
    # first event of the window boundary or later (the input read back).
    fresh = run / "checkpoints" / "replica-0.1"
    cfg = json.loads((run / "replicas" / "replica-0.json").read_text())
    assert cfg["checkpoint_dir"] == str(fresh)
    lines = read_jsonl(run / "progress" / "replica-0.jsonl")
    queries = list(dict.fromkeys(p["id"] for p in lines))
    assert len(queries) == 2, queries
    [start] = journal_events(run, "starting-offsets")
    topic = start["topic"]
    seeded = (fresh / KAFKA_SOURCE_LOG / "0").read_bytes()
    assert seeded.startswith(KAFKA_SOURCE_LOG_HEADER), seeded
    placed = {p: int(o) for p, o in restarted["offsets"].items()}
    assert json.loads(seeded[len(KAFKA_SOURCE_LOG_HEADER) :]) == {topic: placed}, seeded
    msgs = read_to_end(
        stack.kafka, topic, error=ArflError, missing_hint="-", unreachable_hint="-", timeout_s=30
    )
    for p, offset in restarted["offsets"].items():
        run_events = {
            m.offset(): json.loads(m.value())
            for m in msgs
            if m.partition() == int(p) and m.offset() >= start["offsets"][p]
        }
        assert run_events[offset]["ts"] >= start_ms > run_events[offset - 1]["ts"], (p, offset)
        times = [e["ts"] for _, e in sorted(run_events.items()) if not e.get("eoi")]
        assert times == sorted(times)  # the order the rule rests on
    # The standby used the pipeline it built ahead, its first offsets seeded.
    log = (run / "logs" / "standby-0.log").read_text()
    assert "take-over: the query's first offsets written to" in log, log
    assert "take-over: pipeline built ahead, sink added in" in log, log
    # Its updates are the survivor's: every id once, the final values the batch job's, both
    # replicas' updates equal where both emitted them.
    assert not journal_events(run, "replica-gave-up")
    assert result.summary["divergent"] == 0
    check_against_offline(stack, spec, result)
    check = _check_ok(result)
    assert check["final_values_wrong"] == 0 and check["final_values_checked"] == check["windows"]
    both_replicas_agree(stack, result, resumed_ahead=(0, start_ms / 1000))
    caught_up = {e["replica"] for e in journal_events(run, "replica-caught-up")}
    assert 0 in caught_up


@pytest.mark.needs_root(reason="partition needs network namespaces (root)")
def test_pause_slow_partition_show_their_effect_and_revert(
    stack: StackInfo, tmp_path: Path
) -> None:
    del stack  # a network fault: the run starts its own stack on its bridge
    spec = _per_record_spec(
        "rtm-net",
        duration="45s",
        chaos=[
            {"at": "8s", "fault": "pause", "replica": 1, "duration": "5s"},
            {"at": "19s", "fault": "slow", "replica": 1, "duration": "6s", "cpu": 2},
            {"at": "31s", "fault": "partition", "replica": 0, "duration": "6s"},
        ],
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir
    injected = journal_events(run, "fault-injected")
    reverted = journal_events(run, "fault-reverted")
    assert [e["kind"] for e in injected] == ["pause", "slow", "partition"]
    assert [e["kind"] for e in reverted] == ["pause", "slow", "partition"]
    span = {e["kind"]: float(e["ended"]) for e in injected}
    back = {e["kind"]: float(e["started"]) for e in reverted}
    # Paused and partitioned replicas: silent while faulted, output again after the revert.
    check_silent_then_resumed(run, 1, span["pause"], back["pause"])
    check_silent_then_resumed(run, 0, span["partition"], back["partition"])
    # Slowed replica (2 % of a CPU): its results came late while throttled, and on time again
    # after the revert. At the default 10 % a fast host kept a 200-ev/s real-time replica
    # within 5-34 ms unless its batch boundary fell in the window, a slow one
    # ~20 s behind: 2 % is below what the replica needs on any host, so its lag grows through
    # the window wherever its boundary falls. The lag shows the fault, not the count (a
    # throttled replica still delivers most results, late).
    lags = {r: lag_over_time(run, r) for r in (0, 1)}

    def lag_in(r: int, lo: float, hi: float) -> list[float]:
        return [lag for t, lag in lags[r] if lo <= t <= hi]

    throttled = lag_in(1, span["slow"] + 1, back["slow"] + 1)
    other = lag_in(0, span["slow"] + 1, back["slow"] + 1)
    print(f"slow: replica 1 lag while throttled {throttled}, replica 0's {other}")
    print(f"slow: replica 1 after {lag_in(1, back['slow'], back['slow'] + 15)}")
    assert throttled and other, lags
    peak = max(throttled)
    assert peak >= 200.0 and peak >= 10 * statistics.median(other), (throttled, other)
    # On time again: the median over revert + 5 s to + 15 s under a fifth of the peak, and
    # under 100 ms or twice what both replicas' lag settled at once every fault was undone
    # (a slow CI host: 150-200 ms then, and 139 ms here). Not sooner: a boundary the throttle
    # delayed lands near the other replica's, and the phase keeper (arfl.replica.phase) then
    # holds replica 1's next batches back to stagger them again (one run: two holds of 2.38
    # s, nothing delivered until revert + 5 s, then 185 ms, then 2-8 ms). Replica 0's
    # partition from 31 s does not touch replica 1.
    (finished,) = journal_events(run, "injector_finished")
    settled = statistics.median(
        lag_in(0, back["partition"] + 3, float(finished["end"]))
        + lag_in(1, back["partition"] + 3, float(finished["end"]))
        or [math.inf]
    )
    after = statistics.median(lag_in(1, back["slow"] + 5, back["slow"] + 15) or [math.inf])
    print(f"slow: replica 1's lag {after} ms after the revert, both settled at {settled} ms")
    assert after < max(100.0, 2 * settled) and after < peak / 5, (after, settled, peak, lags)
    # Every fault undone; neither replica died; the merged output is complete.
    assert result.summary["replica_restarts"] == 0
    assert result.summary["divergent"] == 0
    _check_ok(result)


def test_killed_replica_is_taken_over_by_the_warm_standby(stack: StackInfo, tmp_path: Path) -> None:
    """The spec writes neither ``standby`` nor ``trigger_interval``: arfl sets a standby and a
    60-s interval (``configs/masking``). A spare driver (session up, executors warmed, niced)
    waits; deploy starts the load once it is ready; the killed replica's place goes to it, which
    runs the replica's query without a new Spark application, from the output frontier (a
    stateless pipeline: no replay of what the survivor delivered), and the report judges the
    kill masked: the killed driver died, and the output was as good as in the steady state.
    The kill falls at a moment taken from the clock, anywhere from 16 to 22 s of the input
    (at least 5 s of steady state after the 8-s warm-up, the verdict's minimum). Where the
    survivor's boundaries fall in the input depends on how long the standby took to be ready
    (the queries start before it; CI: one at 16.9 s): a survivor's boundary stall while the
    newcomer catches up is not masked with R=2 (its share is P(masked)'s to measure:
    bench/p_masked.py), so there the test accepts either verdict and says so; anywhere else the
    kill is masked. Held to 2 x the steady state (``report.tolerance``): a take-over's load moved
    the window's p99 by 1.1-1.3 x on this host, a survivor's stall or an outage by 10 x and
    more."""
    at = round(16.0 + time.time() % 6.0, 1)
    print(f"kill-replica at {at}s of the input (from the clock)")
    spec = realtime_spec(
        "rtm-standby",
        duration="36s",
        interval_s=None,
        workload={"warmup": "8s"},
        chaos=[{"at": f"{at}s", "fault": "kill-replica", "replica": 1}],
        report={"tolerance": 2.0},
    )
    assert spec.replication.standby == 1 and spec.replication.trigger_interval == 60.0
    assert len(spec.chosen_defaults) == 2
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir
    (started,) = [e for e in journal_events(run, "standby-started") if e["standby"] == 0]
    (ready,) = [e for e in journal_events(run, "standby-ready") if e["standby"] == 0]
    assert ready["pid"] == started["pid"]
    assert journal_events(run, "standbys-ready"), "the load started before the standby was up"
    if os.geteuid() == 0:
        assert started["nice"] == 19
    restarted = _taken_over_at_the_frontier(stack, spec, result, 1)
    assert restarted["pid"] == started["pid"]
    took = [e for e in journal_events(run, "replica-started") if e.get("standby") == 0]
    assert took and took[0]["replica"] == 1 and took[0]["attempt"] == 1
    if os.geteuid() == 0:
        # It yielded the CPU to the survivor until the merger saw it caught up, or for at
        # most YIELD_MAX_S (a saturated host starves a newcomer at niceness 19).
        assert took[0]["yielding"] is True and took[0]["reniced"] is False
        (reniced,) = journal_events(run, "replica-reniced")
        assert reniced["replica"] == 1 and reniced["reniced"] is True, reniced
        if reniced["why"] != "caught up":
            assert reniced["why"] == f"not caught up after {YIELD_MAX_S:g}s", reniced
        assert reniced["after_s"] <= YIELD_MAX_S + 2.0, reniced
    # The standby's own Spark application became replica 1's: no new one was started.
    standby_app = json.loads((run / "replicas" / "standby-0.app.json").read_text())["app_id"]
    replica_app = json.loads((run / "replicas" / "replica-1.app.json").read_text())
    assert replica_app["app_id"] == standby_app and replica_app["attempt"] == 1
    (ready1,) = [e for e in journal_events(run, "replica-ready") if e["attempt"] == 1]
    assert ready1["app_id"] == standby_app
    log = (run / "logs" / "standby-0.log").read_text()
    assert log.index("takes over replica 1") < log.index("query started"), log
    # It built each replica's pipeline ahead, and the take-over at the output frontier used
    # it (built anew, it cost 0.3-0.6 s of the catch-up): its offsets went into the new
    # checkpoint's source log, where Spark's Kafka source takes a new query's first offsets
    # from (the frontier checks above show it read nothing below them).
    assert log.count("built the pipeline ahead for replicas 0-1 in") == 1, log
    assert "take-over: pipeline built ahead, sink added in" in log, log
    assert "take-over: the query's first offsets written to" in log, log
    assert log.count("executors warmed up in") == 1, log  # while it waited, not on take-over
    # It rehearsed the pipeline before it was ready (a real-time query started and stopped),
    # on input records of its own that came out as results (the input was still empty).
    assert log.count("rehearsed the pipeline in") == 1, log
    assert log.index("rehearsed the pipeline in") < log.index("ready: waiting"), log
    said = re.search(rf"rehearsed the pipeline in .*?, {REHEARSAL_RECORDS} input records, "
                     r"first result [\d.]+s, (\d+) results\)", log)  # fmt: skip
    assert said, log
    # ... as its warm-up topic holds: the warm-up's records, then the rehearsal's results
    # (those counted before it was stopped, and any that came out meanwhile), each a result of
    # one of its own events (id partition:offset of its rehearsal input topic).
    out = json.loads((run / "replicas" / "standby-0.json").read_text())["output_topic"]
    msgs = read_to_end(
        stack.kafka, warmup_topic(out), error=ArflError, missing_hint="-",
        unreachable_hint="-", timeout_s=30,
    )  # fmt: skip
    rehearsed = [parse_result(m.value()) for m in msgs[WARMUP_RECORDS:]]
    assert len(rehearsed) >= int(said.group(1)) > 0, (len(msgs), log)
    for r in rehearsed:
        part, offset = (int(x) for x in r.rid.split(":"))
        assert 0 <= part < spec.source.partitions and 0 <= offset < REHEARSAL_RECORDS, r
    assert "takes over" in (run / "logs" / "replica-1.log").read_text()
    # It resumed at the output frontier from a fresh checkpoint, and caught up.
    replica_cfg = json.loads((run / "replicas" / "replica-1.json").read_text())
    assert replica_cfg["checkpoint_dir"].endswith("checkpoints/replica-1.1")
    caught_up = {e["replica"] for e in journal_events(run, "replica-caught-up")}
    assert 1 in caught_up
    # The run ended on the replicas' marker copies, not on their batches' ends (60 s apart):
    # each replica delivered one per input partition; none reached the sink (the independent
    # check above found no result it did not expect).
    [finished] = journal_events(run, "workload-finished")
    last = read_jsonl(run / "monitor.jsonl")[-1]["replicas"]
    ended = {int(r): {int(p): t for p, t in v["ended"].items()} for r, v in last.items()}
    assert all(ended[r].keys() == {0, 1} for r in (0, 1)), ended
    stopped = min(e["t"] for e in journal_events(run, "replica-stopped"))
    assert stopped - finished["t"] < 20.0, (finished, stopped, ended)
    # The merger kept each replica's trail (what the report's caught up is judged on): the age of
    # the oldest output result replica 1 owed. It noticed the kill (some tick after it found replica
    # 1 owing, below), and an age never grows faster than the clock from one monitor tick to the
    # next (it drops, or grows less, when the replica delivers what it owed). Between two ticks at
    # which replica 1 owed something and received nothing, it owed the same result: the age grew by
    # exactly the ticks' distance (nothing else moves the oldest owed result: the merger forgets no
    # ids here, no horizon and far below its size limit, and the frontier moves only with replica
    # 1's own records). Such a silent pair needs a take-over longer than two ticks with no stray
    # result of the dying replica between them; a shorter one (on CI: 793 ms at the tick after the
    # kill, 0 at the next) or strays (a suite: received 2,188 then 2,190 while the trail went 516 ->
    # 1,516 ms) leave none, and a standby catching up in order but slower than the input leaves
    # shrinking steps.
    kill_at = float(journal_events(run, "fault-injected")[0]["started"])
    ticks = [d for d in read_jsonl(run / "monitor.jsonl") if d["input_flowing"]]
    after = [
        (float(d["t"]), d["replicas"]["1"]["trail_ms"], d["replicas"]["1"]["received"])
        for d in ticks
        if float(d["t"]) >= kill_at
    ]  # fmt: skip
    assert after and all(a is not None for _t, a, _n in after), after
    # ... unless the take-over was done within the first tick: replica 1 delivered since the
    # tick before the kill and owed nothing at the next (CI: taken over in 29 ms, ahead of
    # replica 0 at the tick 0.98 s after the kill).
    before = [d["replicas"]["1"]["received"] for d in ticks if float(d["t"]) < kill_at]
    first_t, first_trail, first_received = after[0]
    done_in_a_tick = first_t - kill_at <= 1.1 and first_trail == 0 and first_received > before[-1]
    assert max(a for _t, a, _n in after) > 0 or done_in_a_tick, after
    owing = [
        ((b - a) - (tb - ta) * 1000, na == nb)
        for (ta, a, na), (tb, b, nb) in itertools.pairwise(after)
        if a > 0 and b > 0
    ]
    assert all(d < 50 for d, _silent in owing), after
    assert all(abs(d) < 50 for d, silent in owing if silent), after
    # Caught up as the report judges it (on the merger's trail) survives a reading without the
    # merger: the same definition on the replica topics' timestamps, within one monitor tick
    # (the merger reads a record a little after the broker stamped it), both with the floor.
    report = build_report(run)
    (kill,) = report.faults
    assert kill.effect_seen and "replica 1" in (kill.effect or ""), kill.effect
    assert kill.healthy_s is not None and kill.at_s is not None, kill
    healthy, until = kill_at + kill.healthy_s, kill_at + report.overall.end_s - kill.at_s
    monitor = [MonitorSnapshot.from_dict(d) for d in read_jsonl(run / "monitor.jsonl")]
    floor = verdicts.CAUGHT_UP_FLOOR_MS
    by_merger = verdicts.caught_up_at(monitor, 1, healthy, floor, until)
    by_topics = caught_up_from_topics(
        stack, result, 1, restarted["offsets"], [m.t for m in monitor], healthy, floor, until
    )
    assert by_merger is not None and by_topics is not None, (by_merger, by_topics, kill)
    assert abs(by_merger - by_topics) <= 1.001, (by_merger - kill_at, by_topics - kill_at)
    # The survivor's boundaries (its batches' starts, Spark's progress) from one stall before the
    # kill (commit, plan, launch: up to 1.4 s) to 2 s after the newcomer caught up (alone, the
    # just-caught-up newcomer's p99 was 177-219 ms in bench/p_masked.py's misses).
    alone = [b - kill_at for b in _batch_starts(run, 0) if kill_at - 1.5 <= b <= by_merger + 2.0]
    print(f"{kill.verdict}; survivor boundaries in the catch-up (s after the kill): {alone}")
    # Masked; or, where the host's wall clock moved too much for the p99 to be judged
    # against its bar (CI: 40 ms in the window, 65 ms in the steady phase), the p99 within
    # the bar all the same; or either verdict where the survivor hit a boundary alone.
    moved = kill.verdict.startswith("unjudged: the wall clock moved")
    if alone:
        assert kill.outcome in {"masked", "not masked"} or moved, kill.verdict
    elif moved:
        bar = None if kill.steady_p99_ms is None else report.tolerance * kill.steady_p99_ms
        assert kill.p99_ms is not None and bar is not None and kill.p99_ms <= bar, kill.verdict
    else:
        assert kill.outcome == "masked" and kill.masked is True, kill.verdict


def test_the_same_kill_of_a_lone_replica_is_not_masked(stack: StackInfo, tmp_path: Path) -> None:
    """The kill above without a peer: one replica with Spark's own recovery (mode
    ``passive``), killed for real. Nothing covers its restart (a new Spark application, then
    its checkpoint's replay), so the report must say "not masked" and name the death as the
    effect, while the independent check still finds every result exactly once. The input ends
    before the replica is back: the window runs on into the drain, where the late results are
    (docs/design.md §4, "Unjudged")."""
    spec = realtime_spec(
        "rtm-lone-kill",
        duration="20s",
        replication={"mode": "passive", "replicas": 1},
        workload={"warmup": "6s"},
        chaos=[{"at": "12s", "fault": "kill-replica", "replica": 0}],
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    (died,) = journal_events(result.run_dir, "replica-died")
    assert died["replica"] == 0 and died["exit_code"] == -9, died
    check_against_offline(stack, spec, result)
    (kill,) = build_report(result.run_dir).faults
    assert kill.masked is False and kill.outcome == "not masked", kill.verdict
    assert kill.effect_seen and "died" in (kill.effect or ""), kill.effect
    assert kill.p99_ms is not None and kill.p99_ms >= 1000.0, kill.verdict


def test_a_lost_executor_hands_the_replica_to_the_warm_standby(
    stack: StackInfo, tmp_path: Path
) -> None:
    """A real-time replica whose executor was killed would wait for Spark to start a new executor
    JVM; with a ready standby the supervisor kills its driver instead and the standby resumes it
    at the output frontier."""
    spec = _per_record_spec(
        "rtm-exec-standby",
        duration="25s",
        replication={"standby": 1},
        chaos=[{"at": "8s", "fault": "kill-executor", "replica": 0, "after_boundary": "1s"}],
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir
    (injected,) = journal_events(run, "fault-injected")
    # It waited from 8 s for the survivor's next batch boundary, then 1 s. The boundary is a
    # batch end in replica 1's progress (read here on its own: start + batchDuration), the first
    # whose line was appended after the wait began: a real-time replica appends it after the
    # boundary's stall (0.7-2.8 s later in the demo's runs, docs/benchmarks.md), so it may end
    # before the wait began; a batch that ended after that did not come before it.
    (aligned,) = journal_events(run, "fault-aligned")
    assert aligned["boundary_replica"] == 1 and aligned["after_s"] == 1.0, aligned
    ends = [
        datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        + p["batchDuration"] / 1000
        for p in read_jsonl(run / "progress" / "replica-1.jsonl")
    ]  # fmt: skip
    began, boundary = aligned["t"] - aligned["waited_s"], aligned["boundary"]
    assert began >= injected["started"] - injected["at_s"] + 8.0 - 0.1, (aligned, injected)
    assert any(abs(boundary - e) < 0.01 for e in ends), (aligned, ends)
    assert began - 4.0 <= boundary <= aligned["seen"] < began + INTERVAL_S + 4.0, (aligned, ends)
    skipped = [e for e in ends if began + 0.05 < e < boundary - 0.01]
    assert not skipped, (skipped, aligned)
    # 1 s after it, or as soon as its progress line was read (1.2 s after the batch's end once).
    due = max(boundary + 1.0, aligned["seen"])
    assert due <= injected["started"] < due + 0.5, (injected, aligned)
    (lost,) = journal_events(run, "replica-executor-lost")
    assert lost["replica"] == 0 and injected["details"]["pid"] in lost["executors"], lost
    assert lost["action"] == "driver killed: standby 0 takes over"
    (died,) = journal_events(run, "replica-died")
    assert died["replica"] == 0 and died["exit_code"] == -9 and died["t"] >= lost["t"]
    # The fault's revert saw a replacement executor: the standby's.
    (reverted,) = journal_events(run, "fault-reverted")
    assert reverted["details"]["replacement_s"] is not None, reverted
    _taken_over_at_the_frontier(stack, spec, result, 0)
