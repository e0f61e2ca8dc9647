"""Real-time mode: active (RTM, R=2) vs passive (RTM) vs micro-batch, under the same faults.

    .venv/bin/python bench/realtime.py [--duration 75s] [--fault-at 45s[,50s...]]
        [--after-boundary 5s[,10s...]] [--warmup 25s] [--windowed-later 20s] [--rate 1000]
        [--modes none,passive,active,active-leaderless]
        [--pipelines per-record,windowed] [--faults kill-executor,kill-replica]
        [--sweep 1000,2500,5000] [--sweep-duration 50s] [--sweep-modes active]
        [--stagger on|off|both] [--jit c1|c2|both] [--standby 0|1|both]
        [--resume checkpoint,peer,output|both] [--standby-yield on|off|both]
        [--build-ahead on|off|both] [--interval 5s]
        [--spark-conf KEY=VALUE ...] [--quick]
        [--runs DIR] [--out F]

One invocation runs every (pipeline, fault, mode) variant on 2 partitions, one after another,
then a rate sweep of active RTM R=2 on the per-record pipeline without faults. Modes:
``none`` (micro-batch, 1 replica), ``passive`` (RTM, 1 replica), ``active`` (RTM, 2 replicas,
no coordination), ``active-leaderless`` and ``active-leader`` (micro-batch, 2 replicas;
arfl's source decides the batches, docs/design.md §2.3; not in the default ``--modes``).
``--sweep-modes`` picks the sweep's modes (``passive``: one real-time replica, whose every
batch-boundary stall shows);
``--jit`` runs each sweep rate with arfl's C1-only JIT (``c1``, the default), HotSpot's tiered
C1 + C2 (``c2``), or both. Pipelines: ``per-record`` (filter ``amount > 10``) and ``windowed``
(the same filter, then a 1 s tumbling window keyed by user: count + sum, watermark 500 ms).
Faults, on replica 0 at ``--fault-at``: ``kill-executor`` and ``kill-replica``. ``--standby``
runs each fault variant without (``0``) and/or with (``1``) a standby driver
(``replication.standby``) that takes the dead driver's place. ``--resume`` runs each active
fault variant with the killed replica restarting from its own checkpoint, from the freshest
replica's (``peer``) and/or at the output frontier (``replication.resume``; the default
``auto`` is ``output`` for this stateless per-record pipeline, ``peer`` for the windowed one).
``--standby-yield`` runs the standby variants with the promoted standby keeping its low CPU
priority until it caught up or for 10 s at most (``on``, the default) and/or getting it back at
once (``off``; ``replication.standby_yield``). ``--build-ahead`` runs them with the standby
building each replica's pipeline while it waits (``on``, the default) and/or not (``off``:
``[spark.conf] "arfl.standbyBuildAhead" = false``); the row's ``takeover_s`` is the promoted
standby's own count from its assignment to its query started (its log). A list of ``--fault-at``
times runs every fault variant at each; the kill table then says, per run, when the survivor's
next batch boundary came (from its progress) against when the newcomer caught up (the report's
``caught_up_s``: its trail of the output at the merger back within its steady allowance), and
counts the masked runs of each side: whether a kill is masked at R=2 depends on that order.
``--after-boundary 5s`` places each fault as the demo does: from ``--fault-at`` on, 5 s after
the survivor's next batch boundary (a lone replica: its own).

Every figure comes from the run's report (:func:`arfl.report.build.build_report`): fault-free
p50/p99 are the steady phase's (end of the warm-up to the fault) and the whole run's (after the
warm-up); the ratio is the p99 over the fault's impact window (the report's, see
:mod:`arfl.report.verdicts`) ÷ the whole steady phase's p99 (the masked
verdict holds it to the steady p99 at the window's length, ``steady_p99_ms``); gaps are the
report's longest output gap
overlapping the impact window and the steady phase's; masked is the report's verdict;
missing / duplicates / divergent are the report's correctness (the independent check in
``check.json``). The sweep stops at the first rate whose p99 reaches 100 ms and names the
process that saturated from per-process CPU samples (:class:`_common.ProcessCpu`).

The warm-up is long (25 s) because a real-time replica starts cold: deploy starts the load once
the queries started, and their first long batches (query planning, the executor's first tasks
with a cold JIT, two replicas on two cores) run for 10-15 s before records flow at
millisecond latency; the first ~20 s of input are a backlog, not the steady state. A windowed
real-time query needs ~40 s: its runs are ``--windowed-later`` (20 s) longer, with the fault
and the end of the warm-up as much later.

Each deployment holds ``/tmp/arfl-cpu.lock`` for its duration, so other integration runs
interleave between the runs, not during them. The machine is shared: compare variants of one
invocation only.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import HOST, Column, ProcessCpu, cpu_lock, num, print_table, write_rows, yes_no

from arfl import stack
from arfl.configs.load import parse_spec
from arfl.configs.realtime import host_cores
from arfl.configs.spec import BUILD_AHEAD_KEY, Spec
from arfl.errors import ArflError
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.report.build import build_report
from arfl.report.model import PhaseStats, Report
from arfl.run.progress import batch_ends, batch_timing
from arfl.run.rundir import read_jsonl
from arfl.units import parse_duration

P99_LIMIT_MS = 100.0
"""The sweep's bar: the highest rate whose whole-run p99 stays below it."""


@dataclass(frozen=True)
class Mode:
    """A replication variant: the spec's mode, replicas and trigger."""

    mode: str
    replicas: int
    trigger: str


MODES: dict[str, Mode] = {
    "none": Mode("none", 1, "micro-batch"),
    "passive": Mode("passive", 1, "realtime"),
    "active": Mode("active", 2, "realtime"),
    "active-leaderless": Mode("active-leaderless", 2, "micro-batch"),
    "active-leader": Mode("active-leader", 2, "micro-batch"),
}
FILTER: dict[str, Any] = {"filter": "amount > 10"}
WINDOW: dict[str, Any] = {
    "window": {
        "size": "1s",
        "key": "user",
        "watermark": "500ms",
        "agg": {"n": "count(*)", "total": "sum(amount)"},
    }
}
PIPELINES: dict[str, list[dict[str, Any]]] = {
    "per-record": [FILTER],
    "windowed": [FILTER, WINDOW],
}
FAULTS = ("kill-executor", "kill-replica")
SWEEP_MODES = ("active", "passive")
"""Modes the fault-free sweep can run (real-time ones)."""
JIT_C2 = {"spark.driver.extraJavaOptions": "", "spark.executor.extraJavaOptions": ""}
"""``[spark.conf]`` of ``--jit c2``: empty JVM options give HotSpot's default tiered JIT back."""
BOUNDARY_PHASES = ("latestOffset", "queryPlanning", "walCommit", "commitOffsets")
"""Progress ``durationMs`` entries around a real-time batch boundary (medians per run)."""


@dataclass(frozen=True)
class Timing:
    """How long a run lasts and when its fault comes (seconds after the input's start).

    Attributes:
        duration: the input's length.
        fault_at: the fault's injection.
        warmup: excluded from every figure.
        sweep_duration: the input's length in the rate sweep (same warm-up, no fault).
        windowed_later: added to all three of a windowed run: its real-time queries take
            longer to catch up with the input (a stateful query plans and starts more).
    """

    duration: float
    fault_at: float
    warmup: float
    sweep_duration: float
    windowed_later: float = 0.0

    def of(self, pipeline: str) -> Timing:
        """The timing of ``pipeline``'s runs."""
        if pipeline != "windowed" or not self.windowed_later:
            return self
        d = self.windowed_later
        return Timing(self.duration + d, self.fault_at + d, self.warmup + d, self.sweep_duration)

    def describe(self) -> str:
        """``fault at 45s of 75s runs, warm-up 25s``."""
        return f"fault at {self.fault_at:g}s of {self.duration:g}s runs, warm-up {self.warmup:g}s"


def spec_for(
    pipeline: str,
    mode: str,
    rate: int,
    t: Timing,
    fault: str | None,
    duration: float = 0.0,
    interval: str = "",
    stagger: bool = True,
    target: str = "local",
    replicas: int | None = None,
    jit: str = "c1",
    standby: int = 0,
    resume: str = "auto",
    standby_yield: bool = True,
    spark_conf: dict[str, str] | None = None,
    after_boundary: str = "",
    build_ahead: bool = True,
) -> Spec:
    """The benchmark spec: 2 partitions, every replica on ``local-cluster[1,1,1024]`` (deploy
    gives real-time replicas a slot per partition and shuffle partition); ``interval``: the
    real-time checkpoint interval (empty: the default); ``target``: ``spark.target`` (``docker``:
    each replica in a container of its own); ``replicas``: R of the replicated modes instead
    of 2; ``jit``: ``c2`` gives replica JVMs HotSpot's default tiered JIT instead of arfl's
    C1-only default; ``standby``: ``replication.standby``; ``resume``: ``replication.resume``;
    ``spark_conf``: added to ``spark.conf`` (e.g. Spark's event log); ``build_ahead``: false
    sets ``arfl.standbyBuildAhead = false`` (with a standby); ``after_boundary``: the
    fault's ``after_boundary`` (from ``fault_at`` on, that long after the survivor's next batch
    boundary, as the demo places its kill; empty: at ``fault_at``)."""
    m = MODES[mode]
    if replicas is not None and m.replicas > 1:
        m = dataclasses.replace(m, replicas=replicas)
    raw: dict[str, Any] = {
        "name": f"rt-{pipeline}-{mode}",
        "source": {"topic": "rt", "partitions": 2, "event_time": "ts"},
        "steps": PIPELINES[pipeline],
        "sink": {"topic": "rt-out"},
        "replication": {"mode": m.mode, "replicas": m.replicas, "trigger": m.trigger},
        "spark": {
            "master": "local-cluster[1,1,1024]",
            "conf": {"spark.sql.shuffle.partitions": "2"},
            "target": target,
        },
        "workload": {
            "rate": rate,
            "duration": f"{duration or t.duration:g}s",
            "keys": 100,
            "warmup": f"{t.warmup:g}s",
        },
    }
    raw["replication"]["stagger"] = stagger
    raw["replication"]["standby"] = standby  # 0 written: arfl's masking default is 1
    if resume != "auto":
        raw["replication"]["resume"] = resume
    if standby and not standby_yield:
        raw["replication"]["standby_yield"] = False
    if jit == "c2":
        raw["spark"]["conf"].update(JIT_C2)
    raw["spark"]["conf"].update(spark_conf or {})
    if standby and not build_ahead:
        raw["spark"]["conf"][BUILD_AHEAD_KEY] = False
    if interval and m.trigger == "realtime":
        raw["replication"]["trigger_interval"] = interval
    if fault is not None:
        raw["chaos"] = [{"at": f"{t.fault_at:g}s", "fault": fault, "replica": 0}]
        if after_boundary:
            raw["chaos"][0]["after_boundary"] = after_boundary
    return parse_spec(raw, "realtime")


def run(spec: Spec, runs: Path) -> tuple[Path, dict[str, Any], ProcessCpu, float]:
    """Deploy ``spec`` holding the CPU lock, sampling its processes' CPU.

    Returns:
        The run directory, the summary, the CPU samples and the wall seconds of the deploy.
    """
    cpu = ProcessCpu()
    with cpu_lock():
        cpu.start()
        t = time.monotonic()
        try:
            res = deploy(spec, None, DeployOptions(runs_root=runs), on_run_dir=cpu.watch)
        finally:
            cpu.stop()
        return res.run_dir, res.summary, cpu, time.monotonic() - t


def _phase(report: Report, name: str) -> PhaseStats | None:
    return next((p for p in report.phases if p.name == name), None)


def _pct(p: PhaseStats | None, key: str, sent: bool = False) -> float | None:
    if p is None or not p.count:
        return None
    return (p.sent_percentiles_ms if sent else p.percentiles_ms).get(key)


def stagger_s(report: Report, phase: PhaseStats | None) -> float | None:
    """How far apart two replicas' batch boundaries were in ``phase``: the median, over
    replica 1's batch starts in it, of the distance to replica 0's nearest batch start (s).
    The start delay sets it to half an interval; batches of unequal length move it."""
    batches = report.series.batches
    if phase is None or len(batches) < 2 or not batches.get(0):
        return None
    starts0 = [t for t, _ in batches[0]]
    dist = [
        min(abs(t - u) for u in starts0)
        for t, _ in batches.get(1, [])
        if phase.start_s <= t < phase.end_s
    ]
    return statistics.median(dist) if dist else None


def boundary_ms(run_dir: Path, report: Report, phase: PhaseStats | None) -> dict[str, Any]:
    """Medians, over every replica's batches that started in ``phase``, of the progress
    ``durationMs`` entries a real-time boundary waits for (:data:`BOUNDARY_PHASES`), and of the
    idle time between two batches (the next one's start minus the end of its trigger)."""
    if phase is None or report.input_start is None:
        return {}
    lo, hi = report.input_start + phase.start_s, report.input_start + phase.end_s
    values: dict[str, list[float]] = {k: [] for k in (*BOUNDARY_PHASES, "between")}
    for path in sorted((run_dir / "progress").glob("replica-*.jsonl")):
        spans = []
        for p in read_jsonl(path):
            t = batch_timing(p)
            if t is None or not lo <= t[0] < hi:
                continue
            spans.append(t)
            d = p.get("durationMs") or {}
            for k in BOUNDARY_PHASES:
                if isinstance(d.get(k), int | float):
                    values[k].append(float(d[k]))
        spans.sort()
        values["between"] += [b[0] - (a[0] + a[1] / 1000) for a, b in itertools.pairwise(spans)]
    out = {f"{k}_ms": statistics.median(v) for k, v in values.items() if v and k != "between"}
    if values["between"]:
        out["between_ms"] = 1000 * statistics.median(values["between"])
    return out


STALL_LOOKBACK_S = 3.0
"""How far before a fault a survivor's batch end is looked at for a stall still running: a
real-time boundary's stall lasted 0.7-2.8 s in the demo's runs (docs/design.md §2.5)."""
RESUME_PARTS = ("latestOffset", "walCommit", "queryPlanning")
"""The parts of a batch's ``durationMs`` that come before its tasks launch."""


def _resumed_at(lines: list[dict[str, Any]], end: float) -> float | None:
    """When a replica's output came back after its batch that ended at ``end``: the next
    batch's start plus its offsets, offset log and planning (Spark's ``durationMs``; its tasks'
    launch, a few tens of ms, is not in it); None when no later batch reported."""
    later = []
    for line in lines:
        timing = batch_timing(line)
        if timing is not None and timing[0] >= end - 0.5:
            parts = line.get("durationMs") or {}
            later.append(timing[0] + sum(float(parts.get(k, 0.0)) for k in RESUME_PARTS) / 1000)
    return min(later, default=None)


def _silent_through(run_dir: Path, replica: int, t: float) -> bool | None:
    """Whether ``replica`` had delivered nothing since before ``t`` at the merger's first monitor
    tick after it (its ``last_seen_t``); None without such a tick."""
    for line in read_jsonl(run_dir / "monitor.jsonl"):
        if float(line.get("t", 0.0)) > t:
            seen = (line.get("replicas") or {}).get(str(replica), {}).get("last_seen_t")
            return seen is not None and float(seen) < t
    return None


def survivor_boundary_s(run_dir: Path, journal: list[dict[str, Any]]) -> float | None:
    """Seconds from the first fault's injection to the boundary (a batch end, from the progress
    files) of a replica it did not hit whose stall only a caught-up newcomer masks: one before
    the fault whose stall was still running at it (negative: the replica's next batch had not
    launched by then, or without a next batch's line, it had delivered nothing since before the
    fault at the merger's next tick), else the next one. None without a fault on one replica
    or such a batch end."""
    fault = _replica_fault(journal)
    if fault is None:
        return None
    t, replica = fault
    found: list[float] = []
    for path in sorted((run_dir / "progress").glob("replica-*.jsonl")):
        if path.stem == f"replica-{replica}":
            continue
        lines = read_jsonl(path)
        ends = batch_ends(lines)
        found += [end for end in ends if end > t][:1]
        recent = [end for end in ends if t - STALL_LOOKBACK_S <= end <= t]
        if recent:
            resumed = _resumed_at(lines, recent[-1])
            survivor = int(path.stem.rsplit("-", 1)[1])
            if (t < resumed) if resumed is not None else _silent_through(run_dir, survivor, t):
                found.append(recent[-1])
    return min(found) - t if found else None


def _replica_fault(journal: list[dict[str, Any]]) -> tuple[float, int] | None:
    """The first fault's injection (epoch s) and its replica; None without a fault on one."""
    injected = next(iter(_events(journal, "fault-injected")), None)
    if injected is None or injected.get("replica") is None:
        return None
    return float(injected["started"]), int(injected["replica"])


def offset_table(rows: Sequence[dict[str, Any]]) -> None:
    """Kill runs by when the survivor's boundary came (:func:`survivor_boundary_s`): before or
    after the newcomer caught up (the report's ``caught_up_s``: its trail of the output back
    within its steady allowance), masked or not."""
    kills = [r for r in rows if r.get("survivor_boundary_s") is not None and "masked" in r]
    if not kills:
        return
    print_table(
        sorted(kills, key=lambda r: (_variant(r), num(r["survivor_boundary_s"]))),
        Column("pipeline fault mode", 40, "", _variant),
        [
            Column("at s", 5, ".0f", lambda r: num(r.get("fault_at"))),
            Column("bnd s", 6, ".1f", lambda r: num(r["survivor_boundary_s"])),
            Column("take s", 6, ".2f", lambda r: num(r.get("takeover_s"))),
            Column("healthy s", 9, ".1f", lambda r: num(r.get("healthy_s"))),
            Column("caught s", 8, ".1f", lambda r: num(r.get("caught_up_s"))),
            Column("ratio", 6, ".2f", lambda r: num(r.get("ratio"))),
            Column("masked", 6, "", lambda r: yes_no(r.get("masked"))),
        ],
        error_chars=60,
    )
    for variant in sorted({_variant(r) for r in kills}):
        mine = [r for r in kills if _variant(r) == variant]
        for label, group in (
            ("boundary after the catch-up", [r for r in mine if _after_catch_up(r)]),
            ("boundary before it (or none)", [r for r in mine if not _after_catch_up(r)]),
        ):
            if group:
                masked = sum(1 for r in group if r.get("masked") is True)
                print(f"  {variant}: {label}: masked {masked} of {len(group)}")
    print(
        "(bnd s: seconds from the kill to the survivor's next batch end, or to one whose stall "
        "was still running, negative; healthy s: the report's, "
        "to the newcomer's first result from input sent after it came back; caught s: to the "
        "report's caught_up_s, its trail of the output back within its steady allowance)"
    )


def _after_catch_up(r: dict[str, Any]) -> bool:
    caught = r.get("caught_up_s")
    return caught is not None and num(r["survivor_boundary_s"]) > float(caught)


def _events(journal: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in journal if e.get("event") == name]


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def analyse(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """The run's figures, all from its report (module docstring)."""
    report = build_report(run_dir)
    steady = _phase(report, "steady")
    overall = report.overall
    c = report.correctness
    journal = read_jsonl(run_dir / "journal.jsonl")
    slots = next(iter(_events(journal, "replica-slots")), None)
    row: dict[str, Any] = {
        "run": str(run_dir),
        "master": slots["master"] if slots else summary.get("master"),
        "achieved_rate": summary.get("achieved_rate"),
        "steady_p50": _pct(steady, "p50"),
        "steady_p99": _pct(steady, "p99"),
        "steady_max": steady.max_ms if steady else None,
        "steady_s": (steady.end_s - steady.start_s) if steady else None,
        "steady_gap_ms": steady.max_gap_ms if steady else None,
        "steady_stagger_s": stagger_s(report, steady) if report.replicas > 1 else None,
        "overall_stagger_s": stagger_s(report, overall) if report.replicas > 1 else None,
        "overall_p50": _pct(overall, "p50"),
        "overall_p99": _pct(overall, "p99"),
        "overall_sent_p99": _pct(overall, "p99", sent=True),
        "results": c.results,
        "expected": c.expected,
        "basis": c.basis,
        "missing": c.missing,
        "duplicates": c.duplicates,
        "divergent": c.divergent,
        "extra": c.extra,
        "final_values_wrong": getattr(c, "final_values_wrong", None),
        "complete": c.complete,
        "late_drop_rows": report.late_drops.rows,
        "restarts": summary.get("replica_restarts"),
        "restarted": sorted({e["replica"] for e in _events(journal, "replica-restarted")}),
        # Which replicas' Spark saw an executor die (kill-executor picks it by app id, and two
        # local-cluster replicas started in the same second share one).
        "lost_executor": [
            i
            for i in range(report.replicas)
            if "Lost executor" in _text(run_dir / "logs" / f"replica-{i}.log")
        ],
        "cpu_s": summary.get("cpu_s_total"),
        "warnings": report.warnings,
        **boundary_ms(run_dir, report, steady),
        "survivor_boundary_s": survivor_boundary_s(run_dir, journal),
        **takeover(run_dir),
        **hop_ms(report),
    }
    if report.faults:
        f = report.faults[0]
        row.update(
            fault_error=f.error,
            window_p99=f.p99_ms,
            ratio=_div(f.p99_ms, row["steady_p99"]),
            fault_gap_ms=f.max_gap_ms,
            gap_ratio=_div(f.max_gap_ms, row["steady_gap_ms"]),
            window_s=f.window_s,
            window_ended_by=f.window_ended_by,
            healthy_s=f.healthy_s,
            recovery_s=f.recovery_s,
            first_batch_s=f.first_batch_s,
            caught_up_s=f.caught_up_s,
            masked=f.masked,
            verdict=f.verdict,
        )
    return row


def hop_ms(report: Report) -> dict[str, float | None]:
    """The independent check's merge and end-to-end hops (p50, p99; Kafka timestamps, whole
    ms, after the warm-up): ``merge`` is the delivered copy's send minus the first replica's."""
    out: dict[str, float | None] = {}
    for hop in ("merge", "e2e"):
        stats = report.hops.hops.get(hop) if report.hops is not None else None
        for q in ("p50", "p99"):
            out[f"{hop}_hop_{q}"] = getattr(stats, q, None) if stats is not None else None
    return out


TAKEOVER_RE = re.compile(
    r"take-over: pipeline (built ahead, sink added|built) in [\d.]+s, query start [\d.]+s, "
    r"([\d.]+)s since assigned"
)


def takeover(run_dir: Path) -> dict[str, Any]:
    """A promoted standby's own count from its assignment to its query started, and whether
    it used a pipeline built ahead (its log; nothing without a take-over)."""
    m = TAKEOVER_RE.search(_text(run_dir / "logs" / "standby-0.log"))
    if m is None:
        return {}
    return {"takeover_s": float(m.group(2)), "built_ahead": m.group(1) != "built"}


def sweep_cpu(run_dir: Path, cpu: ProcessCpu, warmup_s: float) -> dict[str, Any]:
    """Cores each process used from the end of the warm-up to the end of the input, the top
    one, and what saturated: the host (busy >= 90 % of its cores) or a single-threaded
    Python process (>= 0.85 core; its GIL caps it at one)."""
    from arfl.report.rundata import load_run

    data = load_run(run_dir)
    start, end = data.input_start, data.input_end
    if start is None or end is None:
        return {}
    cores = cpu.cores(start + warmup_s, end)
    if not cores:
        return {}
    host = cores.pop(HOST, math.nan)
    procs = sorted(cores.items(), key=lambda kv: -kv[1])
    top, top_cores = procs[0] if procs else ("-", 0.0)
    n = host_cores()
    python = {k: v for k, v in procs if k in ("merger", "injector") or k.endswith("driver-py")}
    hot_py = max(python.items(), key=lambda kv: kv[1], default=("-", 0.0))
    if hot_py[1] >= 0.85:
        saturated = f"{hot_py[0]} ({hot_py[1]:.2f} core, single-threaded Python)"
    elif host >= 0.9 * n:
        saturated = f"host ({host:.2f} of {n} cores; most: {top} {top_cores:.2f})"
    else:
        saturated = "none"
    return {
        "host_cores_busy": host,
        "top_process": top,
        "top_cores": top_cores,
        "saturated": saturated,
        "process_cores": {k: round(v, 3) for k, v in procs},
    }


ON_OFF: dict[str, list[bool]] = {"on": [True], "off": [False], "both": [False, True]}
"""The variants an ``on|off|both`` option runs."""


def _on_off(ap: argparse.ArgumentParser, flag: str, help: str) -> None:
    """An ``on|off|both`` option (default on): :data:`ON_OFF` of its value."""
    ap.add_argument(flag, choices=list(ON_OFF), default="on", help=help)


def _variant(r: dict[str, Any]) -> str:
    more = f" R={r['replicas']}" if r.get("replicas") else ""
    more += "+standby" if r.get("standby") else ""
    more += " no-yield" if r.get("standby_yield") is False else ""
    more += " no-build-ahead" if r.get("build_ahead_off") else ""
    more += f" from {r['resume']}" if r.get("resume") else ""
    more += f" int={r['interval']}" if r.get("interval") else ""
    more += f" +{r['after_boundary']}" if r.get("after_boundary") else ""
    return f"{r['pipeline']} {r['fault']} {r['mode']}{more}"


def _cnt(v: Any) -> str:
    return "?" if v is None else str(v)


LEGEND = """\
(ms. p50/p99: the steady phase; all p99: the whole run after the warm-up; win s / win p99: the
 report's impact window of the fault, its length and p99; ratio = win p99 / steady p99; gap: the
 longest output gap overlapping the window, st gap: the steady phase's (the report sees gaps
 < 1 s only when they set a run-wide record); masked: the report's verdict; miss/dup/div: the
 report's correctness (independent check); late: rows the replicas dropped behind the
 watermark (every replica together); rst: replica restarts; lost: replicas whose Spark
 lost an executor; stag s: median distance between the two replicas' batch starts, steady)"""


def fault_table(rows: Sequence[dict[str, Any]]) -> None:
    """The fault runs: latency, the report's impact-window figures, correctness, cost."""
    print_table(
        rows,
        Column("pipeline fault mode", 40, "", _variant),
        [
            Column("p50", 7, ".1f", lambda r: num(r["steady_p50"])),
            Column("p99", 7, ".1f", lambda r: num(r["steady_p99"])),
            Column("all p99", 8, ".1f", lambda r: num(r["overall_p99"])),
            Column("win s", 5, ".1f", lambda r: num(r.get("window_s"))),
            Column("win p99", 8, ".1f", lambda r: num(r.get("window_p99"))),
            Column("ratio", 6, ".2f", lambda r: num(r.get("ratio"))),
            Column("gap", 6, ".0f", lambda r: num(r.get("fault_gap_ms"))),
            Column("st gap", 6, ".0f", lambda r: num(r["steady_gap_ms"])),
            Column("masked", 6, "", lambda r: yes_no(r.get("masked"))),
            Column("miss", 4, "", lambda r: _cnt(r["missing"])),
            Column("dup", 4, "", lambda r: _cnt(r["duplicates"])),
            Column("div", 4, "", lambda r: _cnt(r["divergent"])),
            Column("late", 5, "", lambda r: _cnt(r["late_drop_rows"])),
            Column("rst", 3, "", lambda r: _cnt(r["restarts"])),
            Column("lost", 4, "", lambda r: ",".join(map(str, r.get("lost_executor", []))) or "-"),
            Column("cpu s", 6, ".0f", lambda r: num(r["cpu_s"])),
            Column("stag s", 6, ".1f", lambda r: num(r.get("steady_stagger_s"))),
        ],
        error_chars=60,
    )
    print(LEGEND)


def sweep_table(rows: Sequence[dict[str, Any]]) -> None:
    """The rate sweep: latency, whether the injector kept up, who used the CPU."""
    print_table(
        rows,
        Column("RTM per-record", 36, "", _sweep_variant),
        [
            Column("jit", 3, "", lambda r: r.get("jit", "c1")),
            Column("stagger", 7, "", lambda r: "off" if r.get("stagger") is False else "on"),
            Column("stag s", 6, ".1f", lambda r: num(r.get("overall_stagger_s"))),
            Column("p50", 7, ".1f", lambda r: num(r["overall_p50"])),
            Column("p99", 8, ".1f", lambda r: num(r["overall_p99"])),
            Column("sent p99", 9, ".1f", lambda r: num(r["overall_sent_p99"])),
            Column("ev/s", 7, ".0f", lambda r: num(r["achieved_rate"])),
            Column("host", 5, ".2f", lambda r: num(r.get("host_cores_busy"))),
            Column("top process", 16, "", lambda r: r.get("top_process", "?")),
            Column("cores", 5, ".2f", lambda r: num(r.get("top_cores"))),
            Column("miss", 4, "", lambda r: _cnt(r["missing"])),
            Column("div", 4, "", lambda r: _cnt(r["divergent"])),
            Column("plan", 5, ".0f", lambda r: num(r.get("queryPlanning_ms"))),
            Column("wal", 5, ".0f", lambda r: num(r.get("walCommit_ms"))),
            Column("commit", 6, ".0f", lambda r: num(r.get("commitOffsets_ms"))),
            Column("betw", 5, ".0f", lambda r: num(r.get("between_ms"))),
        ],
        error_chars=60,
    )
    print(
        "(plan / wal / commit: medians of the steady batches' queryPlanning, walCommit and "
        "commitOffsets ms; betw: median idle ms between a batch's end and the next one's start)"
    )


def _sweep_variant(r: dict[str, Any]) -> str:
    mode = r.get("mode", "active")
    reps = r.get("replicas") or MODES[mode].replicas
    more = f" int={r['interval']}" if r.get("interval") else ""
    more += f" #{r['round']}" if r.get("round") else ""
    return f"{mode} R={reps} {r['rate']} ev/s{more}"


def print_tables(rows: Sequence[dict[str, Any]], sweep: Sequence[dict[str, Any]]) -> None:
    """Both tables and the sweep's conclusion."""
    if rows:
        fault_table(rows)
        offset_table(rows)
    if sweep:
        sweep_table(sweep)
        ok = [
            r["rate"]
            for r in sweep
            if r.get("stagger", True)
            and r.get("mode", "active") == "active"
            and r.get("jit", "c1") == "c1"
            and num(r.get("overall_p99")) < P99_LIMIT_MS
        ]
        rates = ", ".join(str(r) for r in sorted({r["rate"] for r in sweep}))
        print(
            f"highest rate of active RTM (C1 JIT, staggered) with p99 < {P99_LIMIT_MS:.0f} ms: "
            f"{max(ok) if ok else 'none'} ev/s (of {rates})"
        )
        for r in sweep:
            if "saturated" in r:
                print(f"  {_sweep_variant(r)} {r.get('jit', 'c1')}: saturated: {r['saturated']}")


def reanalyse(path: Path) -> int:
    """Recompute the report figures of the runs listed in ``path`` (the CPU samples of the
    sweep are kept as recorded) and print the tables."""
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    for r in rows:
        if "run" in r:
            run_dir = Path(r["run"])
            summary = json.loads((run_dir / "summary.json").read_text())
            r.update(analyse(run_dir, summary))
    print_tables([r for r in rows if "rate" not in r], [r for r in rows if "rate" in r])
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--duration", default="75s")
    ap.add_argument(
        "--fault-at",
        default="45s",
        help="when the fault comes; a list (68s,72s,76s) runs every variant at each",
    )
    ap.add_argument(
        "--after-boundary",
        default="",
        help="place each fault this long after the survivor's next batch boundary from "
        "--fault-at on (the spec's chaos after_boundary, as the demo does; e.g. 5s); a list "
        "(2s,10s,20s) runs every fault variant at each",
    )
    ap.add_argument("--warmup", default="25s", help="excluded from every figure")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument(
        "--interval",
        default="",
        help="real-time checkpoint interval (e.g. 30s); a list (30s,60s) runs every variant and "
        "sweep run with each",
    )
    _on_off(
        ap, "--stagger",
        "sweep with the replicas' batch boundaries kept apart, started together, or both",
    )  # fmt: skip
    ap.add_argument(
        "--target",
        choices=("local", "docker"),
        default="local",
        help="spark.target of every run (docker: needs a daemon, scripts/docker-up)",
    )
    ap.add_argument(
        "--replicas", type=int, default=None, help="R of the replicated modes (default 2)"
    )
    ap.add_argument(
        "--standby",
        choices=["0", "1", "both"],
        default="0",
        help="fault variants without / with a standby driver taking the dead one's place",
    )
    ap.add_argument(
        "--resume",
        default=None,
        help="active fault variants, a list of checkpoint, peer, output (both = checkpoint,"
        "output): the killed replica restarts from its own checkpoint, from the freshest "
        "replica's, at the output frontier (default: the spec's default, auto)",
    )
    _on_off(
        ap, "--standby-yield",
        "standby variants: the promoted standby yields the CPU until caught up (on), or not (off)",
    )  # fmt: skip
    _on_off(
        ap, "--build-ahead",
        "standby variants: the standby builds each replica's pipeline while it waits (on), or "
        "not (off: arfl.standbyBuildAhead = false)",
    )  # fmt: skip
    ap.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="added to every fault run's spark.conf (repeatable; e.g. spark.eventLog.enabled=true:"
        " replicas started in the same second share a local-cluster app id, and the second one's"
        " event-log directory exists, so it fails once and is restarted before the input)",
    )
    ap.add_argument("--modes", default=",".join(m for m in MODES if m != "active-leader"))
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument(
        "--sweep",
        default="1000,2500,5000",
        help="rates for active RTM R=2 per-record, fault-free ('' for none)",
    )
    ap.add_argument("--sweep-duration", default="50s")
    ap.add_argument(
        "--sweep-rounds",
        type=int,
        default=1,
        help="run the whole sweep this many times in turn (variants alternate: a noisy host "
        "drifts between rounds, not within a pair)",
    )
    ap.add_argument(
        "--sweep-modes",
        default="active",
        help="modes of the fault-free sweep (real-time ones: active, passive)",
    )
    ap.add_argument(
        "--jit",
        choices=("c1", "c2", "both"),
        default="c1",
        help="sweep with arfl's C1-only JIT, HotSpot's tiered C1 + C2, or both",
    )
    ap.add_argument(
        "--windowed-later",
        default="20s",
        help="windowed runs: added to --duration, --fault-at and --warmup (slower catch-up)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="short runs for a smoke test (30 s, fault at 15 s, 5 s warm-up; 25 s sweep runs)",
    )
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/realtime.json"))
    ap.add_argument(
        "--from",
        dest="again",
        type=Path,
        default=None,
        help="deploy nothing: re-analyse the runs of an earlier --out and print the tables",
    )
    args = ap.parse_args(argv)
    if args.resume not in (None, "both") and (
        bad_resume := set(args.resume.split(",")) - {"checkpoint", "peer", "output"}
    ):
        ap.error(f"--resume: unknown {', '.join(sorted(bad_resume))} (checkpoint, peer, output)")
    if args.replicas is not None and args.replicas < 2:
        ap.error("--replicas: the replicated modes need at least 2")
    if args.again is not None:
        return reanalyse(args.again)
    d = parse_duration
    fault_times = [d(a) for a in args.fault_at.split(",") if a]
    if not fault_times:
        ap.error("--fault-at: at least one time")
    t = (
        Timing(30.0, 15.0, 5.0, 25.0)
        if args.quick
        else Timing(
            d(args.duration),
            fault_times[0],
            d(args.warmup),
            d(args.sweep_duration),
            d(args.windowed_later),
        )
    )
    if args.quick:
        fault_times = [t.fault_at]
    modes, pipelines = args.modes.split(","), args.pipelines.split(",")
    faults = args.faults.split(",") if args.faults else []
    rates = [int(r) for r in args.sweep.split(",") if r]
    given = [i for i in args.interval.split(",") if i]
    intervals = given or [""]  # "": the spec's default
    for i in given:
        try:
            d(i)
        except ValueError as e:
            ap.error(f"--interval: {e}")
    sweep_modes = args.sweep_modes.split(",")
    for name, known in (
        (modes, MODES),
        (pipelines, PIPELINES),
        (faults, FAULTS),
        (sweep_modes, SWEEP_MODES),
    ):
        bad = [n for n in name if n not in known]
        if bad:
            ap.error(f"unknown {', '.join(bad)} (known: {', '.join(known)})")
    bad_conf = [c for c in args.spark_conf if "=" not in c]
    if bad_conf:
        ap.error(f"--spark-conf: expected KEY=VALUE, got {', '.join(bad_conf)}")
    spark_conf = dict(c.split("=", 1) for c in args.spark_conf)
    placements = [a for a in args.after_boundary.split(",") if a] or [""]
    for a in filter(None, placements):
        try:
            d(a)
        except ValueError as e:
            ap.error(f"--after-boundary: {e}")
    args.runs.mkdir(parents=True, exist_ok=True)
    stack.up()  # once, up front; a no-op when the embedded stack runs
    rows: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> None:
        print(json.dumps(row, default=str), flush=True)
        write_rows(args.out, [*rows, *sweep])

    standbys = {"0": [0], "1": [1], "both": [0, 1]}[args.standby]
    resumes = (
        ["auto"]
        if args.resume is None
        else ["checkpoint", "output"]
        if args.resume == "both"
        else args.resume.split(",")
    )
    yields, aheads = ON_OFF[args.standby_yield], ON_OFF[args.build_ahead]
    variants = [
        (p, f, m, sb, rs, y, at, iv, ab, ah)
        for at in fault_times
        for ab in placements
        for iv in intervals
        for p in pipelines
        for f in faults
        for m in modes
        for sb in standbys
        for rs in (resumes if MODES[m].mode == "active" else ["auto"])
        for y in (yields if sb else [True])
        for ah in (aheads if sb else [True])
    ]
    for pipeline, fault, mode, sb, resume, yields_cpu, at, interval, placed, ahead in variants:
        row: dict[str, Any] = {"pipeline": pipeline, "fault": fault, "mode": mode}
        if len(intervals) > 1:
            row["interval"] = interval
        timing = dataclasses.replace(t, fault_at=at).of(pipeline)
        row["fault_at"] = timing.fault_at
        if MODES[mode].replicas > 1 and args.replicas is not None:
            row["replicas"] = args.replicas
        if sb:
            row["standby"] = sb
        if resume != "auto":
            row["resume"] = resume
        if sb and not yields_cpu:
            row["standby_yield"] = False
        if sb and not ahead:
            row["build_ahead_off"] = True
        if placed:
            row["after_boundary"] = placed
        spec = spec_for(
            pipeline,
            mode,
            args.rate,
            timing,
            fault,
            interval=interval,
            target=args.target,
            replicas=args.replicas,
            standby=sb,
            resume=resume,
            standby_yield=yields_cpu,
            spark_conf=spark_conf,
            after_boundary=placed,
            build_ahead=ahead,
        )
        try:
            run_dir, summary, _, wall = run(spec, args.runs)
            row.update(wall_s=round(wall, 1), **analyse(run_dir, summary))
        except ArflError as e:
            print(f"{_variant(row)}: failed: {e}", file=sys.stderr)
            row["error"] = str(e)
        rows.append(row)
        record(row)
    staggers = ON_OFF[args.stagger]
    jits = {"c1": ["c1"], "c2": ["c2"], "both": ["c1", "c2"]}[args.jit]
    done: set[tuple[int, str, str, bool, str]] = set()  # past the p99 bar
    for rnd, rate, mode, jit, stagger, interval in (
        (n, r, m, j, g, i)
        for n in range(max(1, args.sweep_rounds))
        for r in rates
        for m in sweep_modes
        for j in jits
        for g in staggers
        for i in intervals
    ):
        if (rnd, mode, jit, stagger, interval) in done:
            continue
        row = {
            "pipeline": "per-record",
            "fault": None,
            "mode": mode,
            "rate": rate,
            "stagger": stagger,
            "jit": jit,
        }
        if len(intervals) > 1:
            row["interval"] = interval
        if args.sweep_rounds > 1:
            row["round"] = rnd + 1
        spec = spec_for(
            "per-record", mode, rate, t, None, t.sweep_duration, interval, stagger,
            args.target, args.replicas, jit,
        )  # fmt: skip
        if args.replicas is not None and MODES[mode].replicas > 1:
            row["replicas"] = args.replicas
        try:
            run_dir, summary, cpu, wall = run(spec, args.runs)
            row.update(wall_s=round(wall, 1), **analyse(run_dir, summary))
            row.update(sweep_cpu(run_dir, cpu, t.warmup))
        except ArflError as e:
            print(f"sweep {mode} {jit} {rate} ev/s: failed: {e}", file=sys.stderr)
            row["error"] = str(e)
        sweep.append(row)
        record(row)
        if "error" in row or num(row.get("overall_p99")) >= P99_LIMIT_MS:
            done.add((rnd, mode, jit, stagger, interval))
    if rows:
        print(f"\n{args.rate} ev/s, 2 partitions, fault on replica 0")
        for pipeline in pipelines:
            for at in fault_times:
                timing = dataclasses.replace(t, fault_at=at).of(pipeline)
                print(f"  {pipeline}: {timing.describe()}")
    print_tables(rows, sweep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
