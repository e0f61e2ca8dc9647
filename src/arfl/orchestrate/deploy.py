"""``arfl deploy``: one experiment end to end, as a sequence of named steps.

    create the run → resolve the stack → create topics → start measuring (merger) → start
    replicas (and wait for their first batches) → start load (injector) → run chaos → watch
    and drain → stop everything by pid → summarise

Each step is a small method over its collaborators: ``RunNetwork`` (stack, namespaces),
``ReplicaRunner`` (drivers, restarts), ``ManagedProcess`` (merger, injector), ``ChaosRunner``,
``Watcher`` (until drained) and ``summarise``.
Whatever happens (an error, Ctrl-C, SIGTERM), everything started is stopped, by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from arfl import stack
from arfl.configs.realtime import host_cores, replica_master, slots_warning
from arfl.configs.spec import Spec
from arfl.errors import ArflError, DeployError, FaultError
from arfl.faults.base import FaultParams
from arfl.faults.runner import ChaosRunner
from arfl.measure.check import check_run
from arfl.measure.merger.config import MergerConfig
from arfl.orchestrate.context import (
    PYTHON,
    DeployOptions,
    RunContext,
    create_run,
    python_env,
    scoped,
)
from arfl.orchestrate.drivers import DriverLaunch
from arfl.orchestrate.exporter import MetricsExporter, serve_metrics
from arfl.orchestrate.heartbeat import heartbeat
from arfl.orchestrate.interrupts import DeferredInterrupts
from arfl.orchestrate.network import RunNetwork
from arfl.orchestrate.resources import ResourceSampler
from arfl.orchestrate.state import write_state
from arfl.orchestrate.summary import cgroup_placement, placement_summary, summarise
from arfl.orchestrate.supervisor import ReplicaRunner
from arfl.orchestrate.watch import FaultState, Tick, Watcher, drain_seconds
from arfl.priority import priority_of
from arfl.processes import ManagedProcess, create_time
from arfl.replica.modes.base import STARTING_OFFSETS
from arfl.replica.sparkenv import run_spark_home
from arfl.run.events import CHECK_FAILED, Event
from arfl.run.records import replica_topic
from arfl.run.rundir import read_jsonl, write_json_atomic
from arfl.run.sparkhome import retire_unless_used
from arfl.stack.config import harness_nice
from arfl.targets.local import LocalTarget
from arfl.targets.shares import CpuShares
from arfl.workload.generate import EventShape
from arfl.workload.injector import InjectorConfig
from arfl.workload.replay import ReplayConfig

__all__ = [
    "DeployOptions",
    "DeployResult",
    "Deployment",
    "Tick",
    "deploy",
    "drain_seconds",
    "scoped",
]


INJECTOR_LEAD_S = 2.0
"""How far ahead of its spawn the injector's schedule starts (its process start-up)."""
STANDBY_READY_TIMEOUT_S = 180.0
"""How long deploy waits for the standby drivers before it starts the load anyway."""
STATE_WRITE_S = 2.0
"""How often ``state.json`` is rewritten while deploy waits for the replicas and standbys."""
STANDBY_RESPAWN_S = 10.0
"""How long after a merger's take-over or restart the next standby merger starts: outside the
fault's impact window (healthy again plus 5 s). A second kill before that is a restart's."""


@dataclass(frozen=True)
class DeployResult:
    """The outcome of a finished deployment."""

    run_dir: Path
    summary: dict[str, Any]


class Deployment:
    """The steps of one deployment and what they started; use :func:`deploy`."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.net = RunNetwork()
        self.runner: ReplicaRunner | None = None
        self.merger: ManagedProcess | None = None
        self.merger_standby: ManagedProcess | None = None
        self._standbys_started = 0
        self._standby_not_before = 0.0
        self.injector: ManagedProcess | None = None
        self.chaos: ChaosRunner | None = None
        self.resources = ResourceSampler()
        self.shares: CpuShares | None = None
        """The drivers' CPU shares (``[placement]``), once planned."""
        self.share_usage: dict[str, tuple[float | None, float]] = {}
        """Each share group's (CPU seconds, wall seconds), read at the stop before removal."""
        self.started_at = time.time()
        self.replicas_started: float | None = None
        """When the first driver was started (a container share's use is measured from it)."""
        self.stopped_at: float | None = None
        """When the stop began (the last moment the replicas' CPU was sampled)."""
        self.t0: float | None = None
        self.drained = False
        """The output drained: the run is worth checking when it stops."""
        self._start_offsets = "earliest"
        """Where replicas first read the input (Spark ``startingOffsets``), set with the topics."""
        self.phase = "creating the run"
        """What the deployment does outside its watch, for the live view (:meth:`tick`)."""
        self._stopping = False
        self._watcher: Watcher | None = None

    @property
    def kafka(self) -> str:
        """The run's Kafka bootstrap servers (once the stack is resolved)."""
        assert self.net.info is not None, "resolve_stack() first"
        return self.net.info.kafka

    def write_state(self) -> None:
        """Keep ``state.json`` current (``arfl chaos`` reads it)."""
        write_state(
            self.ctx,
            self.net,
            self.runner,
            self.merger,
            self.injector,
            self.merger_standby,
            self.shares,
        )

    # --- the steps, in order ----------------------------------------------------------

    def resolve_stack(self) -> None:
        """ZooKeeper and Kafka (started or isolated as needed) and the connector jars."""
        self.phase = "starting the stack"
        # First state.json before anything exists: what follows (namespaces, a docker network,
        # the run's own stack) is found by a later 'arfl chaos recover' through it, whenever
        # this arfl dies.
        self.write_state()
        info = self.net.open(self.ctx, on_change=self.write_state)
        if self.net.docker is not None:
            self.resources.containers = dict(self.net.docker.containers)
            self.resources.standby_container = self.net.standby_container
        self._jars = stack.ensure_installed().spark_kafka_jars
        spec = self.ctx.spec
        self.ctx.journal.write(
            Event.RUN_STARTED,
            run=self.ctx.run_id,
            mode=spec.replication.mode,
            replicas=spec.replication.replicas,
            kafka=info.kafka,
            zookeeper=info.zookeeper,
            source_topic=self.ctx.rspec.source.topic,
            sink_topic=self.ctx.rspec.sink.topic,
        )
        self.write_state()

    def create_topics(self) -> None:
        """The run's input topic and one output topic per replica (``LogAppendTime``: the
        independent check's hops then start where a record became readable, so a replica's
        producer linger counts in its own hop, not the merger's; :mod:`arfl.measure.check.hops`),
        the final output topic."""
        self.phase = "creating topics"
        src, sink = self.ctx.rspec.source, self.ctx.rspec.sink
        stack.topics.ensure_topic(self.kafka, src.topic, src.partitions, log_append_time=True)
        for i in range(self.ctx.spec.replication.replicas):
            stack.topics.ensure_topic(
                self.kafka, replica_topic(sink.topic, i), src.partitions, log_append_time=True
            )
        stack.topics.ensure_topic(self.kafka, sink.topic, src.partitions)
        self._start_offsets = self._starting_offsets()

    def start_measuring(self) -> None:
        """The merger: first copy wins, latency per result, the interval log."""
        self.phase = "starting the merger"
        cfg = MergerConfig(
            bootstrap=self.kafka,
            sink=self.ctx.rspec.sink.topic,
            replicas=self.ctx.spec.replication.replicas,
            run_dir=self.ctx.dir,
            input_stats=self.ctx.injector_stats,
            percentiles=tuple(self.ctx.spec.report.percentiles),
            # The merger ends by itself when this process is gone (a kill -9 of arfl).
            owner_pid=os.getpid(),
            owner_create_time=create_time(os.getpid()),
            fetch_wait_ms=self.ctx.spec.merger.fetch_wait_ms,
            linger_ms=self.ctx.spec.merger.linger_ms,
            # The run's own: a restarted merger reads on from the positions committed under it.
            group_id=f"arfl-merger-{self.ctx.run_id}",
            # With a standby, every merger of the run has this id: the next one fences the last.
            transactional_id=(
                f"arfl-merger-{self.ctx.run_id}" if self.ctx.spec.merger.standby else None
            ),
            lease_s=self.ctx.spec.merger.lease,
        )
        self._merger_cfg = cfg
        self._merger_argv = cfg.command(self.ctx.paths.child_config("merger"), PYTHON)
        self.merger = self._spawn("merger", self._merger_argv)
        self.keep_standby()

    def keep_standby(self) -> str | None:
        """Start a standby merger following the serving one when the spec asks for one and
        none runs (at the start, after it died or took over); returns the live view's text."""
        if not self.ctx.spec.merger.standby or self.merger is None:
            return None
        wait_s = self._standby_not_before - time.time()
        if (self.merger_standby is None or not self.merger_standby.alive()) and wait_s > 0:
            return f"standby in {wait_s:.0f}s"
        if self.merger_standby is None or not self.merger_standby.alive():
            self._standbys_started += 1
            cfg = replace(
                self._merger_cfg,
                standby=True,
                serving_pid=self.merger.pid,
                serving_create_time=self.merger.create_time,
            )
            name = f"merger-standby-{self._standbys_started}"
            self.merger_standby = self._spawn(
                name, cfg.command(self.ctx.paths.child_config(name), PYTHON)
            )
            self.write_state()
        return f"standby pid {self.merger_standby.pid}"

    def restart_merger(self) -> ManagedProcess:
        """The merger in a dead one's place: the standby, which takes over by itself, or a new
        merger, which takes over from the positions committed and the sink's tail
        (:mod:`arfl.measure.merger.recovery`)."""
        standby = self.merger_standby
        if standby is not None and standby.alive():
            self.merger, self.merger_standby = standby, None
        else:
            self.merger = self._spawn("merger", self._merger_argv)
        # A new standby's start (a Python process reading the logs and the sink back) slowed
        # the new merger's output within the fault's window (docs/benchmarks.md).
        self._standby_not_before = time.time() + STANDBY_RESPAWN_S
        self.keep_standby()
        return self.merger

    def start_replicas(self) -> None:
        """Every replica's driver; returns once each one's query has run a batch."""
        assert self.net.info is not None and self.merger is not None
        self.phase = "starting replicas"
        cores = self.ctx.spec.placement.cpus_per_replica
        if cores is not None and self.net.docker is None:
            try:
                self.shares = CpuShares.plan(self.ctx.run_id, cores)
            except FaultError as e:
                raise DeployError(f"placement: {e}") from None
        self.runner = ReplicaRunner(
            self.ctx.rspec,
            self.ctx.dir,
            DriverLaunch(
                self.kafka,
                jars=self._jars,
                master=self._replica_master(),
                command=self.net.driver_command,
                shares=self.shares,
                promote=self.net.promote_standby if self.net.docker is not None else None,
                # Its own SPARK_HOME, removed at the stop (a container's is its own tmpfs).
                spark_home=run_spark_home(self.ctx.dir) if self.net.docker is None else None,
                # Active modes: ZooKeeper for the leader election; the run id names this run's
                # decision topic so that no old decision is ever replayed.
                mode_options={
                    "zookeeper": self.net.info.zookeeper,
                    "run_id": self.ctx.run_id,
                    STARTING_OFFSETS: self._start_offsets,
                },
            ),
            journal=self.ctx.journal,
        )
        self.write_state()  # its SPARK_HOME recorded before a driver runs there
        self.replicas_started = time.time()
        self.runner.start()
        self.write_state()
        deadline = time.monotonic() + self.ctx.options.ready_timeout_s
        self.runner.wait_ready(self.ctx.options.ready_timeout_s)
        self.write_state()
        self._wait_first_batches(deadline)
        self._wait_standbys()
        if not self.merger.alive():
            raise DeployError(f"the merger exited at start:\n{self.merger.tail()}")

    def start_load(self) -> None:
        """The injector, on its fixed-rate schedule; the workload clock starts here. With
        ``[source.replay]`` the replayer instead (it writes the injector's streams)."""
        self.phase = "starting the input"
        if self.ctx.spec.source.replay is not None:
            self._start_replay()
            return
        # The schedule starts a moment from now, in the injector and for the chaos schedule
        # alike: a fault 'at = 6s' comes 6 s after the input's first event, however long the
        # injector process takes to start (over a second on a loaded host).
        t0 = time.time() + INJECTOR_LEAD_S
        cfg = replace(
            InjectorConfig.from_workload(
                self.ctx.spec.workload,
                bootstrap=self.kafka,
                topic=self.ctx.rspec.source.topic,
                stats_path=self.ctx.injector_stats,
                journal_path=self.ctx.paths.journal,
                shape=EventShape.from_spec(self.ctx.spec),
            ),
            start_at=t0,
        )
        self.injector = self._spawn(
            "injector", cfg.command(self.ctx.paths.child_config("injector"), PYTHON)
        )
        self.t0 = t0
        workload = self.ctx.spec.workload
        self.ctx.journal.write(
            Event.WORKLOAD_STARTED, rate=workload.rate, duration_s=workload.duration
        )
        self.write_state()

    def _start_replay(self) -> None:
        """:meth:`start_load` for ``[source.replay]``: the replayer, capped by the duration."""
        replay = self.ctx.spec.source.replay
        assert replay is not None
        cfg = ReplayConfig.from_replay(
            replay,
            self.ctx.spec.workload.duration,
            bootstrap=self.kafka,
            topic=self.ctx.rspec.source.topic,
            stats_path=self.ctx.injector_stats,
            journal_path=self.ctx.paths.journal,
            linger_ms=self.ctx.spec.workload.linger_ms,
        )
        self.injector = self._spawn(
            "replayer", cfg.command(self.ctx.paths.child_config("replayer"), PYTHON)
        )
        self.t0 = time.time()
        self.ctx.journal.write(
            Event.WORKLOAD_STARTED, replay=replay.topic, duration_s=self.ctx.spec.workload.duration
        )
        self.write_state()

    def start_chaos(self) -> None:
        """The spec's ``[[chaos]]`` schedule, timed from the workload's start."""
        if not self.ctx.spec.chaos:
            return
        target = LocalTarget.from_run_dir(self.ctx.dir)
        self.chaos = ChaosRunner(target, start_time=self.t0)
        self.chaos.start_schedule([FaultParams.from_chaos(c) for c in self.ctx.spec.chaos])

    def watch(self, on_tick: Callable[[Tick], None] | None) -> None:
        """Until the input has ended and the output has drained."""
        assert self.runner and self.merger and self.injector
        self._watcher = Watcher(
            self.ctx,
            self.kafka,
            self.runner,
            self.merger,
            self.injector,
            resources=self.resources,
            write_state=self.write_state,
            active_faults=self.active_faults,
            started_at=self.t0 or self.started_at,
            zookeeper=self.net.info.zookeeper if self.net.info is not None else None,
            restart_merger=self.restart_merger,
            keep_standby=self.keep_standby,
            fault_states=self.fault_states,
        )
        self._watcher.run(on_tick)
        self.drained = True

    def check_output(self) -> None:
        """The independent check (no Spark): the final output against the results the spec
        implies for the input topic; written to ``check.json`` for the report. A check that
        cannot run is a warning, never a failed deployment."""
        self.phase = "checking the output"
        try:
            result = check_run(self.ctx.dir)
        except ArflError as e:
            self.ctx.journal.write(
                Event.WARNING, kind=CHECK_FAILED, message=f"independent check not run: {e}"
            )
            return
        write_json_atomic(self.ctx.paths.check, result.to_dict())
        self.ctx.journal.write(
            Event.OUTPUT_CHECKED,
            **{k: v for k, v in result.to_dict().items() if k not in ("examples",)},
        )

    def stop(self) -> None:
        """Stop everything this deployment started, by pid, in reverse order; never raises
        for a dead child. A Ctrl-C or SIGTERM meanwhile is held off and journaled
        (``interrupt-ignored``): stopping half-way would leave processes running.

        Raises:
            DeployError: something could not be stopped or undone (all of it is tried).
        """
        with DeferredInterrupts() as held:
            try:
                self._stop()
            finally:
                if held.received:
                    self.ctx.journal.write(
                        Event.INTERRUPT_IGNORED,
                        signals=[signal.Signals(s).name for s in held.received],
                        during="stopping the deployment",
                    )

    def _stop(self) -> None:
        self.phase = "stopping"
        self.stopped_at = time.time()
        self._stopping = True  # the runner holds its lock while it stops: no states read
        errors: list[str] = []
        if self.chaos is not None:
            try:
                self.chaos.stop()
            except ArflError as e:
                errors.append(str(e))
        if self.injector is not None:
            self.injector.stop()
        if self.runner is not None:
            try:
                self.runner.stop()
            except Exception as e:  # keep stopping the rest
                errors.append(f"replicas: {e}")
            else:
                self._retire_spark_home()
        errors += self._remove_shares()
        if self.merger_standby is not None:
            # First: a standby would take the serving merger's stop for a death.
            self.merger_standby.stop(grace_s=10.0)
        if self.merger is not None:
            # Its exit status says whether every result reached the final topic (exit 4:
            # delivery failures); the report reads it back.
            code = self.merger.stop(grace_s=30.0)
            self.ctx.journal.write(Event.MERGER_EXITED, exit_code=code)
            if code != 0:
                self.ctx.journal.write(
                    Event.WARNING,
                    message=f"the merger exited with {code} (4: results not written to the "
                    f"final topic); see {self.merger.log_path}",
                )
        if self.drained:
            # Every process has stopped, the run's Kafka still runs: the moment to read both
            # topics back for the independent check.
            self.check_output()
            self.phase = "stopping"
        errors += self.net.close(self.ctx)
        self.ctx.journal.write(Event.RUN_STOPPED, errors=errors)
        self.write_state()
        if errors:
            raise DeployError("; ".join(errors))

    def _remove_shares(self) -> list[str]:
        """Once the drivers are gone: read each CPU-share group's usage, then remove the
        groups (``state.json`` keeps naming them until it is rewritten: a failure here is for
        ``arfl chaos recover``)."""
        if self.shares is None:
            return []
        self.share_usage = self.shares.usage()
        try:
            self.shares.remove()
        except FaultError as e:
            return [f"CPU-share cgroups: {e}; 'arfl chaos recover' retries"]
        self.ctx.journal.write(Event.SHARES_REMOVED, root=str(self.shares.root))
        return []

    def _retire_spark_home(self) -> None:
        """Once every driver is gone: the executors' logs into ``logs/executors``, the run's
        SPARK_HOME (jar copies, scratch of killed JVMs) deleted; journaled
        ``spark-home-removed``. While a process still uses it, or when deleting fails, it stays
        (a ``warning``; ``state.json`` names it, so ``arfl chaos recover`` finishes the job): it
        never fails the run."""
        assert self.runner is not None
        home = self.runner.spark_home
        if home is None:
            return
        done = retire_unless_used(home, self.ctx.dir)
        if done.using:
            self.ctx.journal.write(
                Event.WARNING,
                message=f"the run's SPARK_HOME {home} kept: pids {list(done.using)} still use "
                "it; 'arfl chaos recover' removes it once they are gone",
            )
        elif done.error is not None:
            self.ctx.journal.write(
                Event.WARNING,
                message=f"the run's SPARK_HOME {home} not removed ({done.error}); "
                "'arfl chaos recover' retries",
            )
        elif done.retired is not None:
            self.ctx.journal.write(Event.SPARK_HOME_REMOVED, **done.retired.to_json())

    def summarise(self) -> dict[str, Any]:
        """Write ``summary.json``."""
        master = self.ctx.options.master or self.ctx.spec.spark.master
        placement = None
        if self.shares is not None:
            placement = cgroup_placement(self.shares, self.share_usage)
        elif self.net.container_cpus is not None and self.replicas_started is not None:
            # Containers: the replica's processes as the resource sampler saw them (every
            # container it had, a killed one to its last sample).
            wall = (self.stopped_at or time.time()) - self.replicas_started
            cpu = self.resources.cpu_seconds()
            placement = placement_summary(
                self.net.container_cpus,
                {
                    f"replica-{i}": (cpu.get(i), wall)
                    for i in range(self.ctx.spec.replication.replicas)
                },
                quota="container",
            )
        return summarise(self.ctx, self.resources, master, placement)

    # --- helpers ------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        """The merger or the load: ahead of the replicas for the CPU (:data:`HARNESS_NICE`),
        the niceness it got journaled (``harness-priority``)."""
        log = self.ctx.paths.log(name)
        nice = harness_nice()
        try:
            proc = ManagedProcess.start(name, argv, log, env=python_env(), nice=nice)
        except OSError as e:
            raise DeployError(f"could not start the {name} ({argv[0]}): {e}") from e
        self.ctx.journal.write(
            Event.HARNESS_PRIORITY, process=name, pid=proc.pid, asked=nice, **priority_of(proc.pid)
        )
        return proc

    def _replica_master(self) -> str:
        """The spec's (or ``--master``'s) master, enlarged under real-time mode so that every
        partition (and shuffle partition) has a task slot; a change or a warning is journaled."""
        spec = self.ctx.spec
        master, note = replica_master(spec, self.ctx.options.master)
        if spec.spark.target == "docker" and not master.startswith(("local-cluster[", "local[")):
            raise DeployError(
                f"--master {master}: with spark.target = 'docker' each replica runs its own "
                "local-cluster in its container; a spark:// cluster needs spark.target = 'local'"
            )
        if spec.replication.standby and not master.startswith("local"):
            chosen = any(c.key == "replication.standby" for c in spec.chosen_defaults)
            raise DeployError(
                f"--master {master}: replication.standby keeps spare Spark applications warm on "
                "this host and needs a local master (local-cluster[...] or local[...])"
                + ("; arfl set it for masking: write replication.standby = 0" if chosen else "")
            )
        if spec.placement.cpus_per_replica is not None and not master.startswith("local"):
            raise DeployError(
                f"--master {master}: [placement] cpus_per_replica puts each driver's process "
                "tree in a cgroup of this host and needs a local master (local-cluster[...] or "
                "local[...]): a cluster's executors run outside the tree"
            )
        warning = slots_warning(spec, host_cores(), master)
        if note or warning:
            self.ctx.journal.write(Event.REPLICA_SLOTS, master=master, note=note, warning=warning)
        return master

    def _starting_offsets(self) -> str:
        """Where every replica's first start reads the input from, resolved once: the input's
        end offsets before the load starts, as Spark's ``startingOffsets`` JSON (journaled)."""
        src = self.ctx.rspec.source
        ends = stack.topics.end_offsets(self.kafka, src.topic, src.partitions)
        self.ctx.journal.write(Event.STARTING_OFFSETS, topic=src.topic, offsets=ends)
        return json.dumps({src.topic: {str(p): o for p, o in sorted(ends.items())}})

    def _wait_standbys(self) -> None:
        """Start the load only once the spec's standby drivers are ready, so that a fault
        finds one however fast this host started it (journaled: ``standbys-ready``). A
        standby that is not ready in time is no error: the run goes on without it."""
        assert self.runner is not None
        n = self.ctx.spec.replication.standby
        if n <= 0:
            return
        self.phase = "waiting for the standby" if n == 1 else f"waiting for {n} standbys"
        t0 = time.monotonic()
        ready = False
        while not ready and time.monotonic() - t0 < STANDBY_READY_TIMEOUT_S:
            # In slices, writing state.json between them: a standby that died is replaced by a
            # process that recover must know of.
            ready = self.runner.wait_standbys(STATE_WRITE_S)
            self.write_state()
            if not ready and not self.runner.standbys_wanted():
                break
        self.ctx.journal.write(
            Event.STANDBYS_READY if ready else Event.STANDBYS_NOT_READY,
            standbys=n,
            waited_s=round(time.monotonic() - t0, 3),
        )

    def _wait_first_batches(self, deadline: float) -> None:
        """Block until every replica's query has reported a batch (the pipeline runs); in
        real-time mode, until every replica's query has started.

        A real-time batch reports progress only when it ends, so the load starts as soon as
        the queries run. Each real-time replica's driver warmed its executors up before its
        query started (:mod:`arfl.replica.warmup`: cold, the first data batch read one record
        per partition and lost its interval). The warm-up does not run the query's own code: a
        windowed replica's first batch that meets the input read 2-835 records at a 5-s
        interval however long the query had run before the load (docs/design.md), which the
        automatic warm-up covers.
        """
        assert self.runner is not None
        n = self.ctx.spec.replication.replicas
        paths = self.ctx.paths
        realtime = self.ctx.spec.replication.trigger == "realtime"
        last_write = time.monotonic()
        while True:
            waiting = [
                i
                for i in range(n)
                if not read_jsonl(paths.progress(i))
                and not (realtime and self.runner.query_started(i))
            ]
            if not waiting:
                self.ctx.journal.write(Event.REPLICAS_PROCESSING, replicas=n)
                return
            self.phase = (
                "waiting for the first batch of replica"
                + ("s " if len(waiting) > 1 else " ")
                + ", ".join(map(str, waiting))
            )
            dead = [i for i, s in self.runner.states().items() if s.status == "dead"]
            if dead:
                raise DeployError(
                    f"replica {dead[0]} died before its first batch; "
                    f"see {self.runner.log_of(dead[0])}"
                )
            if time.monotonic() > deadline:
                raise DeployError(
                    f"replica(s) {waiting} ran no batch within "
                    f"{self.ctx.options.ready_timeout_s:.0f}s; see "
                    + ", ".join(str(self.runner.log_of(i)) for i in waiting)
                )
            if time.monotonic() - last_write > STATE_WRITE_S:  # a standby may have respawned
                self.write_state()
                last_write = time.monotonic()
            time.sleep(0.2)

    def tick(self) -> Tick:
        """What the live view shows outside the watch: the phase, each replica's state (none
        while stopping) and the faults active."""
        runner = None if self._stopping else self.runner
        states = runner.states() if runner is not None else {}
        return Tick(
            elapsed_s=time.time() - (self.t0 or self.started_at),
            phase=self.phase,
            snapshot=None,
            injector=None,
            replicas={i: st.status for i, st in states.items()},
            faults=self.active_faults(),
            statuses={i: st.status for i, st in states.items()},
            restarts={i: st.restarts for i, st in states.items()},
            injected=self.fault_states(),
            merger_restarts=self._watcher.merger_restarts if self._watcher is not None else 0,
        )

    def active_faults(self) -> list[str]:
        """Faults injected and not reverted yet (for the live view)."""
        if self.chaos is None:
            return []
        return [
            o.description
            for o in list(self.chaos.outcomes)
            if o.injected_at is not None and o.reverted_at is None
        ]

    def fault_states(self) -> list[FaultState]:
        """Every fault injected so far, numbered in the order of injection (for the metrics
        endpoint: a fault's state stays exported after its revert)."""
        if self.chaos is None:
            return []
        done = sorted(
            (o for o in list(self.chaos.outcomes) if o.injected_at is not None),
            key=lambda o: o.injected_at or 0.0,
        )
        return [
            FaultState(i, o.params.kind, o.replica, o.injected_at or 0.0, o.reverted_at)
            for i, o in enumerate(done, start=1)
        ]


def deploy(
    spec: Spec,
    spec_path: Path | None = None,
    options: DeployOptions | None = None,
    on_tick: Callable[[Tick], None] | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
    *,
    exporter: MetricsExporter | None = None,
) -> DeployResult:
    """Run one experiment end to end.

    Args:
        spec: the validated spec.
        spec_path: the spec file (copied into the run directory).
        options: see :class:`DeployOptions`.
        on_tick: called with what the live view shows: about twice a second while the run
            is watched, about once a second before and after (from another thread:
            :func:`~arfl.orchestrate.heartbeat.heartbeat`).
        on_run_dir: called once the run directory exists (before anything starts).
        exporter: feed this metrics exporter (an experiment's, served across its runs);
            without one, ``options.metrics_port`` serves one for this deployment's life.

    Raises:
        SpecError: the metrics endpoint's address cannot be served (before anything starts).
        StackError: the stack is not available.
        DeployError: a component failed (the message names its log).
    """
    options = options or DeployOptions()
    if exporter is None and options.metrics_port is not None:
        with serve_metrics(options.metrics_host, options.metrics_port) as server:
            return _deploy(spec, spec_path, options, on_tick, on_run_dir, server.exporter)
    return _deploy(spec, spec_path, options, on_tick, on_run_dir, exporter)


def _deploy(
    spec: Spec,
    spec_path: Path | None,
    options: DeployOptions,
    on_tick: Callable[[Tick], None] | None,
    on_run_dir: Callable[[Path], None] | None,
    exporter: MetricsExporter | None,
) -> DeployResult:
    """:func:`deploy` once the metrics endpoint (if any) is served."""
    ctx = create_run(spec, spec_path, options)
    if exporter is not None:
        exporter.begin(
            ctx.run_id,
            ctx.paths.hlog,
            spec=spec.name,
            mode=spec.replication.mode,
            replicas=spec.replication.replicas,
        )
        on_tick = exporter.tee(on_tick)
    if on_run_dir is not None:
        on_run_dir(ctx.dir)
    d = Deployment(ctx)
    failure: BaseException | None = None
    with _sigterm_interrupts():
        try:
            with heartbeat(on_tick, d.tick):
                d.resolve_stack()
                d.create_topics()
                d.start_measuring()
                d.start_replicas()
                d.start_load()
                d.start_chaos()
            d.watch(on_tick)
        except BaseException as e:
            failure = e
            ctx.journal.write(Event.RUN_FAILED, error=f"{type(e).__name__}: {e}")
            raise
        finally:
            d.phase = "stopping"  # the heartbeat's first tick comes at once
            stopped = False
            try:
                with heartbeat(on_tick, d.tick):
                    d.stop()
                stopped = True
            except DeployError:
                if failure is None:
                    raise
            finally:
                if exporter is not None:
                    exporter.end(ok=stopped and failure is None)
    summary = d.summarise()
    ctx.journal.write(Event.RUN_FINISHED, results=summary.get("results"))
    return DeployResult(ctx.dir, summary)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C (so ``finally`` stops every process), in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
