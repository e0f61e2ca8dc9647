"""Recompute a pipeline's expected results with a Spark *batch* job over the whole input topic.

The batch job reads every record of ``spec.source.topic`` with Spark's Kafka source and runs the
same :mod:`arfl.replica.query` code as the streaming replicas, so per-record results, rids
and content hashes match exactly. Tests and reports compare a replica's (or the merger's)
output against it.

Windows and finality: a streaming replica in append mode emits a window once, when its
watermark passes the window's end; the watermark is ``max(event time seen) - watermark``. Once
a replica has consumed the whole topic (and run its no-data batch), it has emitted exactly the
windows with ``end <= max_event_time - watermark``. :attr:`Recomputed.final` holds the windows
with ``end < max_event_time - watermark`` (strict, to stay clear of the boundary), computed
from the input topic at recompute time. End-of-input markers count here as they do in a
replica: their event time (a day past the last event) moves the final watermark past every
window, so with them every window is final (:attr:`Recomputed.not_final` is empty); they
yield no result. A test should therefore

1. stop producing, then call :func:`recompute`;
2. wait until the replica output contains every rid in ``final`` (the replica needs one more
   batch to see the last events and advance its watermark);
3. check every emitted rid is in ``results`` with the same hash (``data`` equal), and that
   ``final`` is a subset of what was emitted.

Windows after the cut-off (only without markers) are still open in the replica's state and
are never emitted until later events arrive; events older than the watermark when they arrive
are dropped by a streaming replica but counted here (a producer writing in event-time order
avoids them). The exception is the generator's *late* events (``workload.late``): lagging their
send time by :func:`arfl.configs.lateness.late_lag_ms` or more, they are behind every healthy
replica's watermark, so they are left out here too (:func:`drop_late`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arfl.configs.lateness import late_lag_ms
from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.replica import query
from arfl.replica.sparkenv import local_session
from arfl.run.records import BadRecord, Result, parse_result

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OFFLINE_REPLICA = -1
"""The ``replica`` field of recomputed results."""

_WINDOW_RID = re.compile(r"^(-?\d+)-(-?\d+)(?::|$)")


@dataclass(frozen=True)
class Recomputed:
    """Expected results of a pipeline over its whole input topic.

    Attributes:
        results: rid -> result (``replica`` = -1).
        final: rids a replica must have emitted once it consumed the whole input (every rid
            for per-record pipelines; windows ending before the final watermark otherwise).
        max_event_time_ms: newest event time in the input, end-of-input markers included
            (window pipelines), else None.
        watermark_ms: ``max_event_time_ms - watermark`` (window pipelines), else None.
        input_records: records in the input topic (parseable or not, markers included).
        markers: end-of-input markers in the input topic (one per partition when the
            injector finished).
    """

    results: dict[str, Result]
    final: frozenset[str]
    max_event_time_ms: int | None
    watermark_ms: int | None
    input_records: int
    markers: int = 0

    @property
    def not_final(self) -> frozenset[str]:
        """Expected windows the final watermark never passed: no replica can have emitted
        them (none when end-of-input markers closed them all)."""
        return frozenset(self.results) - self.final

    @property
    def data(self) -> dict[str, dict[str, Any]]:
        """rid -> the result's ``data``."""
        return {rid: r.data for rid, r in self.results.items()}


def read_input(spark: SparkSession, spec: Spec, bootstrap: str) -> DataFrame:
    """Every record of the input topic as Kafka-shaped rows (``value, partition, offset``)."""
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", spec.source.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select("value", "partition", "offset")
    )


def recompute_with(spark: SparkSession, spec: Spec, bootstrap: str) -> Recomputed:
    """:func:`recompute` on an existing session (with the Kafka connector on its classpath)."""
    raw = read_input(spark, spec, bootstrap).cache()
    try:
        return recompute_rows(raw, spec)
    finally:
        raw.unpersist()


def recompute_rows(raw: DataFrame, spec: Spec) -> Recomputed:
    """Expected results of ``spec`` over Kafka-shaped rows (``value, partition, offset``).

    Args:
        raw: every input record (cache it: it is read more than once).
        spec: the pipeline spec.

    Returns:
        Expected results and which of them are final (see the module docstring).
    """
    from pyspark.sql import functions as F

    total = raw.count()
    results: dict[str, Result] = {}
    events = drop_late(query.parse_events(raw, spec), spec)
    for row in query.build_output(events, spec, OFFLINE_REPLICA).collect():
        try:
            res = parse_result(row.value.encode())
        except BadRecord as e:  # cannot happen unless query.py is broken
            raise DeployError(f"offline recompute produced a bad record: {e}") from None
        results[res.rid] = res
    window = spec.window
    # The replicas' watermark operator sees the markers too: the maximum includes them.
    rows = query.parse_input(raw, spec)
    aggs = [F.sum(F.col("__eoi").cast("long")).alias("markers")]
    if window is not None:
        aggs.append(F.max(F.unix_millis(F.col("__et"))).alias("max_et"))
    stats = rows.agg(*aggs).collect()[0]
    max_et: int | None = None
    wm: int | None = None
    if window is not None and stats["max_et"] is not None:
        max_et = int(stats["max_et"])
        wm = max_et - round(window.watermark * 1000)
    if window is None:
        final = frozenset(results)
    else:
        final = frozenset(rid for rid in results if wm is not None and _window_end(rid) < wm)
    return Recomputed(results, final, max_et, wm, total, int(stats["markers"] or 0))


def drop_late(events: DataFrame, spec: Spec) -> DataFrame:
    """Leave out the events late by :func:`arfl.configs.lateness.late_lag_ms` (``ts`` minus the
    event time at least the lag), as the streaming replicas' watermark does; only window
    pipelines drop anything.

    Args:
        events: :func:`arfl.replica.query.parse_events`' output.
        spec: the pipeline spec.
    """
    from pyspark.sql import functions as F

    lag = late_lag_ms(spec)
    if lag is None or not spec.has_window:
        return events
    # Referencing __et keeps the filter above the watermark operator, as the marker filter.
    late = F.col("__ts") - F.unix_millis(F.col("__et")) >= F.lit(lag)
    return events.filter(F.col("__eoi") | ~late)


def recompute(
    spec: Spec, bootstrap: str, jars: Sequence[Path | str], master: str = "local[1]"
) -> Recomputed:
    """Recompute a pipeline's results with a batch job over the whole input topic.

    Args:
        spec: the pipeline spec.
        bootstrap: Kafka bootstrap servers.
        jars: Spark's Kafka connector jars.
        master: Spark master for the batch job (in-process ``local[1]`` by default).

    Returns:
        Expected results and which of them are final (see the module docstring).
    """
    conf = {"spark.jars": ",".join(str(j) for j in jars)} if jars else {}
    with local_session(master, conf, app_name=f"arfl-{spec.name}-offline") as spark:
        return recompute_with(spark, spec, bootstrap)


def _window_end(rid: str) -> int:
    m = _WINDOW_RID.match(rid)
    if m is None:
        raise DeployError(f"not a window result id: {rid!r}")
    return int(m.group(2))
