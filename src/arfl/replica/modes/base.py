"""The replication-mode interface and its registry.

A mode decides three things for one replica's Spark application:

* ``source(spark, spec, ctx)``: a streaming DataFrame of Kafka-shaped rows (``value``,
  ``partition``, ``offset``); it is where active modes put their coordinated batch boundaries
  (a Python ``DataSourceStreamReader`` whose ``latestOffset()`` all replicas agree on);
* ``checkpoint(ctx)``: where Spark keeps offsets and state, and whether that survives a stop;
* ``sink_options(ctx, spec)`` and ``trigger(spec)``: options of the Kafka sink and the trigger.

Modes register themselves with ``@MODES.register("name", ModeInfo(...))`` (:mod:`arfl.registry`),
each with its own batch-boundary policy (``boundary_policy``); every module of this package is
imported on first lookup, so a new mode is one new file.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from arfl.configs.kafka_options import option_strings
from arfl.configs.realtime import REALTIME, RTM_MIN_BATCH_S
from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.registry import MODES, UnknownKind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from arfl.replica.source.kafka import PartitionLog
    from arfl.replica.source.options import SourceOptions
    from arfl.replica.source.policy import BoundaryPolicy


@dataclass(frozen=True)
class ReplicaContext:
    """What a mode knows about the replica it serves.

    Attributes:
        replica: replica index (0-based).
        bootstrap: Kafka bootstrap servers ``host:port[,...]``.
        output_topic: this replica's output topic.
        checkpoint_dir: the durable checkpoint location the runner assigned (modes without a
            durable checkpoint ignore it).
        attempt: 0 for the first start, n for the n-th restart by the supervisor.
        options: extra, mode-specific settings (e.g. ZooKeeper address for active modes).
    """

    replica: int
    bootstrap: str
    output_topic: str
    checkpoint_dir: Path
    attempt: int = 0
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint:
    """Where the query keeps its checkpoint and whether it outlives the driver.

    Attributes:
        location: directory passed as ``checkpointLocation``.
        durable: kept across stops and restarts (a restart resumes from it); when False the
            driver deletes it at stop.
    """

    location: Path
    durable: bool


@runtime_checkable
class ReplicationMode(Protocol):
    """One way of running replicas (see DESIGN.md §2)."""

    name: str

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """Streaming DataFrame with columns ``value``, ``partition``, ``offset``."""
        ...

    def source_key(self, spec: Spec, ctx: ReplicaContext) -> str | None:
        """Everything :meth:`source` depends on besides the session and the spec, as a text:
        two contexts with equal keys get equal sources (a standby's pipeline built ahead for
        one serves the other). None: not only options (a source with a thread or a client of
        its own, as arfl's), built anew each time."""
        ...

    def checkpoint(self, ctx: ReplicaContext) -> Checkpoint:
        """The checkpoint location and its policy."""
        ...

    def sink_options(self, ctx: ReplicaContext, spec: Spec) -> dict[str, str]:
        """Options of the Kafka sink writing ``ctx.output_topic``."""
        ...

    def trigger(self, spec: Spec) -> dict[str, str]:
        """Keyword arguments of ``DataStreamWriter.trigger``."""
        ...

    def start_delay(self, spec: Spec, ctx: ReplicaContext) -> float:
        """Seconds the driver waits before starting its query (to stagger the replicas'
        batch boundaries)."""
        ...

    def boundary_policy(self, opts: SourceOptions, log: PartitionLog) -> BoundaryPolicy:
        """Where the batches of arfl's Kafka source end for this mode (``latestOffset``).

        Modes on Spark's built-in Kafka source take what is available (the plain policy);
        the active modes decide boundaries every replica agrees on.
        """
        ...


_INSTANCES: dict[str, ReplicationMode] = {}


def known_modes() -> list[str]:
    """Names of every registered mode, sorted."""
    return MODES.names()


def get_mode(name: str) -> ReplicationMode:
    """The registered mode called ``name`` (one instance per mode).

    Raises:
        DeployError: no such mode; the message lists the known ones.
    """
    inst = _INSTANCES.get(name)
    if inst is None:
        try:
            cls = MODES.get(name)
        except UnknownKind as e:
            raise DeployError(str(e)) from None
        inst = cls()
        if not isinstance(inst, ReplicationMode):
            raise TypeError(f"{cls.__name__} does not implement ReplicationMode")
        _INSTANCES[name] = inst
    return inst


# --- shared pieces of the Kafka-based modes ---------------------------------------------


class ModeBase:
    """What most modes share: a durable checkpoint, the Kafka sink, micro-batches as fast as
    possible, and the plain boundary policy (take what is available). Modes override what
    they decide differently."""

    name = ""

    def checkpoint(self, ctx: ReplicaContext) -> Checkpoint:
        """Durable: a restarted replica resumes from its own checkpoint."""
        return Checkpoint(location=ctx.checkpoint_dir, durable=True)

    def sink_options(self, ctx: ReplicaContext, spec: Spec) -> dict[str, str]:
        """Kafka sink on the replica's own topic."""
        return kafka_sink_options(ctx, spec)

    def trigger(self, spec: Spec) -> dict[str, str]:
        """Micro-batches (``replication.trigger_interval``, default as fast as possible), or
        Spark's real-time mode with ``replication.trigger = "realtime"``."""
        return trigger_of(spec)

    def start_delay(self, spec: Spec, ctx: ReplicaContext) -> float:
        """Start at once."""
        del spec, ctx
        return 0.0

    def source_key(self, spec: Spec, ctx: ReplicaContext) -> str | None:
        """None: built anew each time (the modes on Spark's Kafka source say otherwise)."""
        del spec, ctx
        return None

    def boundary_policy(self, opts: SourceOptions, log: PartitionLog) -> BoundaryPolicy:
        """Take what is available (Spark's own behaviour)."""
        from arfl.replica.source.policy import PlainPolicy

        return PlainPolicy(opts, log)


STARTING_OFFSETS = "starting_offsets"
"""Mode option: the input's start offsets as Spark's ``startingOffsets`` JSON
(``{"topic": {"0": 0, ...}}``), resolved once by deploy so that every replica (and every first
start) reads from the same explicit positions, never from "latest" (only a standby's rehearsal
without records of its own, whose output nothing reads, starts there:
``replica/standby.rehearse``)."""


STAGGER_REF = "stagger_ref"
"""Mode option: replica 0's app-id file, whose ``query_started`` (epoch s) staggered replicas
align their first batch to."""

PEER_PROGRESS = "peer_progress"
"""Mode option: the other replicas' progress files (a JSON list), whose batch starts a
real-time replica keeps its own away from (:mod:`arfl.replica.phase`)."""

PEER_APPS = "peer_apps"
"""Mode option: the other replicas' app-id files (a JSON list, in :data:`PEER_PROGRESS`'s
order): one deleted, or rewritten after the peer's last reported batch, tells the phase keeper
that the peer restarted (:mod:`arfl.replica.phase`)."""


def kafka_source(
    spark: SparkSession,
    spec: Spec,
    ctx: ReplicaContext,
    starting_offsets: str,
    *,
    limit_batches: bool | None = None,
    topic: str | None = None,
) -> DataFrame:
    """Spark's built-in Kafka source on the spec's input topic (or ``topic``).

    Args:
        spark: the session.
        spec: the pipeline spec (input topic, ``replication.max_records_per_batch``).
        ctx: the replica context (bootstrap; ``kafka.*`` options are passed through).
        starting_offsets: ``earliest``, ``latest`` or a JSON of explicit offsets (ignored when
            resuming a checkpoint).
        limit_batches: cap micro-batches at ``max_records_per_batch`` (``maxOffsetsPerTrigger``);
            default: yes, except in real-time mode, whose batches are time-bounded.
        topic: read this topic instead of the input (a standby's rehearsal input).
    """
    opts = kafka_options(spec, ctx, starting_offsets, limit_batches=limit_batches, topic=topic)
    return (
        spark.readStream.format("kafka")
        .options(**opts)
        .load()
        .select("value", "partition", "offset")
    )


def kafka_options(
    spec: Spec,
    ctx: ReplicaContext,
    starting_offsets: str,
    *,
    limit_batches: bool | None = None,
    topic: str | None = None,
) -> dict[str, str]:
    """The options :func:`kafka_source` gives Spark's Kafka reader (the same arguments)."""
    if limit_batches is None:
        limit_batches = spec.replication.trigger != "realtime"
    opts = {
        "kafka.bootstrap.servers": ctx.bootstrap,
        "subscribe": topic or spec.source.topic,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "false",
    }
    if limit_batches:
        opts["maxOffsetsPerTrigger"] = str(spec.replication.max_records_per_batch)
    for k, v in (option_strings(spec.source.options) | ctx.options).items():
        if k.startswith("kafka."):
            opts[k] = v
    return opts


def kafka_source_key(spec: Spec, ctx: ReplicaContext, starting_offsets: str) -> str:
    """:meth:`ReplicationMode.source_key` of a mode whose source is :func:`kafka_source`."""
    return json.dumps(kafka_options(spec, ctx, starting_offsets), sort_keys=True)


def arfl_source_options(
    spec: Spec, ctx: ReplicaContext, mode: str, **mode_options: Any
) -> SourceOptions:
    """The options of one replica's arfl-kafka reader (the active modes' source).

    Args:
        spec: the pipeline spec (input topic, name, ``replication.max_records_per_batch``).
        ctx: the replica context; its mode options ``source.<option>`` override the rest.
        mode: the replication mode.
        mode_options: the mode's own :class:`SourceOptions` fields.

    Raises:
        DeployError: an option is invalid.
    """
    from arfl.configs.realtime import declared_slots
    from arfl.replica.source.options import SourceOptions, passthrough

    # Windowed pipelines: every replica drops the same late rows, whatever its batches
    # (arfl.replica.source.late).
    window = spec.window
    late: dict[str, Any] = (
        {}
        if window is None or not spec.source.event_time
        else {
            "event_time_field": spec.source.event_time,
            "watermark_delay_ms": round(float(window.watermark) * 1000),
        }
    )
    base = SourceOptions(
        bootstrap=ctx.bootstrap,
        topic=spec.source.topic,
        mode=mode,
        replica=ctx.replica,
        pipeline=spec.name,
        max_records_per_batch=spec.replication.max_records_per_batch,
        reader=spec.replication.reader,
        # As many read tasks as the executors have slots: more would only queue.
        read_tasks=declared_slots(spec.spark.master) or 0,
        **late,
        **mode_options,
    )
    return SourceOptions.parse(base.to_options() | passthrough(ctx.options))


SINK_LINGER_MS = {"micro-batch": 0, REALTIME: 5}
"""The replicas' Kafka sink ``linger.ms`` by trigger. A micro-batch task flushes its producer
at its end; a real-time task sends each record as it comes, and with 0 nearly every record was
a produce request of its own (the broker's largest share of CPU). 5 ms (Kafka 4's own default,
KIP-1030) cost ~2.5 ms of p50 and saved ~0.1 of the broker's ~0.6 cores and ~0.06 of the
merger's at 1,000 ev/s with two replicas; no run of five had a p99 above 40 ms, against three
of five at 0 (docs/benchmarks.md, "The replicas' sink batches for 5 ms")."""


def kafka_sink_options(ctx: ReplicaContext, spec: Spec) -> dict[str, str]:
    """Options of the Kafka sink: idempotent-friendly producer writing ``ctx.output_topic``,
    ``linger.ms`` :data:`SINK_LINGER_MS`; the spec's ``[sink] options`` (``kafka.*``) override
    the producer defaults."""
    return {
        "kafka.linger.ms": str(SINK_LINGER_MS[spec.replication.trigger]),
        "kafka.acks": "all",
        **option_strings(spec.sink.options),
        "kafka.bootstrap.servers": ctx.bootstrap,
        "topic": ctx.output_topic,
    }


REALTIME_DEFAULT_MS = round(RTM_MIN_BATCH_S * 1000)
"""Real-time mode's checkpoint interval when ``trigger_interval`` is 0 (Spark's minimum batch
duration, ``spark.sql.streaming.realTimeMode.minBatchDuration``)."""


def trigger_of(spec: Spec) -> dict[str, str]:
    """The query's trigger.

    Micro-batches run as fast as possible, or every ``replication.trigger_interval``. With
    ``replication.trigger = "realtime"`` Spark's real-time mode (Spark >= 4.1; Kafka source and
    sink, update output mode) processes each record as it arrives; ``trigger_interval`` (default
    5 s) is then the checkpoint interval, the length of one long-running batch.
    """
    if spec.replication.trigger == "realtime":
        ms = round(spec.replication.trigger_interval * 1000) or REALTIME_DEFAULT_MS
        return {"realTime": f"{ms} milliseconds"}
    ms = round(spec.replication.trigger_interval * 1000)
    return {"processingTime": f"{ms} milliseconds"}


def realtime_interval_s(spec: Spec) -> float:
    """Length of one real-time-mode batch in seconds (the checkpoint interval)."""
    return spec.replication.trigger_interval or REALTIME_DEFAULT_MS / 1000


def drop_incomplete_writes(location: Path) -> list[Path]:
    """Delete the temporary files a killed driver left in its checkpoint's logs.

    Spark writes each offset/commit log entry to a hidden ``.<batch>.<uuid>.tmp`` file and
    renames it; a driver killed in between leaves the temporary file (and its ``.crc``). A
    restarted query whose commit log holds only such a file fails with
    ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` (measured: a replica killed during its first
    real-time batch then crash-looped). A temporary file never becomes a log entry without the
    rename, so deleting it loses nothing.

    Returns:
        The files deleted.
    """
    gone: list[Path] = []
    for log in ("commits", "offsets"):
        d = location / log
        if not d.is_dir():
            continue
        for f in d.iterdir():
            if f.name.startswith(".") and (f.name.endswith(".tmp") or f.name.endswith(".tmp.crc")):
                f.unlink(missing_ok=True)
                gone.append(f)
    return gone


def temp_checkpoint(ctx: ReplicaContext) -> Checkpoint:
    """A fresh temporary checkpoint directory, deleted by the driver at stop."""
    path = Path(tempfile.mkdtemp(prefix=f"arfl-ckpt-r{ctx.replica}-"))
    return Checkpoint(location=path, durable=False)
