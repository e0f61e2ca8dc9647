"""The floor of a merger in Python over confluent-kafka (arfl's client): read two replica
topics from their start, forward the first copy of each result id to the sink, drop the
second. No merge logic beyond a set of ids; see bench/merger_cpu.py (the floor-python variant).

    python forward.py BOOTSTRAP SINK TOPIC0 TOPIC1 PARTITIONS SECONDS

arfl's merger's consumer and producer settings and its read rule (drain what is queued, block
only when idle). Prints ``results N duplicates M setup_cpu_s S``: S, the CPU seconds spent
before the loop (the interpreter's start and imports), is not the forwarder's.
"""

from __future__ import annotations

import resource
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from arfl.configs.defaults import MERGER_FETCH_WAIT_MS, MERGER_LINGER_MS
from arfl.measure.merger.kafka import consumer_config, next_messages, sink_producer_config

FIELD = b'"rid":"'


def main(argv: list[str]) -> int:
    """Forward first copies for ``SECONDS``; print the counts."""
    bootstrap, sink, topic0, topic1, partitions, seconds = argv
    consumer = Consumer(consumer_config(bootstrap, "arfl-merger-floor", MERGER_FETCH_WAIT_MS))
    producer = Producer(sink_producer_config(bootstrap, MERGER_LINGER_MS))
    consumer.assign(
        [TopicPartition(t, p, -2) for t in (topic0, topic1) for p in range(int(partitions))]
    )
    setup = resource.getrusage(resource.RUSAGE_SELF)
    seen: set[bytes] = set()
    results = duplicates = 0
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        msgs = next_messages(consumer, 0.05)
        for msg in msgs:
            value = msg.value()
            if msg.error() is not None or value is None or (i := value.find(FIELD)) < 0:
                continue
            i += len(FIELD)
            rid = value[i : value.index(b'"', i)]
            if rid in seen:
                duplicates += 1
                continue
            seen.add(rid)
            results += 1
            producer.produce(sink, value=value, key=msg.key(), partition=msg.partition())
        if msgs:
            producer.poll(0)
    producer.flush(5)
    consumer.close()
    setup_s = setup.ru_utime + setup.ru_stime
    print(f"results {results} duplicates {duplicates} setup_cpu_s {setup_s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
