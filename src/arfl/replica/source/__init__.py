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
    if opts.reader == "jvm":
        return _read_stream_jvm(spark, opts)
    register(spark)
    return spark.readStream.format(SOURCE_NAME).options(**opts.to_options()).load()


JVM_PROVIDER = "arfl.source.ArflKafkaProvider"
"""The JVM reader's data source class (``arfl/stack/resources/jvm``, in ``spark.jars``)."""


def _read_stream_jvm(spark: SparkSession, opts: SourceOptions) -> DataFrame:
    """The same batches read by the JVM on the executors: the boundary policy stays in this
    driver process (:class:`arfl.replica.source.datasource.JvmOracle`), registered with the
    driver JVM under an id the reader's ``oracle`` option names."""
    import uuid

    from pyspark.java_gateway import ensure_callback_server_started

    from arfl.replica.source.datasource import JvmOracle

    sc = spark.sparkContext
    gateway = sc._gateway  # PySpark's own Py4J gateway (as its foreachBatch uses)
    assert gateway is not None
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    oracle_id = f"{opts.topic}-r{opts.replica}-{uuid.uuid4().hex[:8]}"
    oracle = JvmOracle(opts)
    jvm = sc._jvm
    assert jvm is not None
    # Py4J keeps a Python object passed to Java until the Java side drops its proxy, which the
    # registry never does: a query restarted from this DataFrame asks the same oracle (its
    # policy rebuilt lazily after stop()).
    jvm.arfl.source.Oracles.register(oracle_id, oracle)
    return (
        spark.readStream.format(JVM_PROVIDER)
        .option("bootstrap", opts.bootstrap)
        .option("topic", opts.topic)
        .option("oracle", oracle_id)
        .load()
    )
