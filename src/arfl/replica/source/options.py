"""The source's options: what ``spark.readStream.format("arfl-kafka").option(...)`` takes.

Spark hands options to the data source as strings; :meth:`SourceOptions.parse` turns them into
types once, with errors that name the option. :meth:`SourceOptions.to_options` is the inverse,
used by the replication modes to configure a replica's reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from arfl.configs.spec import DEFAULT_BATCH_INTERVAL_S, DEFAULT_HEARTBEAT_INTERVAL_S
from arfl.errors import DeployError
from arfl.registry import MODES
from arfl.replica.source.late import LateRule
from arfl.run.names import SOURCE_NAME

__all__ = [
    "DEFAULT_BATCH_INTERVAL_S",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "DEFAULT_SESSION_TIMEOUT_S",
    "SourceOptions",
    "passthrough",
]

DEFAULT_SESSION_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class SourceOptions:
    """Typed options of one reader.

    Attributes:
        bootstrap: Kafka ``host:port``.
        topic: input topic.
        mode: a replication mode (:data:`arfl.registry.MODES`); it supplies the boundary
            policy. ``none`` (the default) takes what is available: no agreement.
        replica: this replica's index (leader identifier; written into heartbeats).
        pipeline: pipeline name (names the decision topic and the election path).
        starting_offsets: ``earliest`` or JSON ``{"partition": offset}``.
        max_records_per_batch: cap on log positions per batch (leader decisions, mode none).
        heartbeat_interval_s: epoch length (active-leaderless).
        max_epochs_per_batch: active-leaderless: 1 = one aligned group of epochs per batch
            (identical batches on every replica, the default); 0 = up to the newest final
            aligned boundary (catches up after a stall; boundaries still agreed epoch cuts, but
            replicas group them differently: the modes use it where the grouping cannot change
            a result, :attr:`arfl.configs.spec.Spec.merges_agreed_batches`);
            n = at most n groups.
        batch_epochs: active-leaderless: ``G``, epochs per aligned group (batches end only at
            epoch boundaries ``j`` with ``j % G == 0``).
        heartbeat: run this replica's heartbeat ticker (active-leaderless).
        heartbeat_skip_active: write heartbeats only into partitions that got no record since
            the epoch boundary (the time-index optimisation).
        heartbeat_grace_s: how long after a boundary the ticker checks (times ``replica + 1``,
            so replicas stagger and usually only one writes a heartbeat).
        zookeeper: ZooKeeper ``host:port`` (active-leader).
        session_timeout_s: ZooKeeper session timeout (bounds leader failover).
        decision_topic: the one-partition decision log (active-leader); must be unique per run.
        election_path: the run's ZooKeeper election path (active-leader,
            :func:`arfl.run.names.leader_path`).
        batch_interval_s: active-leader: the leader decides one batch per interval (on its
            own clock, apart from its Spark query).
        read_tasks: at most this many read tasks per batch, Kafka partitions dealt among them
            (0: one task per partition); the modes set it to the executors' task slots.
        follower_wait_s: how long a follower waits for the next decision per trigger.
        merge_decisions: active-leader: a replica that fell behind runs the decided batches
            that are ready and contiguous as one Spark batch, within ``max_records_per_batch``
            (only where the grouping cannot change a result,
            :attr:`arfl.configs.spec.Spec.merges_agreed_batches`).
        event_time_field: windowed pipelines in the agreed-batch modes: the input's event-time
            field; with ``watermark_delay_ms`` >= 0 the reader applies the agreed watermark
            (:mod:`arfl.replica.source.late`). Empty: off (the ``late_before`` column is null).
        watermark_delay_ms: the window's watermark delay (with ``event_time_field``).
        reader: who reads the batches on the executors: ``python`` (this Python data source,
            a Python worker per task) or ``jvm`` (arfl's JVM reader, ``arfl.source``, with the
            boundaries still decided by this module's policies in the driver process).
    """

    bootstrap: str
    topic: str
    mode: str = "none"
    replica: int = 0
    pipeline: str = "arfl"
    starting_offsets: str = "earliest"
    max_records_per_batch: int = 100_000
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    max_epochs_per_batch: int = 1
    batch_epochs: int = 1
    heartbeat: bool = True
    heartbeat_skip_active: bool = True
    heartbeat_grace_s: float = 0.01
    zookeeper: str = ""
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    decision_topic: str = ""
    election_path: str = ""
    batch_interval_s: float = DEFAULT_BATCH_INTERVAL_S
    read_tasks: int = 0
    follower_wait_s: float = 0.05
    merge_decisions: bool = False
    event_time_field: str = ""
    watermark_delay_ms: int = -1
    reader: str = "python"

    @property
    def late_rule(self) -> LateRule | None:
        """The agreed watermark of this reader, or None when it is off."""
        if not self.event_time_field or self.watermark_delay_ms < 0:
            return None
        return LateRule(self.event_time_field, self.watermark_delay_ms)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's string options (keys are case-insensitive in Spark; lower-cased here).

        Raises:
            DeployError: a required option is missing, unknown, or has the wrong type.
        """
        given = {k.lower(): v for k, v in raw.items()}
        given.pop("path", None)
        known = {f.name: f for f in fields(cls)}
        problems: list[str] = []
        values: dict[str, object] = {}
        for key, text in given.items():
            f = known.get(key)
            if f is None:
                problems.append(f"unknown option {key!r} (known: {', '.join(sorted(known))})")
                continue
            try:
                values[key] = _convert(str(f.type), str(text))
            except ValueError:
                problems.append(f"option {key}={text!r}: expected {f.type}")
        for req in ("bootstrap", "topic"):
            if req not in values:
                problems.append(f"option {req!r} is required")
        mode = values.get("mode", "none")
        if mode not in MODES:
            problems.append(f"option mode={mode!r}: unknown (known: {', '.join(MODES.names())})")
        if values.get("reader", "python") not in ("python", "jvm"):
            problems.append(f"option reader={values['reader']!r}: expected python or jvm")
        if isinstance(mode, str) and mode in MODES and MODES.info(mode).leader:
            for req in ("zookeeper", "decision_topic"):
                if not values.get(req):
                    problems.append(f"mode {mode!r} needs option {req!r}")
        if problems:
            raise DeployError(f"{SOURCE_NAME} source: " + "; ".join(problems))
        return cls(**values)  # type: ignore[arg-type]

    def to_options(self) -> dict[str, str]:
        """Spark string options that :meth:`parse` turns back into this object."""
        out: dict[str, str] = {}
        for k, v in asdict(self).items():
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


def _convert(type_name: str, text: str) -> object:
    if type_name == "int":
        return int(text)
    if type_name == "float":
        return float(text)
    if type_name == "bool":
        low = text.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ValueError(text)
    return text


def passthrough(options: Mapping[str, str]) -> dict[str, str]:
    """Source options given as ``source.<name>`` in a replica's mode options, prefix removed."""
    return {k.removeprefix("source."): v for k, v in options.items() if k.startswith("source.")}
