"""Latency metrics: HdrHistogram helpers, the interval log, and the merger's monitor stream."""

from __future__ import annotations

from arfl.metrics.histogram import (
    DEFAULT_PERCENTILES,
    HIGHEST_TRACKABLE_US,
    IntervalHistogram,
    IntervalRecorder,
    LatencyLogWriter,
    new_histogram,
    percentiles_ms,
    read_latency_log,
)
from arfl.metrics.monitor import (
    InjectorSecond,
    InjectorStatsTail,
    InjectorSummary,
    JsonlTail,
    MonitorSnapshot,
    MonitorTail,
    ReplicaSnapshot,
)

__all__ = [
    "DEFAULT_PERCENTILES",
    "HIGHEST_TRACKABLE_US",
    "InjectorSecond",
    "InjectorStatsTail",
    "InjectorSummary",
    "IntervalHistogram",
    "IntervalRecorder",
    "JsonlTail",
    "LatencyLogWriter",
    "MonitorSnapshot",
    "MonitorTail",
    "ReplicaSnapshot",
    "new_histogram",
    "percentiles_ms",
    "read_latency_log",
]
