"""Warm a replica's executors up before its real-time query starts.

Measured here (Spark 4.3, ``local-cluster``, 2 cores; docs/benchmarks.md): the first real-time
batch that sees records spends its whole interval cold. Its first Kafka poll took 1.8 s, the
first record then took the rest of the batch to reach the sink (the executor's first Kafka
producer, class loading, JIT), and the batch ended having read **one record per partition** out
of 500 polled
(the executor log's ``read 1 records through 1 polls (polled out 500 records)``). Records that
arrived meanwhile waited for the next batch: every run started with a backlog of one or two
intervals, and so did every restarted replica.

So before the query starts, the driver runs one small batch job on its executors through the
same Kafka clients the query will use: it writes a few records with Spark's Kafka sink and the
query's own producer options (Spark caches producers per executor by their options, so the
query's sink reuses that producer), then reads them back with Spark's Kafka source. The records
go to a topic of the replica's own (:func:`warmup_topic`), which nothing else reads.

A warm-up that fails or takes too long is logged and skipped: it only saves time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arfl.stack.topics import ensure_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WARMUP_RECORDS = 200
"""Records the warm-up writes and reads back (per replica start)."""


def warmup_topic(output_topic: str) -> str:
    """The topic a replica writing ``output_topic`` warms its executors up on."""
    return f"{output_topic}.warmup"


@dataclass(frozen=True, slots=True)
class Warmup:
    """What one warm-up did (for the driver's log)."""

    topic: str
    records: int
    write_s: float
    read_s: float


def warm_up(
    spark: SparkSession,
    sink_options: dict[str, str],
    tasks: int,
    records: int = WARMUP_RECORDS,
) -> Warmup:
    """Write ``records`` records through Spark's Kafka sink with ``sink_options`` (the
    query's, ``topic`` replaced by the warm-up topic) in ``tasks`` tasks, then read the topic
    back through Spark's Kafka source.

    Raises:
        StackError: the warm-up topic cannot be created.
        Exception: whatever Spark raises (the caller logs and goes on).
    """
    bootstrap = sink_options["kafka.bootstrap.servers"]
    topic = warmup_topic(sink_options["topic"])
    ensure_topic(bootstrap, topic, 1)
    t0 = time.monotonic()
    # Rows made in the JVM: a real-time query runs no Python on its executors, and rows from
    # a Python list would boot a Python worker per task first (docs/benchmarks.md, "Executor
    # warm-up before the first real-time batch").
    df = spark.range(0, records, 1, max(1, tasks)).selectExpr(
        "concat('w', id) AS key", "concat('{\"warmup\":', id, '}') AS value"
    )
    writer = df.write.format("kafka")
    for k, v in (sink_options | {"topic": topic}).items():
        writer = writer.option(k, v)
    writer.save()
    t1 = time.monotonic()
    read = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    n = read.select("value").count()
    t2 = time.monotonic()
    return Warmup(topic=topic, records=n, write_s=round(t1 - t0, 3), read_s=round(t2 - t1, 3))
