"""The Spark application of one replica.

Run as ``python -m arfl.replica.driver --config <file.json>``; the file is a
:class:`~arfl.replica.app.DriverConfig` (written by
:class:`~arfl.orchestrate.supervisor.ReplicaRunner`). The driver

1. creates the SparkSession (app name ``arfl-<spec name>-r<N>``, the configured master),
2. writes ``{"app_id", "pid", ...}`` to ``app_id_file`` as soon as the session exists (fault
   injection matches executor JVMs by ``--app-id``),
3. appends every ``StreamingQueryProgress`` JSON as a line to ``progress_file``,
4. runs the replication mode's source -> :mod:`arfl.replica.query` -> Kafka sink,
5. on SIGTERM (or SIGINT) stops the query, the session, deletes a non-durable checkpoint and
   exits 0; if the query fails it exits 1 (the supervisor decides whether to restart).

A *standby* driver (``DriverConfig.standby``) first waits as :mod:`arfl.replica.standby`
describes; once assigned a replica whose driver died, it goes on from step 2 as that replica
(same checkpoint, topics, progress file) without a new Spark application.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from arfl.errors import ArflError
from arfl.replica.app import (
    DriverConfig,
    ProgressWriter,
    app_info,
    log,
    mark_started,
    phase_keeper,
    progress_listener,
    query_writer,
    replica_context,
    spark_conf,
    warm_up_logged,
)
from arfl.replica.control import SparkControl
from arfl.replica.modes.base import (
    drop_incomplete_writes,
    get_mode,
)
from arfl.replica.sparkenv import SCRATCH_ENV
from arfl.replica.standby import Ahead, run_standby
from arfl.run.control import serve as serve_control
from arfl.run.rundir import write_json_atomic
from arfl.run.sparkhome import ScratchTaken, make_scratch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


EXIT_QUERY_FAILED = 1
"""The streaming query failed while running (a restart may help)."""
EXIT_BAD_CONFIG = 2
"""The config or the pipeline is invalid (a restart cannot help; the runner gives up)."""


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
        log(f"signal {signum}: stopping")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    spec = cfg.resolved_spec()
    t0 = time.time()
    if scratch := os.environ.get(SCRATCH_ENV):  # its JVM's java.io.tmpdir, which must exist
        try:
            make_scratch(Path(scratch))
        except ScratchTaken as e:  # the same at every restart
            log(
                f"its JVM's temp directory: {e}; remove it, or give arfl deploy a TMPDIR of "
                "this user's, and deploy again"
            )
            return EXIT_BAD_CONFIG
        except OSError as e:  # a full disk, say: a restart may find room
            log(f"its JVM's temp directory {scratch}: {e}")
            return EXIT_QUERY_FAILED
    builder = SparkSession.builder
    for k, v in spark_conf(cfg, spec).items():
        builder = builder.config(k, v)
    spark: SparkSession = builder.getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("WARN")
    session_s = time.time() - t0
    promoted = False
    ahead: Ahead | None = None
    if cfg.standby:
        log(f"session {sc.applicationId} up in {session_s:.1f}s (master {cfg.master}, standby)")
        took = run_standby(cfg, spark, stop, session_s)
        if took is None:
            spark.stop()
            log("exit 0 (standby, never assigned)")
            return 0
        (cfg, ahead), promoted = took, True
        spec = cfg.resolved_spec()
    t_assigned = time.time()
    mode = get_mode(spec.replication.mode)
    ctx = replica_context(cfg)
    if cfg.control_dir:  # before the app file: a fault may ask as soon as the replica runs
        serve_control(Path(cfg.control_dir), SparkControl(sc._jsc.sc()).handle, stop, log=log)
    write_json_atomic(
        Path(cfg.app_id_file),
        app_info(cfg, sc, session_s, **({"standby": True} if promoted else {})),
    )
    if not promoted:
        log(f"session {sc.applicationId} up in {session_s:.1f}s (master {cfg.master})")
    progress_writer = ProgressWriter(Path(cfg.progress_file))
    spark.streams.addListener(progress_listener(progress_writer))

    ckpt = mode.checkpoint(ctx)
    for f in drop_incomplete_writes(ckpt.location):
        log(f"deleted an unfinished checkpoint write of a killed driver: {f}")
    rc = 0
    q = None
    try:
        try:
            trigger = mode.trigger(spec)
            built = ahead.pipeline(cfg, mode, spec) if ahead is not None else None
            writer = query_writer(
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
            log(f"pipeline cannot be built: {type(e).__name__}: {e}")
            rc = EXIT_BAD_CONFIG
            return rc
        if spec.replication.trigger == "realtime" and cfg.attempt == 0 and not promoted:
            # Not on a restart: there the warm-up (12-13 s measured) cost more than the one
            # cold batch it saves (one interval), and the replica is late already. A promoted
            # standby warmed up while it waited.
            warm_up_logged(spark, mode.sink_options(ctx, spec), sc.defaultParallelism)
        delay = mode.start_delay(spec, ctx)
        if delay > 0:
            log(f"waiting {delay:.1f}s before starting the query (staggered batch boundaries)")
            stop.wait(delay)
            if stop.is_set():
                return rc
        keeper = phase_keeper(spark, spec, ctx)
        if keeper is not None:
            progress_writer.keeper = keeper
            keeper.start()
        t_start = time.time()
        q = writer.start()
        mark_started(Path(cfg.app_id_file))
        log(f"query started (mode {mode.name}, checkpoint {ckpt.location}, trigger {trigger})")
        if promoted:
            # The take-over's own cost, apart from Spark's first batch.
            log(
                f"take-over: pipeline {'built ahead, sink added' if built is not None else 'built'}"
                f" in {built_s:.2f}s, query start "
                f"{time.time() - t_start:.2f}s, {time.time() - t_assigned:.2f}s since assigned"
            )
        while not stop.is_set():
            if q.awaitTermination(1):
                exc = q.exception()
                log(f"query terminated: {exc}")
                rc = EXIT_QUERY_FAILED
                break
    except Exception as e:  # the query failed: report and let the supervisor decide
        log(f"query failed: {type(e).__name__}: {e}")
        rc = EXIT_QUERY_FAILED
    finally:
        if progress_writer.keeper is not None:
            progress_writer.keeper.stop()  # first: a hold under way has the JVM frozen
        if q is not None and q.isActive:
            try:
                q.stop()
            except Exception as e:
                log(f"stopping the query: {e}")
        spark.stop()
        if not ckpt.durable:
            shutil.rmtree(ckpt.location, ignore_errors=True)
    log(f"exit {rc}")
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
        log(f"{args.config}: bad driver config: {e}")
        return EXIT_BAD_CONFIG
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
