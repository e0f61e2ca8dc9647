"""Is a fault masked? The same spec and the same fault at the same time, in every mode.

    .venv/bin/python bench/masking.py [--duration 90s] [--fault-at 30s] [--fault kill-executor]
                                      [--rate 1000] [--warmup 10s]
                                      [--modes none,passive,active-leader,active-leaderless]

Per mode it prints: fault-free p50/p99 (after the warm-up, before the fault), p99 in the 60 s
after the fault, their ratio (1.0 = masked), the longest output gap, and the CPU seconds the
replicas used. Goals from the issue: active ratio <= 1.10, active p50 / none p50 <= 1.25.
Every mode runs in the same invocation, one after another, on the same machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _common import Column, print_table, write_rows

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.measure.histogram import merge, read_latency_log
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.rundir import read_jsonl
from arfl.units import parse_duration


def spec_for(mode: str, fault: str, at: str, duration: str, rate: int, warmup: str = "10s") -> Spec:
    """A per-record pipeline (filter + select): latency is the batch floor, so a fault shows."""
    active = mode.startswith("active")
    replication: dict[str, Any] = {"mode": mode, "replicas": 2 if active else 1}
    if mode == "active-leaderless":
        replication["heartbeat_interval"] = "100ms"
    if mode == "active-leader":
        replication["session_timeout"] = "2s"
    return parse_spec(
        {
            "name": f"mask-{mode}",
            "source": {"topic": "mask", "partitions": 2, "event_time": "ts"},
            "steps": [{"filter": "amount >= 0"}, {"select": ["user", "amount"]}],
            "sink": {"topic": "mask-out"},
            "replication": replication,
            "spark": {"master": "local-cluster[1,1,1024]"},
            "workload": {"rate": rate, "duration": duration, "keys": 100, "warmup": warmup},
            "chaos": [{"at": at, "fault": fault, "replica": 0}],
        },
        "masking",
    )


def analyse(run_dir: Path, warmup_s: float, fault_at_s: float) -> dict[str, Any]:
    """Percentiles before and after the fault, from the interval log and the journal."""
    journal = read_jsonl(run_dir / "journal.jsonl")
    t0 = next(e["t"] for e in journal if e["event"] == "workload-started")
    injected = next((e for e in journal if e["event"] == "fault-injected"), None)
    fault_t = float(injected["started"]) if injected else t0 + fault_at_s
    intervals = read_latency_log(run_dir / "latency.hlog")
    before = merge(intervals, t0 + warmup_s, fault_t)
    after = merge(intervals, fault_t, fault_t + 60)

    def pct(h: Any, q: float) -> float:
        return h.get_value_at_percentile(q) / 1000.0 if h.get_total_count() else float("nan")

    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "p50": pct(before, 50),
        "p99": pct(before, 99),
        "p99_after": pct(after, 99),
        "max_after": pct(after, 100),
        "ratio": pct(after, 99) / pct(before, 99) if before.get_total_count() else float("nan"),
        "max_gap_ms": summary.get("longest_gap_ms"),
        "cpu_s": summary.get("cpu_s_total"),
        "results": summary.get("results"),
        "divergent": summary.get("divergent"),
        "fault_injected": injected is not None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="none,passive,active-leader,active-leaderless")
    ap.add_argument("--fault", default="kill-executor")
    ap.add_argument("--fault-at", default="30s")
    ap.add_argument("--duration", default="90s")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument(
        "--warmup", default="10s", help="excluded from the fault-free figures (cold JVMs)"
    )
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for mode in args.modes.split(","):
        spec = spec_for(mode, args.fault, args.fault_at, args.duration, args.rate, args.warmup)
        try:
            res = deploy(spec, None, DeployOptions(runs_root=args.runs))
        except ArflError as e:
            print(f"{mode}: failed: {e}", file=sys.stderr)
            rows.append({"mode": mode, "error": str(e)})
            continue
        row = {
            "mode": mode,
            "run": str(res.run_dir),
            **analyse(res.run_dir, spec.workload.least_warmup_s, parse_duration(args.fault_at)),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    none = next((r for r in rows if r.get("mode") == "none" and "p50" in r), None)
    print_table(
        rows,
        Column("mode", 20, "", lambda r: r["mode"]),
        [
            Column("p50 ms", 8, ".1f", lambda r: r["p50"]),
            Column("p99 ms", 8, ".1f", lambda r: r["p99"]),
            Column("p99 after", 10, ".1f", lambda r: r["p99_after"]),
            Column("ratio", 6, ".2f", lambda r: r["ratio"]),
            Column("gap ms", 8, ".0f", lambda r: r["max_gap_ms"] or 0),
            Column("cpu s", 6, ".1f", lambda r: r["cpu_s"] or 0),
            Column(
                "p50/none", 9, ".2f", lambda r: r["p50"] / none["p50"] if none else float("nan")
            ),
            Column("divergent", 9, "", lambda r: r["divergent"]),
        ],
        error_chars=90,
    )
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
