"""Mode ``passive``: one replica, Spark's Kafka source and sink, durable checkpoint.

What a Spark user does today. The checkpoint (offset log, commit log, state store) lives in
the run directory; the supervisor restarts a dead driver on the same checkpoint and Spark
resumes from the last committed batch. The batch in flight at the crash is re-run, so the
replica may emit some results twice (Kafka sink: at-least-once); the merger drops them by rid.

``replication.trigger = "realtime"`` asks for Spark's real-time mode
(``trigger(realTime=...)``, Spark >= 4.1, Kafka source and sink, update output mode). The
checkpoint interval is ``trigger_interval`` (default 5 s). Real-time mode runs one long task
per input partition at the same time, so the master needs at least ``source.partitions``
task slots (e.g. ``local-cluster[1,4,1024]`` for 4 partitions); with fewer, batches cannot
start. Not exercised by the test suite (see the project notes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arfl.configs.spec import Spec
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import (
    ModeBase,
    ReplicaContext,
    kafka_source,
    trigger_of,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REALTIME_DEFAULT_MS = 5000


@MODES.register(
    "passive",
    ModeInfo(
        "one replica restarted from its checkpoint (Spark's own recovery)",
        triggers=frozenset({"micro-batch", "realtime"}),
        order=1,
    ),
)
class PassiveReplication(ModeBase):
    """One replica restarted from its checkpoint."""

    name = "passive"

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """Kafka source from earliest; after a restart the checkpoint's offsets win."""
        realtime = spec.replication.trigger == "realtime"
        return kafka_source(spark, spec, ctx, "earliest", limit_batches=not realtime)

    def trigger(self, spec: Spec) -> dict[str, str]:
        """Micro-batches, or real-time mode with ``trigger = "realtime"``."""
        if spec.replication.trigger == "realtime":
            ms = round(spec.replication.trigger_interval * 1000) or REALTIME_DEFAULT_MS
            return {"realTime": f"{ms} milliseconds"}
        return trigger_of(spec)
