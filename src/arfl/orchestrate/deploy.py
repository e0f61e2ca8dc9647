"""``arfl deploy``: one experiment end to end.

Order of events: resolve the stack (start the embedded one if needed), fetch the connector
jars, create the run directory and this run's topics, start the merger, start the replicas and
wait until every one has a SparkSession, start the injector and the spec's chaos schedule,
watch (a ``Tick`` per half second for the live view), drain the last results, stop everything
by pid (also on Ctrl-C, SIGTERM and errors), and write ``summary.json``.

Topics are scoped to the run (``<topic>.<run id>``) so that runs never read each other's data;
the names are in ``state.json`` and ``summary.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from arfl import stack
from arfl.configs.spec import Spec
from arfl.errors import ArflError, DeployError
from arfl.faults.netns import needs_isolation
from arfl.faults.state import IsolationState
from arfl.measure.merger import MergerConfig
from arfl.orchestrate.rejoin import RejoinTracker
from arfl.orchestrate.supervisor import ReplicaRunner, default_command
from arfl.run.progress import reached
from arfl.run.records import replica_topic
from arfl.run.rundir import Journal, RunPaths, new_run_dir, read_jsonl, write_json_atomic
from arfl.run.streams import InjectorSecond, InjectorStatsTail, MonitorSnapshot, MonitorTail
from arfl.workload.injector import InjectorConfig

if TYPE_CHECKING:
    from arfl.stack.embedded import EmbeddedStack

TICK_S = 0.5
REJOIN_GRACE_S = 180.0
"""Extra drain time while a restarted replica has not caught up yet."""


@dataclass(frozen=True)
class DeployOptions:
    """How to run a deployment (not what: that is the spec).

    Attributes:
        runs_root: parent of new run directories.
        run_dir: use this run directory instead of a new one under ``runs_root``.
        ready_timeout_s: how long replicas may take to start.
        drain_s: how long to wait for the last results after the input ends (None: derived
            from the pipeline: window size + watermark + a margin).
        master: override ``spark.master`` (e.g. a standalone cluster for a test).
        stack_state: state directory of the embedded stack (tests use their own).
    """

    runs_root: Path = Path("runs")
    run_dir: Path | None = None
    ready_timeout_s: float = 240.0
    drain_s: float | None = None
    master: str | None = None
    stack_state: Path | None = None


@dataclass
class Tick:
    """What the live view shows, about twice a second."""

    elapsed_s: float
    phase: str
    snapshot: MonitorSnapshot | None
    injector: InjectorSecond | None
    replicas: dict[int, str]
    faults: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DeployResult:
    """The outcome of a finished deployment."""

    run_dir: Path
    summary: dict[str, Any]


def scoped(spec: Spec, run_id: str) -> Spec:
    """The spec with this run's topic names (``<topic>.<run id>``)."""
    return spec.model_copy(
        update={
            "source": spec.source.model_copy(update={"topic": f"{spec.source.topic}.{run_id}"}),
            "sink": spec.sink.model_copy(update={"topic": f"{spec.sink.topic}.{run_id}"}),
        }
    )


def drain_seconds(spec: Spec) -> float:
    """The longest wait for replicas to catch up and emit their last results after the input.

    Deploy stops earlier, as soon as every replica has consumed the whole input and its
    output went quiet; this cap only matters for a replica that cannot keep up.
    """
    extra = 0.0
    for step in spec.steps:
        if step.window is not None:
            extra = step.window.size + step.window.watermark
    return 120.0 + extra


class _Child:
    """A helper process (injector, merger) started and stopped by pid."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM, wait, SIGKILL; returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Deployment:
    """A running experiment; use :func:`deploy` unless you need the pieces."""

    def __init__(self, spec: Spec, spec_path: Path | None, options: DeployOptions) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.options = options
        # Absolute: drivers run with another working directory and read their config from it.
        self.run_dir = (options.run_dir or new_run_dir(options.runs_root, spec.name)).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("progress", "logs"):
            (self.run_dir / sub).mkdir(exist_ok=True)
        self.paths = RunPaths(self.run_dir)
        self.run_id = self.run_dir.name
        self.journal = Journal(self.paths.journal)
        self.rspec = scoped(spec, self.run_id)
        self.injector_stats = self.run_dir / "injector.jsonl"
        self.info: stack.StackInfo | None = None
        self.runner: ReplicaRunner | None = None
        self.merger: _Child | None = None
        self.injector: _Child | None = None
        self.chaos: Any = None
        self.isolation: IsolationState | None = None
        self._cpu: dict[tuple[int, float], tuple[int, float]] = {}
        self.peak_rss = 0
        self.run_stack: EmbeddedStack | None = None
        self.started_at = time.time()
        self.t0: float | None = None

    # --- set-up ---------------------------------------------------------------------

    def prepare(self) -> None:
        """Stack, jars, run directory files and topics."""
        if needs_isolation(c.fault for c in self.spec.chaos):
            self._isolate()
        else:
            self.info = stack.resolve(self.spec.stack, state=self.options.stack_state)
        assert self.info is not None
        installed = stack.ensure_installed()
        self._jars = installed.spark_kafka_jars
        if self.spec_path is not None:
            shutil.copyfile(self.spec_path, self.run_dir / "spec.toml")
        write_json_atomic(
            self.run_dir / "spec.json", self.spec.model_dump(mode="json", by_alias=True)
        )
        src, sink = self.rspec.source, self.rspec.sink
        stack.topics.ensure_topic(self.info.kafka, src.topic, src.partitions, log_append_time=True)
        for i in range(self.rspec.replication.replicas):
            stack.topics.ensure_topic(self.info.kafka, replica_topic(sink.topic, i), src.partitions)
        stack.topics.ensure_topic(self.info.kafka, sink.topic, src.partitions)
        self.journal.write(
            "run-started",
            run=self.run_id,
            mode=self.spec.replication.mode,
            replicas=self.spec.replication.replicas,
            kafka=self.info.kafka,
            zookeeper=self.info.zookeeper,
            source_topic=src.topic,
            sink_topic=sink.topic,
        )
        self.write_state()

    def _isolate(self) -> None:
        """Network faults: each replica in its own namespace on a bridge, and a stack of this
        run's own listening on the bridge address (replicas cannot reach 127.0.0.1)."""
        from arfl.faults.netns import create_isolation, require_net_admin
        from arfl.stack.embedded import EmbeddedStack

        if self.spec.stack.kind != "embedded":
            raise DeployError(
                "network faults (partition, delay) need stack.kind = 'embedded': arfl starts "
                "ZooKeeper and Kafka on the replicas' bridge; an external stack is out of reach"
            )
        require_net_admin("network faults (partition, delay)")
        self.isolation = create_isolation(self.run_id, range(self.spec.replication.replicas))
        self.journal.write("isolation-created", **self.isolation.to_json())
        self.run_stack = EmbeddedStack(self.run_dir / "stack", host=self.isolation.host_ip)
        self.info = self.run_stack.start()
        self.journal.write(
            "run-stack-started", kafka=self.info.kafka, zookeeper=self.info.zookeeper
        )

    def _driver_command(self, replica: int, config: Path) -> list[str]:
        argv = default_command(replica, config)
        if self.isolation is None:
            return argv
        from arfl.faults.netns import netns_command

        return netns_command(self.isolation.namespaces[replica].name, argv)

    def write_state(self) -> None:
        """Keep ``state.json`` current (``arfl chaos`` reads it)."""
        replicas: dict[str, Any] = {}
        if self.runner is not None:
            for i, st in self.runner.states().items():
                ns = self.isolation.namespaces.get(i) if self.isolation else None
                create = None
                if st.pid is not None:
                    with contextlib.suppress(psutil.Error):
                        create = psutil.Process(st.pid).create_time()
                replicas[str(i)] = {
                    "driver_pid": st.pid,
                    "driver_create_time": create,
                    "app_id": st.app_id,
                    "state": st.status,
                    "restarts": st.restarts,
                    "netns": ns.name if ns else None,
                    "address": ns.address if ns else None,
                }
        assert self.info is not None
        write_json_atomic(
            self.paths.state,
            {
                "run": self.run_id,
                "pid": os.getpid(),
                "mode": self.spec.replication.mode,
                "spec_name": self.spec.name,
                "stack": {"kafka": self.info.kafka, "zookeeper": self.info.zookeeper},
                "topics": {
                    "source": self.rspec.source.topic,
                    "sink": self.rspec.sink.topic,
                    "replicas": [
                        replica_topic(self.rspec.sink.topic, i)
                        for i in range(self.spec.replication.replicas)
                    ],
                },
                "replicas": replicas,
                "leader_path": f"/arfl/{self.spec.name}/leader",
                "isolation": self.isolation.to_json() if self.isolation else None,
                "merger_pid": self.merger.pid if self.merger else None,
                "injector_pid": self.injector.pid if self.injector else None,
            },
        )

    def start(self) -> None:
        """Merger, replicas (waits until ready), then injector and chaos."""
        assert self.info is not None
        env = _python_env()
        mcfg = MergerConfig(
            bootstrap=self.info.kafka,
            sink=self.rspec.sink.topic,
            replicas=self.spec.replication.replicas,
            run_dir=self.run_dir,
            input_stats=self.injector_stats,
            percentiles=tuple(self.spec.report.percentiles),
        )
        self.merger = _Child(
            "merger",
            [sys.executable, "-m", "arfl.measure.merger", *mcfg.argv()],
            self.paths.log("merger"),
            env,
        )
        self.runner = ReplicaRunner(
            self.rspec,
            self.run_dir,
            self.info.kafka,
            jars=self._jars,
            master=self.options.master,
            journal=self.journal,
            command=self._driver_command,
            # Active modes: ZooKeeper for the leader election; the run id names this run's
            # decision topic so that no old decision is ever replayed.
            mode_options={"zookeeper": self.info.zookeeper, "run_id": self.run_id},
        )
        self.runner.start()
        self.write_state()
        deadline = time.monotonic() + self.options.ready_timeout_s
        self.runner.wait_ready(self.options.ready_timeout_s)
        self.write_state()
        self._wait_first_batches(deadline)
        if not self.merger.alive():
            raise DeployError(f"the merger exited at start:\n{self.merger.tail()}")
        icfg = InjectorConfig.from_workload(
            self.spec.workload,
            bootstrap=self.info.kafka,
            topic=self.rspec.source.topic,
            stats_path=self.injector_stats,
            journal_path=self.paths.journal,
        )
        self.injector = _Child(
            "injector",
            [sys.executable, "-m", "arfl.workload.injector", *icfg.argv()],
            self.paths.log("injector"),
            env,
        )
        self.t0 = time.time()
        self.journal.write(
            "workload-started", rate=self.spec.workload.rate, duration_s=self.spec.workload.duration
        )
        self.write_state()
        self._start_chaos()

    def _wait_first_batches(self, deadline: float) -> None:
        """Block until every replica's query has reported a batch (the pipeline runs)."""
        assert self.runner is not None
        n = self.spec.replication.replicas
        while True:
            waiting = [i for i in range(n) if not read_jsonl(self.paths.progress(i))]
            if not waiting:
                self.journal.write("replicas-processing", replicas=n)
                return
            dead = [i for i, s in self.runner.states().items() if s.status == "dead"]
            if dead:
                raise DeployError(
                    f"replica {dead[0]} died before its first batch; "
                    f"see {self.paths.log(f'replica-{dead[0]}')}"
                )
            if time.monotonic() > deadline:
                raise DeployError(
                    f"replica(s) {waiting} ran no batch within {self.options.ready_timeout_s:.0f}s;"
                    f" see " + ", ".join(str(self.paths.log(f"replica-{i}")) for i in waiting)
                )
            time.sleep(0.2)

    def _start_chaos(self) -> None:
        if not self.spec.chaos:
            return
        from arfl.faults.base import FaultParams
        from arfl.faults.local import LocalTarget
        from arfl.faults.runner import ChaosRunner

        target = LocalTarget.from_run_dir(self.run_dir)
        self.chaos = ChaosRunner(target, start_time=self.t0)
        self.chaos.start_schedule([FaultParams.from_chaos(c) for c in self.spec.chaos])

    # --- watching -------------------------------------------------------------------

    def watch(self, on_tick: Callable[[Tick], None] | None) -> None:
        """Until the input has ended and the output has drained."""
        assert self.injector is not None and self.merger is not None and self.runner is not None
        monitor = MonitorTail(self.paths.monitor)
        inj = InjectorStatsTail(self.injector_stats)
        drain = (
            self.options.drain_s if self.options.drain_s is not None else drain_seconds(self.spec)
        )
        rejoins = RejoinTracker(self.journal, self._source_end_offsets, self._last_progress)
        try:
            self._watch_loop(on_tick, monitor, inj, drain, rejoins)
        finally:
            rejoins.finish()

    def _watch_loop(
        self,
        on_tick: Callable[[Tick], None] | None,
        monitor: MonitorTail,
        inj: InjectorStatsTail,
        drain: float,
        rejoins: RejoinTracker,
    ) -> None:
        assert self.injector is not None and self.merger is not None and self.runner is not None
        phase = "running"
        input_done_at: float | None = None
        input_end_offsets: dict[int, int] = {}
        last_results = -1
        last_change = time.monotonic()
        last_state_write = 0.0
        while True:
            time.sleep(TICK_S)
            monitor.poll()
            inj.poll()
            states = self.runner.states()
            rejoins.observe(time.time(), {i: st.restarts for i, st in states.items()})
            self._sample_cpu(states)
            if time.monotonic() - last_state_write > 2.0:
                self.write_state()
                last_state_write = time.monotonic()
            if not self.merger.alive():
                raise DeployError(
                    f"the merger died (exit {self.merger.proc.returncode}); "
                    f"see {self.merger.log_path}:\n{self.merger.tail()}"
                )
            dead = [s.replica for s in states.values() if s.status == "dead"]
            if dead and len(dead) == len(states):
                raise DeployError(
                    f"every replica is dead; see {self.paths.log('replica-0')} and the journal"
                )
            if input_done_at is None and not self.injector.alive():
                code = self.injector.proc.returncode
                if code != 0 and inj.summary is None:
                    raise DeployError(
                        f"the injector failed (exit {code}); see {self.injector.log_path}:\n"
                        f"{self.injector.tail()}"
                    )
                input_done_at = time.monotonic()
                input_end_offsets = self._source_end_offsets()
                phase = "draining"
                self.journal.write("workload-finished", exit_code=code)
            snap = monitor.latest
            results = snap.results if snap is not None else 0
            if results != last_results:
                last_results = results
                last_change = time.monotonic()
            if on_tick is not None:
                on_tick(
                    Tick(
                        elapsed_s=time.time() - (self.t0 or self.started_at),
                        phase=phase,
                        snapshot=snap,
                        injector=inj.latest,
                        replicas={i: s.status for i, s in states.items()},
                        faults=self._active_faults(),
                    )
                )
            if input_done_at is not None:
                waited = time.monotonic() - input_done_at
                quiet = time.monotonic() - last_change
                # A replica restarted late (a driver kill near the end) gets longer to rejoin:
                # a new driver and its first, cold catch-up batch take minutes on small hosts.
                cap = drain + (REJOIN_GRACE_S if rejoins.rejoining else 0.0)
                if waited >= cap:
                    self.journal.write(
                        "warning",
                        message=f"replicas had not caught up {cap:.0f}s after the input "
                        "ended; stopping anyway (results may be missing)",
                    )
                    return
                if quiet >= 3.0 and self._caught_up(input_end_offsets):
                    return

    def _sample_cpu(self, states: dict[int, Any]) -> None:
        """Remember the CPU time of every process of every replica (a killed one keeps its
        last sample), so the summary can say what the replicas cost."""
        rss_now = 0
        for i, st in states.items():
            if st.pid is None:
                continue
            try:
                root = psutil.Process(st.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for p in procs:
                try:
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())
                except psutil.Error:
                    continue
                self._cpu[key] = (i, t.user + t.system)
                with contextlib.suppress(psutil.Error):
                    rss_now += p.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss_now)

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds each replica's processes used (sampled every tick)."""
        out: dict[int, float] = {}
        for replica, secs in self._cpu.values():
            out[replica] = out.get(replica, 0.0) + secs
        return out

    def _source_end_offsets(self) -> dict[int, int]:
        """The source topic's end offset per partition (the whole input, markers included)."""
        from confluent_kafka import Consumer, TopicPartition

        assert self.info is not None
        c = Consumer({"bootstrap.servers": self.info.kafka, "group.id": f"arfl-{self.run_id}"})
        try:
            ends: dict[int, int] = {}
            for p in range(self.rspec.source.partitions):
                _, high = c.get_watermark_offsets(
                    TopicPartition(self.rspec.source.topic, p), timeout=10
                )
                ends[p] = max(0, int(high))
            return ends
        finally:
            c.close()

    def _last_progress(self, replica: int) -> dict[str, Any] | None:
        progress = read_jsonl(self.paths.progress(replica))
        return progress[-1] if progress else None

    def _caught_up(self, end_offsets: dict[int, int]) -> bool:
        """Every replica's last batch reached the input's end and the one after it ran empty.

        The empty (no-data) batch is the one that advances the watermark and emits the windows
        it closed; per-record pipelines need none, but it costs nothing to wait for.
        """
        for i in range(self.spec.replication.replicas):
            progress = read_jsonl(self.paths.progress(i))
            if not progress or not reached(progress[-1], end_offsets):
                return False
            if self.spec.has_window and progress[-1].get("numInputRows", 0) != 0:
                return False
        return True

    def _active_faults(self) -> list[str]:
        if self.chaos is None:
            return []
        return [
            o.description
            for o in list(self.chaos.outcomes)
            if o.injected_at is not None and o.reverted_at is None
        ]

    # --- tear-down ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this deployment started, by pid; never raises for a dead child."""
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
        if self.merger is not None:
            self.merger.stop(timeout_s=30.0)
        if self.run_stack is not None:
            try:
                self.run_stack.stop()
            except ArflError as e:
                errors.append(str(e))
        if self.isolation is not None:
            from arfl.faults.netns import teardown_isolation

            try:
                removed = teardown_isolation(self.isolation)
                self.journal.write("isolation-removed", removed=removed)
            except Exception as e:  # keep going: 'arfl chaos recover' can finish it
                errors.append(f"isolation: {e}; run 'arfl chaos recover {self.run_dir}'")
        self.journal.write("run-stopped", errors=errors)
        if self.info is not None:
            self.write_state()
        if errors:
            raise DeployError("; ".join(errors))

    def summarise(self) -> dict[str, Any]:
        """Build and write ``summary.json`` from the files the components left."""
        inj = InjectorStatsTail(self.injector_stats)
        inj.poll()
        merged: dict[str, Any] = {}
        merger_json = self.run_dir / "merger.json"
        if merger_json.exists():
            merged = json.loads(merger_json.read_text())
        events = read_jsonl(self.paths.journal)
        restarts = sum(1 for e in events if e.get("event") == "replica-restarted")
        summary: dict[str, Any] = {
            "run": self.run_id,
            "spec": self.spec.name,
            "mode": self.spec.replication.mode,
            "replicas": self.spec.replication.replicas,
            "master": self.options.master or self.spec.spark.master,
            "topics": {"source": self.rspec.source.topic, "sink": self.rspec.sink.topic},
            "workload": {
                "target_rate": self.spec.workload.rate,
                "duration_s": self.spec.workload.duration,
            },
            "produced": inj.summary.produced if inj.summary else None,
            "achieved_rate": inj.summary.achieved_rate if inj.summary else None,
            "injector": inj.summary.to_dict() if inj.summary else None,
            "results": merged.get("results"),
            "duplicates_dropped": merged.get("duplicates"),
            "divergent": merged.get("divergent"),
            "bad_records": merged.get("bad"),
            "latency_ms": merged.get("latency_ms"),
            "longest_gap_ms": merged.get("longest_gap_ms"),
            "replica_restarts": restarts,
            "cpu_s": {str(k): round(v, 1) for k, v in sorted(self.cpu_seconds().items())},
            "cpu_s_total": round(sum(self.cpu_seconds().values()), 1),
            "replicas_peak_rss_mb": round(self.peak_rss / 2**20, 1),
            "merger": merged,
        }
        write_json_atomic(self.paths.summary, summary)
        return summary


def deploy(
    spec: Spec,
    spec_path: Path | None = None,
    options: DeployOptions | None = None,
    on_tick: Callable[[Tick], None] | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
) -> DeployResult:
    """Run one experiment end to end.

    Args:
        spec: the validated spec.
        spec_path: the spec file (copied into the run directory).
        options: see :class:`DeployOptions`.
        on_tick: called about twice a second with what the live view shows.
        on_run_dir: called once the run directory exists (before anything starts).

    Raises:
        StackError: the stack is not available.
        DeployError: a component failed (the message names its log).
    """
    d = Deployment(spec, spec_path, options or DeployOptions())
    if on_run_dir is not None:
        on_run_dir(d.run_dir)
    old_term = signal.getsignal(signal.SIGTERM)
    in_main = _in_main_thread()
    if in_main:
        # SIGTERM behaves like Ctrl-C so that ``finally`` stops every process.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    failure: BaseException | None = None
    try:
        d.prepare()
        d.start()
        d.watch(on_tick)
    except BaseException as e:
        failure = e
        d.journal.write("run-failed", error=f"{type(e).__name__}: {e}")
        raise
    finally:
        try:
            d.stop()
        except DeployError:
            if failure is None:
                raise
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, old_term)
    summary = d.summarise()
    d.journal.write("run-finished", results=summary.get("results"))
    return DeployResult(d.run_dir, summary)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
