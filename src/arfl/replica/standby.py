"""A standby driver (``DriverConfig.standby``, ``replication.standby``): it creates its session
(app name ``arfl-<spec name>-standby<N>``), warms its executors up, on real-time mode rehearses
the pipeline (:func:`rehearse`), builds each replica's pipeline ahead (:func:`build_ahead`),
marks its ``app_id_file`` ``ready`` and waits for ``assignment_file``: the supervisor writes
there the :class:`~arfl.replica.app.DriverConfig` of a replica whose driver died, and
:func:`arfl.replica.driver.run` goes on as that replica without a new Spark application."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from arfl.configs.spec import (
    BUILD_AHEAD_KEY,
    REHEARSAL_KEY,
    Spec,
)
from arfl.replica.app import (
    DriverConfig,
    app_info,
    log,
    pipeline,
    query_writer,
    replica_context,
    warm_up_logged,
)
from arfl.replica.modes.base import (
    STARTING_OFFSETS,
    ReplicaContext,
    ReplicationMode,
    get_mode,
    kafka_source,
)
from arfl.replica.warmup import warmup_topic
from arfl.run.rundir import write_json_atomic
from arfl.stack.clients import producer_config
from arfl.stack.topics import EndOffsetProbe, ensure_topic

REHEARSAL_TASKS_S = 3.0
"""How long a rehearsal's query runs once its tasks are up (their Kafka clients connected and
their code generated), before it is stopped (without rehearsal input)."""
REHEARSAL_MAX_S = 30.0
"""A rehearsal whose tasks are not up by then is stopped and skipped."""
REHEARSAL_BATCH_S = 60.0
"""The shortest batch interval of a rehearsal's real-time query (it is stopped long before)."""
REHEARSAL_RECORDS = 200
"""Input-shaped records a rehearsal processes (``DriverConfig.rehearsal_input``)."""
REHEARSAL_RESULTS_S = 10.0
"""How long a rehearsal with input waits, once its tasks are up, for its first result."""
REHEARSAL_AFTER_RESULT_S = 1.0
"""... and how long it goes on after it (the rest of its records through the same path)."""


def rehearsal_input_topic(output_topic: str) -> str:
    """The topic a standby writing ``output_topic`` rehearses its pipeline on."""
    return f"{warmup_topic(output_topic)}.in"


def _write_rehearsal_input(spec: Spec, bootstrap: str, topic: str, events: list[list[str]]) -> int:
    """Write ``events`` (``[key, value]`` texts) to ``topic``, created like the input (as many
    partitions, so the rehearsal's query has as many tasks as the replica's; log-append
    time); returns how many.

    Written by the driver's own Kafka client with the injector's settings (keys partitioned as
    the input's are): a Spark job over a Python list would boot a Python worker per task, which
    a real-time query never uses (docs/benchmarks.md "Executor warm-up before the first
    real-time batch")."""
    ensure_topic(bootstrap, topic, spec.source.partitions, log_append_time=True)
    producer = Producer(producer_config(bootstrap))
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for key, value in events:
        producer.produce(topic, value=value.encode(), key=key.encode(), on_delivery=delivered)
    left = producer.flush(10.0)
    if left or failed:
        raise RuntimeError(f"{left} undelivered, {len(failed)} failed ({failed[:1]})")
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
        fed = _write_rehearsal_input(spec, cfg.bootstrap, topic, cfg.rehearsal_input)
        ensure_topic(cfg.bootstrap, output_topic, 1)  # the warm-up's, unless it failed
        probe = EndOffsetProbe(cfg.bootstrap, output_topic, 1)
        return topic, fed, probe, sum(probe().values())
    except Exception as e:  # only a speed-up: rehearse without records
        if probe is not None:
            with contextlib.suppress(Exception):
                probe.close()
        log(f"rehearsal input not written ({type(e).__name__}: {e}): reading the input's end")
        return None


def rehearse(
    spark: Any, spec: Spec, mode: ReplicationMode, cfg: DriverConfig, stop: threading.Event
) -> None:
    """Run the replica's query once while a real-time standby waits, so that its take-over
    finds the driver's and the executors' paths warm: measured cold (docs/benchmarks.md), a
    take-over spent 1.25 s building the pipeline, 0.4 s starting the query, 0.9 s planning its
    first batch and 0.4 s launching its tasks, then 2.4-3.4 s until their first result.

    The same pipeline on Spark's Kafka source, the sink on the standby's warm-up topic, a
    throwaway checkpoint. Its input: the input-shaped events of ``cfg.rehearsal_input``
    (:data:`REHEARSAL_RECORDS`, the supervisor's), which the standby writes to a topic of its
    own (:func:`rehearsal_input_topic`), read from the earliest offset, so that every
    per-record step runs once. A standby waits before the load starts, so the input itself is
    empty then; in docs/benchmarks.md, a take-over after a rehearsal
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
        # A long batch: the tasks of a cold driver's first batch start seconds after it was
        # planned, and past a short interval's end they read nothing (0 records in 0.37 s at
        # 5 s, a windowed pipeline's rehearsal then gave 2 results of 200); it is stopped here.
        long = spec.replication.model_copy(
            update={"trigger_interval": max(spec.replication.trigger_interval, REHEARSAL_BATCH_S)}
        )
        q = query_writer(
            raw,
            spec.model_copy(update={"replication": long}),
            mode,
            ctx,
            f"arfl-{spec.name}-rehearsal",
            ckpt,
        ).start()
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
        log(f"rehearsal skipped after {time.time() - t0:.1f}s: {why}")
        return
    if feed is None:
        seen = "on the input's end, no records"
    elif first is None:
        seen = f"{feed[1]} input records, no result within {REHEARSAL_RESULTS_S:g}s"
    else:
        seen = f"{feed[1]} input records, first result {first:.2f}s, {results} results"
    log(
        f"rehearsed the pipeline in {time.time() - t0:.1f}s (built and started "
        f"{built:.2f}s, tasks up {tasks:.2f}s, {seen})"
    )


ASSIGNMENT_POLL_S = 0.02
"""How often a standby looks for its assignment."""


def await_assignment(path: Path, stop: threading.Event) -> DriverConfig | None:
    """The replica config a standby was assigned (None when stopped first)."""
    while not stop.is_set():
        if path.exists():
            try:
                return DriverConfig.load(path)
            except (OSError, ValueError, TypeError) as e:
                # Written atomically: a partial file is not expected; say so and keep waiting.
                log(f"{path}: unreadable assignment ({type(e).__name__}: {e})")
        stop.wait(ASSIGNMENT_POLL_S)
    return None


@dataclass
class Ahead:
    """Each replica's pipeline (source, steps, output shape; no sink, no checkpoint) that a
    standby built while it waited, by replica index, with its source's key
    (:meth:`ReplicationMode.source_key`), the spec it was built from and the start offsets its
    source was given (``STARTING_OFFSETS``, None: none)."""

    spec: dict[str, Any]
    pipelines: dict[int, tuple[str, Any]]
    offsets: str | None = None

    def pipeline(self, cfg: DriverConfig, mode: ReplicationMode, spec: Spec) -> Any | None:
        """The pipeline built for ``cfg``'s replica when its spec and source are the same as
        the assignment's: a take-over resuming from a checkpoint, or one at the output frontier
        whose source differs only in its start offsets, which are then written where Spark's
        Kafka source looks for a new query's first offsets (:func:`seed_initial_offsets`);
        None otherwise (the take-over builds it)."""
        have = self.pipelines.get(cfg.replica)
        if have is None or cfg.spec != self.spec:
            return None
        key, built = have
        ctx = replica_context(cfg)
        if key == mode.source_key(spec, ctx):
            return built
        wanted = ctx.options.get(STARTING_OFFSETS)
        if wanted is None or self.offsets is None:
            return None
        as_built = replace(ctx, options={**ctx.options, STARTING_OFFSETS: self.offsets})
        if key != mode.source_key(spec, as_built) or not _same_partitions(wanted, self.offsets):
            return None
        location = Path(mode.checkpoint(ctx).location)
        return built if seed_initial_offsets(location, wanted) else None


KAFKA_SOURCE_LOG = Path("sources") / "0"
"""Where Spark's Kafka source (``KafkaMicroBatchStream``, micro-batch and real-time) keeps a
query's first offsets: batch 0 of an ``HDFSMetadataLog`` under the checkpoint. A new query reads
them from there if present and resolves ``startingOffsets`` only otherwise."""
KAFKA_SOURCE_LOG_HEADER = b"\x00v1\n"
"""``KafkaSourceInitialOffsetWriter``'s framing: a zero byte, its version line, then the
offsets' JSON (``{"topic": {"0": offset, ...}}``)."""


def seed_initial_offsets(checkpoint: Path, starting_offsets: str) -> bool:
    """Make a new query on ``checkpoint`` (a fresh one: no offsets log, no source log) start
    its Kafka source at ``starting_offsets`` whatever the source's own option says, so that a
    pipeline built ahead from other offsets serves a take-over at the output frontier. Only
    explicit offsets (every one >= 0: ``earliest``/``latest`` markers are resolved by Spark);
    False, with nothing written, when they are not or the checkpoint is not fresh."""
    try:
        offsets = json.loads(starting_offsets)
    except ValueError:
        return False
    explicit = isinstance(offsets, dict) and all(
        isinstance(parts, dict)
        and parts
        and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in parts.values())
        for parts in offsets.values()
    )
    log_file = checkpoint / KAFKA_SOURCE_LOG / "0"
    if not explicit or not offsets or log_file.exists() or any((checkpoint / "offsets").glob("*")):
        return False
    tmp = log_file.with_name(".0.arfl.tmp")
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(KAFKA_SOURCE_LOG_HEADER + json.dumps(offsets, sort_keys=True).encode())
        tmp.replace(log_file)
    except OSError as e:  # only a speed-up: the take-over builds the pipeline instead
        with contextlib.suppress(OSError):
            tmp.unlink()
        log(f"take-over: the query's first offsets not written ({e}): pipeline built anew")
        return False
    log(f"take-over: the query's first offsets written to {log_file}: {starting_offsets}")
    return True


def _same_partitions(a: str, b: str) -> bool:
    """Two ``startingOffsets`` JSONs name the same topics and partitions (a seeded log without
    one of them would have Spark read that partition from its start)."""
    try:
        x, y = json.loads(a), json.loads(b)
    except ValueError:
        return False
    if not isinstance(x, dict) or not isinstance(y, dict) or x.keys() != y.keys():
        return False
    return all(
        isinstance(x[t], dict) and isinstance(y[t], dict) and x[t].keys() == y[t].keys() for t in x
    )


def build_ahead(
    spark: Any, spec: Spec, mode: ReplicationMode, cfg: DriverConfig, stop: threading.Event
) -> Ahead | None:
    """Build every replica's pipeline now, from the replicas' source options (the standby's
    mode options are theirs: deploy's start offsets, the same ``kafka.*``), so that a take-over
    whose source is the same only adds the sink and starts the query (0.3-0.9 s of Python and
    plan analysis at a take-over, docs/benchmarks.md). None: switched off
    (``arfl.standbyBuildAhead = false``), or a mode whose source is not only its options."""
    base = replica_context(cfg)
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
            pipelines[r] = (key, pipeline(mode.source(spark, spec, ctx), spec, r))
        except Exception as e:  # only a speed-up: the take-over builds it (and says why not)
            log(f"pipeline not built ahead ({type(e).__name__}: {e}): built at a take-over")
            return None
    log(
        f"built the pipeline ahead for replicas 0-{spec.replication.replicas - 1} in "
        f"{time.time() - t0:.2f}s"
    )
    return Ahead(spec=cfg.spec, pipelines=pipelines, offsets=base.options.get(STARTING_OFFSETS))


def run_standby(
    cfg: DriverConfig, spark: Any, stop: threading.Event, session_s: float
) -> tuple[DriverConfig, Ahead | None] | None:
    """Warm a standby up, build the replicas' pipelines ahead, mark it ready, and wait for its
    assignment (with what it built)."""
    spec = cfg.resolved_spec()
    mode = get_mode(spec.replication.mode)
    ctx = replica_context(cfg)
    sc = spark.sparkContext
    write_json_atomic(Path(cfg.app_id_file), app_info(cfg, sc, session_s, standby=True))
    if stop.is_set():  # the run stopped while the session started: no warm-up for nothing
        return None
    if spec.replication.trigger == "realtime":
        warm_up_logged(spark, mode.sink_options(ctx, spec), sc.defaultParallelism)
        if spec.spark.flag(REHEARSAL_KEY, True) and not stop.is_set():
            rehearse(spark, spec, mode, cfg, stop)
        if stop.is_set():
            return None
    ahead = build_ahead(spark, spec, mode, cfg, stop)
    if stop.is_set():
        return None
    write_json_atomic(
        Path(cfg.app_id_file), app_info(cfg, sc, session_s, standby=True, ready=time.time())
    )
    log(f"standby {cfg.replica} ready: waiting for a replica to take over")
    assigned = await_assignment(Path(cfg.assignment_file), stop)
    if assigned is not None:
        log(
            f"standby {cfg.replica} takes over replica {assigned.replica} "
            f"(attempt {assigned.attempt})"
        )
        return assigned, ahead
    return None
