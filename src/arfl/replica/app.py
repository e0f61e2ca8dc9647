"""The pieces of a replica's Spark application that a replica and a standby share: what a driver
is told (:class:`DriverConfig`), the Spark configuration it runs with, its progress listener and
log, the pipeline and the query writer, the phase keeper and the app file."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arfl.configs.kafka_options import option_strings
from arfl.configs.realtime import (
    DEFAULT_SHUFFLE_PARTITIONS,
    REALTIME,
    SHUFFLE_FLUSH_CONF,
    SHUFFLE_FLUSH_MS,
)
from arfl.configs.spec import (
    ARFL_CONF_KEYS,
    ASYNC_PROGRESS_KEY,
    Spec,
)
from arfl.registry import MODES
from arfl.replica import query
from arfl.replica.modes.base import (
    PEER_APPS,
    PEER_PROGRESS,
    ReplicaContext,
    ReplicationMode,
)
from arfl.replica.phase import PhaseKeeper
from arfl.replica.sparkenv import (
    C1_ONLY_JIT,
    DRIVER_JAVA_OPTIONS,
    EXECUTOR_DEFAULT_JAVA_OPTIONS,
    EXECUTOR_JAVA_OPTIONS,
    SCRATCH_ENV,
)
from arfl.replica.warmup import warm_up
from arfl.run.rundir import write_json_atomic


@dataclass(frozen=True)
class DriverConfig:
    """Everything one replica's driver needs (JSON-serialisable).

    Attributes:
        spec: the resolved spec, ``Spec.model_dump(mode="json", by_alias=True)``.
        replica: replica index.
        bootstrap: Kafka bootstrap servers.
        output_topic: ``records.replica_topic(spec.sink.topic, replica)``.
        checkpoint_dir: durable checkpoint location (used by modes that keep one).
        progress_file: JSONL file receiving one progress event per batch.
        app_id_file: JSON file receiving the Spark application id.
        master: Spark master URL.
        conf: extra Spark configuration (applied after arfl's defaults).
        jars: jar files for ``spark.jars`` (Kafka connector).
        attempt: 0 on first start, n on the n-th restart.
        mode_options: mode-specific settings (see ``ReplicaContext.options``).
        standby: a standby driver (``replica`` is then the standby's index, ``output_topic``
            the base of its warm-up topic); it runs a replica once ``assignment_file`` holds
            that replica's config.
        assignment_file: where a standby's assignment appears (JSON of a ``DriverConfig``).
        rehearsal_input: ``[key, value]`` texts of the input-shaped events a real-time
            standby rehearses its pipeline on (written by the supervisor, which knows the
            workload; empty: the rehearsal reads the input's end, see :func:`rehearse`).
        control_dir: where the driver answers requests through its Spark context
            (:mod:`arfl.replica.control`; empty: none, a standby before its assignment).
    """

    spec: dict[str, Any]
    replica: int
    bootstrap: str
    output_topic: str
    checkpoint_dir: str
    progress_file: str
    app_id_file: str
    master: str
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    attempt: int = 0
    mode_options: dict[str, str] = field(default_factory=dict)
    standby: bool = False
    assignment_file: str = ""
    rehearsal_input: list[list[str]] = field(default_factory=list)
    control_dir: str = ""

    def dump(self, path: Path) -> None:
        """Write this config as JSON (atomically)."""
        write_json_atomic(path, asdict(self))

    @classmethod
    def load(cls, path: Path) -> DriverConfig:
        """Read a config written by :meth:`dump`."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def resolved_spec(self) -> Spec:
        """The spec, re-validated."""
        return Spec.model_validate(self.spec)


def async_progress(spec: Spec) -> bool:
    """Whether the replica's query tracks progress asynchronously.

    Spark allows it only for stateless micro-batch queries writing to Kafka: a spec whose steps
    are all filters and selects (a window is stateful; a transform may be). Where allowed,
    ``[spark.conf] "arfl.asyncProgressTracking"`` decides, by default on where the mode says
    so (:attr:`arfl.registry.ModeInfo.async_progress`: every mode but ``passive``, whose
    restart from the checkpoint is the recovery under study and would replay up to a second
    more). It takes the offset-log write and the commit (~170-190 ms of every 0.4-0.7 s
    micro-batch here) off the critical path (docs/benchmarks.md "Shorter agreed batches").
    """
    eligible = spec.replication.trigger == "micro-batch" and spec.stateless
    if not eligible:
        return False
    default = MODES.info(spec.replication.mode).async_progress
    return spec.spark.flag(ASYNC_PROGRESS_KEY, default)


def writer_options(spec: Spec) -> dict[str, str]:
    """Options of the query's ``DataStreamWriter`` that do not belong to the sink."""
    if not async_progress(spec):
        return {}
    return {"asyncProgressTrackingEnabled": "true"}


def driver_address(master: str) -> str:
    """Where the driver listens and tells executors to find it (client mode).

    Loopback for local masters and a ``spark://`` master on this host. For a remote master: this
    host's address on the route towards it (found with an unconnected UDP socket's ``connect``,
    which sends nothing), so that executors on the cluster's machines (or containers) can
    reach the driver. ``[spark.conf] spark.driver.host`` still wins.
    """
    m = re.match(r"^spark://([^:/,]+):(\d+)", master)
    if m is None:
        return "127.0.0.1"
    host, port = m.group(1), int(m.group(2))
    try:
        addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
    except OSError:
        return "127.0.0.1"
    if str(addr).startswith("127."):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((addr, port))
        except OSError:
            return "127.0.0.1"
        return str(probe.getsockname()[0])


def spark_conf(cfg: DriverConfig, spec: Spec) -> dict[str, str]:
    """The Spark configuration of a replica: arfl's defaults, the spec's, then ``cfg.conf``."""
    conf: dict[str, str] = {
        "spark.app.name": (
            f"arfl-{spec.name}-standby{cfg.replica}"
            if cfg.standby
            else f"arfl-{spec.name}-r{cfg.replica}"
        ),
        "spark.master": cfg.master,
        "spark.driver.memory": spec.spark.driver_memory,
        "spark.driver.host": driver_address(cfg.master),
        "spark.driver.bindAddress": driver_address(cfg.master),
        # The default 200 shuffle partitions make every stateful batch slow on 2 cores.
        "spark.sql.shuffle.partitions": str(DEFAULT_SHUFFLE_PARTITIONS),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopTimeout": "10s",
        # Spark gives a Python worker a fixed 10 s to connect back over TCP; on a loaded
        # machine that fails ("Python worker failed to connect back"). Unix sockets do not.
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.ui.enabled": "false",
        # C1-only JIT: on a small host C2's compile threads starve everything for the first
        # minutes (bench/startup: session up and first batches ~2x faster, p50 4x lower, CPU
        # -40 % on 2 cores). A spec that sets these keys in [spark.conf] gets its own value.
        DRIVER_JAVA_OPTIONS: C1_ONLY_JIT,
        EXECUTOR_JAVA_OPTIONS: C1_ONLY_JIT,
    }
    if cfg.master.startswith(("local-cluster", "spark://")):
        conf["spark.executor.memory"] = "512m"
    scratch = os.environ.get(SCRATCH_ENV)
    if scratch and cfg.master.startswith("local-cluster"):
        # Executors' temp files (Kafka's client extracts its lz4 library there) with the
        # driver's, removed with the SPARK_HOME: a killed JVM never deletes its own. Not on a
        # spark:// cluster: the directory is on the driver's host.
        conf[EXECUTOR_DEFAULT_JAVA_OPTIONS] = f"-Djava.io.tmpdir={scratch}"
    if spec.replication.trigger == REALTIME:
        # A real-time aggregation's shuffle sends a partly filled buffer after this wait (Spark:
        # 50 ms, half of it added to a windowed replica's median latency).
        conf[SHUFFLE_FLUSH_CONF] = str(SHUFFLE_FLUSH_MS)
    if cfg.jars:
        conf["spark.jars"] = ",".join(cfg.jars)
    conf.update(
        option_strings({k: v for k, v in spec.spark.conf.items() if k not in ARFL_CONF_KEYS})
    )
    conf.update(cfg.conf)
    return conf


class ProgressWriter:
    """Appends progress JSON lines; the listener calls it from py4j's callback thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.keeper: PhaseKeeper | None = None
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, progress_json: str) -> None:
        progress = json.loads(progress_json)
        line = json.dumps(progress, separators=(",", ":"))
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        if self.keeper is not None:
            self.keeper.on_progress(progress)


def progress_listener(writer: ProgressWriter) -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            writer.append(event.progress.json)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return ProgressListener()


def log(msg: str) -> None:
    print(f"[arfl-driver {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mark_started(app_id_file: Path) -> None:
    """Add ``query_started`` (epoch s) to the app-id file: a real-time query reports its first
    progress only when its first long batch ends, so deploy waits for this instead."""
    try:
        info = json.loads(app_id_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    info["query_started"] = time.time()
    write_json_atomic(app_id_file, info)


def warm_up_logged(spark: Any, sink_options: dict[str, str], tasks: int) -> None:
    """:func:`arfl.replica.warmup.warm_up`, logged; a failure is logged and skipped."""
    t0 = time.time()
    try:
        w = warm_up(spark, sink_options, tasks)
    except Exception as e:  # only a speed-up: the query runs without it
        log(f"executor warm-up skipped after {time.time() - t0:.1f}s: {type(e).__name__}: {e}")
        return
    log(
        f"executors warmed up in {time.time() - t0:.1f}s ({w.records} records on {w.topic}: "
        f"write {w.write_s:.1f}s, read {w.read_s:.1f}s)"
    )


def pipeline(raw: Any, spec: Spec, replica: int) -> Any:
    """Replica ``replica``'s output records from the source ``raw`` (the spec's steps)."""
    return query.build_output(query.parse_events(raw, spec, keep_markers=True), spec, replica)


def query_writer(
    raw: Any,
    spec: Spec,
    mode: ReplicationMode,
    ctx: ReplicaContext,
    name: str,
    checkpoint: Path,
    *,
    built: Any = None,
) -> Any:
    """The replica's query on the source ``raw`` (or on the pipeline ``built`` ahead from an
    equal source), ready to start: the pipeline and the Kafka sink on ``ctx.output_topic``."""
    out = built if built is not None else pipeline(raw, spec, ctx.replica)
    writer = (
        out.writeStream.format("kafka")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .outputMode(query.output_mode(spec))
        .trigger(**mode.trigger(spec))
    )
    for k, v in (mode.sink_options(ctx, spec) | writer_options(spec)).items():
        writer = writer.option(k, v)
    return writer


def phase_keeper(spark: Any, spec: Spec, ctx: ReplicaContext) -> PhaseKeeper | None:
    """A real-time replica with peers keeps its batch boundaries away from theirs."""
    peers = json.loads(ctx.options.get(PEER_PROGRESS, "[]"))
    if spec.replication.trigger != "realtime" or not spec.replication.stagger or not peers:
        return None
    try:
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception as e:  # only keeps the stagger: the query runs without it
        log(f"no phase keeper: the driver JVM's pid is unknown ({type(e).__name__}: {e})")
        return None
    apps = json.loads(ctx.options.get(PEER_APPS, "[]"))
    return PhaseKeeper(
        jvm_pid,
        [Path(p) for p in peers],
        spec.replication.replicas,
        log,
        peer_apps=[Path(p) for p in apps] if len(apps) == len(peers) else None,
    )


REPORTED_CONF = (SHUFFLE_FLUSH_CONF,)
"""Spark settings arfl tunes for latency, read back from the running application into its
``replicas/*.app.json`` (``conf``; absent: Spark's default)."""


def running_conf(sc: Any) -> dict[str, str]:
    """:data:`REPORTED_CONF` as the running SparkContext has it (for the app file only: a
    failure to read it is logged, not raised)."""
    try:
        conf = sc.getConf()
        return {k: conf.get(k) for k in REPORTED_CONF if conf.contains(k)}
    except Exception as e:  # reporting only: the replica runs without it
        log(f"cannot read the Spark conf back ({type(e).__name__}: {e})")
        return {}


def app_info(cfg: DriverConfig, sc: Any, session_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "app_id": sc.applicationId,
        "pid": os.getpid(),
        "replica": cfg.replica,
        "attempt": cfg.attempt,
        "master": cfg.master,
        "ui": sc.uiWebUrl,
        "session_s": round(session_s, 3),
        "conf": running_conf(sc),
        "t": time.time(),
        **extra,
    }


def replica_context(cfg: DriverConfig) -> ReplicaContext:
    """What the replication mode gets to know of this replica (a standby: of itself)."""
    return ReplicaContext(
        replica=cfg.replica,
        bootstrap=cfg.bootstrap,
        output_topic=cfg.output_topic,
        checkpoint_dir=Path(cfg.checkpoint_dir),
        attempt=cfg.attempt,
        options=dict(cfg.mode_options),
    )
