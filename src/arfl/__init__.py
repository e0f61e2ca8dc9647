"""arfl: active replication for latency-sensitive stream pipelines on Spark and Kafka."""

__version__ = "0.1.0"
