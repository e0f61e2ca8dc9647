"""Where a run's end-to-end latency goes, hop by hop and second by second, from the Kafka
timestamps of its topics.

The hops are ``arfl.measure.check.hops``'s (the run's ``check.json`` has their whole-run
summary after the warm-up): ``late`` (injector behind schedule), ``append`` (the broker's append
of the input), ``replica <i>`` (each replica's send minus the input's append), ``merge`` (the
merger's send minus the earliest replica's), ``e2e`` (what the merger's histogram measures).
This script prints their quantile per second of the input (by each event's intended time, from
the injector's t0), which shows *when* a hop was slow: a second with a high ``e2e`` and both
replica hops low points at the broker or the merger; a replica's boundary stall shows in its
own column only. It needs the run's stack up (it reads the topics).

    .venv/bin/python bench/latency_breakdown.py /tmp/b15/runs/<run> [--from 60 --to 120]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from arfl.measure.check.hops import HopStats, hop_samples, nearest_rank
from arfl.measure.check.kafka import input_start_ms, read_records, replica_topics


def breakdown(
    run_dir: Path, t_from: float = 0.0, t_to: float = 1e9, q: float = 0.99
) -> dict[str, Any]:
    """The q-quantile (nearest rank) of every hop per second of the input (``seconds``: a row
    per second, ``s`` from the injector's t0) and over [t_from, t_to) (``all``), in ms.

    Raises:
        ValueError: the run's journal has no ``injector_started``.
    """
    state = json.loads((run_dir / "state.json").read_text())
    kafka, topics = state["stack"]["kafka"], state["topics"]
    t0 = input_start_ms(run_dir)
    if t0 is None:
        raise ValueError(f"{run_dir}: no injector_started in the journal")
    samples = hop_samples(
        read_records(kafka, topics["source"]),
        [read_records(kafka, t) for t in replica_topics(run_dir)],
        read_records(kafka, topics["sink"]),
    )
    per: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    whole: dict[str, list[float]] = defaultdict(list)
    for src_ts, hops in samples.rows:
        sec = (src_ts - t0) / 1000.0
        if not t_from <= sec < t_to:
            continue
        for name, v in hops.items():
            per[int(sec)][name].append(float(v))
            whole[name].append(float(v))

    def quantile(values: list[float]) -> float | None:
        return nearest_rank(sorted(values), q) if values else None

    cols = samples.names
    return {
        "columns": cols,
        "seconds": [{"s": s, **{c: quantile(per[s][c]) for c in cols}} for s in sorted(per)],
        "all": {c: quantile(whole[c]) for c in cols},
        "p50_p99_max": {c: HopStats.of(v).to_dict() for c, v in whole.items() if v},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--from", dest="t_from", type=float, default=0.0,
                    help="first second (from the injector's t0)")  # fmt: skip
    ap.add_argument("--to", dest="t_to", type=float, default=1e9)
    ap.add_argument("--q", type=float, default=0.99)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    try:
        b = breakdown(args.run, args.t_from, args.t_to, args.q)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    cols = b["columns"]

    def fmt(v: float | None) -> str:
        return f"{v:9.0f}" if v is not None else "        -"

    print(f"p{args.q * 100:g} per second (ms), seconds from the injector's t0")
    print("s     " + " ".join(f"{c:>9}" for c in cols))
    for row in b["seconds"]:
        print(f"{row['s']:<5} " + " ".join(fmt(row[c]) for c in cols))
    print("all   " + " ".join(fmt(b["all"][c]) for c in cols))
    if args.json:
        args.json.write_text(json.dumps(b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
