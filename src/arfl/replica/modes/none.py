"""Mode ``none``: one replica, Spark's Kafka source and sink, no durable checkpoint.

The reference for overhead. A restarted driver starts over with a fresh temporary checkpoint
at the input's *latest* offsets: what arrived while it was down is lost (the first start reads
from the earliest offset, so events produced before the driver was up are processed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arfl.configs.spec import Spec
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import (
    Checkpoint,
    ModeBase,
    ReplicaContext,
    kafka_source,
    kafka_source_key,
    temp_checkpoint,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@MODES.register(
    "none",
    ModeInfo(
        "one replica, no checkpoint: the reference for overhead",
        triggers=frozenset({"micro-batch", "realtime"}),
        order=0,
        async_progress=True,
    ),
)
class NoReplication(ModeBase):
    """One replica, nothing survives a driver crash."""

    name = "none"

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """Kafka source from earliest (first start) or latest (after a restart)."""
        return kafka_source(spark, spec, ctx, "earliest" if ctx.attempt == 0 else "latest")

    def source_key(self, spec: Spec, ctx: ReplicaContext) -> str | None:
        """The Kafka reader's options."""
        return kafka_source_key(spec, ctx, "earliest" if ctx.attempt == 0 else "latest")

    def checkpoint(self, ctx: ReplicaContext) -> Checkpoint:
        """A temporary directory, deleted at stop."""
        return temp_checkpoint(ctx)
