"""arfl beside Flink and Kafka Streams: the same load, the same fault moment, one probe.

    .venv/bin/python bench/peers.py [--systems floor,arfl,arfl-passive,flink,kstreams]
        [--rate 1000] [--partitions 2] [--duration 160s] [--fault-at 115s] [--warmup 65s]
        [--window 30s] [--faults kill[,none]] [--arfl-fault kill-replica,kill-executor]
        [--flink-sink at-least-once,exactly-once] [--heartbeat fast,default]
        [--kstreams-restart] [--commit-interval 1s] [--linger 1ms] [--repeat N]
        [--runs DIR] [--out F] [--from F]

One invocation runs each system in turn on the embedded Kafka (``arfl stack up``; started
when it is not running), each on fresh topics: arfl's injector sends the same events
(``seq``, ``user``, ``amount``, ``ts``, ... at ``--rate`` on ``--partitions`` partitions), every
system filters ``amount > 10`` and writes ``seq, user, amount, ts``, and one probe
(``bench/peers/peer_probe.py``) reads the system's final topic. Systems:

* ``arfl``: the demo's pipeline, ``mode = "active"``, 2 replicas, real-time mode (arfl sets
  the standby and the interval), deployed by arfl itself; one run per ``--arfl-fault``;
* ``arfl-passive``: the same, ``mode = "passive"``, 1 replica (Spark's checkpoint recovery),
  the first ``--arfl-fault`` only;
* ``flink``: a Flink standalone session cluster running the pipeline as Flink SQL,
  checkpointing every ``--commit-interval``, one run per ``--flink-sink`` guarantee and
  ``--heartbeat`` choice; its fault SIGKILLs the TaskManager and starts a new one at once;
* ``kstreams``: two Kafka Streams instances (``num.standby.replicas = 1``, at-least-once), one
  run per ``--heartbeat`` choice (the group's session timeout); its fault SIGKILLs one;
* ``floor``: no system, the probe reads the injector's topic (Kafka's own produce + consume).

``--faults kill`` injects each system's fault at ``--fault-at`` seconds of input; ``none``
runs it fault-free. Every figure comes from the probe's samples (``peer_stats``): steady
p50 / p99 / p99.9 (input sent from ``--warmup`` to the impact window), the impact window's
p99 (input sent from 5 s before the fault, in flight when it came, to ``--window`` after it)
and longest output gap, the time back to steady,
missing and duplicate results by ``seq``, and the system's own processes' CPU (whole life and
steady cores) and resident memory, sampled with psutil; the injector, the probe and the broker
are left out of them (in ``cpu_s_by_group``). Each run holds the machine's CPU lock
(``/tmp/arfl-cpu.lock``). The JSON (``--out``) has a row per run, the per-second series
included; ``--from`` re-analyses its runs from their probe files. Only figures of one
invocation compare: hosts differ.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from _common import cpu_lock, write_rows
from peer_arfl import FAULTS as ARFL_FAULTS
from peer_arfl import ArflSystem
from peer_flink import GUARANTEES, HEARTBEATS, FlinkSystem
from peer_kstreams import KStreamsSystem
from peer_probe import ProbeFile
from peer_sampler import HOST, Point, cores, cpu_s, own, rss_mib
from peer_stats import Sample, Timing, analyse, expected_seqs, markdown_table
from peer_systems import (
    MIN_AMOUNT,
    Floor,
    Load,
    Outcome,
    PeerSystem,
    load_points,
    run_peer,
)

from arfl import stack
from arfl.errors import ArflError
from arfl.units import parse_duration

SYSTEMS = ("arfl", "arfl-passive", "flink", "kstreams", "floor")
DEFAULT_SYSTEMS = "floor,arfl,arfl-passive,flink,kstreams"
System = ArflSystem | PeerSystem

LEGEND = """\
(ms from each event's intended send time to the probe. p50/p99/p99.9: input sent between the
 warm-up and the impact window; window p99: input sent from {lead} s before the fault to the
 window's end after it (what was in flight at the fault is the fault's); gap ms: the
 longest stretch without output overlapping that window; back s: from the fault to the first
 input second that starts {hold} s in a row with output and a p99 within {tol} x the worst
 p99 of a steady second; missing/dup: by seq; CPU s: the system's own processes from start
 to stop; steady cores: theirs between the warm-up and the impact window; RSS MiB: their
 peak resident memory)"""


def systems_for(args: argparse.Namespace) -> list[System]:
    """One runner per system and variant asked for, in the order asked."""
    commit_ms = round(1000 * parse_duration(args.commit_interval))
    linger_ms = 1000 * parse_duration(args.linger)
    out: list[System] = []
    for name in args.systems.split(","):
        if name == "arfl":
            out += [ArflSystem("active", f) for f in args.arfl_fault.split(",")]
        elif name == "arfl-passive":  # the in-family baseline: the first fault only
            out.append(ArflSystem("passive", args.arfl_fault.split(",")[0]))
        elif name == "flink":
            out += [
                FlinkSystem(g, h, commit_ms, linger_ms)
                for g in args.flink_sink.split(",")
                for h in args.heartbeat.split(",")
            ]
        elif name == "kstreams":
            out += [
                KStreamsSystem(h, args.kstreams_restart, commit_ms, linger_ms)
                for h in args.heartbeat.split(",")
            ]
        else:
            out.append(Floor())
    return out


def cpu_figures(points: list[Point], timing: Timing) -> dict[str, Any]:
    """The system's CPU and memory (module docstring), and every group's for the JSON."""
    life = cpu_s(points)
    lo, hi = (t / 1000 for t in timing.steady)
    steady = cores(points, lo, hi)
    peak, _ = rss_mib(points)
    _, steady_rss = rss_mib(points, lo, hi)
    return {
        "cpu_s": own(life) if life else None,
        "steady_cores": own(steady) if steady else None,
        "host_steady_cores": steady.get(HOST),
        "rss_peak_mib": peak,
        "rss_steady_mib": steady_rss,
        "cpu_s_by_group": {k: round(v, 2) for k, v in sorted(life.items())},
        "steady_cores_by_group": {k: round(v, 3) for k, v in sorted(steady.items())},
    }


def figures(
    samples: Sequence[Sample], points: list[Point], row: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """Every figure of a run from its samples and its row's timing and load."""
    timing = Timing(
        row["t0_ms"], row["duration_s"], row["warmup_s"], row["fault_s"], row["window_s"]
    )
    expected = expected_seqs(
        row["rate"], row["duration_s"], row["seed"], row["keys"],
        MIN_AMOUNT if row["filters"] else None,
    )  # fmt: skip
    out = analyse(samples, timing, expected, tolerance=args.tolerance, hold=args.hold)
    out.update(cpu_figures(points, timing))
    return out


def run_one(
    system: System, fault: bool, load: Load, bootstrap: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of ``system`` and its row."""
    filters = not isinstance(system, Floor)
    row: dict[str, Any] = {
        "system": system.label,
        "fault": system.fault_name if fault else None,
        "rate": load.rate,
        "partitions": load.partitions,
        "duration_s": load.duration_s,
        "warmup_s": load.warmup_s,
        "window_s": load.window_s,
        "fault_at_s": load.fault_at_s if fault else None,
        "seed": load.seed,
        "keys": load.keys,
        "filters": filters,
    }
    expected = expected_seqs(
        load.rate, load.duration_s, load.seed, load.keys, MIN_AMOUNT if filters else None
    )
    with cpu_lock():
        if isinstance(system, ArflSystem):
            outcome = system.run(bootstrap, load, fault, args.runs, expected)
        else:
            work = args.runs / f"{system.slug()}-{time.strftime('%Y%m%d-%H%M%S')}"
            outcome = run_peer(system, bootstrap, load, fault, work, expected)
    row.update(_outcome_fields(outcome))
    row.update(figures(outcome.samples, outcome.points, row, args))
    return row


def _outcome_fields(o: Outcome) -> dict[str, Any]:
    return {
        "t0_ms": o.t0_ms,
        "fault_s": o.fault_s,
        "fault_did": o.fault,
        "unparsed": o.unparsed,
        "probe_csv": str(o.probe_csv),
        "cpu_json": str(o.cpu_json),
        **o.info,
    }


def reanalyse(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows of an earlier ``--out`` with every figure computed again from their files."""
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    for r in rows:
        if "error" in r or "probe_csv" not in r:
            continue
        probe = ProbeFile(Path(r["probe_csv"]))
        probe.poll()
        r.update(figures(probe.samples, load_points(Path(r["cpu_json"])), r, args))
    return rows


def brief(row: dict[str, Any]) -> str:
    """A run's row without its long parts, for the progress lines."""
    long = {"seconds", "cpu_s_by_group", "steady_cores_by_group"}
    return json.dumps({k: v for k, v in row.items() if k not in long}, default=str)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"of {', '.join(SYSTEMS)}")
    ap.add_argument("--rate", type=int, default=1000, help="events per second")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--duration", default="160s", help="of the input")
    ap.add_argument("--fault-at", default="115s", help="seconds of input")
    ap.add_argument("--warmup", default="65s", help="excluded from the steady figures")
    ap.add_argument("--window", default="30s", help="the impact window after the fault")
    ap.add_argument("--faults", default="kill", help="kill (each system's), none, or kill,none")
    ap.add_argument(
        "--arfl-fault",
        default=",".join(ARFL_FAULTS),
        help=f"of {', '.join(ARFL_FAULTS)}: one arfl run each (arfl-passive: the first)",
    )
    ap.add_argument("--flink-sink", default=",".join(GUARANTEES), help="delivery guarantees")
    ap.add_argument(
        "--heartbeat",
        default="fast,default",
        help="fast (Flink 1 s / 5 s heartbeat, Kafka Streams 6-s session), default (each "
        "system's own), or both",
    )
    ap.add_argument(
        "--kstreams-restart",
        action="store_true",
        help="start a new Kafka Streams instance at once after the kill",
    )
    ap.add_argument(
        "--commit-interval", default="1s", help="Flink's checkpoints, Kafka Streams' commits"
    )
    ap.add_argument("--linger", default="1ms", help="the peers' sink producers' linger.ms")
    ap.add_argument("--tolerance", type=float, default=1.1, help="back to steady: x steady p99")
    ap.add_argument("--hold", type=int, default=5, help="back to steady: seconds in a row")
    ap.add_argument("--drain", default="15s", help="stop waiting once no output came this long")
    ap.add_argument("--repeat", type=int, default=1, help="run every variant this many times")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--runs", type=Path, default=Path("runs/bench/peers"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/peers.json"))
    ap.add_argument(
        "--from", dest="again", type=Path, help="run nothing: re-analyse an earlier --out"
    )
    args = ap.parse_args(argv)
    if args.again is not None:
        again = reanalyse(args.again, args)
        print(markdown_table(again))
        print(LEGEND.format(hold=args.hold, tol=args.tolerance, lead=f"{Timing.in_flight_s:g}"))
        return 0
    unknown = [s for s in args.systems.split(",") if s not in SYSTEMS]
    if unknown:
        ap.error(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    bad = [g for g in args.flink_sink.split(",") if g not in GUARANTEES]
    bad += [h for h in args.heartbeat.split(",") if h not in HEARTBEATS]
    bad += [f for f in args.arfl_fault.split(",") if f not in ARFL_FAULTS]
    faults = args.faults.split(",")
    bad += [f for f in faults if f not in ("kill", "none")]
    if bad:
        ap.error(f"unknown {', '.join(bad)}")
    try:
        load = Load(
            rate=args.rate,
            duration_s=parse_duration(args.duration),
            partitions=args.partitions,
            keys=args.keys,
            seed=args.seed,
            fault_at_s=parse_duration(args.fault_at),
            warmup_s=parse_duration(args.warmup),
            window_s=parse_duration(args.window),
            drain_idle_s=parse_duration(args.drain),
        )
        systems_for(args)  # the durations' syntax
    except ValueError as e:
        ap.error(str(e))
    if not load.warmup_s < load.fault_at_s < load.duration_s:
        ap.error("--warmup < --fault-at < --duration")
    # SIGTERM as Ctrl-C: every run's finally stops what it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args.runs.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    bootstrap = stack.up().kafka  # a no-op when the embedded stack runs
    systems = systems_for(args)
    rows: list[dict[str, Any]] = []
    broken: dict[str, str] = {}
    for s in systems:
        try:
            s.prepare()
        except Exception as e:  # a download or a build: the other systems still run
            broken[s.label] = f"{type(e).__name__}: {e}"
            print(f"{s.label}: cannot be prepared: {e}", file=sys.stderr, flush=True)
    try:
        run_all(systems, faults, broken, load, bootstrap, args, rows)
    except KeyboardInterrupt:
        print("interrupted: the run's processes were stopped", file=sys.stderr, flush=True)
        return 130
    finally:
        print()
        print(markdown_table(rows))
        print(LEGEND.format(hold=args.hold, tol=args.tolerance, lead=f"{Timing.in_flight_s:g}"))
    return 0


def run_all(
    systems: list[System],
    faults: list[str],
    broken: dict[str, str],
    load: Load,
    bootstrap: str,
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
) -> None:
    """Every run, ``--repeat`` rounds of every system and fault in turn, each row added to
    ``rows`` and written to ``--out`` as it comes."""
    for r in range(args.repeat):
        fault_free: set[str] = set()  # arfl's runners differ by fault only: one such run each
        for s in systems:
            for f in faults:
                fault = f == "kill" and s.fault_name is not None
                if f == "kill" and s.fault_name is None and "none" in faults:
                    continue  # its fault-free run is the one it has
                if not fault and s.label in fault_free:
                    continue
                if not fault:
                    fault_free.add(s.label)
                print(f"{s.label} {s.fault_name if fault else 'fault-free'}: running", flush=True)
                if s.label in broken:
                    row: dict[str, Any] = {"system": s.label, "error": broken[s.label]}
                else:
                    try:
                        row = run_one(s, fault, load, bootstrap, args)
                    except (ArflError, OSError, TimeoutError) as e:
                        row = {"system": s.label, "error": f"{type(e).__name__}: {e}"}
                row.update(round=r + 1, fault=s.fault_name if fault else None)
                rows.append(row)
                print(brief(row), flush=True)
                write_rows(args.out, rows)


if __name__ == "__main__":
    sys.exit(main())
