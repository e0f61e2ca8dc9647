"""Real-time mode's latency knobs: the replicas' sink linger, the source's fetch batching, the
streaming shuffle's flush wait, the injector's linger and the merger's consumer fetch wait and
producer linger, measured on active RTM R=2 (fault-free; ``--pipeline``
per-record or windowed), every variant in one invocation (``--rounds``: that many runs each,
alternating), at Spark's 5-s real-time interval unless ``--interval`` says otherwise.

    .venv/bin/python bench/rtm_knobs.py --runs /tmp/knobs --out /tmp/knobs/knobs.json
    .venv/bin/python bench/rtm_knobs.py --variants default,"sink linger 1 ms" --rounds 3 ...
    .venv/bin/python bench/rtm_knobs.py --pipeline windowed --variants "shuffle flush 50 ms,default"

The machine saturates at 1,000 ev/s with two RTM replicas (docs/benchmarks.md): each RTM task
polls Kafka hundreds of times a second and each replica's producer sends what it has every
``linger.ms`` (5 ms by default under RTM; 0 would be nearly a produce request per record),
so the broker is the busiest process. The variants trade a few ms of batching for
fewer requests; the table says what each did to p50, p99 and the cores used. A windowed
pipeline's aggregation sits behind RTM's streaming shuffle, whose writer holds a partly filled
buffer up to ``spark.shuffle.streaming.networkBufferMaxWaitTimeMs`` (Spark's default 50 ms)
before it sends it to the reader; the "shuffle flush" variants set it. The injector's producer
lingers ``[workload] linger`` (2 ms) before it sends, after the event's intended send time (the
latency's start); the merger's consumer asks the broker to hold an empty fetch up to
``[merger] fetch_wait`` (5 ms), and its producer lingers ``[merger] linger`` (1 ms) on the
final topic, after the latency is measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import stalled_seconds
from realtime import Timing, analyse, run, spec_for, sweep_cpu

from arfl.configs.realtime import SHUFFLE_FLUSH_CONF
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.replica.sparkenv import C1_ONLY_JIT, EXECUTOR_JAVA_OPTIONS
from arfl.units import parse_duration


@dataclass(frozen=True)
class Knobs:
    """One variant: ``[source] options``, ``[sink] options``, ``[spark] conf``, and
    ``[workload]`` / ``[merger]`` keys (values as the spec model holds them: seconds)."""

    source: dict[str, str]
    sink: dict[str, str]
    conf: dict[str, str]
    workload: dict[str, float] = field(default_factory=dict)
    merger: dict[str, float] = field(default_factory=dict)


VARIANTS: dict[str, Knobs] = {
    "default": Knobs({}, {}, {}),
    "sink linger 0 ms": Knobs({}, {"kafka.linger.ms": "0"}, {}),
    "sink linger 1 ms": Knobs({}, {"kafka.linger.ms": "1"}, {}),
    "sink linger 2 ms": Knobs({}, {"kafka.linger.ms": "2"}, {}),
    "sink linger 5 ms": Knobs({}, {"kafka.linger.ms": "5"}, {}),
    "source fetch >= 4 KB or 5 ms": Knobs(
        {"kafka.fetch.min.bytes": "4096", "kafka.fetch.max.wait.ms": "5"}, {}, {}
    ),
    "both": Knobs(
        {"kafka.fetch.min.bytes": "4096", "kafka.fetch.max.wait.ms": "5"},
        {"kafka.linger.ms": "2"},
        {},
    ),
    "shuffle flush 50 ms": Knobs({}, {}, {SHUFFLE_FLUSH_CONF: "50"}),
    "shuffle flush 5 ms": Knobs({}, {}, {SHUFFLE_FLUSH_CONF: "5"}),
    "shuffle flush 1 ms": Knobs({}, {}, {SHUFFLE_FLUSH_CONF: "1"}),
    "injector linger 0 ms": Knobs({}, {}, {}, workload={"linger": 0.0}),
    "injector linger 5 ms": Knobs({}, {}, {}, workload={"linger": 0.005}),
    "merger fetch wait 1 ms": Knobs({}, {}, {}, merger={"fetch_wait": 0.001}),
    "merger fetch wait 50 ms": Knobs({}, {}, {}, merger={"fetch_wait": 0.05}),
    # The executors' collector: G1's pauses use both cores of a 2-core host, so one replica's
    # could starve its peer (docs/benchmarks.md, "Not the executors' collectors either").
    "executor GC 1 thread": Knobs(
        {},
        {},
        {EXECUTOR_JAVA_OPTIONS: f"{C1_ONLY_JIT} -XX:ParallelGCThreads=1 -XX:ConcGCThreads=1"},
    ),
    "executor serial GC": Knobs({}, {}, {EXECUTOR_JAVA_OPTIONS: f"{C1_ONLY_JIT} -XX:+UseSerialGC"}),
}


def variant_spec(base: Spec, knobs: Knobs) -> Spec:
    """``base`` with the variant's ``[source]``/``[sink]`` options, ``[spark] conf`` and
    ``[workload]``/``[merger]`` keys, validated again as the model (a value it refuses is a
    ValidationError naming the field, not a run with it; ``model_copy`` alone checks nothing)."""
    update: dict[str, Any] = {
        "source": base.source.model_copy(update={"options": knobs.source}),
        "sink": base.sink.model_copy(update={"options": knobs.sink}),
    }
    if knobs.conf:
        update["spark"] = base.spark.model_copy(update={"conf": {**base.spark.conf, **knobs.conf}})
    if knobs.workload:
        update["workload"] = base.workload.model_copy(update=knobs.workload)
    if knobs.merger:
        update["merger"] = base.merger.model_copy(update=knobs.merger)
    copied = base.model_copy(update=update)
    return Spec.model_validate(copied.model_dump(mode="json", by_alias=True))


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _name(row: dict[str, Any], rounds: int) -> str:
    return f"{row['variant']} #{row['round'] + 1}" if rounds > 1 else row["variant"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--pipeline", choices=("per-record", "windowed"), default="per-record")
    ap.add_argument("--duration", default="60s")
    ap.add_argument("--warmup", default="25s")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every variant this many times, alternating (a noisy host drifts between "
        "rounds, not within one)",
    )
    ap.add_argument(
        "--interval", default="", help="real-time checkpoint interval (default: Spark's 5 s)"
    )
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/knobs.json"))
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    duration, warmup = parse_duration(args.duration), parse_duration(args.warmup)
    if args.interval:
        try:
            parse_duration(args.interval)
        except ValueError as e:
            ap.error(f"--interval: {e}")
    t = Timing(duration, duration, warmup, duration)
    args.runs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for rnd, name in ((r, n) for r in range(args.rounds) for n in names):
        knobs = VARIANTS[name]
        spec = variant_spec(
            spec_for(args.pipeline, "active", args.rate, t, None, duration, args.interval), knobs
        )
        row: dict[str, Any] = {
            "variant": name,
            "round": rnd,
            "pipeline": args.pipeline,
            **asdict(knobs),
        }
        try:
            run_dir, summary, cpu, _ = run(spec, args.runs)
            row.update(analyse(run_dir, summary))
            row.update(sweep_cpu(run_dir, cpu, warmup))
            row.update(stalled_seconds(run_dir, warmup))
        except ArflError as e:
            row["error"] = str(e)
            print(f"{name}: failed: {e}", file=sys.stderr)
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1, default=str))
    print(f"\nactive RTM R=2 {args.pipeline}, {args.rate} ev/s, after a {args.warmup} warm-up")
    print(
        f"{'variant':30} {'p50 ms':>7} {'p99 ms':>8} {'host':>5} {'kafka':>6} "
        f"{'executors':>9} {'merger':>6} {'inject':>6} {'miss':>4} {'merge hop p50/p99':>17} "
        f"{'worst s p99':>11} {'stalled s':>9}"
    )
    for r in rows:
        if "error" in r:
            print(f"{_name(r, args.rounds):30} failed: {r['error'][:60]}")
            continue
        pc = r.get("process_cores", {})
        execs = sum(v for k, v in pc.items() if "executor" in k)
        print(
            f"{_name(r, args.rounds):30} {r['overall_p50']:7.1f} {r['overall_p99']:8.1f} "
            f"{r.get('host_cores_busy', float('nan')):5.2f} {pc.get('kafka', float('nan')):6.2f} "
            f"{execs:9.2f} {pc.get('merger', float('nan')):6.2f} "
            f"{pc.get('injector', float('nan')):6.2f} {r['missing']:4} "
            f"{_ms(r.get('merge_hop_p50')):>8}/{_ms(r.get('merge_hop_p99')):<8} "
            f"{_ms(r.get('worst_second_p99')):>11} "
            f"{r.get('stalled_seconds')}/{r.get('seconds')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
