"""The Spark application of one replica.

Run as ``python -m arfl.replica.driver --config <file.json>``; the file is a
:class:`DriverConfig` (written by :class:`~arfl.orchestrate.supervisor.ReplicaRunner`). The driver

1. creates the SparkSession (app name ``arfl-<spec name>-r<N>``, the configured master),
2. writes ``{"app_id", "pid", ...}`` to ``app_id_file`` as soon as the session exists (fault
   injection matches executor JVMs by ``--app-id``),
3. appends every ``StreamingQueryProgress`` JSON as a line to ``progress_file``,
4. runs the replication mode's source -> :mod:`arfl.replica.query` -> Kafka sink,
5. on SIGTERM (or SIGINT) stops the query, the session, deletes a non-durable checkpoint and
   exits 0; if the query fails it exits 1 (the supervisor decides whether to restart).

A *standby* driver (``DriverConfig.standby``, ``replication.standby``) creates its session
(app name ``arfl-<spec name>-standby<N>``), warms its executors up, on real-time mode rehearses
the pipeline (:func:`_rehearse`), marks its ``app_id_file`` ``ready`` and waits for
``assignment_file``: the supervisor writes there the
:class:`DriverConfig` of a replica whose driver died, and the standby goes on from step 2 as
that replica (same checkpoint, topics, progress file) without a new Spark application.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from arfl.configs.realtime import (
    DEFAULT_SHUFFLE_PARTITIONS,
    REALTIME,
    SHUFFLE_FLUSH_CONF,
    SHUFFLE_FLUSH_MS,
)
from arfl.configs.spec import (
    ARFL_CONF_KEYS,
    ASYNC_PROGRESS_KEY,
    BUILD_AHEAD_KEY,
    REHEARSAL_KEY,
    Spec,
    option_strings,
)
from arfl.errors import ArflError
from arfl.registry import MODES
from arfl.replica import query
from arfl.replica.modes.base import (
    PEER_APPS,
    PEER_PROGRESS,
    ReplicaContext,
    ReplicationMode,
    drop_incomplete_writes,
    get_mode,
    kafka_source,
)
from arfl.replica.phase import PhaseKeeper
from arfl.replica.warmup import warm_up, warmup_topic
from arfl.run.rundir import write_json_atomic
from arfl.stack.topics import EndOffsetProbe, ensure_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_QUERY_FAILED = 1
"""The streaming query failed while running (a restart may help)."""
EXIT_BAD_CONFIG = 2
"""The config or the pipeline is invalid (a restart cannot help; the runner gives up)."""


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
            workload; empty: the rehearsal reads the input's end, see :func:`_rehearse`).
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


C1_ONLY_JIT = "-XX:TieredStopAtLevel=1"
"""JVM option of arfl's default replica JVMs (see :func:`spark_conf`)."""


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
        "spark.driver.extraJavaOptions": C1_ONLY_JIT,
        "spark.executor.extraJavaOptions": C1_ONLY_JIT,
    }
    if cfg.master.startswith(("local-cluster", "spark://")):
        conf["spark.executor.memory"] = "512m"
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


class _ProgressWriter:
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


def _make_listener(writer: _ProgressWriter) -> Any:
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


def _log(msg: str) -> None:
    print(f"[arfl-driver {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _mark_started(app_id_file: Path) -> None:
    """Add ``query_started`` (epoch s) to the app-id file: a real-time query reports its first
    progress only when its first long batch ends, so deploy waits for this instead."""
    try:
        info = json.loads(app_id_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    info["query_started"] = time.time()
    write_json_atomic(app_id_file, info)


def _warm_up(spark: Any, sink_options: dict[str, str], tasks: int) -> None:
    """:func:`arfl.replica.warmup.warm_up`, logged; a failure is logged and skipped."""
    t0 = time.time()
    try:
        w = warm_up(spark, sink_options, tasks)
    except Exception as e:  # only a speed-up: the query runs without it
        _log(f"executor warm-up skipped after {time.time() - t0:.1f}s: {type(e).__name__}: {e}")
        return
    _log(
        f"executors warmed up in {time.time() - t0:.1f}s ({w.records} records on {w.topic}: "
        f"write {w.write_s:.1f}s, read {w.read_s:.1f}s)"
    )


def _pipeline(raw: Any, spec: Spec, replica: int) -> Any:
    """Replica ``replica``'s output records from the source ``raw`` (the spec's steps)."""
    return query.build_output(query.parse_events(raw, spec), spec, replica)


def _writer(
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
    out = built if built is not None else _pipeline(raw, spec, ctx.replica)
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


REHEARSAL_TASKS_S = 3.0
"""How long a rehearsal's query runs once its tasks are up (their Kafka clients connected and
their code generated), before it is stopped (without rehearsal input)."""
REHEARSAL_MAX_S = 30.0
"""A rehearsal whose tasks are not up by then is stopped and skipped."""
REHEARSAL_RECORDS = 200
"""Input-shaped records a rehearsal processes (``DriverConfig.rehearsal_input``)."""
REHEARSAL_RESULTS_S = 10.0
"""How long a rehearsal with input waits, once its tasks are up, for its first result."""
REHEARSAL_AFTER_RESULT_S = 1.0
"""... and how long it goes on after it (the rest of its records through the same path)."""


def rehearsal_input_topic(output_topic: str) -> str:
    """The topic a standby writing ``output_topic`` rehearses its pipeline on."""
    return f"{warmup_topic(output_topic)}.in"


def _write_rehearsal_input(
    spark: Any, spec: Spec, bootstrap: str, topic: str, events: list[list[str]]
) -> int:
    """Write ``events`` (``[key, value]`` texts) to ``topic``, created like the input (as many
    partitions, so the rehearsal's query has as many tasks as the replica's; log-append
    time); returns how many."""
    ensure_topic(bootstrap, topic, spec.source.partitions, log_append_time=True)
    df = spark.createDataFrame([tuple(e) for e in events], "key string, value string")
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).save()
    return len(events)


def _rehearsal_feed(
    spark: Any, spec: Spec, cfg: DriverConfig, output_topic: str
) -> tuple[str, int, EndOffsetProbe, int] | None:
    """Write ``cfg.rehearsal_input`` to the standby's rehearsal topic and open a probe of the
    end of ``output_topic`` (the warm-up topic, one partition): ``(topic, events written,
    probe, records on output_topic before)``. None without events, or when either fails
    (logged: the rehearsal then reads the input's end)."""
    if not cfg.rehearsal_input:
        return None
    probe = None
    try:
        topic = rehearsal_input_topic(cfg.output_topic)
        fed = _write_rehearsal_input(spark, spec, cfg.bootstrap, topic, cfg.rehearsal_input)
        ensure_topic(cfg.bootstrap, output_topic, 1)  # the warm-up's, unless it failed
        probe = EndOffsetProbe(cfg.bootstrap, output_topic, 1)
        return topic, fed, probe, sum(probe().values())
    except Exception as e:  # only a speed-up: rehearse without records
        if probe is not None:
            with contextlib.suppress(Exception):
                probe.close()
        _log(f"rehearsal input not written ({type(e).__name__}: {e}): reading the input's end")
        return None


def _rehearse(
    spark: Any, spec: Spec, mode: ReplicationMode, cfg: DriverConfig, stop: threading.Event
) -> None:
    """Run the replica's query once while a real-time standby waits, so that its take-over
    finds the driver's and the executors' paths warm: measured cold (session 17), a take-over
    spent 1.25 s building the pipeline, 0.4 s starting the query, 0.9 s planning its first
    batch and 0.4 s launching its tasks, then 2.4-3.4 s until their first result.

    The same pipeline on Spark's Kafka source, the sink on the standby's warm-up topic, a
    throwaway checkpoint. Its input: the input-shaped events of ``cfg.rehearsal_input``
    (:data:`REHEARSAL_RECORDS`, the supervisor's), which the standby writes to a topic of its
    own (:func:`rehearsal_input_topic`), read from the earliest offset, so that every
    per-record step runs once. A standby waits before the load starts, so the input itself is
    empty then; measured in session 19 (docs/benchmarks.md), a take-over after a rehearsal
    without records spent 3-4 s between its tasks' first record read and their first code
    generation, its first result 4-5 s after that read; after one with records no code was
    generated on the take-over and the newcomer was healthy 1.4-3.7 s sooner (4 pairs). The
    rehearsal ends :data:`REHEARSAL_AFTER_RESULT_S` after its first result (at most
    :data:`REHEARSAL_RESULTS_S` after its tasks are up). Without events (``[source.replay]``,
    ``arfl.rehearsalInput = false``, or writing them failed) it reads the input from its end
    instead and runs :data:`REHEARSAL_TASKS_S` once its tasks are up. Then stopped, its
    checkpoint removed. ``rehearsed the pipeline`` is logged only when its tasks ran and it
    stopped cleanly; anything else is logged as skipped (it only saves time). ``stop``
    (SIGTERM) ends it early."""
    t0 = time.time()
    ckpt = Path(cfg.checkpoint_dir) / "rehearsal"
    shutil.rmtree(ckpt, ignore_errors=True)  # a killed standby's (same directory)
    ctx = ReplicaContext(
        replica=cfg.replica,
        bootstrap=cfg.bootstrap,
        output_topic=warmup_topic(cfg.output_topic),
        checkpoint_dir=ckpt,
        attempt=0,
        options=dict(cfg.mode_options),
    )
    q = None
    feed = None
    why: str | None = None
    built = tasks = 0.0
    first: float | None = None
    results = 0
    try:
        feed = _rehearsal_feed(spark, spec, cfg, ctx.output_topic)
        if feed is not None:
            raw = kafka_source(spark, spec, ctx, "earliest", topic=feed[0])
        else:
            raw = kafka_source(spark, spec, ctx, "latest")
        q = _writer(raw, spec, mode, ctx, f"arfl-{spec.name}-rehearsal", ckpt).start()
        built = time.time() - t0
        tracker = spark.sparkContext.statusTracker()
        while (
            time.time() < t0 + REHEARSAL_MAX_S
            and q.isActive
            and not stop.is_set()
            and not tracker.getActiveStageIds()
        ):
            stop.wait(0.05)
        tasks = time.time() - t0
        if stop.is_set():
            pass
        elif not q.isActive:
            why = f"its query ended: {q.exception()}"
        elif not tracker.getActiveStageIds():
            why = f"no tasks after {REHEARSAL_MAX_S:g}s"
        elif feed is None:
            stop.wait(REHEARSAL_TASKS_S)
        else:
            _, _, probe, before = feed
            deadline = time.time() + REHEARSAL_RESULTS_S
            while q.isActive and not stop.is_set() and time.time() < deadline:
                results = sum(probe().values()) - before
                if results > 0:
                    first = time.time() - t0
                    stop.wait(REHEARSAL_AFTER_RESULT_S)
                    results = sum(probe().values()) - before
                    break
                stop.wait(0.1)
        if why is None and stop.is_set():
            why = "stopped"
        if why is None and not q.isActive:
            why = f"its query ended: {q.exception()}"
        q.stop()
        if spark.streams.active:
            why = f"{len(spark.streams.active)} query still active after the stop"
    except Exception as e:  # only a speed-up: the take-over runs without it
        why = f"{type(e).__name__}: {e}"
    finally:
        if q is not None and why is not None:
            with contextlib.suppress(Exception):
                q.stop()
        if feed is not None:
            with contextlib.suppress(Exception):
                feed[2].close()
        shutil.rmtree(ckpt, ignore_errors=True)
    if why is not None:
        _log(f"rehearsal skipped after {time.time() - t0:.1f}s: {why}")
        return
    if feed is None:
        seen = "on the input's end, no records"
    elif first is None:
        seen = f"{feed[1]} input records, no result within {REHEARSAL_RESULTS_S:g}s"
    else:
        seen = f"{feed[1]} input records, first result {first:.2f}s, {results} results"
    _log(
        f"rehearsed the pipeline in {time.time() - t0:.1f}s (built and started "
        f"{built:.2f}s, tasks up {tasks:.2f}s, {seen})"
    )


def _phase_keeper(spark: Any, spec: Spec, ctx: ReplicaContext) -> PhaseKeeper | None:
    """A real-time replica with peers keeps its batch boundaries away from theirs."""
    peers = json.loads(ctx.options.get(PEER_PROGRESS, "[]"))
    if spec.replication.trigger != "realtime" or not spec.replication.stagger or not peers:
        return None
    try:
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception as e:  # only keeps the stagger: the query runs without it
        _log(f"no phase keeper: the driver JVM's pid is unknown ({type(e).__name__}: {e})")
        return None
    apps = json.loads(ctx.options.get(PEER_APPS, "[]"))
    return PhaseKeeper(
        jvm_pid,
        [Path(p) for p in peers],
        spec.replication.replicas,
        _log,
        peer_apps=[Path(p) for p in apps] if len(apps) == len(peers) else None,
    )


ASSIGNMENT_POLL_S = 0.02
"""How often a standby looks for its assignment."""


def _await_assignment(path: Path, stop: threading.Event) -> DriverConfig | None:
    """The replica config a standby was assigned (None when stopped first)."""
    while not stop.is_set():
        if path.exists():
            try:
                return DriverConfig.load(path)
            except (OSError, ValueError, TypeError) as e:
                # Written atomically: a partial file is not expected; say so and keep waiting.
                _log(f"{path}: unreadable assignment ({type(e).__name__}: {e})")
        stop.wait(ASSIGNMENT_POLL_S)
    return None


REPORTED_CONF = (SHUFFLE_FLUSH_CONF,)
"""Spark settings arfl tunes for latency, read back from the running application into its
``replicas/*.app.json`` (``conf``; absent: Spark's default)."""


def _running_conf(sc: Any) -> dict[str, str]:
    """:data:`REPORTED_CONF` as the running SparkContext has it (for the app file only: a
    failure to read it is logged, not raised)."""
    try:
        conf = sc.getConf()
        return {k: conf.get(k) for k in REPORTED_CONF if conf.contains(k)}
    except Exception as e:  # reporting only: the replica runs without it
        _log(f"cannot read the Spark conf back ({type(e).__name__}: {e})")
        return {}


def _app_info(cfg: DriverConfig, sc: Any, session_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "app_id": sc.applicationId,
        "pid": os.getpid(),
        "replica": cfg.replica,
        "attempt": cfg.attempt,
        "master": cfg.master,
        "ui": sc.uiWebUrl,
        "session_s": round(session_s, 3),
        "conf": _running_conf(sc),
        "t": time.time(),
        **extra,
    }


def _context(cfg: DriverConfig) -> ReplicaContext:
    """What the replication mode gets to know of this replica (a standby: of itself)."""
    return ReplicaContext(
        replica=cfg.replica,
        bootstrap=cfg.bootstrap,
        output_topic=cfg.output_topic,
        checkpoint_dir=Path(cfg.checkpoint_dir),
        attempt=cfg.attempt,
        options=dict(cfg.mode_options),
    )


@dataclass
class _Ahead:
    """Each replica's pipeline (source, steps, output shape; no sink, no checkpoint) that a
    standby built while it waited, by replica index, with its source's key
    (:meth:`ReplicationMode.source_key`) and the spec it was built from."""

    spec: dict[str, Any]
    pipelines: dict[int, tuple[str, Any]]

    def pipeline(self, cfg: DriverConfig, mode: ReplicationMode, spec: Spec) -> Any | None:
        """The pipeline built for ``cfg``'s replica when its spec and source are the same as
        the assignment's (a take-over resuming from a checkpoint); None otherwise (one at the
        output frontier starts from offsets of its own)."""
        have = self.pipelines.get(cfg.replica)
        if have is None or cfg.spec != self.spec:
            return None
        key, built = have
        return built if key == mode.source_key(spec, _context(cfg)) else None


def _build_ahead(
    spark: Any, spec: Spec, mode: ReplicationMode, cfg: DriverConfig, stop: threading.Event
) -> _Ahead | None:
    """Build every replica's pipeline now, from the replicas' source options (the standby's
    mode options are theirs: deploy's start offsets, the same ``kafka.*``), so that a take-over
    whose source is the same only adds the sink and starts the query (0.3-0.9 s of Python and
    plan analysis at a take-over, measured in session 30). None: switched off
    (``arfl.standbyBuildAhead = false``), or a mode whose source is not only its options."""
    base = _context(cfg)
    if not spec.spark.flag(BUILD_AHEAD_KEY, True) or mode.source_key(spec, base) is None:
        return None
    t0 = time.time()
    pipelines: dict[int, tuple[str, Any]] = {}
    for r in range(spec.replication.replicas):
        if stop.is_set():
            return None
        ctx = replace(base, replica=r)
        key = mode.source_key(spec, ctx)
        assert key is not None
        try:
            pipelines[r] = (key, _pipeline(mode.source(spark, spec, ctx), spec, r))
        except Exception as e:  # only a speed-up: the take-over builds it (and says why not)
            _log(f"pipeline not built ahead ({type(e).__name__}: {e}): built at a take-over")
            return None
    _log(
        f"built the pipeline ahead for replicas 0-{spec.replication.replicas - 1} in "
        f"{time.time() - t0:.2f}s"
    )
    return _Ahead(spec=cfg.spec, pipelines=pipelines)


def _standby(
    cfg: DriverConfig, spark: Any, stop: threading.Event, session_s: float
) -> tuple[DriverConfig, _Ahead | None] | None:
    """Warm a standby up, build the replicas' pipelines ahead, mark it ready, and wait for its
    assignment (with what it built)."""
    spec = cfg.resolved_spec()
    mode = get_mode(spec.replication.mode)
    ctx = _context(cfg)
    sc = spark.sparkContext
    write_json_atomic(Path(cfg.app_id_file), _app_info(cfg, sc, session_s, standby=True))
    if stop.is_set():  # the run stopped while the session started: no warm-up for nothing
        return None
    if spec.replication.trigger == "realtime":
        _warm_up(spark, mode.sink_options(ctx, spec), sc.defaultParallelism)
        if spec.spark.flag(REHEARSAL_KEY, True) and not stop.is_set():
            _rehearse(spark, spec, mode, cfg, stop)
        if stop.is_set():
            return None
    ahead = _build_ahead(spark, spec, mode, cfg, stop)
    if stop.is_set():
        return None
    write_json_atomic(
        Path(cfg.app_id_file), _app_info(cfg, sc, session_s, standby=True, ready=time.time())
    )
    _log(f"standby {cfg.replica} ready: waiting for a replica to take over")
    assigned = _await_assignment(Path(cfg.assignment_file), stop)
    if assigned is not None:
        _log(
            f"standby {cfg.replica} takes over replica {assigned.replica} "
            f"(attempt {assigned.attempt})"
        )
        return assigned, ahead
    return None


def run(cfg: DriverConfig) -> int:
    """Run the replica until SIGTERM/SIGINT or query failure; returns the exit code.

    A standby (``cfg.standby``) first waits for its assignment and then runs that replica;
    stopped before one came, it exits 0.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        _log(f"signal {signum}: stopping")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    spec = cfg.resolved_spec()
    t0 = time.time()
    builder = SparkSession.builder
    for k, v in spark_conf(cfg, spec).items():
        builder = builder.config(k, v)
    spark: SparkSession = builder.getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    session_s = time.time() - t0
    promoted = False
    ahead: _Ahead | None = None
    if cfg.standby:
        _log(f"session {sc.applicationId} up in {session_s:.1f}s (master {cfg.master}, standby)")
        took = _standby(cfg, spark, stop, session_s)
        if took is None:
            spark.stop()
            _log("exit 0 (standby, never assigned)")
            return 0
        (cfg, ahead), promoted = took, True
        spec = cfg.resolved_spec()
    t_assigned = time.time()
    mode = get_mode(spec.replication.mode)
    ctx = _context(cfg)
    write_json_atomic(
        Path(cfg.app_id_file),
        _app_info(cfg, sc, session_s, **({"standby": True} if promoted else {})),
    )
    if not promoted:
        _log(f"session {sc.applicationId} up in {session_s:.1f}s (master {cfg.master})")
    progress_writer = _ProgressWriter(Path(cfg.progress_file))
    spark.streams.addListener(_make_listener(progress_writer))

    ckpt = mode.checkpoint(ctx)
    for f in drop_incomplete_writes(ckpt.location):
        _log(f"deleted an unfinished checkpoint write of a killed driver: {f}")
    rc = 0
    q = None
    try:
        try:
            trigger = mode.trigger(spec)
            built = ahead.pipeline(cfg, mode, spec) if ahead is not None else None
            writer = _writer(
                None if built is not None else mode.source(spark, spec, ctx),
                spec,
                mode,
                ctx,
                f"arfl-{spec.name}-r{cfg.replica}",
                ckpt.location,
                built=built,
            )
            built_s = time.time() - t_assigned
        except (ArflError, PySparkException) as e:
            # The pipeline cannot be built (bad expression, transform, column): restarting
            # would fail the same way, so say so with a distinct exit code.
            _log(f"pipeline cannot be built: {type(e).__name__}: {e}")
            rc = EXIT_BAD_CONFIG
            return rc
        if spec.replication.trigger == "realtime" and cfg.attempt == 0 and not promoted:
            # Not on a restart: there the warm-up (12-13 s measured) cost more than the one
            # cold batch it saves (one interval), and the replica is late already. A promoted
            # standby warmed up while it waited.
            _warm_up(spark, mode.sink_options(ctx, spec), sc.defaultParallelism)
        delay = mode.start_delay(spec, ctx)
        if delay > 0:
            _log(f"waiting {delay:.1f}s before starting the query (staggered batch boundaries)")
            stop.wait(delay)
            if stop.is_set():
                return rc
        keeper = _phase_keeper(spark, spec, ctx)
        if keeper is not None:
            progress_writer.keeper = keeper
            keeper.start()
        t_start = time.time()
        q = writer.start()
        _mark_started(Path(cfg.app_id_file))
        _log(f"query started (mode {mode.name}, checkpoint {ckpt.location}, trigger {trigger})")
        if promoted:
            # The take-over's own cost, apart from Spark's first batch (issue 11's exposure).
            _log(
                f"take-over: pipeline {'built ahead, sink added' if built is not None else 'built'}"
                f" in {built_s:.2f}s, query start "
                f"{time.time() - t_start:.2f}s, {time.time() - t_assigned:.2f}s since assigned"
            )
        while not stop.is_set():
            if q.awaitTermination(1):
                exc = q.exception()
                _log(f"query terminated: {exc}")
                rc = EXIT_QUERY_FAILED
                break
    except Exception as e:  # the query failed: report and let the supervisor decide
        _log(f"query failed: {type(e).__name__}: {e}")
        rc = EXIT_QUERY_FAILED
    finally:
        if progress_writer.keeper is not None:
            progress_writer.keeper.stop()  # first: a hold under way has the JVM frozen
        if q is not None and q.isActive:
            try:
                q.stop()
            except Exception as e:
                _log(f"stopping the query: {e}")
        spark.stop()
        if not ckpt.durable:
            shutil.rmtree(ckpt.location, ignore_errors=True)
    _log(f"exit {rc}")
    return rc


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m arfl.replica.driver``."""
    parser = argparse.ArgumentParser(prog="arfl.replica.driver")
    parser.add_argument("--config", required=True, type=Path, help="DriverConfig JSON file")
    args = parser.parse_args(argv)
    try:
        cfg = DriverConfig.load(args.config)
        cfg.resolved_spec()
    except (OSError, ValueError, TypeError) as e:
        _log(f"{args.config}: bad driver config: {e}")
        return EXIT_BAD_CONFIG
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
