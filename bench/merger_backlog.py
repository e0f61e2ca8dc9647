"""A replica's backlog in the merger's path: how late the other replica's fresh copies come
out while the merger reads a resumed replica's burst of copies it already forwarded.

    .venv/bin/arfl stack up
    .venv/bin/python bench/merger_backlog.py [--rate 1000] [--seconds 30] [--hold 10s,8s]
        [--rounds 2] [--variants default,unbounded,tight] [--out F]

Each run creates a sink and two replica topics (4 partitions) on the stack at 127.0.0.1:9092,
forks a process per replica that writes ``--rate`` results a second to its replica topic as
``bench/merger_memory.py`` does (replica 1's copy 2 ms after replica 0's), except that replica
0's copies due in the ``--hold`` span (start, length into the input) are held back and
written all at once at its end: the backlog a paused replica sends when it resumes, every copy
of it a duplicate. :class:`arfl.measure.merger.process.Merger` runs in a thread of this
process with the variant's consumer settings until the input ends.

Variants (:data:`VARIANTS`): ``default`` (arfl's consumer settings: a few hundred copies
queued ahead of the merger), ``unbounded`` (librdkafka's own prefetch: up to 100,000 messages
or 64 MB queued ahead, a partition fetched up to 1 MB at a time) and ``tight`` (fewer still).

Figures, from the merger's own interval log (``latency.hlog``, 1-s intervals, latency
from each result's intended time): the p99 of the intervals before the hold (steady), the
largest interval p99 and the max over the second the burst lands in and the 3 s after (the
backlog's seconds), and
the merger thread's and process's cores over the run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from _common import Column, cpu_lock, num, print_table, write_rows
from merger_cpu import BOOTSTRAP, run_merger
from merger_memory import Produced, produce_results

import arfl.measure.merger.kafka as merger_kafka
from arfl.measure.histogram import merge, percentiles_ms, read_latency_log
from arfl.run.records import replica_topic
from arfl.stack.topics import ensure_topic
from arfl.units import parse_duration

AFTER_S = 3.0
"""The seconds after the hold's end that count as the backlog's."""

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    # librdkafka's own prefetch: up to 100,000 messages or 64 MB queued ahead of the merger,
    # a partition fetched up to 1 MB at a time, a full queue retried after 1 s.
    "unbounded": {
        "queued.min.messages": 100_000,
        "queued.max.messages.kbytes": 65_536,
        "max.partition.fetch.bytes": 1_048_576,
        "fetch.queue.backoff.ms": 1000,
    },
    # Fewer still ahead: a quarter of arfl's queue and fetch size.
    "tight": {
        "queued.min.messages": 100,
        "queued.max.messages.kbytes": 64,
        "max.partition.fetch.bytes": 8192,
        "fetch.queue.backoff.ms": 1,
    },
}
"""Consumer settings each variant puts over arfl's (``default``: arfl's as they are)."""


def one_run(
    variant: str, rate: float, seconds: float, hold: tuple[float, float], work: Path
) -> dict[str, Any]:
    """One merger run of ``variant`` over a fresh input with a held-back replica 0."""
    sink = f"merger-backlog-{uuid.uuid4().hex[:8]}"
    for t in (sink, replica_topic(sink, 0), replica_topic(sink, 1)):
        ensure_topic(BOOTSTRAP, t, partitions=4)
    start = time.time() + 1.0
    span = (start + hold[0], start + hold[0] + hold[1])
    children = []
    for replica in (0, 1):
        child = os.fork()
        if child == 0:
            try:
                produce_results(BOOTSTRAP, sink, rate, seconds, start, 0.002, Produced(),
                                lambda _now: None, span, (replica,))  # fmt: skip
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        children.append(child)
    saved = merger_kafka.consumer_config
    over = VARIANTS[variant]

    def consumer_config(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {**saved(*args, **kwargs), **over}

    merger_kafka.consumer_config = consumer_config  # type: ignore[assignment]
    try:
        cores = run_merger(sink, start + seconds + 2.5, work)
    finally:
        merger_kafka.consumer_config = saved  # type: ignore[assignment]
        failed = [c for c in children if os.waitpid(c, 0)[1] != 0]
    if failed:
        raise RuntimeError(f"a replica's writer failed (pids {failed}); its traceback is above")
    intervals = read_latency_log(work / sink / "latency.hlog")
    steady = percentiles_ms(merge(intervals, start + 2.0, span[0] - 1.0), (50.0, 99.0))
    after = [iv for iv in intervals if span[1] - 1.0 <= iv.start_s < span[1] + AFTER_S]
    if not after:
        raise RuntimeError(f"the merger logged no interval after the burst ({sink})")
    worst = max((iv.percentiles_ms((99.0,)) for iv in after), key=lambda p: p["p99"] or 0.0)
    whole = percentiles_ms(merge(after), (99.0,))
    return {
        "variant": variant,
        "steady_p50": steady["p50"],
        "steady_p99": steady["p99"],
        "backlog_p99": worst["p99"],
        "backlog_max": whole["max"],
        "backlog_results": int(whole["count"] or 0),
        **cores,
    }


COLUMNS = [
    Column("steady p50", 10, ".1f", lambda r: num(r.get("steady_p50"))),
    Column("steady p99", 10, ".1f", lambda r: num(r.get("steady_p99"))),
    Column("backlog worst p99", 17, ".1f", lambda r: num(r.get("backlog_p99"))),
    Column("backlog max", 11, ".1f", lambda r: num(r.get("backlog_max"))),
    Column("thread cores", 12, ".3f", lambda r: num(r.get("thread_cores"))),
    Column("process cores", 13, ".3f", lambda r: num(r.get("process_cores"))),
]


def main(argv: list[str] | None = None) -> int:
    """Alternate the variants ``--rounds`` times and print the table."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--hold", default="10s,8s", help="start,length of replica 0's hold")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="default,unbounded")
    ap.add_argument("--work", type=Path, default=Path("/tmp/merger_backlog"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    a, _, b = args.hold.partition(",")
    hold = (parse_duration(a), parse_duration(b))
    if hold[0] < 4.0 or hold[0] + hold[1] + AFTER_S > args.seconds:
        ap.error("--hold must start at 4 s or later and end 3 s before the input does")
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for variant in args.variants.split(","):
            print(f"--- {variant} #{rnd + 1}", file=sys.stderr, flush=True)
            try:
                with cpu_lock():
                    row = one_run(variant, args.rate, args.seconds, hold, args.work)
            except RuntimeError as e:
                row = {"error": str(e)}
            rows.append({**row, "variant": f"{variant} #{rnd + 1}"})
            write_rows(args.out, rows)
    print_table(rows, Column("variant", 15, "", lambda r: r["variant"], True), COLUMNS)
    print(
        f"(ms; {args.rate:g} results/s, replica 0 held {hold[1]:g} s from {hold[0]:g} s; "
        f"backlog: the burst's second and the {AFTER_S:g} s after)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
