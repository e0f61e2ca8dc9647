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
* ``standby-started`` {standby, pid, nice, cpu_shares} /
  ``standby-ready`` {standby, pid, startup_s} / ``standby-died`` {standby, pid, exit_code} /
  ``standby-gave-up`` {reason} /
  ``standby-stopped`` {standby, pid, ready, exit_code, graceful, leftover_pids, after_s} — at
  the run's stop, ``after_s`` after its SIGTERM: at most :data:`STANDBY_STOP_GRACE_S` before
  its tree is killed (a standby holds no replica); ``ready`` as supervision last saw it, and a
  standby that died since supervision's last look is reported here too (its exit code)
* ``replica-reniced`` {replica, pid, after_s, why, behind_ms, reniced} — a promoted standby that
  yielded the CPU (``replication.standby_yield``) got niceness 0 back
* ``replica-executor-lost`` {replica, pid, executors, action} — a real-time replica lost an
  executor JVM while a standby was ready: its driver is killed and the standby takes over

The supervisor coordinates four parts, one module each: how a driver is started
(:mod:`.drivers`), when a dead one is restarted or given up (:mod:`.restarts`), where it resumes
(:mod:`.resume`) and the standby pool that takes a replica over (:mod:`.standbys`,
``replication.standby = N``: ``replica-started`` and ``replica-restarted`` then carry
``standby: K``). A real-time replica that loses an executor JVM while a standby is ready is
handed to the standby too (its driver killed, :mod:`.failover`): Spark would start a new
executor JVM and re-run the lost tasks, ~13 s here.

``stop()`` SIGTERMs each driver, waits, then SIGKILLs what is left of its whole process tree
(the driver JVM and, in ``local-cluster``, the executor JVMs are its descendants). A Ctrl-C
or SIGTERM arriving meanwhile is noted, not raised: an interrupted stop would leave the
remaining drivers running in their own sessions.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil

from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.orchestrate import failover, window_resume
from arfl.orchestrate.drivers import DriverLaunch, Drivers
from arfl.orchestrate.interrupts import DeferredInterrupts
from arfl.orchestrate.restarts import RestartPolicy
from arfl.orchestrate.resume import plan_resume
from arfl.orchestrate.slots import ReplicaSlot, ReplicaState
from arfl.orchestrate.standbys import StandbyPool, StandbyState
from arfl.processes import ExitWatch, is_running, process_tree, signal_all, wait_until
from arfl.replica.app import DriverConfig
from arfl.replica.modes.base import PEER_APPS, PEER_PROGRESS, STAGGER_REF, STARTING_OFFSETS
from arfl.run.events import Event
from arfl.run.records import replica_topic
from arfl.run.rundir import Journal, RunPaths


class ReplicaRunner:
    """Starts R replica drivers and keeps them running.

    Example::

        launch = DriverLaunch("127.0.0.1:9092", jars=installed.spark_kafka_jars)
        with ReplicaRunner(spec, run_dir, launch) as r:
            r.wait_ready(timeout=120)
            ...
            r.kill(0)            # SIGKILL replica 0's driver tree; the supervisor restarts it
    """

    def __init__(
        self,
        spec: Spec,
        run_dir: Path,
        launch: DriverLaunch,
        *,
        journal: Journal | None = None,
        policy: RestartPolicy | None = None,
        poll_interval_s: float = 0.2,
        stop_timeout_s: float = 30.0,
        tree_grace_s: float = 5.0,
    ) -> None:
        """Prepare (but do not start) the replicas.

        Args:
            spec: the validated spec (``replication.replicas`` drivers are run).
            run_dir: the run directory (see :mod:`arfl.run.rundir`).
            launch: how the drivers are started (Kafka, jars, master, SPARK_HOME, command).
            journal: where to journal events; default ``run_dir/journal.jsonl``.
            policy: when to restart; default ``replication.restart`` with the crash-loop
                limits of :mod:`.restarts`.
            poll_interval_s: supervision period.
            stop_timeout_s: grace period between SIGTERM and SIGKILL in :meth:`stop`.
            tree_grace_s: after a driver stopped gracefully, how long its JVMs may take to
                exit before they are killed.
        """
        self.spec = spec
        self.paths = RunPaths(run_dir)
        self.launch = launch
        self.drivers = Drivers(spec, self.paths, launch)
        self.journal = journal or Journal(self.paths.journal)
        self.policy = policy or RestartPolicy(restart=spec.replication.restart)
        self.poll_interval_s = poll_interval_s
        self.stop_timeout_s = stop_timeout_s
        self.tree_grace_s = tree_grace_s
        self._local_executors = spec.spark.target == "local" and spec.spark.master.startswith(
            "local-cluster["
        )
        """Executor JVMs in the drivers' trees: while a replica shows none, its tree is read
        at every look."""
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        """Set when a driver exits: supervision looks at once, not at its next period (every
        millisecond before a standby takes over is one the survivors cover alone)."""
        self._deaths = ExitWatch(self._driver_pids, self._wake, self._stopping)
        self._placer = (
            window_resume.Placer(launch.bootstrap) if spec.resumes_from_window_start else None
        )
        """Places a restarted replica's start at a window (:mod:`.window_resume`)."""
        rdir = run_dir / "replicas"
        self._replicas = [
            ReplicaSlot(
                i,
                rdir / f"replica-{i}.json",
                rdir / f"replica-{i}.app.json",
                self.paths.log(f"replica-{i}"),
            )
            for i in range(spec.replication.replicas)
        ]
        self.standbys = StandbyPool(
            spec, self.drivers, self.journal, spec.replication.standby, self.policy.delay_s
        )

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
        self.drivers.prepare([f"replica-{rep.index}" for rep in self._replicas])
        for rep in self._replicas:
            rep.config_path.parent.mkdir(parents=True, exist_ok=True)
            self._spawn(rep)
        self.standbys.start_all()
        if self._placer is not None:
            self._placer.connect()
        self._thread = threading.Thread(target=self._supervise, name="arfl-replicas", daemon=True)
        self._thread.start()
        self._deaths.start()

    def _driver_pids(self) -> list[int]:
        """The replicas' driver pids (what :class:`ExitWatch` waits on)."""
        return [rep.proc.pid for rep in self._replicas if rep.proc is not None]

    @property
    def spark_home(self) -> Path | None:
        """The run's SPARK_HOME (None: the shared one)."""
        return self.launch.spark_home

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
            return self.standbys.states()

    def standbys_wanted(self) -> bool:
        """False once standbys were given up (none will come)."""
        return self.standbys.wanted()

    def wait_standbys(self, timeout_s: float) -> bool:
        """Block until every standby slot holds a ready standby (True), or until the timeout
        or until standbys were given up (False)."""

        def settled() -> bool | None:
            with self._lock:
                if self.standbys.all_ready():
                    return True
                return None if self.standbys.wanted() else False

        try:
            return wait_until(settled, timeout_s=timeout_s, interval_s=self.poll_interval_s)
        except TimeoutError:
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
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._placer is not None:
            self._placer.close()
        with self._lock:
            live = [r for r in self._replicas if r.proc is not None]
            # SIGTERM every driver first, so that they shut down in parallel.
            terminated = time.monotonic()
            for rep in live:
                assert rep.proc is not None
                rep.proc.terminate()
            standbys = self.standbys.terminate()
            deadline = time.monotonic() + self.stop_timeout_s
            self.standbys.stop(standbys, terminated, self.stop_timeout_s, self.tree_grace_s)
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

    def _config(self, rep: ReplicaSlot) -> DriverConfig:
        options = self.launch.mode_options
        return self.drivers.config(
            replica=rep.index,
            output_topic=self.output_topic(rep.index),
            checkpoint_dir=rep.checkpoint or self.checkpoint_dir(rep.index),
            progress_file=self.paths.progress(rep.index),
            app_id_file=rep.app_id_path,
            control_dir=self.paths.control(rep.index),
            attempt=rep.attempt,
            # Replica 0's app file: where a staggered replica reads when replica 0's query
            # started (see arfl.replica.modes.active), and the other replicas' progress files,
            # whose batch boundaries a real-time replica keeps away from, and their app files,
            # which say when one restarted (arfl.replica.phase).
            mode_options={
                STAGGER_REF: str(self._replicas[0].app_id_path),
                PEER_PROGRESS: json.dumps(
                    [str(self.paths.progress(r.index)) for r in self._replicas if r is not rep]
                ),
                PEER_APPS: json.dumps([str(r.app_id_path) for r in self._replicas if r is not rep]),
                **options,
                **({STARTING_OFFSETS: rep.start_offsets} if rep.start_offsets else {}),
            },
        )

    def _resume(self, rep: ReplicaSlot) -> dict[str, object]:
        """Decide where replica ``rep``'s next attempt starts reading (:mod:`.resume`) and
        apply it; the journal's fields."""
        planned = plan_resume(
            self.spec,
            self.paths.root,
            rep.index,
            rep.attempt,
            {r.index: r.checkpoint or self.checkpoint_dir(r.index) for r in self._replicas},
            self.launch.mode_options.get(STARTING_OFFSETS),
            self._placer,
        )
        if planned.checkpoint is not None:
            if planned.journal.get("resume") == "peer" and rep.checkpoint is not None:
                shutil.rmtree(rep.checkpoint, ignore_errors=True)  # an earlier copy, replaced
            rep.checkpoint = planned.checkpoint
        if planned.start_offsets is not None:
            rep.start_offsets = planned.start_offsets
        return planned.journal

    def _spawn(self, rep: ReplicaSlot) -> None:
        self._config(rep).dump(rep.config_path)
        rep.app_id_path.unlink(missing_ok=True)
        rep.log_path.parent.mkdir(parents=True, exist_ok=True)
        banner = f"=== arfl: replica {rep.index} attempt {rep.attempt} at {time.ctime()} ===\n"
        with rep.log_path.open("ab") as log:
            log.write(banner.encode())
        rep.proc = self.drivers.start(
            f"replica-{rep.index}", rep.index, rep.config_path, rep.log_path
        )
        rep.proc_log = rep.log_path
        now = time.time()
        rep.state = replace(
            rep.state, status="starting", pid=rep.proc.pid, app_id=None, started_at=now
        )
        self.journal.write(
            Event.REPLICA_STARTED, replica=rep.index, pid=rep.proc.pid, attempt=rep.attempt
        )

    def _refresh_app_id(self, rep: ReplicaSlot) -> None:
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
        while not self._stopping.is_set():
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._lock:
                self.standbys.check_all(self._stopping)
                for rep in self._replicas:
                    if self._stopping.is_set():
                        return
                    self._check(rep)

    def _fail_over_lost_executor(self, rep: ReplicaSlot) -> None:
        """A running real-time replica that lost an executor JVM while a standby is ready:
        kill its driver (``replica-executor-lost``); the take-over follows (:mod:`.failover`)."""
        if (
            rep.proc is None
            or rep.state.status != "running"
            or self.spec.replication.trigger != "realtime"
            or not self.spec.replication.standby
        ):
            return
        now = time.monotonic()
        if (
            (rep.executors or not self._local_executors)
            and now - rep.executors_read_at < failover.TREE_READ_S
            and all(is_running(p) for p in rep.executor_procs)
        ):
            return
        found = failover.executor_jvms(rep.proc.pid)
        rep.executors_read_at = now
        if found is None:
            return  # the driver itself is gone: its death is handled by _check
        tree, alive = found
        rep.executor_procs = [p for p in tree if p.pid in alive]
        lost, rep.executors = rep.executors - alive, alive
        ready = self.standbys.ready()
        if not lost or ready is None:
            return
        self.journal.write(
            Event.REPLICA_EXECUTOR_LOST,
            replica=rep.index,
            pid=rep.proc.pid,
            executors=sorted(lost),
            action=f"driver killed: standby {ready.sid} takes over",
        )
        signal_all(tree, signal.SIGKILL)

    def _restart(self, rep: ReplicaSlot) -> None:
        """Restart a dead replica once its delay passed, or at once on a ready standby (the
        dead driver's tree was killed when its death was seen; the standby's JVMs are its
        own)."""
        assert rep.died_at is not None
        ready = self.standbys.ready()
        if ready is None and time.time() - rep.died_at < self.policy.delay_s:
            return
        rep.attempt += 1
        resumed = self._resume(rep)
        took: dict[str, int] = {}
        if ready is not None:
            took["standby"] = ready.sid
            self.standbys.take_over(
                rep, ready, self._config(rep), replays=resumed["resume"] != "output"
            )
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

    def _check(self, rep: ReplicaSlot) -> None:
        self._refresh_app_id(rep)
        self.standbys.end_yield(rep)
        self._fail_over_lost_executor(rep)
        if rep.state.status == "restarting":
            self._restart(rep)
            return
        if rep.proc is None or rep.state.status not in ("starting", "running"):
            return
        code = rep.proc.returncode
        if code is None:
            return
        # Kill what is left of its tree (driver JVM, executors: still in the dead driver's
        # session) so a restart starts clean.
        signal_all(rep.proc.descendants(), signal.SIGKILL)
        rep.yield_since, rep.executors, rep.executor_procs = None, set(), []
        rep.executors_read_at = 0.0
        now = time.time()
        self.policy.died(rep, code, now)
        self.journal.write(
            Event.REPLICA_DIED,
            replica=rep.index,
            pid=rep.proc.pid,
            exit_code=code,
            app_id=rep.state.app_id,
            uptime_s=round(now - (rep.state.started_at or now), 3),
        )
        rep.died_at = now
        give_up = self.policy.give_up(rep, code, self.paths.root)
        if give_up is not None:
            reason, detail = give_up
            rep.state = replace(rep.state, status="dead", exit_code=code)
            extra = {} if detail is None else {"detail": detail}
            self.journal.write(Event.REPLICA_GAVE_UP, replica=rep.index, reason=reason, **extra)
        else:
            rep.state = replace(rep.state, status="restarting", exit_code=code)
            if self.standbys.ready() is not None:
                self._restart(rep)  # a ready standby takes over now, not a period later
