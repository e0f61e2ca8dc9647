"""Launch and supervise the driver processes of R replicas.

Each replica's driver (``python -m arfl.replica.driver``) runs in its own session (process
group), logs to ``logs/replica-N.log`` of the run directory and writes
``replicas/replica-N.app.json`` (its Spark app id) and ``progress/replica-N.jsonl``.
A poll thread restarts a driver that died unexpectedly when ``spec.replication.restart`` is
true (same checkpoint: a ``passive`` replica resumes). Journal events (``rundir.Journal``):

* ``replica-started``  {replica, pid, attempt}  — process spawned
* ``replica-ready``    {replica, pid, app_id, attempt, startup_s} — SparkSession up
* ``replica-died``     {replica, pid, exit_code, app_id, uptime_s}
* ``replica-restarted`` {replica, pid, attempt, downtime_s, resume, offsets?, why?} —
  respawned (downtime since death); ``resume``: ``checkpoint`` (from its own, replaying since
  its last batch end), ``peer`` (from a copy of replica ``peer``'s checkpoint, whose committed
  ``batch`` ended at ``offsets``, ``ahead`` input records beyond its own last committed batch
  ``own_batch``; ``copied_files``, ``copy_s``) or ``output`` (a fresh checkpoint at the output
  frontier ``offsets``, ``replication.resume``); ``why`` says why a pipeline that may resume
  from the output, or from a peer's copy, did not
* ``replica-gave-up``  {replica, reason, detail?} — restart disabled, or ``crash-loop``
* ``replica-stopped``  {replica, pid, exit_code, graceful}
* ``interrupt-ignored`` {signals, during} — Ctrl-C or SIGTERM arrived while stopping
* ``standby-started`` {standby, pid, nice} / ``standby-ready`` {standby, pid, startup_s} /
  ``standby-died`` {standby, pid, exit_code} / ``standby-gave-up`` {reason} /
  ``standby-stopped`` {standby, pid, ready, exit_code, graceful, leftover_pids, after_s} — at
  the run's stop, ``after_s`` after its SIGTERM: at most :data:`STANDBY_STOP_GRACE_S` before
  its tree is killed (a standby holds no replica); ``ready`` as supervision last saw it, and a
  standby that died since supervision's last look is reported here too (its exit code)
* ``replica-reniced`` {replica, pid, after_s, why, behind_ms, reniced} — a promoted standby that
  yielded the CPU (``replication.standby_yield``) got niceness 0 back
* ``replica-executor-lost`` {replica, pid, executors, action} — a real-time replica lost an
  executor JVM while a standby was ready: its driver is killed and the standby takes over

With ``replication.standby = N`` it also keeps N *standby* drivers (``logs/standby-K.log``,
K counting every standby started): each starts its Spark session, warms its executors up and
(real-time) rehearses the pipeline at niceness :data:`STANDBY_NICE` (the replicas keep the
CPU), then waits. A replica to restart is given a ready standby if there is one: its niceness
goes back to 0 (at once, or once it caught up but after :data:`YIELD_MAX_S` at most:
``standby_yield``, only for a replica resuming at the output frontier: one that replays from
a checkpoint covers no one until it is done), it is sent the
replica's config, and it starts the replica's query at once (``replica-started`` and
``replica-restarted`` carry ``standby: K``) instead of a new Spark application (25-45 s here
under load). A new standby is started :data:`STANDBY_RESPAWN_DELAY_S` later, so that its
start-up does not compete with the promoted replica's catch-up. A real-time
replica that loses an executor JVM while a standby is ready is handed to the standby too (its
driver killed): Spark would start a new executor JVM and re-run the lost tasks, ~13 s here.

A driver that keeps exiting by itself is not restarted forever: after ``crash_loop_limit``
deaths in a row before Spark came up, or more than ``crash_loop_restarts`` restarts within
``crash_loop_window_s`` (a query that fails after start-up), it is given up with reason
``crash-loop``. Deaths by a signal (a ``kill-replica`` fault, the OOM killer) do not count
towards the second limit: they are what chaos is made of, not a broken pipeline.

``stop()`` SIGTERMs each driver, waits, then SIGKILLs what is left of its whole process tree
(the driver JVM and, in ``local-cluster``, the executor JVMs are its descendants). A Ctrl-C
or SIGTERM arriving meanwhile is noted, not raised: an interrupted stop would leave the
remaining drivers running in their own sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

import psutil

from arfl.configs.spec import REHEARSAL_INPUT_KEY, REHEARSAL_KEY, Spec
from arfl.errors import DeployError
from arfl.faults.local import EXECUTOR_MAIN, not_forked_from_another, restart_suppressed
from arfl.orchestrate.interrupts import DeferredInterrupts
from arfl.orchestrate.resume import plan_resume
from arfl.processes import (
    ManagedProcess,
    can_unnice,
    is_running,
    process_tree,
    same_process,
    set_nice,
    signal_all,
    wait_until,
)
from arfl.replica.app import DriverConfig
from arfl.replica.driver import EXIT_BAD_CONFIG
from arfl.replica.modes.base import PEER_APPS, PEER_PROGRESS, STAGGER_REF, STARTING_OFFSETS
from arfl.replica.sparkenv import driver_env, ensure_spark_home
from arfl.replica.standby import REHEARSAL_RECORDS
from arfl.run.events import Event
from arfl.run.records import replica_topic
from arfl.run.rundir import Journal, RunPaths, write_json_atomic
from arfl.run.sparkhome import driver_spark_home
from arfl.run.streams import MonitorTail
from arfl.workload.generate import EventShape
from arfl.workload.injector import sample_events

Status = Literal["starting", "running", "restarting", "dead", "stopped"]
CommandFactory = Callable[[int, Path], Sequence[str]]
"""(replica, config file) -> argv of the driver process (tests substitute a fake)."""

CRASH_LOOP_LIMIT = 5
"""Deaths in a row before Spark came up after which a replica is given up."""
CRASH_LOOP_RESTARTS = 5
"""At most this many restarts of one replica within :data:`CRASH_LOOP_WINDOW_S` after exits
by itself (not by a signal); one more such exit gives it up as a crash loop."""
CRASH_LOOP_WINDOW_S = 300.0
STANDBY_NICE = 19
"""Niceness of a waiting standby's processes (CFS weight 15 against a replica's 1024)."""
STANDBY_RESPAWN_DELAY_S = 20.0
"""After a standby took a replica over, how long before its successor starts."""
STANDBY_STOP_GRACE_S = 3.0
"""How long a standby may take to exit on SIGTERM when the run stops, before its tree is
killed. It holds no replica (its warm-up and rehearsal are thrown away), and the real driver
acts on SIGTERM once its Spark session is up, without waiting for its executors' warm-up (a
driver that waited for it, started just before the stop, held the standby integration tests'
stop 28 s). Its niceness is set back to 0 first."""
STANDBY_FAILURE_LIMIT = 3
"""Standbys that die in a row before they were ready; then no more are started."""
STANDBY = -1
"""The replica argument of the command factory for a standby driver."""
YIELD_UNTIL_LAG_MS = 1000.0
"""A promoted standby that yields (``replication.standby_yield``) gets niceness 0 back once the
merger saw a result of its own and it is at most this far behind (``ReplicaSnapshot.behind_ms``:
its trail of the output, with two or more replicas; else the age of its newest result)."""
YIELD_MAX_S = 10.0
"""... or this long after the take-over, caught up or not. At niceness 19 on a saturated host
the newcomer may get almost no CPU: in the standby integration test (300 ev/s, R=2 + standby on
2 cores) its first result came 13 s after the kill, its query's tasks starved, and it caught up
only once the input had ended (3 runs of 3). Take-overs that do get CPU catch up in
6-13 s (docs/benchmarks.md), so after 10 s the yield costs more redundancy than it saves CPU."""


def rehearsal_events(spec: Spec) -> list[list[str]]:
    """What a real-time standby rehearses its pipeline on (``DriverConfig.rehearsal_input``):
    :data:`~arfl.replica.standby.REHEARSAL_RECORDS` events as the injector would send them,
    ``[key, value]`` texts; none without a rehearsal, with ``arfl.rehearsalInput = false``
    or with ``[source.replay]`` (whose records the injector does not make)."""
    if (
        spec.replication.trigger != "realtime"
        or spec.source.replay is not None
        or not spec.spark.flag(REHEARSAL_KEY, True)
        or not spec.spark.flag(REHEARSAL_INPUT_KEY, True)
    ):
        return []
    events = sample_events(
        spec.workload, EventShape.from_spec(spec), REHEARSAL_RECORDS, int(time.time() * 1000)
    )
    return [[k.decode(), v.decode()] for k, v in events]


@dataclass(frozen=True)
class ReplicaState:
    """A snapshot of one replica's supervision state.

    Attributes:
        replica: index.
        status: ``starting`` (spawned, no app id yet), ``running``, ``restarting``,
            ``dead`` (gave up), ``stopped`` (by ``stop()``).
        pid: driver process id (of the current or last attempt).
        app_id: Spark application id of the current attempt, once known.
        restarts: how many times the supervisor restarted it.
        exit_code: exit code of the last attempt that ended.
        started_at: epoch seconds when the current attempt was spawned.
    """

    replica: int
    status: Status
    pid: int | None = None
    app_id: str | None = None
    restarts: int = 0
    exit_code: int | None = None
    started_at: float | None = None


class _Replica:
    def __init__(self, index: int, config_path: Path, app_id_path: Path, log_path: Path) -> None:
        self.index = index
        self.config_path = config_path
        self.app_id_path = app_id_path
        self.log_path = log_path
        self.proc: ManagedProcess | None = None
        self.state = ReplicaState(replica=index, status="starting")
        self.attempt = 0
        self.failures_without_app = 0
        self.died_at: float | None = None
        self.exits: list[float] = []
        """When the driver exited by itself (exit code >= 0), for the crash-loop window."""
        self.proc_log = log_path
        """The log of the current driver process (a promoted standby keeps its own)."""
        self.checkpoint: Path | None = None
        """Its checkpoint since it resumed from the output frontier or from a copy of a peer's
        (None: the first one)."""
        self.start_offsets: str | None = None
        """The ``startingOffsets`` of that checkpoint's first query."""
        self.yield_since: float | None = None
        """A promoted standby still at low CPU priority since then (``standby_yield``)."""
        self.executors: set[int] = set()
        """Pids of its executor JVMs at the last look (real-time replicas with standbys)."""


class _Standby:
    """One standby slot; ``sid`` numbers the standby processes started in it (files by sid)."""

    def __init__(self) -> None:
        self.sid = -1
        self.proc: ManagedProcess | None = None
        self.ready = False
        self.spawned_at = 0.0
        self.spawn_at: float | None = 0.0
        """When to start the next standby here (None: not any more)."""
        self.niced = False


@dataclass(frozen=True)
class StandbyState:
    """A live standby driver (``state.json`` ``standbys``)."""

    standby: int
    pid: int
    ready: bool


def default_command(replica: int, config: Path) -> list[str]:
    """The real driver: this interpreter running :mod:`arfl.replica.driver`."""
    del replica
    return [sys.executable, "-m", "arfl.replica.driver", "--config", str(config)]


class ReplicaRunner:
    """Starts R replica drivers and keeps them running.

    Example::

        with ReplicaRunner(spec, run_dir, "127.0.0.1:9092", jars=installed.spark_kafka_jars) as r:
            r.wait_ready(timeout=120)
            ...
            r.kill(0)            # SIGKILL replica 0's driver tree; the supervisor restarts it
    """

    def __init__(
        self,
        spec: Spec,
        run_dir: Path,
        bootstrap: str,
        *,
        jars: Sequence[Path] = (),
        master: str | None = None,
        extra_conf: dict[str, str] | None = None,
        mode_options: dict[str, str] | None = None,
        journal: Journal | None = None,
        spark_home: Path | None = None,
        command: CommandFactory | None = None,
        poll_interval_s: float = 0.2,
        stop_timeout_s: float = 30.0,
        restart_delay_s: float = 0.5,
        crash_loop_limit: int = CRASH_LOOP_LIMIT,
        crash_loop_restarts: int = CRASH_LOOP_RESTARTS,
        crash_loop_window_s: float = CRASH_LOOP_WINDOW_S,
        tree_grace_s: float = 5.0,
    ) -> None:
        """Prepare (but do not start) the replicas.

        Args:
            spec: the validated spec (``replication.replicas`` drivers are run).
            run_dir: the run directory (see :mod:`arfl.run.rundir`).
            bootstrap: Kafka bootstrap servers.
            jars: Spark's Kafka connector jars (``spark.jars``).
            master: override ``spec.spark.master`` (e.g. a standalone ``spark://`` URL).
            extra_conf: Spark conf applied last.
            mode_options: passed to the replication mode (``ReplicaContext.options``).
            journal: where to journal events; default ``run_dir/journal.jsonl``.
            spark_home: the run's SPARK_HOME directory
                (:func:`arfl.replica.sparkenv.run_spark_home`), one SPARK_HOME per driver in it;
                default: every driver in the shared one (:func:`ensure_spark_home`).
            command: argv factory for a driver (tests); default :func:`default_command`.
            poll_interval_s: supervision period.
            stop_timeout_s: grace period between SIGTERM and SIGKILL in :meth:`stop`.
            restart_delay_s: pause before restarting a dead driver.
            crash_loop_limit: give up after this many consecutive deaths before the driver
                reported an app id (a config or environment problem, not a crash to mask).
            crash_loop_restarts: at most this many restarts within ``crash_loop_window_s``
                after the driver exited by itself; one more exit gives it up.
            crash_loop_window_s: the window of ``crash_loop_restarts``.
            tree_grace_s: after a driver stopped gracefully, how long its JVMs may take to
                exit before they are killed.
        """
        self.spec = spec
        self.paths = RunPaths(run_dir)
        self.bootstrap = bootstrap
        self.jars = [str(j) for j in jars]
        self.master = master or spec.spark.master
        self.extra_conf = dict(extra_conf or {})
        self.mode_options = dict(mode_options or {})
        self.journal = journal or Journal(self.paths.journal)
        self._spark_home = spark_home
        self._command = command or default_command
        self.poll_interval_s = poll_interval_s
        self.stop_timeout_s = stop_timeout_s
        self.restart_delay_s = restart_delay_s
        self.crash_loop_limit = crash_loop_limit
        self.crash_loop_restarts = crash_loop_restarts
        self.crash_loop_window_s = crash_loop_window_s
        self.tree_grace_s = tree_grace_s
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._env: dict[str, str] | None = None
        self._driver_envs: dict[str, dict[str, str]] = {}
        rdir = run_dir / "replicas"
        self._replicas = [
            _Replica(
                i,
                rdir / f"replica-{i}.json",
                rdir / f"replica-{i}.app.json",
                self.paths.log(f"replica-{i}"),
            )
            for i in range(spec.replication.replicas)
        ]
        self._standbys = [_Standby() for _ in range(spec.replication.standby)]
        self._standby_count = 0
        self._standby_failures = 0
        self._standbys_given_up = False
        self._rehearsal_input = rehearsal_events(spec) if spec.replication.standby else []
        """What every real-time standby rehearses on: made once, not on the supervision thread
        at each spawn (a skewed key's distribution can take seconds to build)."""
        self._monitor: MonitorTail | None = None
        """The merger's monitor, tailed from the last take-over by a yielding standby on."""

    # --- public API -----------------------------------------------------------------

    def checkpoint_dir(self, replica: int) -> Path:
        """The durable checkpoint directory of a replica (used by ``passive``)."""
        return self.paths.root / "checkpoints" / f"replica-{replica}"

    def query_started(self, replica: int) -> bool:
        """True once the replica's current driver has started its streaming query."""
        path = self._replicas[replica].app_id_path
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(info, dict) and "query_started" in info

    def output_topic(self, replica: int) -> str:
        """The output topic of a replica."""
        return replica_topic(self.spec.sink.topic, replica)

    def start(self) -> None:
        """Spawn every driver and the supervision thread.

        Raises:
            DeployError: already started, or a driver could not be spawned.
        """
        if self._thread is not None:
            raise DeployError("replica runner already started")
        # The shared SPARK_HOME's environment; a run's own home gives each driver its own,
        # every replica's built here (a failure fails the start, not a later restart).
        self._env = self._env_in(None) if self._spark_home is None else None
        for rep in self._replicas:
            self._driver_env(f"replica-{rep.index}")
        for rep in self._replicas:
            rep.config_path.parent.mkdir(parents=True, exist_ok=True)
            self._spawn(rep)
        for sb in self._standbys:
            self._start_standby(sb)
        self._thread = threading.Thread(target=self._supervise, name="arfl-replicas", daemon=True)
        self._thread.start()

    @property
    def spark_home(self) -> Path | None:
        """The run's SPARK_HOME given to the constructor (None: the shared one)."""
        return self._spark_home

    @staticmethod
    def _env_in(home: Path | None) -> dict[str, str]:
        """A driver's environment with ``home`` as its SPARK_HOME (None: the shared one)."""
        env = driver_env(home or ensure_spark_home())
        # Let the driver import arfl even when it is not installed (a source checkout).
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _driver_env(self, name: str) -> dict[str, str]:
        """The environment of driver ``name`` (``replica-N``, ``standby-K``). In a run's own
        SPARK_HOME each driver gets a home of its own under it
        (:func:`arfl.run.sparkhome.driver_spark_home`): two ``local-cluster`` drivers started
        in one second get one application id, and in one home they would share
        ``work/<app>/0/`` (one executor's log replacing the other's).

        Raises:
            DeployError: that home cannot be created.
        """
        if self._spark_home is None:
            assert self._env is not None
            return self._env
        env = self._driver_envs.get(name)
        if env is None:  # built once: a restart on the supervision thread only reuses it
            env = self._env_in(ensure_spark_home(driver_spark_home(self._spark_home, name)))
            self._driver_envs[name] = env
        return env

    def states(self) -> dict[int, ReplicaState]:
        """Current state of every replica (refreshing app ids)."""
        with self._lock:
            for rep in self._replicas:
                self._refresh_app_id(rep)
            return {rep.index: rep.state for rep in self._replicas}

    def log_of(self, replica: int) -> Path:
        """The log of a replica's current driver (a promoted standby's is its own)."""
        return self._replicas[replica].proc_log

    def standby_states(self) -> list[StandbyState]:
        """The live standby drivers (not yet given a replica)."""
        with self._lock:
            return [
                StandbyState(sb.sid, sb.proc.pid, sb.ready)
                for sb in self._standbys
                if sb.proc is not None and sb.proc.alive()
            ]

    def standbys_wanted(self) -> bool:
        """False once standbys were given up (none will come)."""
        return bool(self._standbys) and not self._standbys_given_up

    def wait_standbys(self, timeout_s: float) -> bool:
        """Block until every standby slot holds a ready standby (True), or until the timeout
        or until standbys were given up (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if all(sb.proc is not None and sb.ready for sb in self._standbys):
                    return True
                if not self.standbys_wanted():
                    return False
            time.sleep(self.poll_interval_s)
        return False

    def app_ids(self) -> dict[int, str | None]:
        """Spark application id of each replica's current attempt (None until known)."""
        return {i: s.app_id for i, s in self.states().items()}

    def wait_ready(self, timeout_s: float = 180.0) -> dict[int, ReplicaState]:
        """Block until every replica is ``running`` (SparkSession up, app id known).

        Raises:
            DeployError: a replica is dead or the timeout passed; names the log file.
        """
        last: dict[int, ReplicaState] = {}

        def all_running() -> dict[int, ReplicaState] | None:
            nonlocal last
            last = self.states()
            dead = [s for s in last.values() if s.status in ("dead", "stopped")]
            if dead:
                r = dead[0].replica
                raise DeployError(
                    f"replica {r} is {dead[0].status} (exit code {dead[0].exit_code}); "
                    f"see {self._replicas[r].proc_log}"
                )
            return last if all(s.status == "running" for s in last.values()) else None

        try:
            return wait_until(all_running, timeout_s=timeout_s, interval_s=self.poll_interval_s)
        except TimeoutError:
            waiting = [s.replica for s in last.values() if s.status != "running"]
            raise DeployError(
                f"replica(s) {waiting} not up after {timeout_s:.0f}s; see "
                + ", ".join(str(self._replicas[r].proc_log) for r in waiting)
            ) from None

    def kill(self, replica: int, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to a driver's whole process tree (driver first); returns its pid.

        The supervisor sees the death and, if ``replication.restart``, restarts it.

        Raises:
            DeployError: no such replica or it has no live process.
        """
        with self._lock:
            if not 0 <= replica < len(self._replicas):
                raise DeployError(f"no replica {replica} (have 0..{len(self._replicas) - 1})")
            proc = self._replicas[replica].proc
            if proc is None or not proc.alive():
                raise DeployError(f"replica {replica} has no running driver to kill")
            signal_all(process_tree(proc.pid), sig)
            return proc.pid

    def process_tree(self, replica: int) -> list[psutil.Process]:
        """The live driver process of a replica and its descendants (driver JVM, and in
        ``local-cluster`` the executor JVMs); empty when it is not running."""
        with self._lock:
            proc = self._replicas[replica].proc
            if proc is None or not proc.alive():
                return []
            return [p for p in process_tree(proc.pid) if is_running(p)]

    def stop(self) -> None:
        """Stop supervision, then every driver: SIGTERM, wait, SIGKILL its process tree.

        Ctrl-C and SIGTERM are held off until every driver is stopped (then journaled as
        ``interrupt-ignored``): stopping is bounded by ``stop_timeout_s`` and ``tree_grace_s``.
        """
        with DeferredInterrupts() as held:
            self._stop()
        if held.received and not held.nested:  # else the outer stop (deploy's) reports them
            self.journal.write(
                Event.INTERRUPT_IGNORED,
                signals=[signal.Signals(s).name for s in held.received],
                during="stopping the replicas",
            )

    def _stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            live = [r for r in self._replicas if r.proc is not None]
            standbys = [sb for sb in self._standbys if sb.proc is not None]
            # SIGTERM every driver first, so that they shut down in parallel.
            terminated = time.monotonic()
            for rep in live:
                assert rep.proc is not None
                rep.proc.terminate()
            for sb in standbys:
                assert sb.proc is not None
                if sb.niced:  # at 19 it would hardly get the CPU to exit within its grace
                    set_nice(process_tree(sb.proc.pid), 0)
                sb.proc.terminate()
            deadline = time.monotonic() + self.stop_timeout_s
            standby_deadline = time.monotonic() + min(STANDBY_STOP_GRACE_S, self.stop_timeout_s)
            for sb in standbys:
                assert sb.proc is not None
                code = sb.proc.stop(
                    grace_s=max(0.1, standby_deadline - time.monotonic()),
                    tree_grace_s=self.tree_grace_s,
                )
                self.journal.write(
                    Event.STANDBY_STOPPED,
                    standby=sb.sid,
                    pid=sb.proc.pid,
                    ready=sb.ready,
                    exit_code=code,
                    graceful=bool(sb.proc.graceful) and code == 0,
                    leftover_pids=sb.proc.survivors,
                    after_s=round(time.monotonic() - terminated, 3),
                )
                # What it rehearsed on (a promoted standby checkpoints as its replica instead).
                shutil.rmtree(self._standby_checkpoint(sb.sid), ignore_errors=True)
            for sb in self._standbys:
                sb.proc, sb.spawn_at = None, None
            for rep in live:
                assert rep.proc is not None
                # Then its JVMs: a stopped driver's JVM exits on its own once its Python parent
                # is gone (tree_grace_s); what is left of the tree is killed.
                code = rep.proc.stop(
                    grace_s=max(0.1, deadline - time.monotonic()), tree_grace_s=self.tree_grace_s
                )
                if rep.state.status not in ("dead", "stopped"):
                    self.journal.write(
                        Event.REPLICA_STOPPED,
                        replica=rep.index,
                        pid=rep.proc.pid,
                        exit_code=code,
                        graceful=bool(rep.proc.graceful) and code == 0,
                        leftover_pids=rep.proc.survivors,
                    )
                rep.state = replace(rep.state, status="stopped", exit_code=code)

    def __enter__(self) -> ReplicaRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals ------------------------------------------------------------------

    def _config(self, rep: _Replica) -> DriverConfig:
        return DriverConfig(
            spec=self.spec.model_dump(mode="json", by_alias=True),
            replica=rep.index,
            bootstrap=self.bootstrap,
            output_topic=self.output_topic(rep.index),
            checkpoint_dir=str(rep.checkpoint or self.checkpoint_dir(rep.index)),
            progress_file=str(self.paths.progress(rep.index)),
            app_id_file=str(rep.app_id_path),
            master=self.master,
            conf=self.extra_conf,
            jars=self.jars,
            attempt=rep.attempt,
            # Replica 0's app file: where a staggered replica reads when replica 0's query
            # started (see arfl.replica.modes.active).
            # and the other replicas' progress files, whose batch boundaries a real-time
            # replica keeps away from, and their app files, which say when one restarted
            # (arfl.replica.phase).
            mode_options={
                STAGGER_REF: str(self._replicas[0].app_id_path),
                PEER_PROGRESS: json.dumps(
                    [str(self.paths.progress(r.index)) for r in self._replicas if r is not rep]
                ),
                PEER_APPS: json.dumps([str(r.app_id_path) for r in self._replicas if r is not rep]),
                **self.mode_options,
                **({STARTING_OFFSETS: rep.start_offsets} if rep.start_offsets else {}),
            },
        )

    def _resume(self, rep: _Replica) -> dict[str, object]:
        """Decide where replica ``rep``'s next attempt starts reading (:mod:`.resume`) and
        apply it; the journal's fields."""
        planned = plan_resume(
            self.spec,
            self.paths.root,
            rep.index,
            rep.attempt,
            {r.index: r.checkpoint or self.checkpoint_dir(r.index) for r in self._replicas},
            self.mode_options.get(STARTING_OFFSETS),
        )
        if planned.checkpoint is not None:
            if planned.journal.get("resume") == "peer" and rep.checkpoint is not None:
                shutil.rmtree(rep.checkpoint, ignore_errors=True)  # an earlier copy, replaced
            rep.checkpoint = planned.checkpoint
        if planned.start_offsets is not None:
            rep.start_offsets = planned.start_offsets
        return planned.journal

    def _standby_paths(self, sid: int) -> tuple[Path, Path, Path, Path]:
        """(config, app file, assignment, log) of standby ``sid``."""
        rdir = self.paths.root / "replicas"
        return (
            rdir / f"standby-{sid}.json",
            rdir / f"standby-{sid}.app.json",
            rdir / f"standby-{sid}.assign.json",
            self.paths.log(f"standby-{sid}"),
        )

    def _standby_checkpoint(self, sid: int) -> Path:
        """Standby ``sid``'s own checkpoint directory (its rehearsal's)."""
        return self.paths.root / "checkpoints" / f"standby-{sid}"

    def _spawn_standby(self, sb: _Standby) -> None:
        sid = self._standby_count
        self._standby_count += 1
        config, app, assign, log = self._standby_paths(sid)
        config.parent.mkdir(parents=True, exist_ok=True)
        DriverConfig(
            spec=self.spec.model_dump(mode="json", by_alias=True),
            replica=sid,
            bootstrap=self.bootstrap,
            output_topic=f"{self.spec.sink.topic}.standby{sid}",
            checkpoint_dir=str(self._standby_checkpoint(sid)),
            progress_file=str(self.paths.root / "progress" / f"standby-{sid}.jsonl"),
            app_id_file=str(app),
            master=self.master,
            conf=self.extra_conf,
            jars=self.jars,
            mode_options=dict(self.mode_options),
            standby=True,
            assignment_file=str(assign),
            rehearsal_input=self._rehearsal_input,
        ).dump(config)
        for f in (app, assign):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"=== arfl: standby {sid} at {time.ctime()} ===\n".encode())
        argv = list(self._command(STANDBY, config))
        try:
            proc = ManagedProcess.start(
                f"standby-{sid}",
                argv,
                log,
                env=self._driver_env(f"standby-{sid}"),
                cwd=self.paths.root,
            )
        except OSError as e:
            raise DeployError(f"cannot start standby {sid} ({argv[0]}): {e}") from None
        sb.sid, sb.proc, sb.ready, sb.spawn_at = sid, proc, False, None
        sb.spawned_at = time.time()
        # Before the interpreter starts its JVM: every process and thread after inherits it.
        # Only where it can be undone at the take-over (else the replica would stay niced).
        p = same_process(proc.pid, None)
        niced = p is not None and can_unnice() and set_nice([p], STANDBY_NICE)
        sb.niced = niced
        self.journal.write(
            Event.STANDBY_STARTED, standby=sid, pid=proc.pid, nice=STANDBY_NICE if niced else 0
        )

    def _start_standby(self, sb: _Standby) -> None:
        if self._standbys_given_up:
            return
        try:
            self._spawn_standby(sb)
        except (OSError, DeployError) as e:  # a spare that cannot start must not stop the rest
            self._give_up_standbys(f"cannot start a standby: {e}")

    def _give_up_standbys(self, reason: str) -> None:
        self._standbys_given_up = True
        for sb in self._standbys:
            sb.spawn_at = None
        self.journal.write(Event.STANDBY_GAVE_UP, reason=reason)

    def _check_standby(self, sb: _Standby) -> None:
        now = time.time()
        if sb.proc is None:
            if sb.spawn_at is not None and now >= sb.spawn_at:
                self._start_standby(sb)
            return
        code = sb.proc.returncode
        if code is not None:
            signal_all(sb.proc.descendants(), signal.SIGKILL)
            self.journal.write(Event.STANDBY_DIED, standby=sb.sid, pid=sb.proc.pid, exit_code=code)
            self._standby_failures = 0 if sb.ready else self._standby_failures + 1
            sb.proc, sb.ready = None, False
            if self._standby_failures >= STANDBY_FAILURE_LIMIT:
                self._give_up_standbys(
                    f"{self._standby_failures} standbys died before they were ready; "
                    f"see {self._standby_paths(sb.sid)[3]}"
                )
            elif not self._standbys_given_up:
                sb.spawn_at = now + self.restart_delay_s
            return
        if not sb.ready:
            try:
                info = json.loads(self._standby_paths(sb.sid)[1].read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return
            if isinstance(info, dict) and info.get("ready"):
                sb.ready = True
                self._standby_failures = 0
                self.journal.write(
                    Event.STANDBY_READY,
                    standby=sb.sid,
                    pid=sb.proc.pid,
                    startup_s=round(now - sb.spawned_at, 3),
                )

    def _promote(self, rep: _Replica, sb: _Standby, *, replays: bool) -> None:
        """Hand replica ``rep``'s config to the ready standby ``sb``; ``replays``: it starts
        from a checkpoint (its own or a peer's), not at the output frontier."""
        assert sb.proc is not None
        cfg = self._config(rep)
        cfg.dump(rep.config_path)
        with contextlib.suppress(FileNotFoundError):
            rep.app_id_path.unlink()
        now = time.time()
        # A replica that replays from a checkpoint (a stateful pipeline, resume = "checkpoint"
        # or "peer", another mode than active, or no output frontier yet) covers no one until
        # it is done, and at niceness 19 it barely replays (docs/benchmarks.md): it yields only
        # when it starts at the output frontier.
        yielding = self.spec.replication.standby_yield and sb.niced and not replays
        reniced = False if yielding else set_nice(process_tree(sb.proc.pid), 0)
        rep.yield_since = now if yielding else None
        if yielding:
            # Only what the merger writes from now on (a long run's file is megabytes).
            self._monitor = MonitorTail(self.paths.monitor, from_end=True)
        log = self._standby_paths(sb.sid)[3]
        banner = (
            f"=== arfl: replica {rep.index} attempt {rep.attempt} at {time.ctime()}: standby "
            f"{sb.sid} (pid {sb.proc.pid}) takes over; its log: {log} ===\n"
        )
        with rep.log_path.open("ab") as out:
            out.write(banner.encode())
        write_json_atomic(self._standby_paths(sb.sid)[2], asdict(cfg))
        rep.proc, rep.proc_log = sb.proc, log
        rep.state = replace(
            rep.state, status="starting", pid=sb.proc.pid, app_id=None, started_at=now
        )
        self.journal.write(
            Event.REPLICA_STARTED,
            replica=rep.index,
            pid=sb.proc.pid,
            attempt=rep.attempt,
            standby=sb.sid,
            reniced=reniced,
            **({"yielding": True} if yielding else {}),
        )
        sb.proc, sb.ready = None, False
        sb.spawn_at = None if self._standbys_given_up else now + STANDBY_RESPAWN_DELAY_S

    def _spawn(self, rep: _Replica) -> None:
        self._config(rep).dump(rep.config_path)
        with contextlib.suppress(FileNotFoundError):
            rep.app_id_path.unlink()
        rep.log_path.parent.mkdir(parents=True, exist_ok=True)
        banner = f"=== arfl: replica {rep.index} attempt {rep.attempt} at {time.ctime()} ===\n"
        with rep.log_path.open("ab") as log:
            log.write(banner.encode())
        argv = list(self._command(rep.index, rep.config_path))
        try:
            rep.proc = ManagedProcess.start(
                f"replica-{rep.index}",
                argv,
                rep.log_path,
                env=self._driver_env(f"replica-{rep.index}"),
                cwd=self.paths.root,
            )
        except OSError as e:
            raise DeployError(f"cannot start replica {rep.index} ({argv[0]}): {e}") from None
        rep.proc_log = rep.log_path
        now = time.time()
        rep.state = replace(
            rep.state, status="starting", pid=rep.proc.pid, app_id=None, started_at=now
        )
        self.journal.write(
            Event.REPLICA_STARTED, replica=rep.index, pid=rep.proc.pid, attempt=rep.attempt
        )

    def _refresh_app_id(self, rep: _Replica) -> None:
        if rep.state.status != "starting" or not rep.app_id_path.exists():
            return
        try:
            info = json.loads(rep.app_id_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return
        rep.state = replace(rep.state, status="running", app_id=str(info.get("app_id")))
        rep.failures_without_app = 0
        self.journal.write(
            Event.REPLICA_READY,
            replica=rep.index,
            pid=rep.state.pid,
            app_id=rep.state.app_id,
            attempt=rep.attempt,
            startup_s=round(time.time() - (rep.state.started_at or time.time()), 3),
        )

    def _supervise(self) -> None:
        while not self._stopping.wait(self.poll_interval_s):
            with self._lock:
                for sb in self._standbys:
                    if self._stopping.is_set():
                        return
                    self._check_standby(sb)
                for rep in self._replicas:
                    if self._stopping.is_set():
                        return
                    self._check(rep)

    def _give_up_reason(self, rep: _Replica, code: int) -> tuple[str, str | None] | None:
        """Why a replica that just exited is not restarted (reason, detail), or None."""
        if not self.spec.replication.restart:
            return "replication.restart is false", None
        if restart_suppressed(self.paths.root, rep.index):
            # A 'kill-replica' fault with restart = false asked the supervisor to stand down.
            return "no-restart marker (fault)", None
        if code == EXIT_BAD_CONFIG:
            return f"the pipeline cannot be built (exit code {code}); see {rep.proc_log}", None
        if rep.failures_without_app >= self.crash_loop_limit:
            return "crash-loop", (
                f"died {rep.failures_without_app} times in a row before Spark was up; "
                f"see {rep.proc_log}"
            )
        if len(rep.exits) > self.crash_loop_restarts:
            return "crash-loop", (
                f"exited again (exit code {code}) after {len(rep.exits) - 1} restarts "
                f"within {self.crash_loop_window_s:.0f}s; see {rep.proc_log}"
            )
        return None

    def _end_yield(self, rep: _Replica) -> None:
        """Give a promoted standby that yielded the CPU its full priority back once the merger
        saw it caught up (a result of its own since, and at most :data:`YIELD_UNTIL_LAG_MS`
        behind: ``ReplicaSnapshot.behind_ms``, its trail of the output with two or more
        replicas), or after :data:`YIELD_MAX_S`."""
        if rep.yield_since is None or rep.proc is None or self._monitor is None:
            return
        now = time.time()
        self._monitor.poll()
        snap = self._monitor.latest
        seen = snap.replicas.get(rep.index) if snap is not None else None
        caught_up = (
            seen is not None
            and seen.last_seen_t is not None
            and seen.last_seen_t > rep.yield_since
            and seen.behind_ms is not None
            and seen.behind_ms <= YIELD_UNTIL_LAG_MS
        )
        if not caught_up and now - rep.yield_since < YIELD_MAX_S:
            return
        reniced = set_nice(process_tree(rep.proc.pid), 0)
        self.journal.write(
            Event.REPLICA_RENICED,
            replica=rep.index,
            pid=rep.proc.pid,
            after_s=round(now - rep.yield_since, 3),
            why="caught up" if caught_up else f"not caught up after {YIELD_MAX_S:g}s",
            behind_ms=None if seen is None else seen.behind_ms,
            reniced=reniced,
        )
        rep.yield_since = None

    def _fail_over_lost_executor(self, rep: _Replica) -> None:
        """A real-time replica that lost an executor JVM waits for Spark to start a new one and
        re-run its tasks (13 s measured, docs/benchmarks.md); a ready standby resumes it sooner.
        So its driver is killed (``replica-executor-lost``) and the usual take-over follows."""
        if (
            rep.proc is None
            or rep.state.status != "running"
            or self.spec.replication.trigger != "realtime"
            or not self.spec.replication.standby
        ):
            return
        tree = [p for p in process_tree(rep.proc.pid) if is_running(p)]
        if not tree or tree[0].pid != rep.proc.pid:
            return  # the driver itself is gone: its death is handled below
        # Executor JVMs by their main class; not their children, which carry the same command
        # line from fork to exec (a windowed replica's executors start hundreds: Hadoop's local
        # file system runs readlink/chmod/rm at each state checkpoint) and then vanish:
        # counted, they looked lost.
        parent_of: dict[int, int] = {}
        for p in tree[1:]:
            with contextlib.suppress(psutil.Error):
                if EXECUTOR_MAIN in " ".join(p.cmdline()[:200]):
                    parent_of[p.pid] = p.ppid()
        alive = not_forked_from_another(parent_of)
        lost, rep.executors = rep.executors - alive, alive
        ready = [
            sb for sb in self._standbys if sb.proc is not None and sb.ready and sb.proc.alive()
        ]
        if not lost or not ready:
            return
        self.journal.write(
            Event.REPLICA_EXECUTOR_LOST,
            replica=rep.index,
            pid=rep.proc.pid,
            executors=sorted(lost),
            action=f"driver killed: standby {ready[0].sid} takes over",
        )
        signal_all(tree, signal.SIGKILL)

    def _check(self, rep: _Replica) -> None:
        self._refresh_app_id(rep)
        self._end_yield(rep)
        self._fail_over_lost_executor(rep)
        if rep.state.status == "restarting":
            assert rep.died_at is not None
            ready = [
                sb for sb in self._standbys if sb.proc is not None and sb.ready and sb.proc.alive()
            ]
            # A standby takes over at once: the dead driver's tree was killed when its death was
            # seen, and the standby's JVMs are its own.
            if ready or time.time() - rep.died_at >= self.restart_delay_s:
                rep.attempt += 1
                resumed = self._resume(rep)
                took: dict[str, int] = {}
                if ready and ready[0].proc is not None:
                    took["standby"] = ready[0].sid
                    self._promote(rep, ready[0], replays=resumed["resume"] != "output")
                else:
                    self._spawn(rep)
                rep.state = replace(rep.state, restarts=rep.state.restarts + 1)
                self.journal.write(
                    Event.REPLICA_RESTARTED,
                    replica=rep.index,
                    pid=rep.state.pid,
                    attempt=rep.attempt,
                    restarts=rep.state.restarts,
                    downtime_s=round(time.time() - rep.died_at, 3),
                    **took,
                    **resumed,
                )
            return
        if rep.proc is None or rep.state.status not in ("starting", "running"):
            return
        code = rep.proc.returncode
        if code is None:
            return
        # Kill what is left of its tree (driver JVM, executors: still in the dead driver's
        # session) so a restart starts clean.
        signal_all(rep.proc.descendants(), signal.SIGKILL)
        rep.yield_since, rep.executors = None, set()
        now = time.time()
        if rep.state.status == "starting":
            rep.failures_without_app += 1
        if code >= 0:
            rep.exits = [t for t in rep.exits if now - t <= self.crash_loop_window_s] + [now]
        self.journal.write(
            Event.REPLICA_DIED,
            replica=rep.index,
            pid=rep.proc.pid,
            exit_code=code,
            app_id=rep.state.app_id,
            uptime_s=round(now - (rep.state.started_at or now), 3),
        )
        rep.died_at = now
        give_up = self._give_up_reason(rep, code)
        if give_up is not None:
            reason, detail = give_up
            rep.state = replace(rep.state, status="dead", exit_code=code)
            extra = {} if detail is None else {"detail": detail}
            self.journal.write(Event.REPLICA_GAVE_UP, replica=rep.index, reason=reason, **extra)
        else:
            rep.state = replace(rep.state, status="restarting", exit_code=code)
