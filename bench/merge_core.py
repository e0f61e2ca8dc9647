"""The merger's in-process cost per record, with and without the replicas' trail, in one run.

    .venv/bin/python bench/merge_core.py [--results 100000] [--rounds 3] [--out F]

Feeds :class:`arfl.measure.merger.core.MergeCore` the records of an actively replicated run held in
memory (two replicas, each delivering every result; the second copy of each a few records
behind the first; a monitor tick every 1,000 results) and times it, alternating the variants
round by round. ``trail`` is the merger as deployed (it keeps, per replica, which output results
it still owes: ``trail_ms`` in the monitor); ``no-trail`` switches that bookkeeping off
(the merger before it existed). No Kafka, no I/O: the merger's own CPU per record, the figure
that bounds its throughput. Ratios are to ``no-trail``; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _common import Column, cpu_lock, print_table, write_rows

from arfl.measure.merger.core import DedupState, MergeCore

T0 = 1_800_000_000.0


def records(n: int) -> list[tuple[int, bytes, float]]:
    """``(replica, value, arrival s)``: replica 0's copy of result i, then replica 1's copy of
    result i - 5 (so replica 1 always owes a few), 1,000 results per second."""
    out: list[tuple[int, bytes, float]] = []
    for i in range(n):
        t = T0 + i / 1000
        for r, k in ((0, i), (1, i - 5)):
            if k < 0:
                continue
            src = int((T0 + k / 1000) * 1000)
            obj = {
                "rid": f"{k % 2}:{k // 2}",
                "src_ts": src,
                "sent_ts": src + 1,
                "replica": r,
                "hash": f"{k:064x}",
                "data": {"user": f"u{k % 97}", "amount": k % 1000},
            }
            out.append((r, json.dumps(obj).encode(), t + 0.002))
    return out


def run_once(recs: list[tuple[int, bytes, float]], trail: bool) -> float:
    """Seconds of CPU (process time) to merge ``recs``."""
    core = MergeCore(2, T0)
    if not trail:
        # The bookkeeping off (a dedup memory told of one replica): what the merger did
        # before the trail.
        core.dedup = DedupState(replicas=1)
    next_tick = T0 + 1.0
    start = time.process_time()
    for replica, value, arrival in recs:
        if arrival >= next_tick:
            core.tick(next_tick)
            next_tick += 1.0
        core.on_record(replica, value, arrival)
    core.tick(next_tick)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--results", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    recs = records(args.results)
    times: dict[str, list[float]] = {"no-trail": [], "trail": []}
    with cpu_lock():
        for _ in range(args.rounds):
            for name in times:
                times[name].append(run_once(recs, name == "trail"))
    base = statistics.median(times["no-trail"])
    rows = [
        {
            "variant": name,
            "records": len(recs),
            "cpu_s": round(statistics.median(ts), 3),
            "records_per_s": round(len(recs) / statistics.median(ts)),
            "ratio": round(statistics.median(ts) / base, 3),
            "rounds": [round(t, 3) for t in ts],
        }
        for name, ts in times.items()
    ]
    print_table(
        rows,
        Column("variant", 10, "", lambda r: r["variant"]),
        [
            Column("records", 8, "d", lambda r: r["records"]),
            Column("cpu s", 7, ".3f", lambda r: r["cpu_s"]),
            Column("rec/s", 8, "d", lambda r: r["records_per_s"]),
            Column("ratio", 6, ".3f", lambda r: r["ratio"]),
        ],
    )
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
