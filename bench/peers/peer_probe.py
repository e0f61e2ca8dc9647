"""The probe: one consumer of a system's final topic, the same for every system.

    python bench/peers/peer_probe.py --bootstrap HOST:PORT --topic T --out F [--wait-topic 600]

It waits for the topic, reads every partition from the start (assigned, no group: nothing to
rebalance) and writes one CSV line per record to ``F``: its arrival time (this process's wall
clock when ``consume`` returned it, epoch ms), the event's ``ts`` and ``seq``, and the output
record's Kafka timestamp. It reads committed records only (``read_committed``, what a consumer
of an exactly-once sink sees; the same for every system). SIGTERM ends it.

It runs as a process of its own, at the harness's niceness, so that neither the benchmark's
own threads nor a system in the same interpreter (arfl's deploy) delay its reading.
:class:`ProbeFile` reads the lines back while it runs.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from peer_stats import Sample

HEADER = "# arrival_ms,ts_ms,seq,out_ms"
FLUSH_S = 0.5
"""How often the probe flushes its file (what the benchmark's drain sees)."""


def extract(doc: Any) -> tuple[int, int] | None:
    """``(ts, seq)`` of an output record: flat (``{"seq", "ts", ...}``, the peers'), or arfl's
    result (``{"src_ts", "data": {"seq", "ts", ...}}``, :mod:`arfl.run.records`); None when
    it carries no numeric ``seq`` and ``ts``."""
    if not isinstance(doc, dict):
        return None
    data = doc.get("data")
    body = data if isinstance(data, dict) else doc
    seq, ts = body.get("seq"), body.get("ts", doc.get("src_ts"))
    if isinstance(seq, bool) or isinstance(ts, bool):
        return None
    if not isinstance(seq, int | float) or not isinstance(ts, int | float):
        return None
    return int(ts), int(seq)


def consumer_config(bootstrap: str) -> dict[str, Any]:
    """arfl's merger's low-latency consumer settings, committed records only."""
    from arfl.measure.merger.kafka import consumer_config as merger_config

    cfg = merger_config(bootstrap, f"peers-probe-{uuid.uuid4().hex[:8]}")
    cfg.update({"client.id": "peers-probe", "isolation.level": "read_committed"})
    return cfg


def run(bootstrap: str, topic: str, out: Path, wait_topic_s: float, stop: threading.Event) -> int:
    """Consume ``topic`` into ``out`` until ``stop``; returns the records written."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from arfl.measure.merger.kafka import next_messages
    from arfl.processes import Stopped, wait_until

    consumer = Consumer(consumer_config(bootstrap))

    def partitions() -> list[int]:
        meta = consumer.list_topics(topic=topic, timeout=5).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        return sorted(meta.partitions)

    try:
        parts = wait_until(
            partitions, timeout_s=wait_topic_s, interval_s=0.5, what=f"topic {topic}", stop=stop
        )
    except Stopped:
        consumer.close()
        return 0
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    written = unparsed = 0
    with out.open("w") as f:
        f.write(HEADER + "\n")
        f.flush()
        last_flush = time.monotonic()
        while not stop.is_set():
            msgs = next_messages(consumer, 0.05)  # as the merger reads: no wait when busy
            now_ms = time.time() * 1000.0
            for m in msgs:
                if m.error() is not None:
                    continue
                try:
                    got = extract(orjson.loads(m.value() or b"null"))
                except orjson.JSONDecodeError:
                    got = None
                if got is None:
                    unparsed += 1
                    continue
                kind, ts_out = m.timestamp()
                out_ms = f"{ts_out}" if kind else ""
                f.write(f"{now_ms:.3f},{got[0]},{got[1]},{out_ms}\n")
                written += 1
            if time.monotonic() - last_flush >= FLUSH_S:
                f.flush()
                last_flush = time.monotonic()
        f.write(f"# unparsed {unparsed}\n")
    consumer.close()
    return written


class ProbeFile:
    """Reads a probe's CSV as it grows: :meth:`poll` adds the complete lines written since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.samples: list[Sample] = []
        self.unparsed = 0
        self._offset = 0
        self._seqs: set[int] = set()

    def poll(self) -> int:
        """Read the new complete lines; returns how many samples they added."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        added = 0
        for line in chunk[:end].decode().splitlines():
            if line.startswith("# unparsed "):
                self.unparsed = int(line.split()[-1])
            if not line or line.startswith("#"):
                continue
            a, ts, seq, out = line.split(",")
            s = Sample(float(a), int(ts), int(seq), float(out) if out else None)
            self.samples.append(s)
            self._seqs.add(s.seq)
            added += 1
        return added

    def seen(self, seqs: set[int]) -> int:
        """How many of ``seqs`` arrived so far."""
        return len(self._seqs & seqs)


def main(argv: Sequence[str] | None = None) -> int:
    from arfl.processes import stop_on_termination

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wait-topic", type=float, default=600.0, help="seconds")
    args = ap.parse_args(argv)
    stop = threading.Event()
    stop_on_termination(stop.set)
    n = run(args.bootstrap, args.topic, args.out, args.wait_topic, stop)
    print(f"probe: {n} records from {args.topic}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
