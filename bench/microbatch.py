"""Micro-batch speed: where a batch's time goes, and what each setting buys.

    .venv/bin/python bench/microbatch.py [--variants none,active-leaderless,active-leader]
        [--duration 45s] [--warmup 20s] [--rate 1000] [--windowed] [--event-log] [--runs DIR]
        [--out F]

One invocation deploys every variant, one after another, on the per-record pipeline (filter
``amount > 10``; ``--windowed``: then a 1 s tumbling window per user, watermark 500 ms, count
and sum), 2 partitions, every replica on ``local-cluster[1,1,1024]``. A variant is a
mode (``none`` 1 replica; ``passive`` 1; ``active-leaderless`` / ``active-leader`` 2) followed by
``+knob`` settings, e.g. ``none+c2``, ``active-leader+bi=1s``:

* ``bi=<duration>``: ``replication.batch_interval`` (active modes);
* ``hb=<duration>``: ``replication.heartbeat_interval`` (active-leaderless);
* ``catch=auto|aligned``: ``replication.catch_up`` (active-leader/-leaderless);
* ``jvm`` / ``py``: ``replication.reader`` (active-leader/-leaderless: arfl's JVM or Python
  reader);
* ``conf:<key>=<value>``: one Spark conf entry in ``[spark.conf]``;
* ``cpu=<cores>``: ``[placement] cpus_per_replica``, each replica on a CPU share of its own
  (needs root), so that one replica and two compare as on hosts of equal size;
* ``rate=<ev/s>``: this variant's input rate instead of ``--rate`` (a rate search in one
  invocation: ``none+cpu=0.6+rate=600,none+cpu=0.6+rate=800``);
* ``kill=<at>``: a ``kill-executor`` of replica 0 at ``<at>`` of the input; the table adds the
  report's verdict on it (masked, the impact window's p99 and longest gap). The report's
  steady phase (p50/p99, ÷none) then ends at the kill; the batch figures and the share still
  run to the end of the output;
* a name from :data:`KNOBS` (a named set of Spark conf entries).

Figures: the steady phase's p50/p99 end to end (the run's report: end of the warm-up to the end
of the output), the largest lag of any replica behind the input (``max_lag_s``, the lag
watch), the rows dropped behind a watermark (every replica together), each replica's batch
duration (``durationMs.triggerExecution``), ``addBatch``, ``walCommit``, ``commitOffsets``,
``latestOffset`` and ``queryPlanning`` (medians over the batches that started after the
warm-up, every replica pooled), batches per second of one replica, and the CPU seconds of the
replicas.
With ``--event-log`` every replica writes a Spark event log and the table adds the medians of
its tasks after the warm-up: executor run time, deserialisation, scheduler delay (launch to
finish minus everything the executor reports), result serialisation, and the job's wall time
(submission to completion).

Each deployment holds ``/tmp/arfl-cpu.lock`` for its duration, so other integration runs
interleave between the runs, not during them. The machine is shared: compare variants of one
invocation only.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import Column, cpu_lock, num, print_table, write_rows, yes_no

from arfl import stack
from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.report.build import build_report
from arfl.report.rundata import load_run
from arfl.run.progress import batch_timing
from arfl.run.rundir import read_jsonl
from arfl.units import parse_duration

REPLICAS = {"none": 1, "passive": 1, "active-leaderless": 2, "active-leader": 2, "active": 2}
PHASES = (
    "triggerExecution",
    "addBatch",
    "walCommit",
    "commitOffsets",
    "latestOffset",
    "queryPlanning",
)
KNOBS: dict[str, dict[str, str]] = {
    # HotSpot's default tiered JIT (C1 then C2) instead of arfl's C1-only default.
    "c2": {"spark.driver.extraJavaOptions": "", "spark.executor.extraJavaOptions": ""},
    "c1": {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    },
    # Spark's asynchronous progress tracking (arfl's key, see arfl.replica.driver).
    "async": {"arfl.asyncProgressTracking": "true"},
    "sync": {"arfl.asyncProgressTracking": "false"},
    "noreuse": {"spark.python.worker.reuse": "false"},
    "reuse": {"spark.python.worker.reuse": "true"},
    "nodata-off": {"spark.sql.streaming.noDataMicroBatches.enabled": "false"},
    "poll10": {"spark.sql.streaming.pollingDelay": "10ms"},
    "shuffle1": {"spark.sql.shuffle.partitions": "1"},
    "cores2": {"spark.master": "local-cluster[1,2,1024]"},
    "local2": {"spark.master": "local[2]"},
}
"""Named sets of Spark conf entries a variant may add with ``+name``."""


@dataclass(frozen=True)
class Variant:
    """One deployment: a mode, its replicas and what it changes.

    Attributes:
        name: as given on the command line.
        mode: the replication mode.
        conf: Spark conf entries added to ``[spark.conf]`` (``spark.master`` sets the master).
        replication: extra ``[replication]`` keys (``batch_interval``, ``heartbeat_interval``).
        cpus: ``[placement] cpus_per_replica`` (None: no share).
        rate: the input rate (None: ``--rate``).
        kill_at: when replica 0's executor is killed, seconds into the input (None: no fault).
    """

    name: str
    mode: str
    conf: dict[str, str] = field(default_factory=dict)
    replication: dict[str, str] = field(default_factory=dict)
    cpus: float | None = None
    rate: int | None = None
    kill_at: float | None = None

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``mode[+knob...]`` (module docstring).

        Raises:
            ValueError: unknown mode or knob.
        """
        mode, *knobs = text.split("+")
        if mode not in REPLICAS:
            raise ValueError(f"{text}: unknown mode {mode!r} (known: {', '.join(REPLICAS)})")
        conf: dict[str, str] = {}
        repl: dict[str, str] = {}
        cpus: float | None = None
        rate: int | None = None
        kill_at: float | None = None
        for k in knobs:
            if k.startswith("conf:") and "=" in k:
                key, _, value = k[5:].partition("=")
                conf[key] = value
            elif k.startswith("bi="):
                repl["batch_interval"] = k[3:]
            elif k.startswith("hb="):
                repl["heartbeat_interval"] = k[3:]
            elif k.startswith("cpu="):
                cpus = float(k[4:])
            elif k.startswith("rate="):
                rate = int(k[5:])
            elif k.startswith("kill="):
                kill_at = parse_duration(k[5:])
            elif k.startswith("catch="):
                repl["catch_up"] = k[6:]
            elif k in ("jvm", "py"):
                repl["reader"] = "jvm" if k == "jvm" else "python"
            elif k in KNOBS:
                conf.update(KNOBS[k])
            else:
                more = ["bi=<d>", "hb=<d>", "catch=<auto|aligned>", "jvm|py", "conf:<k>=<v>"]
                more += ["cpu=<cores>", "rate=<ev/s>", "kill=<at>"]
                known = ", ".join([*KNOBS, *more])
                raise ValueError(f"{text}: unknown knob {k!r} (known: {known})")
        return cls(text, mode, conf, repl, cpus, rate, kill_at)


WINDOW = {
    "size": "1s",
    "key": "user",
    "watermark": "500ms",
    "agg": {"n": "count(*)", "total": "sum(amount)"},
}


def spec_for(
    v: Variant,
    rate: int,
    duration: float,
    warmup: float,
    event_log: Path | None,
    windowed: bool = False,
) -> Spec:
    """The benchmark spec of variant ``v``."""
    conf: dict[str, str] = {"spark.sql.shuffle.partitions": "2", **v.conf}
    master = conf.pop("spark.master", "local-cluster[1,1,1024]")
    if event_log is not None:
        event_log.mkdir(parents=True, exist_ok=True)
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(event_log.resolve()),
            "spark.eventLog.compress": "false",
        }
    safe = "".join(c if c.isalnum() or c == "-" else "-" for c in v.name)[:60]
    raw: dict[str, Any] = {
        "name": f"mb-{safe}",
        "source": {"topic": "mb", "partitions": 2, "event_time": "ts"},
        "steps": [{"filter": "amount > 10"}, *([{"window": WINDOW}] if windowed else [])],
        "sink": {"topic": "mb-out"},
        "replication": {"mode": v.mode, "replicas": REPLICAS[v.mode], **v.replication},
        "spark": {"master": master, "conf": conf},
        "workload": {
            "rate": v.rate or rate,
            "duration": f"{duration:g}s",
            "keys": 100,
            "warmup": f"{warmup:g}s",
        },
    }
    if v.cpus is not None:
        raw["placement"] = {"cpus_per_replica": v.cpus}
    if v.kill_at is not None:
        raw["chaos"] = [{"at": f"{v.kill_at:g}s", "fault": "kill-executor", "replica": 0}]
    return parse_spec(raw, "microbatch")


def _median(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def batch_figures(run_dir: Path, after: float) -> dict[str, Any]:
    """Medians of the batch phases (ms) over every replica's data batches that started at or
    after ``after`` (epoch s), and batches per second of replica 0 over that span."""
    lines: list[dict[str, Any]] = []
    rate: float | None = None
    for f in sorted((run_dir / "progress").glob("replica-*.jsonl")):
        mine = []
        for p in read_jsonl(f):
            t = batch_timing(p)
            if t is not None and t[0] >= after and p.get("numInputRows", 0) > 0:
                mine.append((t[0], p))
        lines += [p for _, p in mine]
        if f.name == "replica-0.jsonl" and len(mine) > 1:
            span = mine[-1][0] - mine[0][0]
            rate = (len(mine) - 1) / span if span > 0 else None
    out: dict[str, Any] = {
        f"{k}_ms": _median(float((p.get("durationMs") or {}).get(k, math.nan)) for p in lines)
        for k in PHASES
    }
    out["rows_per_batch"] = _median(float(p.get("numInputRows", 0)) for p in lines)
    out["batches"] = len(lines)
    out["batches_per_s"] = rate
    return out


def _app_ids(run_dir: Path) -> list[str]:
    ids = []
    for f in sorted((run_dir / "replicas").glob("replica-*.app.json")):
        try:
            ids.append(str(json.loads(f.read_text())["app_id"]))
        except (OSError, ValueError, KeyError):
            continue
    return ids


def task_figures(event_log: Path, app_ids: list[str], after: float) -> dict[str, Any]:
    """Medians (ms) of the tasks and jobs that started at or after ``after`` (epoch s) in the
    replicas' event logs, and the SQL metrics whose name says time (summed per task)."""
    tasks: dict[str, list[float]] = {
        k: [] for k in ("task", "run", "deser", "sched", "resser", "gc", "cpu")
    }
    jobs: list[float] = []
    metrics: dict[str, list[float]] = {}
    for app in app_ids:
        # Spark 4 rolls event logs by default: a directory of ``events_<n>_<app>`` files.
        files = [event_log / app, *sorted((event_log / f"eventlog_v2_{app}").glob("events_*"))]
        text = "".join(f.read_text(errors="replace") for f in files if f.is_file())
        submitted: dict[int, float] = {}
        for line in text.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            kind = ev.get("Event")
            if kind == "SparkListenerJobStart":
                submitted[ev["Job ID"]] = ev.get("Submission Time", 0) / 1000
            elif kind == "SparkListenerJobEnd":
                t0 = submitted.pop(ev["Job ID"], None)
                if t0 is not None and t0 >= after:
                    jobs.append(ev["Completion Time"] - t0 * 1000)
            elif kind == "SparkListenerTaskEnd":
                info, m = ev.get("Task Info") or {}, ev.get("Task Metrics") or {}
                launch, finish = info.get("Launch Time", 0), info.get("Finish Time", 0)
                if launch / 1000 < after or not m:
                    continue
                dur = finish - launch
                run = m.get("Executor Run Time", 0)
                deser = m.get("Executor Deserialize Time", 0)
                resser = m.get("Result Serialization Time", 0)
                getting = info.get("Getting Result Time", 0)
                tasks["task"].append(dur)
                tasks["run"].append(run)
                tasks["deser"].append(deser)
                tasks["resser"].append(resser)
                tasks["sched"].append(max(0, dur - run - deser - resser - getting))
                tasks["gc"].append(m.get("JVM GC Time", 0))
                tasks["cpu"].append(m.get("Executor CPU Time", 0) / 1e6)
                for acc in info.get("Accumulables", []):
                    name = str(acc.get("Name", ""))
                    if "time" in name.lower() and "Update" in acc:
                        try:
                            metrics.setdefault(name, []).append(float(acc["Update"]))
                        except (TypeError, ValueError):
                            continue
    out: dict[str, Any] = {f"task_{k}_ms": _median(v) for k, v in tasks.items()}
    out["tasks"] = len(tasks["task"])
    out["job_ms"] = _median(jobs)
    out["jobs"] = len(jobs)
    out["task_time_metrics"] = {k: _median(v) for k, v in sorted(metrics.items())}
    return out


def analyse(
    run_dir: Path, summary: dict[str, Any], warmup: float, event_log: Path | None
) -> dict[str, Any]:
    """The variant's figures (module docstring)."""
    report = build_report(run_dir)
    steady = next((p for p in report.phases if p.name == "steady"), None)
    start = load_run(run_dir).input_start
    after = (start or 0.0) + warmup
    c = report.correctness
    row: dict[str, Any] = {
        "run": str(run_dir),
        "achieved_rate": summary.get("achieved_rate"),
        "p50": steady.percentiles_ms.get("p50") if steady and steady.count else None,
        "p99": steady.percentiles_ms.get("p99") if steady and steady.count else None,
        "results": c.results,
        "missing": c.missing,
        "divergent": c.divergent,
        "late_drops": report.late_drops.rows,
        "max_lag_s": max((summary.get("max_lag_s") or {}).values(), default=None),
        "cpu_s": summary.get("cpu_s_total"),
        # With a CPU share: the most any replica used of its own (1.0: it ran into its quota).
        "share_used": max(
            (
                g.get("used_fraction") or 0.0
                for name, g in ((summary.get("placement") or {}).get("groups") or {}).items()
                if name.startswith("replica-")
            ),
            default=None,
        ),
        **batch_figures(run_dir, after),
    }
    if report.faults:
        f = report.faults[0]
        row.update(
            masked=f.masked,
            verdict=f.verdict,
            window_p99=f.p99_ms,
            fault_gap_ms=f.max_gap_ms,
            caught_up_s=f.caught_up_s,
        )
    if event_log is not None:
        row.update(task_figures(event_log, _app_ids(run_dir), after))
    return row


def run(spec: Spec, runs: Path) -> tuple[Path, dict[str, Any], float]:
    """Deploy ``spec`` holding the CPU lock; the run directory, summary and wall seconds."""
    with cpu_lock():
        t = time.monotonic()
        res = deploy(spec, None, DeployOptions(runs_root=runs))
        return res.run_dir, res.summary, time.monotonic() - t


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The results table (ratios to the first ``none`` variant)."""
    ref = next((r for r in rows if r["variant"].split("+")[0] == "none" and "error" not in r), None)
    ref_p50 = num(ref["p50"]) if ref else math.nan
    columns = [
        Column("ev/s", 5, ".0f", lambda r: num(r.get("rate"))),
        Column("p50", 7, ".0f", lambda r: num(r["p50"])),
        Column("p99", 7, ".0f", lambda r: num(r["p99"])),
        Column("÷none", 6, ".2f", lambda r: num(r["p50"]) / ref_p50),
        Column("batch", 6, ".0f", lambda r: num(r["triggerExecution_ms"])),
        Column("addB", 6, ".0f", lambda r: num(r["addBatch_ms"])),
        Column("wal", 5, ".0f", lambda r: num(r["walCommit_ms"])),
        Column("commit", 6, ".0f", lambda r: num(r["commitOffsets_ms"])),
        Column("latest", 6, ".0f", lambda r: num(r["latestOffset_ms"])),
        Column("plan", 5, ".0f", lambda r: num(r["queryPlanning_ms"])),
        Column("b/s", 5, ".2f", lambda r: num(r["batches_per_s"])),
        Column("rows", 6, ".0f", lambda r: num(r["rows_per_batch"])),
        Column("miss", 5, "", lambda r: str(r["missing"])),
        Column("div", 4, "", lambda r: str(r["divergent"])),
        Column("late", 5, "", lambda r: str(r.get("late_drops", "-"))),
        Column("lag s", 6, ".1f", lambda r: num(r.get("max_lag_s"))),
        Column("cpu s", 6, ".0f", lambda r: num(r["cpu_s"])),
        Column("share", 6, ".2f", lambda r: num(r.get("share_used"))),
    ]
    if any("masked" in r for r in rows):
        columns += [
            Column("masked", 6, "", lambda r: yes_no(r.get("masked"))),
            Column("win99", 6, ".0f", lambda r: num(r.get("window_p99"))),
            Column("gap", 6, ".0f", lambda r: num(r.get("fault_gap_ms"))),
        ]
    if any("task_task_ms" in r for r in rows):
        columns += [
            Column("job", 5, ".0f", lambda r: num(r.get("job_ms"))),
            Column("task", 5, ".0f", lambda r: num(r.get("task_task_ms"))),
            Column("run", 5, ".0f", lambda r: num(r.get("task_run_ms"))),
            Column("deser", 5, ".0f", lambda r: num(r.get("task_deser_ms"))),
            Column("sched", 5, ".0f", lambda r: num(r.get("task_sched_ms"))),
        ]
    print_table(rows, Column("variant", 34, "", lambda r: r["variant"]), columns)
    print(
        "(ms; p50/p99 end to end over the steady phase; ÷none = p50 / the first none variant's;\n"
        " batch..plan: median durationMs phases of every replica's data batches after the\n"
        " warm-up; b/s: replica 0's batches per second; rows: rows per batch; job/task/run/deser/\n"
        " sched: event-log medians: job wall time, task launch-to-finish, executor run time,\n"
        " deserialisation, scheduler delay; masked/win99/gap: the report's verdict on a kill=,\n"
        " its impact window's p99 and longest gap)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--variants", default="none,active-leaderless,active-leader")
    ap.add_argument("--duration", default="45s")
    ap.add_argument("--warmup", default="20s", help="excluded from every figure")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--windowed", action="store_true", help="add a 1 s window per user")
    ap.add_argument("--event-log", action="store_true", help="Spark event logs: task metrics")
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/microbatch.json"))
    ap.add_argument(
        "--from",
        dest="again",
        type=Path,
        default=None,
        help="deploy nothing: print the table of an earlier --out",
    )
    args = ap.parse_args(argv)
    if args.again is not None:
        print_rows(json.loads(args.again.read_text()))
        return 0
    try:
        variants = [Variant.parse(v) for v in args.variants.split(",") if v]
    except ValueError as e:
        ap.error(str(e))
    duration, warmup = parse_duration(args.duration), parse_duration(args.warmup)
    args.runs.mkdir(parents=True, exist_ok=True)
    event_log = args.runs / "eventlogs" if args.event_log else None
    stack.up()  # once, up front; a no-op when the embedded stack runs
    rows: list[dict[str, Any]] = []
    for v in variants:
        row: dict[str, Any] = {"variant": v.name, "rate": v.rate or args.rate}
        try:
            spec = spec_for(v, args.rate, duration, warmup, event_log, args.windowed)
            run_dir, summary, wall = run(spec, args.runs)
            row.update(wall_s=round(wall, 1), **analyse(run_dir, summary, warmup, event_log))
        except ArflError as e:
            print(f"{v.name}: failed: {e}", file=sys.stderr)
            row["error"] = str(e)
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
        write_rows(args.out, rows)
    shape = "windowed" if args.windowed else "per-record"
    rates = "ev/s as its column says" if any(v.rate for v in variants) else f"{args.rate} ev/s"
    print(f"\n{rates}, {shape}, 2 partitions, {duration:g}s runs, warm-up {warmup:g}s")
    print_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
