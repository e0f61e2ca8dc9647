"""What the final topic's transactions cost a merger with a standby: the fence's
``init_transactions`` against a dead merger's open transaction, with one producer and with the
merger's :data:`~arfl.measure.merger.transactions.FENCERS` (:func:`arfl.measure.merger.
transactions.fence`: some ask 5 ms apart until the abort is over, then the servers), and the
per-tick commit at 1,000 records/s. The stack must be up (``arfl stack up``).

    .venv/bin/python bench/transactions.py [--bootstrap 127.0.0.1:9092] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from confluent_kafka import Producer

from arfl.measure.merger import transactions
from arfl.stack.topics import ensure_topic


def _producer(bootstrap: str, tid: str, topic: str) -> Any:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 1,
                  "enable.idempotence": True, "acks": "all", "log_level": 0})  # fmt: skip
    p.list_topics(topic, timeout=10)
    return p


def fence_ms(bootstrap: str, topic: str, producers: int) -> float:
    """Open a transaction with records in it, then fence it with ``producers`` producers."""
    tid = f"bench-fence-{time.time_ns()}"
    old = _producer(bootstrap, tid, topic)
    old.init_transactions(10)
    old.begin_transaction()
    for i in range(100):
        old.produce(topic, b"x", partition=i % 2)
    old.flush(10)
    tries = [_producer(bootstrap, tid, topic) for _ in range(producers)]
    t0 = time.perf_counter()
    transactions.fence(tries, topic, 30.0)
    return (time.perf_counter() - t0) * 1000


def commit_ms(bootstrap: str, topic: str, seconds: float) -> list[float]:
    """Commit once a second while producing 1,000 records/s."""
    p = _producer(bootstrap, f"bench-commit-{time.time_ns()}", topic)
    p.init_transactions(10)
    p.begin_transaction()
    durations: list[float] = []
    t0 = time.time()
    sent, next_commit = 0, t0 + 1
    while time.time() - t0 < seconds:
        for _ in range(sent, int((time.time() - t0) * 1000)):
            p.produce(topic, b"x" * 200, partition=sent % 2)
            sent += 1
        p.poll(0)
        if time.time() >= next_commit:
            a = time.perf_counter()
            transactions.commit(p)
            durations.append((time.perf_counter() - a) * 1000)
            next_commit += 1
        time.sleep(0.001)
    return durations


def main(argv: list[str] | None = None) -> int:
    """Print the fence with 1 producer and with the merger's per round, then the commits."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args(argv)
    topic = f"bench-transactions-{time.time_ns()}"
    ensure_topic(args.bootstrap, topic, 2)
    for r in range(args.rounds):
        n = transactions.FENCERS
        one, more = fence_ms(args.bootstrap, topic, 1), fence_ms(args.bootstrap, topic, n)
        print(f"round {r + 1}: fence with 1 producer {one:.0f} ms, with {n} {more:.0f} ms")
    d = sorted(commit_ms(args.bootstrap, topic, args.seconds))
    print(f"commits: {len(d)}, p50 {statistics.median(d):.1f} ms, max {d[-1]:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
