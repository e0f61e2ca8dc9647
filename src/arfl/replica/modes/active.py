"""Mode ``active``: R replicas on Spark's own Kafka source, agreeing on nothing at run time.

Every replica is its own Spark application reading the input topic with Spark's built-in Kafka
source from the same explicit start offsets (resolved once by deploy, never "latest") and writing
its own topic; the merger keeps the first copy of each result id. No leader, no decision log, no
shared batch boundaries: the pipelines it accepts give the same results however the input is
batched (DESIGN §2.1, :mod:`arfl.configs.realtime` refuses the others):

* per-record pipelines: a result's id is its input record's ``partition:offset``;
* window aggregations keyed by the partitioning key: a key's records come from one partition,
  in offset order, in every replica. Under real-time mode each update is identified by
  ``window + key + n`` (:func:`arfl.run.records.update_rid`).

What still depends on batching is late data (Spark's watermark advances between batches): the
watcher journals every replica's ``numRowsDroppedByWatermark`` (``late-drop``) and the merger's
divergence check is the backstop.

With ``replication.trigger = "realtime"`` (Spark's real-time mode) records are processed as they
arrive. Each replica's long batches end by wall clock every ``trigger_interval``, and the output
stalls while Spark commits and plans the next batch. Replica i therefore starts its query
``interval * i / R`` after replica 0, so that the replicas' boundaries fall apart and one
replica's stall is covered by the others (a restarted replica starts at once). The phase is
taken from replica 0's actual query start (its app-id file, written by the driver), since
sessions take different times to come up. A lost executor
fails a real-time query (no task retries): the supervisor restarts the replica, from its
checkpoint (what it replays carries the same ids and the merger drops it) or, for a stateless
pipeline, from a fresh checkpoint at the output frontier (``replication.resume``,
:mod:`arfl.measure.frontier`): the deploy's start offsets then come in ``STARTING_OFFSETS``
moved up to it.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from arfl.configs.spec import Spec
from arfl.processes import wait_until
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import (
    STAGGER_REF,
    STARTING_OFFSETS,
    ModeBase,
    ReplicaContext,
    kafka_source,
    kafka_source_key,
    realtime_interval_s,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@MODES.register(
    "active",
    ModeInfo(
        "R replicas on Spark's Kafka source, no coordination (results independent of batching)",
        min_replicas=2,
        max_replicas=None,
        triggers=frozenset({"micro-batch", "realtime"}),
        active=True,
        coordination_free=True,
        order=2,
        async_progress=True,
        resumes_from_peers=True,
    ),
)
class ActiveReplication(ModeBase):
    """R independent replicas whose results do not depend on their batches."""

    name = "active"

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """Spark's Kafka source from deploy's explicit start offsets (the checkpoint's after a
        restart)."""
        return kafka_source(spark, spec, ctx, ctx.options.get(STARTING_OFFSETS, "earliest"))

    def source_key(self, spec: Spec, ctx: ReplicaContext) -> str | None:
        """The Kafka reader's options: the same for every replica and for a take-over that
        resumes from a checkpoint; a resume at the output frontier has start offsets of its
        own."""
        return kafka_source_key(spec, ctx, ctx.options.get(STARTING_OFFSETS, "earliest"))

    def start_delay(self, spec: Spec, ctx: ReplicaContext) -> float:
        """Real-time mode, first start of replica i > 0: until ``interval * i / R`` after
        replica 0's query started (or the next such phase); 0 otherwise."""
        ref = ctx.options.get(STAGGER_REF)
        if (
            spec.replication.trigger != "realtime"
            or not spec.replication.stagger
            or ctx.attempt > 0
            or ctx.replica == 0
        ):
            return 0.0
        t0 = _query_started(Path(ref), REF_WAIT_S) if ref else None
        if t0 is None:
            return 0.0
        interval = realtime_interval_s(spec)
        return stagger_delay(t0, time.time(), interval, ctx.replica, spec.replication.replicas)


REF_WAIT_S = 180.0
"""How long a staggered replica waits for replica 0's query to start before it starts anyway."""


def stagger_delay(t0: float, now: float, interval: float, replica: int, replicas: int) -> float:
    """Seconds from ``now`` until the next time ``t0 + interval * (replica / replicas + k)``,
    k >= 0: replica ``replica``'s batch boundaries then fall between replica 0's (which started
    at ``t0``)."""
    target = t0 + interval * replica / replicas
    if target < now:
        target += interval * math.ceil((now - target) / interval)
    return target - now


def _query_started(path: Path, timeout_s: float) -> float | None:
    """Replica 0's ``query_started`` from its app-id file (waits up to ``timeout_s``)."""

    def started() -> float | None:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if isinstance(info, dict) and isinstance(info.get("query_started"), int | float):
            return float(info["query_started"]) or None  # 0.0 is no start time
        return None

    try:
        return wait_until(started, timeout_s=timeout_s, interval_s=0.2)
    except TimeoutError:
        return None
