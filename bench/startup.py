"""How long until replicas serve: start-up and first batches, default JVM vs C1-only JIT.

    .venv/bin/python bench/startup.py [--mode active-leaderless] [--replicas 2] [--repeat 1]

A replica's start-up (driver JVM, executor JVM, Python workers) decides passive recovery time
(a killed driver restarts from scratch) and the time a rejoining active replica needs. Both
variants run in the same invocation, one after the other. Per variant it prints: seconds until
each replica's SparkSession was up, until every replica had run a batch, the durations of the
first three batches with data, and the p50 latency of the run (after its warm-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from _common import Column, print_table

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.rundir import read_jsonl

C1_ONLY = "-XX:TieredStopAtLevel=1"
VARIANTS: dict[str, dict[str, str]] = {
    "default-jit": {},
    "c1-only": {
        "spark.driver.extraJavaOptions": C1_ONLY,
        "spark.executor.extraJavaOptions": C1_ONLY,
    },
}


def spec_for(
    mode: str, replicas: int, conf: dict[str, str], duration: str, target: str = "local"
) -> Spec:
    """The windowed demo pipeline at 200 ev/s over 2 partitions."""
    return parse_spec(
        {
            "name": "startup",
            "source": {"topic": "st", "partitions": 2, "event_time": "ts"},
            "steps": [
                {"filter": "amount > 10"},
                {
                    "window": {
                        "size": "1s",
                        "key": "user",
                        "watermark": "500ms",
                        "agg": {"n": "count(*)"},
                    }
                },
            ],
            "sink": {"topic": "st-out"},
            "replication": {"mode": mode, "replicas": replicas},
            "spark": {
                "master": "local-cluster[1,1,1024]",
                "conf": {"spark.sql.shuffle.partitions": "2", **conf},
                "target": target,
            },
            "workload": {"rate": 200, "duration": duration, "keys": 20, "warmup": "10s"},
        },
        "startup",
    )


def analyse(run_dir: Path) -> dict[str, Any]:
    """Start-up figures from the journal, batch durations from the progress files."""
    journal = read_jsonl(run_dir / "journal.jsonl")
    t_start = next(e["t"] for e in journal if e["event"] == "run-started")
    ready = [e["startup_s"] for e in journal if e["event"] == "replica-ready"]
    processing = next(e["t"] for e in journal if e["event"] == "replicas-processing")
    first_batches: list[float] = []
    for f in sorted((run_dir / "progress").glob("replica-*.jsonl")):
        with_data = [p for p in read_jsonl(f) if p.get("numInputRows", 0) > 0]
        first_batches += [p["durationMs"]["triggerExecution"] / 1000 for p in with_data[:3]]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "session_up_s": max(ready),
        "first_batch_all_s": processing - t_start,
        "first3_data_batches_s": statistics.median(first_batches) if first_batches else None,
        "p50_ms": (summary.get("latency_ms") or {}).get("p50"),
        "cpu_s": summary.get("cpu_s_total"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="active-leaderless")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--duration", default="30s")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for i in range(args.repeat):
        for name, conf in VARIANTS.items():
            spec = spec_for(args.mode, args.replicas, conf, args.duration)
            try:
                res = deploy(spec, None, DeployOptions(runs_root=args.runs))
            except ArflError as e:
                print(f"{name}: failed: {e}", file=sys.stderr)
                continue
            row = {"variant": name, "round": i, "run": str(res.run_dir), **analyse(res.run_dir)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print_table(
        rows,
        Column("variant", 12, "", lambda r: r["variant"]),
        [
            Column("session s", 9, ".1f", lambda r: r["session_up_s"]),
            Column("1st batch s", 11, ".1f", lambda r: r["first_batch_all_s"]),
            Column("data batch s", 12, ".1f", lambda r: r["first3_data_batches_s"] or 0),
            Column("p50 ms", 8, ".0f", lambda r: r["p50_ms"] or 0),
            Column("cpu s", 6, ".1f", lambda r: r["cpu_s"] or 0),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
