"""arfl's Kafka streaming source, whose batch boundaries all replicas agree on.

Usage::

    from arfl.replica.source import SourceOptions, read_stream
    df = read_stream(spark, SourceOptions(bootstrap="127.0.0.1:9092", topic="clicks",
                                          mode="active-leaderless", replica=0))

:func:`register` adds the ``arfl-kafka`` format to a SparkSession (idempotent);
:func:`read_stream` registers and returns the streaming DataFrame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arfl.replica.source.offsets import NO_BATCH, BatchOffset
from arfl.replica.source.options import SourceOptions
from arfl.run.names import SOURCE_NAME

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "NO_BATCH",
    "SOURCE_NAME",
    "BatchOffset",
    "SourceOptions",
    "read_stream",
    "register",
]


def register(spark: SparkSession) -> None:
    """Register the ``arfl-kafka`` data source with ``spark`` (safe to call repeatedly)."""
    from arfl.replica.source.datasource import ArflKafkaSource

    spark.dataSource.register(ArflKafkaSource)


def read_stream(spark: SparkSession, opts: SourceOptions) -> DataFrame:
    """A streaming DataFrame of the input topic with the mode's batch boundaries.

    Columns: ``key``, ``value`` (strings), ``topic``, ``partition`` (int), ``offset`` (long),
    ``timestamp`` (long, epoch ms). Marker records never appear.
    """
    register(spark)
    return spark.readStream.format(SOURCE_NAME).options(**opts.to_options()).load()
