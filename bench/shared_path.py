"""The shared path under active RTM R=2: the embedded broker's JVM settings, and CPU priority.

Every result crosses the broker three times (input append, replica append, merger fetch), and
no replica can mask a stall there. This script restarts the embedded stack with each broker
variant, in turn (A B A B … within one invocation: the machine is shared and noisy), deploys
the same fault-free per-record active RTM R=2 run, and prints per run:

* the merged output's p50/p99 after the warm-up (arfl's report);
* the hops through the broker (``bench/latency_breakdown.py``, from the topics' timestamps):
  ``append`` (injector send → broker append of the input) and ``merge`` (replica send → merger);
* the broker's GC pauses during the steady part (from its GC log): count, total, ≥ 20 ms, max;
* the steady part's seconds (the merger's 1-s intervals): the worst one's p99, and how many had
  a p99 over 1.5 x their median (the stalls a fault's impact window is judged against).

Variants:

* ``before``: a 512m broker heap grown from 128m, Kafka's default 128 MB dedupe buffer (the
  reference);
* ``after``: ``arfl.stack.config``'s broker as it is now, every process at niceness 0 (arfl's
  own harness priority off: ``ARFL_HARNESS_NICE=0`` for the whole bench; the broker reset to 0
  once before every run);
* ``shared-first``: ``after``, with every thread (and session group) of the broker, the merger
  and the injector at niceness -10 while the run lasts (root only): the non-redundant path wins
  the CPU — what deploy does by default (``arfl.stack.config.HARNESS_NICE``);
* ``replicas-last``: ``after``, with every thread of the replicas' drivers and Spark JVMs at
  niceness 10 (any user): the same order, from the other side;
* ``g1``, ``pretouch``, ``zgc``: ``shared-first`` with the broker's collector set
  (``arfl.stack.config.KAFKA_GC``): G1 (young pauses of 10-180 ms on this host), G1 with its
  whole heap touched at start (``-XX:+AlwaysPreTouch``: a pause that copies into regions never
  used before page-faults on each of their pages), or ZGC (concurrent, pauses under a
  millisecond);
* ``g1-5ms``, ``serial-young32m``, ``serial-young64m``: ``shared-first`` with shorter, more
  frequent young pauses: G1 aiming at 5 ms (it shrinks the young generation), or the serial
  collector (one thread: a pause takes one core, not both) with a 32 or 64 MB young generation;
* ``g1-young32m-1t``: G1 with a 32 MB young generation and one GC thread (short young pauses on
  one core, and old space reclaimed concurrently: no full collection).

* ``tmpfs``: ``shared-first`` with the broker's log directories and the run directory (the
  replicas' checkpoints) in memory (``/dev/shm``), off the disk the host's other writes share:
  a replica's batch boundary writes its checkpoint's offset and commit logs, and an ext4
  journal commit can hold up every writer on the disk, the broker's appends among them.

Variants that set the broker (all but ``after``, ``shared-first`` and ``replicas-last``) restart
the stack before every run.

    .venv/bin/python bench/shared_path.py --reps 2 --runs /tmp/b15/broker --out /tmp/b15/broker.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import latency_breakdown as lb
import psutil
import realtime as rt
from _common import Column, gc_pauses, print_table, stalled_seconds, write_rows

from arfl import stack
from arfl.priority import set_nice
from arfl.processes import process_tree
from arfl.report.build import build_report
from arfl.stack import config, lifecycle

ORIG_HEAP = config.KAFKA_HEAP
ORIG_JVM = config._kafka_jvm
ORIG_PROPS = config.kafka_properties
ORIG_GC = config.KAFKA_GC
G1 = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
)
ZGC = ("-XX:+UseZGC",)
BROKER_GC = {
    "before": G1,
    "g1": G1,
    "pretouch": (*G1, "-XX:+AlwaysPreTouch"),
    "zgc": ZGC,
    "g1-5ms": tuple(o.replace("MaxGCPauseMillis=20", "MaxGCPauseMillis=5") for o in G1),
    "serial-young32m": ("-XX:+UseSerialGC", "-Xmn32m"),
    "serial-young64m": ("-XX:+UseSerialGC", "-Xmn64m"),
    "g1-young32m-1t": (
        "-XX:+UseG1GC",
        "-Xmn32m",
        "-XX:ParallelGCThreads=1",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
    ),
}
IN_MEMORY = Path("/dev/shm/arfl-bench-shared-path")
"""Where the ``tmpfs`` variant keeps the broker's logs and the runs."""
RESTARTS = (*BROKER_GC, "tmpfs")


def _set_variant(variant: str) -> None:
    """Set the stack's broker settings to ``variant`` (they take effect at the next ``up``)."""
    config.KAFKA_HEAP = ORIG_HEAP
    config._kafka_jvm = ORIG_JVM
    config.kafka_properties = ORIG_PROPS
    config.KAFKA_GC = BROKER_GC.get(variant, ORIG_GC)
    _broker_data_in_memory(variant == "tmpfs")
    if variant != "before":
        return

    def jvm(java: str, libs: Path, log4j: Path, logs: Path, heap: str, min_heap: str) -> list[str]:
        return ORIG_JVM(java, libs, log4j, logs, heap, "128m")

    def props(data_dir: Path, host: str, port: int, controller_port: int) -> dict[str, str | int]:
        p = ORIG_PROPS(data_dir, host, port, controller_port)
        p.pop("log.cleaner.dedupe.buffer.size", None)
        return p

    config.KAFKA_HEAP = "512m"
    config._kafka_jvm = jvm
    config.kafka_properties = props


def _broker_data_in_memory(on: bool) -> None:
    """Put the stack's Kafka data directory in memory (a symlink to a fresh directory under
    :data:`IN_MEMORY`; the broker formats it at ``up``) or back on disk. Call with the stack
    down."""
    data = lifecycle.layout_of(None).data("kafka")
    disk = data.with_name("kafka.disk")
    if data.is_symlink():
        data.unlink()
        shutil.rmtree(IN_MEMORY / "kafka", ignore_errors=True)
        if disk.exists():
            disk.rename(data)
    if on:
        if data.exists():
            data.rename(disk)
        (IN_MEMORY / "kafka").mkdir(parents=True, exist_ok=True)
        data.symlink_to(IN_MEMORY / "kafka")


SHARED = ("kafka.Kafka", "arfl.measure.merger", "arfl.workload.injector")
REPLICAS = ("arfl.replica.driver",)


class Renicer(threading.Thread):
    """Every 0.5 s, sets every thread of the processes whose command line holds one of
    ``needles`` (and of their descendants), and their session groups, to niceness ``nice``:
    threads born since get it too; 0 again when halted."""

    def __init__(self, needles: tuple[str, ...], nice: int) -> None:
        super().__init__(daemon=True)
        self.needles, self.nice = needles, nice
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.5):
            self._pass(self.nice)
        self._pass(0)  # the stack's broker outlives the variant: back to its default

    def _pass(self, nice: int) -> None:
        for p in psutil.process_iter(["cmdline"]):
            line = " ".join(p.info["cmdline"] or [])
            if any(n in line for n in self.needles):
                set_nice(process_tree(p.pid), nice)


def renicer(variant: str) -> Renicer | None:
    """The priority of ``variant`` (None: every process at 0; the long-lived broker is put back
    to 0 once before each run, :meth:`Renicer._pass`)."""
    if variant in ("shared-first", "tmpfs") or (variant in BROKER_GC and variant != "before"):
        return Renicer(SHARED, -10)
    if variant == "replicas-last":
        return Renicer(REPLICAS, 10)
    return None


def measure(run_dir: Path, warmup: float, gc_log: Path) -> dict[str, Any]:
    """The figures of one run (see the module's docstring)."""
    report = build_report(run_dir)
    steady = rt._phase(report, "steady") or report.overall
    hops = lb.breakdown(run_dir, warmup, 1e9)["all"]
    t0 = report.input_start or 0.0
    pauses = gc_pauses(gc_log, t0 + warmup, t0 + 1e9) or []  # the stack's broker: it has one
    return {
        **stalled_seconds(run_dir, warmup),
        "p50": rt._pct(steady, "p50"),
        "p99": rt._pct(steady, "p99"),
        "append_p99": hops.get("append"),
        "merge_p99": hops.get("merge"),
        "e2e_p99_topics": hops.get("e2e"),
        "gc_pauses": len(pauses),
        "gc_total_ms": round(sum(pauses), 1),
        "gc_over_20ms": sum(p >= 20 for p in pauses),
        "gc_max_ms": max(pauses, default=0.0),
    }


def _cores(row: dict[str, Any], role: str) -> float:
    return float((row.get("process_cores") or {}).get(role, float("nan")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="before,after")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    ap.add_argument("--interval", default="30s")
    ap.add_argument("--runs", type=Path, default=Path("/tmp/arfl-bench-broker"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    os.environ["ARFL_HARNESS_NICE"] = "0"  # the variants set the priorities themselves
    variants = args.variants.split(",")
    restarts = any(v in RESTARTS for v in variants)
    args.runs.mkdir(parents=True, exist_ok=True)
    t = rt.Timing(duration=args.duration, fault_at=args.duration, warmup=args.warmup,
                  sweep_duration=args.duration, windowed_later=0.0)  # fmt: skip
    rows: list[dict[str, Any]] = []
    gc_log = (
        lifecycle.layout_of(None).logs / config.KAFKA_GC_LOG
    )  # every variant's broker writes it
    try:
        for rep in range(args.reps):
            for v in variants:
                if restarts:  # a broker of each kind in turn
                    stack.down()
                    _set_variant(v)
                stack.up()
                spec = rt.spec_for("per-record", "active", args.rate, t, None,
                                   interval=args.interval)  # fmt: skip
                row: dict[str, Any] = {"variant": v, "rep": rep}
                Renicer(SHARED + REPLICAS, 0)._pass(0)  # a variant's broker niceness undone
                prio = renicer(v)
                if prio is not None:
                    prio.start()
                runs = IN_MEMORY / "runs" if v == "tmpfs" else args.runs  # checkpoints too
                try:
                    run_dir, _summary, cpu, _wall = rt.run(spec, runs)
                    row["run"] = str(run_dir)
                    row.update(measure(run_dir, args.warmup, gc_log))
                    row.update(rt.sweep_cpu(run_dir, cpu, args.warmup))
                except Exception as e:  # a failed variant is a row, not the end of the bench
                    row["error"] = f"{type(e).__name__}: {e}"
                finally:
                    if prio is not None:
                        prio.halt.set()
                        prio.join()
                rows.append(row)
                print(json.dumps(row), flush=True)
                write_rows(args.out, rows)
    finally:
        if restarts:  # leave the stack with today's broker
            stack.down()
            _set_variant("after")
            stack.up()
        # The tmpfs variant's runs go on disk beside the others' (rows name where they were).
        for run in sorted((IN_MEMORY / "runs").glob("*")):
            shutil.move(str(run), str(args.runs / run.name))
        shutil.rmtree(IN_MEMORY, ignore_errors=True)
    name = Column("variant", 14, "", lambda r: f"{r['variant']} #{r['rep']}", on_failure=True)
    cols = [
        Column("p50", 7, ".1f", lambda r: r["p50"]),
        Column("p99", 7, ".1f", lambda r: r["p99"]),
        Column("append p99", 11, ".0f", lambda r: r["append_p99"]),
        Column("merge p99", 10, ".0f", lambda r: r["merge_p99"]),
        Column("worst 1s", 9, ".1f", lambda r: r["worst_second_p99"]),
        Column(">1.5x s", 8, "d", lambda r: r["stalled_seconds"]),
        Column("gc pauses", 10, "d", lambda r: r["gc_pauses"]),
        Column("gc ms", 8, ".0f", lambda r: r["gc_total_ms"]),
        Column(">=20ms", 7, "d", lambda r: r["gc_over_20ms"]),
        Column("gc max", 8, ".1f", lambda r: r["gc_max_ms"]),
        Column("host", 6, ".2f", lambda r: r.get("host_cores_busy") or float("nan")),
        Column("kafka", 6, ".2f", lambda r: _cores(r, "kafka")),
    ]
    print_table(rows, name, cols)
    print(
        "(p50/p99: merged output after the warm-up, ms; append/merge: hops through the broker "
        "from the topics' timestamps, ms; worst 1s: the worst second's p99, ms; >1.5x s: seconds "
        "whose p99 was over 1.5 x the median second's; gc: the broker's pauses after the warm-up)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
