"""Where a real-time batch boundary's time goes, from Spark's own progress reports.

    .venv/bin/python bench/boundary_costs.py RUN_DIR [RUN_DIR ...]

Reads every replica's progress lines (``progress/replica-N.jsonl``: Spark's
``StreamingQueryProgress``, one per batch) of the given runs. A real-time batch's tasks stop
reading at the end of the interval; until the next batch's tasks read again, the replica emits
nothing (its *stall*). Spark's ``durationMs`` splits the batch: ``addBatch`` (the long batch:
the interval, then the tasks' end and the sink's flush: its overrun), ``commitOffsets`` (the
commit log), then the next batch's ``latestOffset`` (Kafka end offsets), ``walCommit`` (the
offset log) and ``queryPlanning``; between two batches' lines, the *gap* (the driver's loop, a
listener, a freeze of the phase keeper). The first batch of each query run (a new ``runId``: a
start or a take-over) is shown apart: it plans and launches cold.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

PARTS = ("queryPlanning", "latestOffset", "walCommit", "commitOffsets")


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """One row per batch: its interval, the parts of ``durationMs``, the overrun of
    ``addBatch`` past the interval, the gap after the previous batch of the same query run."""
    spec = json.loads((run_dir / "spec.json").read_text())
    interval_ms = _seconds(spec["replication"].get("trigger_interval")) * 1000 or 5000.0
    out: list[dict[str, Any]] = []
    for path in sorted((run_dir / "progress").glob("replica-*.jsonl")):
        prev: tuple[str, float] | None = None
        for line in path.read_text().splitlines():
            try:
                d = json.loads(line)
                start = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp()
                dur = d["durationMs"]
                total = float(d.get("batchDuration") or dur["triggerExecution"])
            except (ValueError, KeyError, TypeError):
                continue
            row: dict[str, Any] = {p: float(dur.get(p, 0.0)) for p in PARTS}
            row["addBatch overrun"] = float(dur.get("addBatch", 0.0)) - interval_ms
            row["whole overrun"] = float(dur.get("triggerExecution", 0.0)) - interval_ms
            first = prev is None or prev[0] != d.get("runId")
            row["first"] = first
            row["gap"] = None if first or prev is None else (start - prev[1]) * 1000
            prev = (str(d.get("runId")), start + total / 1000)
            out.append(row)
    return out


def _seconds(v: Any) -> float:
    if not v:
        return 0.0
    s = str(v).strip()
    for unit, k in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * k
    return float(s)


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    all_rows = [r for run in args.runs for r in rows(run)]
    for title, first in (("later batches", False), ("first batch of a query run", True)):
        rs = [r for r in all_rows if r["first"] is first]
        print(f"\n{title}: {len(rs)} batches of {len(args.runs)} run(s), ms")
        print(f"{'part':18} {'p50':>7} {'p90':>7} {'max':>7}")
        for key in ("addBatch overrun", "gap", *PARTS, "whole overrun"):
            xs = [float(r[key]) for r in rs if r[key] is not None]
            if xs:
                print(f"{key:18} {_q(xs, 0.5):7.0f} {_q(xs, 0.9):7.0f} {max(xs):7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
