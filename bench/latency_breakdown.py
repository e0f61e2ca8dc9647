"""Where a run's end-to-end latency goes, hop by hop, from the Kafka timestamps of its topics.

Every hop of an arfl pipeline writes a Kafka record whose CreateTime is set by its producer
when it sends: the injector (input topic), each replica's Kafka sink (replica topics) and the
merger (final output). For every result of a per-record run this script joins the input record
(``partition:offset``), every replica's copy and the delivered copy, and prints per second:

* ``late``: the injector's clock when it sent the event (``sent_ms``) - its intended send time
  (``src_ts``): the injector behind its schedule;
* ``append``: the input record's broker timestamp (the input topic uses LogAppendTime) -
  ``sent_ms``: the injector's producer and the broker's append;
* ``r<i>``: replica i's CreateTime - input CreateTime: the broker to Spark, the pipeline, the
  sink's producer;
* ``merge``: final CreateTime - the earliest replica CreateTime: broker to merger, merger, and
  the merger's producer;
* ``e2e``: final CreateTime - ``src_ts`` (what the merger's histogram measures, to 1 ms).

A second in which the e2e p99 is high while both replicas' hops are low points at the broker
or the merger; one in which both replica hops rise together points at the host or the broker.
It reads only the topics (the run's stack must still be up) and shares no code with the merger's
measurement.

    .venv/bin/python bench/latency_breakdown.py /tmp/b15/runs/<run> [--from 60 --to 120]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, int, bytes]]:
    """(partition, offset, CreateTime ms, value) of every record of ``topic``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "arfl-breakdown",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    md = c.list_topics(topic, timeout=10)
    parts = sorted(md.topics[topic].partitions)
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[tuple[int, int, int, bytes]] = []
    done = {p for p in parts if ends[p] == 0}
    while len(done) < len(parts):
        for m in c.consume(10000, timeout=2.0):
            if m.error():
                continue
            p, o = m.partition(), m.offset()
            if p is None or o is None:
                continue
            out.append((p, o, m.timestamp()[1], m.value() or b""))
            if o + 1 >= ends[p]:
                done.add(p)
    c.close()
    return out


def pct(xs: list[float], q: float) -> float:
    """The q-quantile of ``xs`` (nearest rank)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def breakdown(
    run_dir: Path, t_from: float = 0.0, t_to: float = 1e9, q: float = 0.99
) -> dict[str, Any]:
    """The q-quantile of every hop, per second of the input (``seconds``: a row per second,
    ``s`` from the injector's t0) and over [t_from, t_to) (``all``), in ms.

    Raises:
        ValueError: the run's journal has no ``injector_started``.
    """
    state = json.loads((run_dir / "state.json").read_text())
    bootstrap = state["stack"]["kafka"]
    topics = state["topics"]
    t0 = None
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") == "injector_started":
            t0 = float(ev["t0"]) * 1000.0
    if t0 is None:
        raise ValueError(f"{run_dir}: no injector_started in the journal")
    inp: dict[str, int] = {}
    sent: dict[str, int] = {}
    for p, o, ts, v in read_topic(bootstrap, topics["source"]):
        inp[f"{p}:{o}"] = ts
        with contextlib.suppress(ValueError, KeyError, TypeError):
            sent[f"{p}:{o}"] = int(json.loads(v)["sent_ms"])
    reps: list[dict[str, int]] = []
    src: dict[str, int] = {}
    for t in topics["replicas"]:
        d: dict[str, int] = {}
        for _p, _o, ts, v in read_topic(bootstrap, t):
            try:
                obj = json.loads(v)
                rid, s_ts = str(obj["rid"]), int(obj["src_ts"])
            except (ValueError, KeyError, TypeError):
                continue
            d.setdefault(rid, ts)
            src.setdefault(rid, s_ts)
        reps.append(d)
    final: dict[str, int] = {}
    for _p, _o, ts, v in read_topic(bootstrap, topics["sink"]):
        try:
            final.setdefault(str(json.loads(v)["rid"]), ts)
        except (ValueError, KeyError, TypeError):
            continue
    per: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rid, fts in final.items():
        if rid not in inp or rid not in src:
            continue
        sec = (src[rid] - t0) / 1000.0
        if not (t_from <= sec < t_to):
            continue
        row = per[int(sec)]
        its = inp[rid]
        if rid in sent:
            row["late"].append(sent[rid] - src[rid])
            row["append"].append(its - sent[rid])
        firsts = []
        for i, d in enumerate(reps):
            if rid in d:
                row[f"r{i}"].append(d[rid] - its)
                firsts.append(d[rid])
        if firsts:
            row["merge"].append(fts - min(firsts))
        row["e2e"].append(fts - src[rid])
    cols = ["late", "append", *(f"r{i}" for i in range(len(reps))), "merge", "e2e"]
    seconds = [
        {"s": sec, **{c: (pct(per[sec][c], q) if per[sec][c] else None) for c in cols}}
        for sec in sorted(per)
    ]
    whole = {c: [x for r in per.values() for x in r[c]] for c in cols}
    return {
        "columns": cols,
        "seconds": seconds,
        "all": {c: (pct(v, q) if v else None) for c, v in whole.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument(
        "--from",
        dest="t_from",
        type=float,
        default=0.0,
        help="first second (from the injector's t0)",
    )
    ap.add_argument("--to", dest="t_to", type=float, default=1e9)
    ap.add_argument("--q", type=float, default=0.99)
    ap.add_argument("--json", type=Path, help="also write the per-second rows here")
    args = ap.parse_args()
    try:
        b = breakdown(args.run, args.t_from, args.t_to, args.q)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    cols = b["columns"]

    def fmt(v: float | None) -> str:
        return f"{v:7.0f}" if v is not None else "      -"

    print(f"p{args.q * 100:g} per second (ms), seconds from the injector's t0")
    print("s     " + " ".join(f"{c:>7}" for c in cols))
    for row in b["seconds"]:
        print(f"{row['s']:<5} " + " ".join(fmt(row[c]) for c in cols))
    print("all   " + " ".join(fmt(b["all"][c]) for c in cols))
    if args.json:
        args.json.write_text(json.dumps(b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
