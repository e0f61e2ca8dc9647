"""P(masked): how often a fault is masked when it falls at a moment nobody chose.

    .venv/bin/python bench/p_masked.py [--spec F.toml] [--faults kill-replica,kill-executor]
        [--placements 10] [--from 95s] [--to 155s] [--seed N] [--runs DIR] [--out F]
    .venv/bin/python bench/p_masked.py --reanalyse F [--out G]

Each fault kind is injected once per run, on replica 0, at ``--placements`` moments spread
uniformly over ``[--from, --to]`` of the input: the span is cut into that many equal strata and
each run draws its moment uniformly inside its own (``--seed``, by default the clock: the
moments are not chosen, and the seed is printed to repeat them). Kinds alternate run by run,
so drift on the host falls on every kind alike. The default span is one real-time interval
(60 s, what arfl sets for a stateless pipeline), so every phase of a fault against the
survivor's batch boundaries is drawn, and it starts ~30 s after the automatic warm-up (~65 s):
the verdict holds a fault's window to the steady state before it, and a shorter steady state
calls a fault that changed nothing "not masked" more often (``bench/null_faults.py``,
docs/benchmarks.md).

The spec (``--spec``) is a user's; without one, the one the README teaches with the defaults:
per-record (filter + select), ``mode = "active"``, 2 replicas, ``trigger = "realtime"``, 2
partitions, 1,000 ev/s for 170 s, nothing else set (arfl then sets a standby, a 60-s interval
and the warm-up itself: :mod:`arfl.configs.masking`, :mod:`arfl.run.steady`). Its own
``[[chaos]]`` entries are replaced, and ``after_boundary`` is never set.

``--reanalyse F`` runs nothing: it judges the run directories of an earlier ``--out`` again
(after a change of the report or of this analysis), prints the table and writes the rows to
``--out`` when one is given. A row whose run directory is gone, or cannot be judged, keeps what it
said; one whose window the broker's GC log no longer reaches keeps its pauses.

Per run, from the report (:mod:`arfl.report.verdicts`): the outcome (masked, not masked, no
effect, unjudged, unknown), the impact window's p99 against what it was held to, its length and
what ended it, when the faulted replica caught up, and when the survivor's batch boundary came
(its progress: the next one, or one whose stall was still running at the fault, negative). An
unmasked run is put down to the first of: **survivor boundary** (the survivor's boundary fell
inside the impact window, before the faulted replica caught up), **not
caught up** (it was not back within its allowance before the window's cap), **broker pause**
(the embedded broker's GC log holds a pause inside the window long enough on its own to lift a
record past the bar: at least the bar minus the steady p50; a stall on the one path every copy
takes, which no replica covers), **gap** or **p99** (none of those: the output was slower than
steady all the same, e.g. the host), or the outcome itself when it is not a verdict. Each row
lists the broker's pauses in its window (none: no GC log of the broker, e.g. a Kafka arfl did
not start). The table gives P(masked) per kind: masked runs ÷ runs whose fault took effect.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from _common import gc_pauses
from realtime import _pct, _phase, run, survivor_boundary_s

from arfl.configs.load import load_spec, parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.registry import FAULTS
from arfl.report.build import build_report
from arfl.run.events import Event
from arfl.run.rundir import read_jsonl
from arfl.stack import config, lifecycle
from arfl.units import parse_duration

DEFAULT_SPEC: dict[str, Any] = {
    "name": "pmasked",
    "source": {"topic": "pm", "partitions": 2},
    "steps": [{"filter": "amount > 10"}, {"select": ["user", "amount", "ts"]}],
    "sink": {"topic": "pm-out"},
    "replication": {"mode": "active", "replicas": 2, "trigger": "realtime"},
    "spark": {"master": "local-cluster[1,2,1024]"},
    "workload": {"rate": 1000, "duration": "170s", "keys": 100},
}


def base_of(path: Path) -> dict[str, Any]:
    """A user's spec file as the raw document each run's spec is made from: what it sets
    (arfl's chosen defaults included), without its faults; the keys at their defaults are left
    out, as the user left them (a full dump would set keys another mode refuses)."""
    spec = load_spec(path)
    raw: dict[str, Any] = json.loads(
        spec.model_dump_json(exclude={"chaos"}, exclude_defaults=True, by_alias=True)
    )
    return raw


def placements(n: int, start: float, end: float, seed: int) -> list[float]:
    """One uniform draw in each of ``n`` equal strata of ``[start, end]``, in time order."""
    rng = random.Random(seed)
    width = (end - start) / n
    return [round(start + (k + rng.random()) * width, 1) for k in range(n)]


def on_merger(fault: str) -> bool:
    """Whether a fault kind acts on the merger (no replica to name, none to catch up)."""
    return bool(FAULTS.info(fault).on == "merger")


def with_fault(base: dict[str, Any], fault: str, at: float, k: int) -> Spec:
    raw = copy.deepcopy(base)
    raw["name"] = f"{base.get('name', 'pm')}-{fault}-{k}"
    entry: dict[str, Any] = {"at": f"{at:g}s", "fault": fault}
    if not on_merger(fault):
        entry["replica"] = 0
    raw["chaos"] = [entry]
    return parse_spec(raw, "p_masked")


def cause(row: dict[str, Any]) -> str:
    """Why a run was not masked (module docstring); empty when it was."""
    if row["outcome"] == "masked":
        return ""
    if row["outcome"] != "not masked":
        return str(row["outcome"])
    boundary, caught = row.get("survivor_boundary_s"), row.get("caught_up_s")
    window = row.get("window_s")
    replica_fault = not row.get("on_merger")
    if (
        replica_fault
        and boundary is not None
        and window is not None
        and boundary < window
        and (caught is None or boundary < caught)
    ):
        return "survivor boundary"
    if replica_fault and caught is None:
        return "not caught up"
    bar, p50 = row.get("held_to_ms"), row.get("steady_p50_ms")
    if bar is not None and any(p >= bar - (p50 or 0.0) for p in row.get("broker_pauses_ms") or []):
        return "broker pause"
    return "gap" if str(row.get("verdict", "")).startswith("not masked: output gap") else "p99"


def analyse(run_dir: Path) -> dict[str, Any]:
    report = build_report(run_dir)
    f = report.faults[0]
    journal = read_jsonl(run_dir / "journal.jsonl")
    row: dict[str, Any] = {
        "run": str(run_dir),
        "on_merger": on_merger(f.kind),
        "outcome": f.outcome,
        "verdict": f.verdict,
        "at_s": f.at_s,
        "window_s": f.window_s,
        "window_ended_by": f.window_ended_by,
        "p99_ms": f.p99_ms,
        "held_to_ms": None if f.steady_p99_ms is None else f.steady_p99_ms * report.tolerance,
        "max_gap_ms": f.max_gap_ms,
        "caught_up_s": f.caught_up_s,
        "healthy_s": f.healthy_s,
        "effect": f.effect,
        "survivor_boundary_s": survivor_boundary_s(run_dir, journal),
        "missing": report.correctness.missing,
        "duplicates": report.correctness.duplicates,
        "steady_p50_ms": _pct(_phase(report, "steady"), "p50"),
    }
    injected = next((e["t"] for e in journal if e.get("event") == Event.FAULT_INJECTED), None)
    took = [
        e
        for e in journal
        if e.get("event") == Event.MERGER_TOOK_OVER and injected is not None and e["t"] >= injected
    ]
    if took:  # a merger fault with a standby: how long until it served again
        row["took_over_ms"] = round(1000 * float(took[0].get("took_s") or 0.0), 1)
    # Mergers that died before the fault (a standby that judged a healthy one late kills it).
    row["merger_deaths_before"] = sum(
        e.get("event") == Event.MERGER_DIED and injected is not None and e["t"] < injected
        for e in journal
    )
    if report.input_start is not None and f.at_s is not None and f.window_s is not None:
        at = report.input_start + f.at_s
        gc_log = lifecycle.layout_of(None).logs / config.KAFKA_GC_LOG
        pauses = gc_pauses(gc_log, at, at + f.window_s)
        row["broker_pauses_ms"] = None if pauses is None else [p for p in pauses if p >= 1]
    row["cause"] = cause(row)
    return row


def longest_pause(row: dict[str, Any]) -> float | None:
    """The broker's longest pause in a row's window (0: none; None: no GC log to read)."""
    pauses = row.get("broker_pauses_ms")
    return None if pauses is None else max(pauses, default=0.0)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a share ``k / n`` (95% by default): what ten placements can
    say about P(masked) (0/0: the whole range)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _f(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def print_table(rows: list[dict[str, Any]], faults: list[str], title: str) -> None:
    """Each run's row, then P(masked) per fault kind with its interval and the misses' causes."""
    print(f"\nP(masked), {title}")
    print(
        f"{'fault':14} {'at s':>6} {'outcome':11} {'p99 ms':>8} {'held to':>8} {'window s':>8} "
        f"{'caught up':>9} {'boundary':>8} {'gc max':>6} {'took ms':>7} {'died before':>11}  cause"
    )
    for r in rows:
        print(
            f"{r['fault']:14} {r['at']:6.1f} {r['outcome']:11} {_f(r.get('p99_ms')):>8} "
            f"{_f(r.get('held_to_ms')):>8} {_f(r.get('window_s')):>8} "
            f"{_f(r.get('caught_up_s')):>9} {_f(r.get('survivor_boundary_s')):>8} "
            f"{_f(longest_pause(r)):>6} {_f(r.get('took_over_ms')):>7} "
            f"{r.get('merger_deaths_before', '-'):>11}  "
            f"{r.get('cause', '')}"
        )
    for fault in faults:
        took = [r for r in rows if r["fault"] == fault and r["outcome"] != "failed"]
        masked = sum(r["outcome"] == "masked" for r in took)
        causes: dict[str, int] = {}
        for r in took:
            if r["cause"]:
                causes[r["cause"]] = causes.get(r["cause"], 0) + 1
        share = f"{masked / len(took):.2f}" if took else "-"
        lo, hi = wilson(masked, len(took))
        print(
            f"{fault}: P(masked) = {masked}/{len(took)} = {share} (95% interval {lo:.2f}-"
            f"{hi:.2f}); not masked: {causes or '-'}"
        )


def reanalyse(path: Path, out: Path | None) -> int:
    """``--reanalyse``: each row of an earlier invocation's output judged again from its run
    directory (module docstring), the table printed, the rows written to ``out`` if given."""
    judged: list[dict[str, Any]] = json.loads(path.read_text())
    for row in judged:
        if not row.get("run"):
            continue  # a run that failed: nothing to judge
        try:
            again = analyse(Path(row["run"]))
        except (ArflError, OSError, IndexError) as e:
            print(f"{row['run']}: not judged again ({e}); its row is kept", file=sys.stderr)
            continue
        if again.get("broker_pauses_ms") is None and row.get("broker_pauses_ms") is not None:
            again["broker_pauses_ms"] = row["broker_pauses_ms"]
            again["cause"] = cause({**row, **again})
        row.update(again)
    kinds = list(dict.fromkeys(r["fault"] for r in judged))
    seeds = sorted({r["seed"] for r in judged})
    print_table(judged, kinds, f"seed {seeds}, judged again from {path}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(judged, indent=1, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--spec", type=Path, help="a spec file (default: the README's defaults)")
    ap.add_argument("--faults", default="kill-replica,kill-executor")
    ap.add_argument("--placements", type=int, default=10)
    ap.add_argument("--from", dest="start", default="95s", help="earliest moment (input time)")
    ap.add_argument("--to", dest="end", default="155s", help="latest moment (input time)")
    ap.add_argument("--seed", type=int, default=None, help="default: the clock")
    ap.add_argument("--runs", type=Path, default=Path("runs/bench/p_masked"))
    ap.add_argument("--out", type=Path, help="default: runs/bench/p_masked.json")
    ap.add_argument(
        "--reanalyse",
        type=Path,
        metavar="F",
        help="run nothing: judge the runs of an earlier --out again and print the table",
    )
    args = ap.parse_args(argv)
    if args.reanalyse is not None:
        return reanalyse(args.reanalyse, args.out)
    args.out = args.out or Path("runs/bench/p_masked.json")
    if args.placements < 1:
        ap.error("--placements: at least 1")
    base = base_of(args.spec) if args.spec else DEFAULT_SPEC
    start, end = parse_duration(args.start), parse_duration(args.end)
    seed = args.seed if args.seed is not None else int(time.time())
    faults = args.faults.split(",")
    moments = {f: placements(args.placements, start, end, seed + i) for i, f in enumerate(faults)}
    print(f"seed {seed}; moments: {json.dumps(moments)}", flush=True)
    args.runs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for k in range(args.placements):
        for fault in faults:
            at = moments[fault][k]
            row: dict[str, Any] = {"fault": fault, "placement": k, "at": at, "seed": seed}
            try:
                run_dir, _, _, _ = run(with_fault(base, fault, at, k), args.runs)
                row.update(analyse(run_dir))
            except ArflError as e:
                row.update(outcome="failed", cause="failed", error=str(e))
                print(f"{fault} at {at}s: failed: {e}", file=sys.stderr)
            rows.append(row)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(rows, indent=1, default=str))
            print(f"{fault} at {at:g}s: {row['outcome']} {row.get('cause', '')}", flush=True)
    print_table(
        rows, faults, f"seed {seed}, {args.placements} placements in [{start:g}, {end:g}] s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
