"""End-to-end latency floor of the unreplicated and passive pipelines, in one run.

    .venv/bin/python bench/latency_floor.py [--duration 30s] [--rates 1000,10000] [--out F]

For every (mode, trigger, rate) variant it deploys the same per-record pipeline (filter +
select, so no window adds latency) on the embedded stack, then prints end-to-end p50/p99 from
the merger's HdrHistogram and where a batch's time goes (median Spark ``durationMs`` phases from
the replica's progress events). Ratios are to the first variant: the machine is shared and
noisy, only comparisons made in the same run mean much.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import Column, print_table, write_rows

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.rundir import read_jsonl

PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
)


def spec_for(mode: str, trigger: str, rate: int, duration: str) -> Spec:
    """The benchmark pipeline: per-record filter + select, 4 partitions."""
    return parse_spec(
        {
            "name": f"floor-{mode}-{trigger}-{rate}",
            "source": {"topic": "floor", "partitions": 4, "event_time": "ts"},
            "steps": [{"filter": "amount >= 0"}, {"select": ["user", "amount", "ts"]}],
            "sink": {"topic": "floor-out"},
            "replication": {"mode": mode, "replicas": 1, "trigger": trigger},
            "spark": {
                "master": "local-cluster[1,1,1024]",
                "conf": {"spark.sql.shuffle.partitions": "2"},
            },
            "workload": {"rate": rate, "duration": duration, "keys": 100, "warmup": "5s"},
        },
        "latency_floor",
    )


def phases(run_dir: Path, skip: int = 3) -> dict[str, float]:
    """Median of each batch phase (ms) over the batches after the first ``skip``."""
    progress = [
        p
        for p in read_jsonl(run_dir / "progress" / "replica-0.jsonl")
        if p.get("numInputRows", 0) > 0
    ][skip:]
    out: dict[str, float] = {"batches": float(len(progress))}
    for k in PHASES:
        vals = [float(p.get("durationMs", {}).get(k, 0)) for p in progress]
        out[k] = statistics.median(vals) if vals else float("nan")
    rows = [float(p.get("numInputRows", 0)) for p in progress]
    out["rows_per_batch"] = statistics.median(rows) if rows else float("nan")
    return out


def steady_percentiles(run_dir: Path, warmup_s: float) -> dict[str, float]:
    """p50/p99 over the intervals after the warm-up (from the interval log).

    The warm-up counts from the input's start (the injector's first intended send time), not
    from the log's first interval: the merger starts logging before any input exists.
    """
    from arfl.measure.histogram import merge, read_latency_log
    from arfl.report.rundata import load_run

    intervals = read_latency_log(run_dir / "latency.hlog")
    input_start = load_run(run_dir).input_start
    if not intervals or input_start is None:
        return {"p50": float("nan"), "p99": float("nan"), "count": 0.0}
    start = input_start + warmup_s
    h = merge(intervals, start_s=start)
    return {
        "p50": h.get_value_at_percentile(50) / 1000.0,
        "p99": h.get_value_at_percentile(99) / 1000.0,
        "count": float(h.get_total_count()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="30s")
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--variants", default="none:micro-batch,passive:micro-batch,passive:realtime")
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    args = ap.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    variants = [tuple(v.split(":")) for v in args.variants.split(",")]
    warmup = 5.0
    rows: list[dict[str, Any]] = []
    for rate in rates:
        for mode, trigger in variants:
            spec = spec_for(mode, trigger, rate, args.duration)
            t = time.monotonic()
            try:
                res = deploy(spec, None, DeployOptions(runs_root=args.runs))
            except ArflError as e:
                print(f"{mode}/{trigger}@{rate}: failed: {e}", file=sys.stderr)
                rows.append({"mode": mode, "trigger": trigger, "rate": rate, "error": str(e)})
                continue
            row: dict[str, Any] = {
                "mode": mode,
                "trigger": trigger,
                "rate": rate,
                "run": str(res.run_dir),
                "wall_s": round(time.monotonic() - t, 1),
                "achieved_rate": res.summary.get("achieved_rate"),
                "results": res.summary.get("results"),
                **steady_percentiles(res.run_dir, warmup),
                **phases(res.run_dir),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = next((r for r in rows if "p50" in r), None)
    print_table(
        rows,
        Column("variant", 26, "", lambda r: f"{r['mode']}/{r['trigger']}"),
        [
            Column("rate", 6, "", lambda r: r["rate"], on_failure=True),
            Column("p50 ms", 8, ".1f", lambda r: r["p50"]),
            Column("p99 ms", 8, ".1f", lambda r: r["p99"]),
            Column("p50 x", 6, ".2f", lambda r: r["p50"] / base["p50"] if base else float("nan")),
            Column("batch ms", 9, ".0f", lambda r: r["triggerExecution"]),
            Column("addBatch", 9, ".0f", lambda r: r["addBatch"]),
            Column("walCommit", 9, ".0f", lambda r: r["walCommit"]),
            Column("commit", 7, ".0f", lambda r: r["commitOffsets"]),
            Column("rows/b", 7, ".0f", lambda r: r["rows_per_batch"]),
        ],
    )
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
