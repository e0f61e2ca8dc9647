"""Where the merger's cores go: the real merger loop at a steady rate, two copies a result,
variants of its Python path alternating in one invocation.

    .venv/bin/arfl stack up
    .venv/bin/python bench/merger_cpu.py [--rate 1000] [--seconds 30] [--rounds 2] [--out F]

Each run creates a sink and two replica topics (4 partitions) on the stack at 127.0.0.1:9092,
forks a process that writes ``--rate`` results a second to both replica topics as
``bench/merger_memory.py`` does (replica 1's copy 2 ms after replica 0's), and runs
:class:`arfl.measure.merger.process.Merger` in a thread of this process until the input ends.
It reports the merger thread's CPU (``time.thread_time``: the Python loop and the client calls
it makes) and the process's (with librdkafka's threads), in cores over the run's wall time.

Variants: ``orjson`` (arfl's: results parsed with orjson) and ``json`` (the standard library's
parser in its place).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from _common import Column, print_table, write_rows
from merger_memory import Produced, produce_results

import arfl.run.records as records
from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.process import Merger
from arfl.run.records import replica_topic
from arfl.stack.topics import ensure_topic

BOOTSTRAP = "127.0.0.1:9092"


class _StdlibJson:
    """Stands in for orjson in :mod:`arfl.run.records` (the ``json`` variant)."""

    loads = staticmethod(json.loads)


def one_run(variant: str, rate: float, seconds: float, work: Path) -> dict[str, Any]:
    """One merger run of ``variant``; its CPU in cores."""
    sink = f"merger-cpu-{uuid.uuid4().hex[:8]}"
    for t in (sink, replica_topic(sink, 0), replica_topic(sink, 1)):
        ensure_topic(BOOTSTRAP, t, partitions=4)
    start = time.time() + 1.0
    child = os.fork()
    if child == 0:  # the replicas
        try:
            produce_results(BOOTSTRAP, sink, rate, seconds + 2, start, 0.002, Produced(),
                            lambda _now: None)  # fmt: skip
        finally:
            os._exit(0)
    saved = records.orjson
    if variant == "json":
        records.orjson = _StdlibJson  # type: ignore[assignment]
    cfg = MergerConfig(
        bootstrap=BOOTSTRAP, sink=sink, replicas=2, run_dir=work / sink,
        until=start + seconds + 2.5,
    )  # fmt: skip
    merger = Merger(cfg)
    thread_s: list[float] = []

    def run() -> None:
        t0 = time.thread_time()
        merger.run()
        thread_s.append(time.thread_time() - t0)

    proc = psutil.Process()
    c0, w0 = proc.cpu_times(), time.time()
    th = threading.Thread(target=run)
    th.start()
    th.join()
    c1, wall = proc.cpu_times(), time.time() - w0
    records.orjson = saved
    os.waitpid(child, 0)
    final = json.loads((work / sink / "merger.json").read_text())
    return {
        "variant": variant,
        "thread_cores": thread_s[0] / wall,
        "process_cores": (c1.user + c1.system - c0.user - c0.system) / wall,
        "results": final["results"],
        "duplicates": final["duplicates"],
        "p50_ms": final["latency_ms"].get("p50"),
    }


COLUMNS = [
    Column("thread cores", 13, ".3f", lambda r: r["thread_cores"]),
    Column("process cores", 14, ".3f", lambda r: r["process_cores"]),
    Column("results", 9, "d", lambda r: r["results"]),
    Column("duplicates", 11, "d", lambda r: r["duplicates"]),
]


def main(argv: list[str] | None = None) -> int:
    """Alternate the variants ``--rounds`` times and print the table."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="orjson,json")
    ap.add_argument("--work", type=Path, default=Path("/tmp/merger_cpu"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for variant in args.variants.split(","):
            print(f"--- {variant} #{rnd + 1}", file=sys.stderr, flush=True)
            row = one_run(variant, args.rate, args.seconds, args.work)
            rows.append({**row, "variant": f"{variant} #{rnd + 1}"})
            write_rows(args.out, rows)
    print_table(rows, Column("parser", 10, "", lambda r: r["variant"], True), COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
