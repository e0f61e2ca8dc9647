"""Mode ``passive``: one replica, Spark's Kafka source and sink, durable checkpoint.

What a Spark user does today. The checkpoint (offset log, commit log, state store) lives in
the run directory; the supervisor restarts a dead driver on the same checkpoint and Spark
resumes from the last committed batch. The batch in flight at the crash is re-run, so the
replica may emit some results twice (Kafka sink: at-least-once); the merger drops them by rid.

``replication.trigger = "realtime"`` asks for Spark's real-time mode
(``trigger(realTime=...)``, Spark >= 4.1, Kafka source and sink, update output mode; window
aggregations from Spark 4.3): the honest single-replica baseline of mode ``active``. The
checkpoint interval is ``trigger_interval`` (default 5 s). Real-time mode runs one long task
per input partition (plus one per shuffle partition for aggregations) at the same time; the
supervisor sizes the replica's executor so that each has a slot (:mod:`arfl.configs.realtime`).
Real-time mode does not retry tasks: a lost executor fails the query, and the supervisor
restarts the replica from its checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arfl.configs.spec import Spec
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import ModeBase, ReplicaContext, kafka_source, kafka_source_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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
        return kafka_source(spark, spec, ctx, "earliest")

    def source_key(self, spec: Spec, ctx: ReplicaContext) -> str | None:
        """The Kafka reader's options."""
        return kafka_source_key(spec, ctx, "earliest")
