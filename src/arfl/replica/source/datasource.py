"""The ``arfl-kafka`` PySpark streaming data source.

Driver side (Spark runs the stream reader in a long-lived Python process next to the driver
JVM, one per query): ``initialOffset``/``latestOffset`` ask a :class:`BoundaryPolicy`, which is
where the replicas agree on batch boundaries. Executor side: ``read`` fetches exactly
``[start, end)`` of one Kafka partition with a cached consumer and drops marker records.

Rows: ``key string, value string, topic string, partition int, offset long, timestamp long,
late_before long`` (the record's timestamp in epoch ms, the broker's append time on topics arfl
creates; ``late_before``: the agreed watermark of the row's agreed batch,
:mod:`arfl.replica.source.late`, null where it is off).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from arfl.errors import DeployError
from arfl.replica.source.fetch import Range, read_batches
from arfl.replica.source.kafka import PartitionLog, TopicLog
from arfl.replica.source.late import annotate, group_maxes, thresholds
from arfl.replica.source.offsets import NO_BATCH, BatchOffset
from arfl.replica.source.options import SourceOptions
from arfl.replica.source.policy import BoundaryPolicy, initial_offsets
from arfl.run.names import SOURCE_NAME

SCHEMA = (
    "key string, value string, topic string, partition int, offset long, timestamp long, "
    "late_before long"
)

log = logging.getLogger(__name__)


def build_policy(opts: SourceOptions, log: PartitionLog) -> BoundaryPolicy:
    """The boundary policy of the replication mode ``opts.mode`` (each mode owns its own).

    Raises:
        DeployError: unknown mode (the message lists the known ones).
    """
    from arfl.replica.modes.base import get_mode

    return get_mode(opts.mode).boundary_policy(opts, log)


class RangePartition(InputPartition):
    """One Spark input partition (one task): :class:`Range` s of one or more Kafka partitions,
    read one after the other."""

    def __init__(self, ranges: list[Range]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


def group_ranges(ranges: list[Range], tasks: int) -> list[list[Range]]:
    """Deal ``ranges`` (partition order) round-robin into at most ``tasks`` read tasks
    (``tasks`` <= 0: one task per range). Fewer tasks than Kafka partitions when the executors
    have fewer cores: the tasks would run one after the other anyway, and each costs a Python
    worker hand-off and a consumer of its own."""
    if tasks <= 0 or tasks >= len(ranges):
        return [[r] for r in ranges]
    out: list[list[Range]] = [[] for _ in range(tasks)]
    for i, r in enumerate(ranges):
        out[i % tasks].append(r)
    return out


class ArflKafkaStreamReader(DataSourceStreamReader):
    """Stream reader; one instance lives for a whole query in the driver's planner process.

    Args:
        opts: parsed options.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.latest_offset_ms: list[float] = []
        # Clients, threads (heartbeats, election) start on the first planning call: Spark also
        # creates readers in short-lived planning workers only to pickle ``read``, and those
        # must not join the election or tick.
        self._planner: tuple[TopicLog, BoundaryPolicy] | None = None

    def _plan(self) -> tuple[TopicLog, BoundaryPolicy]:
        if self._planner is None:
            log = TopicLog(self.opts.bootstrap, self.opts.topic, f"arfl-r{self.opts.replica}")
            try:
                self._planner = (log, build_policy(self.opts, log))
            except BaseException:
                log.close()
                raise
        return self._planner

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to run ``read`` on executors; clients and threads stay here.
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.opts = state["opts"]
        self.latest_offset_ms = []
        self._planner = None

    def initialOffset(self) -> dict[str, Any]:
        """The topic's beginning, or ``starting_offsets`` (partitions not named: beginning)."""
        return BatchOffset(NO_BATCH, initial_offsets(self.opts, self._plan()[0])).to_dict()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Ask the policy where the batch starting at ``start`` ends."""
        t0 = time.perf_counter()
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        begin = BatchOffset.from_dict(start)
        rule = self.opts.late_rule
        if rule is not None and begin.batch != NO_BATCH and not begin.tracked:
            raise DeployError(
                f"{SOURCE_NAME} source: the checkpoint's last batch has no newest event time "
                f"(written before the agreed watermark, or by another mode): its watermark "
                f"would start over; use a fresh checkpoint directory"
            )
        end = self._plan()[1].next_end(begin, max_records)
        if rule is not None and not end.same_position(begin):
            maxes = group_maxes(self.opts.bootstrap, self.opts.topic, begin, end, rule.field)
            end = annotate(begin, end, maxes)
        ms = (time.perf_counter() - t0) * 1000
        self.latest_offset_ms.append(ms)
        if len(self.latest_offset_ms) > 10_000:
            del self.latest_offset_ms[:5_000]
        return end.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        """No Spark-side limit: caps are the policy's (they must agree across replicas)."""
        return ReadAllAvailable()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The Kafka partitions with records in ``[start, end)``, in at most ``read_tasks``
        input partitions (:func:`group_ranges`)."""
        s = BatchOffset.from_dict(start)
        e = BatchOffset.from_dict(end)
        rule = self.opts.late_rule
        ranges = []
        for p in sorted(e.offsets):
            lo = s.offsets.get(p, e.offsets[p])
            hi = e.offsets[p]
            if hi > lo:
                late = () if rule is None else thresholds(rule, s, e, p)
                ranges.append(Range(self.opts.bootstrap, self.opts.topic, p, lo, hi, late))
        return [RangePartition(g) for g in group_ranges(ranges, self.opts.read_tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: the records of the task's ranges as Arrow batches, markers dropped."""
        assert isinstance(partition, RangePartition)
        return (b for r in partition.ranges for b in read_batches(r))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the position lives in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        """Stop the policy's threads and clients (if this reader ever planned)."""
        if self._planner is None:
            return
        log, policy = self._planner
        self._planner = None
        try:
            policy.close()
        finally:
            log.close()


def offset_json(offset: dict[str, Any]) -> str:
    """An offset as the JVM reader carries it: the text PySpark writes for the Python reader
    (``json.dumps`` of :meth:`BatchOffset.to_dict`, whose key order is fixed), so equal
    positions give equal text (Spark compares a batch's end with its start by their JSON), and
    a checkpoint written by either reader reads back the same."""
    return json.dumps(offset)


class JvmOracle:
    """The boundary policy behind arfl's JVM source reader (``arfl.source.Oracle``, called
    through Py4J's callback server from the driver's stream execution thread): the same
    :class:`ArflKafkaStreamReader` planning as the Python source, so both cut every batch alike;
    only the executor-side read differs (the JVM's Kafka client, no Python worker)."""

    class Java:
        implements: ClassVar[list[str]] = ["arfl.source.Oracle"]

    def __init__(self, opts: SourceOptions) -> None:
        self.reader = ArflKafkaStreamReader(opts)

    def initialOffset(self) -> str:
        """The first batch's start (the Java interface's names, hence camel case)."""
        return offset_json(self.reader.initialOffset())

    def latestOffset(self, start: str) -> str:
        """The end of the batch starting at ``start`` (the policy's)."""
        return offset_json(self.reader.latestOffset(json.loads(start), ReadAllAvailable()))

    def partitions(self, start: str, end: str) -> str:
        """The read tasks of ``[start, end)``: ``[[partition, from, to, late], ...]`` each."""
        tasks = self.reader.partitions(json.loads(start), json.loads(end))
        return json.dumps(
            [
                [[r.partition, r.start, r.end, [list(x) for x in r.late]] for r in t.ranges]
                for t in tasks
                if isinstance(t, RangePartition)
            ]
        )

    def stop(self) -> None:
        """Stop the policy's threads and clients."""
        self.reader.stop()


class ArflKafkaSource(DataSource):
    """``spark.readStream.format("arfl-kafka")``: Kafka with replica-agreed batch boundaries."""

    @classmethod
    def name(cls) -> str:
        """Format name for ``readStream.format``."""
        return SOURCE_NAME

    def schema(self) -> str:
        """Kafka-shaped rows."""
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """Create the reader (in Spark's planner process) from the options."""
        del schema
        return ArflKafkaStreamReader(SourceOptions.parse(dict(self.options)))
