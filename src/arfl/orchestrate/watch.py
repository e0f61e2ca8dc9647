"""Watching a running deployment until its output has drained.

Twice a second: read the merger's and the injector's streams, sample the replicas'
resources, keep ``state.json`` current, notice a dead injector or a run whose every replica
gave up, and hand a :class:`Tick` to the live view. A dead merger is replaced the moment it
exits (a pidfd). After the input ends, wait until
every replica has consumed all of it and the output went quiet, at most a drain time (longer
while a restarted replica is still rejoining).

A replica the supervisor gave up on (status ``dead``: ``replication.restart = false``, a
``kill-replica`` with ``restart = false``, a crash loop) will never catch up: it is left out
of the wait, and ``replica-excluded`` is journaled once for it (the run continues without it).
Only when every replica is dead does the run fail.

Each tick also reads the lines the replicas appended to their progress files and journals one
``late-drop`` per replica and batch that dropped rows behind the watermark (a determinism risk
between replicas; :func:`arfl.run.progress.late_drops`). The report reads the progress files
itself, so batches after the watch ended are counted there too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.orchestrate.context import RunContext
from arfl.orchestrate.lag import LagWatch
from arfl.orchestrate.rejoin import RejoinTracker
from arfl.orchestrate.resources import ResourceSampler
from arfl.orchestrate.supervisor import ReplicaRunner
from arfl.processes import ExitWatch, ManagedProcess
from arfl.registry import MODES
from arfl.run.events import Event
from arfl.run.names import leader_path
from arfl.run.progress import from_journal, late_drops, reached
from arfl.run.rundir import Journal, RunPaths
from arfl.run.steady import expected_warmup_s
from arfl.run.streams import (
    InjectorSecond,
    InjectorStatsTail,
    JsonlTail,
    MonitorSnapshot,
    MonitorTail,
)
from arfl.stack.topics import EndOffsetProbe

TICK_S = 0.5
REJOIN_GRACE_S = 180.0
"""Extra drain time while a restarted replica has not caught up yet."""
QUIET_S = 3.0
"""The output must have been quiet this long before a caught-up run stops."""


@dataclass(frozen=True)
class FaultState:
    """One fault injected so far, for the metrics endpoint's per-fault gauge."""

    index: int
    """1, 2, ... in the order of injection: the report's fault numbers."""
    kind: str
    replica: int | None
    """The replica it hit (None: a fault aimed at no single replica)."""
    injected_at: float
    """Epoch seconds when the injection ended."""
    reverted_at: float | None = None
    """Epoch seconds when the revert ended (None: still active)."""

    @property
    def active(self) -> bool:
        """Injected and not reverted yet."""
        return self.reverted_at is None


@dataclass
class Tick:
    """What the live view shows: about twice a second while the run is watched, about once a
    second before (start-up) and after (stop)."""

    elapsed_s: float
    """Seconds since the input started (before it: since the deployment started)."""
    phase: str
    """What the deployment does: a start-up step (``starting the stack``, ``waiting for the
    standby``, ...), ``warming up``, ``running``, ``draining``, ``stopping``."""
    snapshot: MonitorSnapshot | None
    injector: InjectorSecond | None
    replicas: dict[int, str]
    faults: list[str] = field(default_factory=list)
    merger: str = ""
    """Which merger serves: its pid, and how often one was restarted."""
    warmup_s: float | None = None
    """The warm-up's length (seconds from the input's start) as expected while the run is
    watched: ``workload.warmup``, or about the automatic one; None before and after."""
    warmup_auto: bool = False
    """``warmup_s`` is the automatic warm-up's expected length (the report gives the real one)."""
    statuses: dict[int, str] = field(default_factory=dict)
    """Each replica's supervision status alone (``running``, ``restarting``, ``dead``, ...):
    ``replicas`` adds the lag for the eye, the metrics endpoint needs the bare word."""
    restarts: dict[int, int] = field(default_factory=dict)
    """How often the supervisor restarted each replica."""
    injected: list[FaultState] = field(default_factory=list)
    """Every fault injected so far, active or reverted."""
    merger_restarts: int = 0
    """How often another merger took a dead one's place (the standby or a new merger)."""


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


def caught_up(
    spec: Spec,
    last_progress: Callable[[int], dict[str, Any] | None],
    input_end: dict[int, int],
    without: Collection[int] = (),
    read_to_end: Callable[[int], bool] | None = None,
) -> bool:
    """Every replica read the whole input: its last batch reached the input's end and the one
    after it ran empty, or ``read_to_end`` says so (its marker copies: :func:`markers_passed`).

    The empty (no-data) batch is the one that advances the watermark and emits the windows
    it closed; per-record pipelines need none, but it costs nothing to wait for.

    Args:
        spec: the run's spec.
        last_progress: a replica's newest progress line (:meth:`Watcher.last_progress`).
        input_end: the input topic's end offset per partition.
        without: replicas left out (the supervisor gave up on them: they never catch up).
        read_to_end: replica -> whether it read the input to its end by another sign than its
            progress.
    """
    for i in range(spec.replication.replicas):
        if i in without or (read_to_end is not None and read_to_end(i)):
            continue
        last = last_progress(i)
        if last is None or not reached(last, input_end):
            return False
        if spec.has_window and last.get("numInputRows", 0) != 0:
            return False
    return True


def markers_passed(ended: Mapping[int, float], input_end: Mapping[int, int], now: float) -> bool:
    """A replica delivered a marker copy (:mod:`arfl.run.records`) of every input partition,
    the newest :data:`QUIET_S` or more before ``now``: it read the whole input and had written
    every result before the markers, and the quiet seconds cover a result of its that went to
    another partition of its topic in a later producer batch. A real-time batch reports its
    progress only when it ends, up to an interval after this. Never true for an input without
    markers (the injector writes them once every event is acknowledged).

    Args:
        ended: input partition -> when the replica's latest marker copy of it was appended to
            its topic (epoch s; :attr:`arfl.run.streams.ReplicaSnapshot.ended`).
        input_end: the input topic's end offset per partition.
        now: epoch seconds.
    """
    return bool(input_end) and all(p in ended and ended[p] <= now - QUIET_S for p in input_end)


class LateDropWatch:
    """Journals ``late-drop`` once per replica and batch whose progress dropped rows.

    Batch ids continue from the checkpoint when a replica restarts (same progress file), so a
    (replica, batch) is journaled at most once; events already in the journal (a watch of the
    same run before this one) count as journaled.

    Args:
        journal: where the events go (and the ones already there are read from).
        paths: the run directory's files (``progress/replica-N.jsonl``).
        replicas: how many replicas.
    """

    def __init__(self, journal: Journal, paths: RunPaths, replicas: int) -> None:
        self.journal = journal
        self._tails = {i: JsonlTail(paths.progress(i)) for i in range(replicas)}
        self._seen: dict[int, set[int]] = {i: set() for i in range(replicas)}
        for ev in journal.read():
            drop = from_journal(ev)
            if drop is not None:
                self._seen.setdefault(drop.replica, set()).add(drop.batch)

    def poll(self) -> int:
        """Read what the replicas appended since the last call; returns the events written."""
        written = 0
        for i, tail in self._tails.items():
            seen = self._seen[i]
            for drop in late_drops(tail.read_new(), i, seen):
                self.journal.write(Event.LATE_DROP, **drop.journal_fields())
                seen.add(drop.batch)
                written += 1
        return written


class LeaderWatch:
    """Journals ``leader-elected`` (``replica``, ``previous``) whenever the first contender of
    the run's election changes (active-leader), read from ZooKeeper once per tick.

    Args:
        journal: where the events go.
        zookeeper: ZooKeeper ``host:port``.
        path: the run's election path (:func:`arfl.run.names.leader_path`).
    """

    def __init__(self, journal: Journal, zookeeper: str, path: str) -> None:
        from kazoo.client import KazooClient

        self.journal = journal
        self.path = path
        self.leader: int | None = None
        self.errors = 0
        self._zk = KazooClient(hosts=zookeeper, timeout=5.0)
        try:
            self._zk.start(timeout=5.0)
        except Exception as e:
            self._zk.close()
            raise DeployError(
                f"zookeeper at {zookeeper} not reachable: {e}; run 'arfl stack up'"
            ) from None

    def poll(self) -> int | None:
        """The current leader (journaled when it changed); None while nobody leads."""
        from kazoo.recipe.election import Election

        try:
            contenders = Election(self._zk, self.path).contenders()
        except Exception:  # a ZooKeeper hiccup: try again on the next tick
            self.errors += 1
            return self.leader
        leader = next((int(c) for c in map(str, contenders) if c.isdigit()), None)
        if leader is not None and leader != self.leader:
            self.journal.write(Event.LEADER_ELECTED, replica=leader, previous=self.leader)
            self.leader = leader
        return leader

    def close(self) -> None:
        """Close the ZooKeeper session."""
        try:
            self._zk.stop()
        finally:
            self._zk.close()


MERGER_RESTARTS = 3
"""A merger that dies more often than this within :data:`MERGER_LOOP_S` fails the run."""
MERGER_LOOP_S = 60.0


class Watcher:
    """Watches one deployment; :meth:`run` returns when its output has drained."""

    def __init__(
        self,
        ctx: RunContext,
        kafka: str,
        runner: ReplicaRunner,
        merger: ManagedProcess,
        injector: ManagedProcess,
        *,
        resources: ResourceSampler,
        write_state: Callable[[], None],
        active_faults: Callable[[], list[str]],
        started_at: float,
        zookeeper: str | None = None,
        restart_merger: Callable[[], ManagedProcess] | None = None,
        keep_standby: Callable[[], str | None] | None = None,
        fault_states: Callable[[], list[FaultState]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.restart_merger = restart_merger
        self.keep_standby = keep_standby
        self.fault_states = fault_states
        self._standby_text: str | None = None
        self._merger_deaths: list[float] = []
        self.merger_restarts = 0
        """Mergers restarted in all (``_merger_deaths`` keeps only the last minute's)."""
        self.kafka = kafka
        self.runner = runner
        self.merger = merger
        self.injector = injector
        self.resources = resources
        self.write_state = write_state
        self.active_faults = active_faults
        self.started_at = started_at
        self.zookeeper = zookeeper
        self.drain_s = (
            ctx.options.drain_s if ctx.options.drain_s is not None else drain_seconds(ctx.spec)
        )
        src = ctx.rspec.source
        self._probe: EndOffsetProbe | None = None
        self._probe_args = (kafka, src.topic, src.partitions)
        self._progress_tails = {
            i: JsonlTail(ctx.paths.progress(i)) for i in range(ctx.spec.replication.replicas)
        }
        self._newest_progress: dict[int, dict[str, Any]] = {}
        self._snapshot: MonitorSnapshot | None = None
        """The merger's newest monitor line."""
        self.lag = LagWatch(ctx.journal, ctx.spec, self.source_end_offsets, self.last_progress)

    def source_end_offsets(self) -> dict[int, int]:
        """The input topic's end offset per partition (the whole input, markers included), over
        one consumer kept for the whole watch (the lag watch asks every second)."""
        if self._probe is None:
            self._probe = EndOffsetProbe(*self._probe_args)
        return self._probe()

    def last_progress(self, replica: int) -> dict[str, Any] | None:
        """The newest ``StreamingQueryProgress`` of a replica (its file read incrementally:
        the lag and rejoin watches ask every tick, and the file grows all run)."""
        new = self._progress_tails[replica].read_new()
        if new:
            self._newest_progress[replica] = new[-1]
        return self._newest_progress.get(replica)

    def _marker_copies(self, replica: int) -> dict[int, float]:
        """Input partition -> when the replica's latest marker copy of it arrived (epoch s)."""
        seen = None if self._snapshot is None else self._snapshot.replicas.get(replica)
        return {} if seen is None else seen.ended

    def run(self, on_tick: Callable[[Tick], None] | None) -> None:
        """Until the input has ended and the output has drained (or the drain cap passed).

        Raises:
            DeployError: the merger or the injector failed, or every replica is dead.
        """
        rejoins = RejoinTracker(
            self.ctx.journal, self.source_end_offsets, self.last_progress, self._marker_copies
        )
        drops = LateDropWatch(self.ctx.journal, self.ctx.paths, self.ctx.spec.replication.replicas)
        leader: LeaderWatch | None = None
        if self.zookeeper and MODES.info(self.ctx.spec.replication.mode).leader:
            path = leader_path(self.ctx.spec.name, self.ctx.run_id)
            try:
                leader = LeaderWatch(self.ctx.journal, self.zookeeper, path)
            except DeployError as e:  # the replicas may still reach it: watch without it
                self.ctx.journal.write(Event.WARNING, message=f"no leader-elected events: {e}")
        try:
            self._loop(on_tick, rejoins, drops, leader)
        finally:
            self.lag.finish(time.time())
            if self._probe is not None:
                self._probe.close()
                self._probe = None
            rejoins.finish()
            drops.poll()
            if leader is not None:
                leader.close()

    def _loop(
        self,
        on_tick: Callable[[Tick], None] | None,
        rejoins: RejoinTracker,
        drops: LateDropWatch,
        leader: LeaderWatch | None = None,
    ) -> None:
        monitor = MonitorTail(self.ctx.paths.monitor)
        inj = InjectorStatsTail(self.ctx.injector_stats)
        # A dead merger is replaced the moment it exits, not at the next tick (up to 0.5 s of
        # the output's gap without a standby merger: docs/benchmarks.md).
        merger_exit, stopped = threading.Event(), threading.Event()
        ExitWatch(lambda: [self.merger.pid], merger_exit, stopped).start()
        try:
            self._ticks(on_tick, rejoins, drops, leader, monitor, inj, merger_exit)
        finally:
            stopped.set()

    def _ticks(
        self,
        on_tick: Callable[[Tick], None] | None,
        rejoins: RejoinTracker,
        drops: LateDropWatch,
        leader: LeaderWatch | None,
        monitor: MonitorTail,
        inj: InjectorStatsTail,
        merger_exit: threading.Event,
    ) -> None:
        phase = "running"
        warmup_s = expected_warmup_s(self.ctx.spec)
        input_done_at: float | None = None
        input_end: dict[int, int] = {}
        last_results = -1
        last_change = time.monotonic()
        last_state_write = 0.0
        gone: set[int] = set()
        while True:
            if merger_exit.wait(TICK_S):
                merger_exit.clear()
                if not self.merger.alive():
                    self._merger_died()
                continue
            monitor.poll()
            self._snapshot = monitor.latest
            inj.poll()
            states = self.runner.states()
            rejoins.observe(time.time(), {i: st.restarts for i, st in states.items()})
            self.lag.observe(
                time.time(),
                {
                    i: st.started_at if st.status == "running" else None
                    for i, st in states.items()
                    if i not in gone
                },
            )
            drops.poll()
            if leader is not None:
                leader.poll()
            spares = self.runner.standby_states()
            self.resources.sample(states, [s.pid for s in spares], [s.standby for s in spares])
            if time.monotonic() - last_state_write > 2.0:
                self.write_state()
                last_state_write = time.monotonic()
            self._check_alive(states)
            self._note_gone(states, gone)
            if input_done_at is None and not self.injector.alive():
                code = self.injector.returncode
                if code != 0 and inj.summary is None:
                    raise DeployError(
                        f"the injector failed (exit {code}); see {self.injector.log_path}:\n"
                        f"{self.injector.tail()}"
                    )
                input_done_at = time.monotonic()
                input_end = self.source_end_offsets()
                self.lag.input_ended(input_end)
                phase = "draining"
                self.ctx.journal.write(Event.WORKLOAD_FINISHED, exit_code=code)
            snap = monitor.latest
            results = snap.results if snap is not None else 0
            if results != last_results:
                last_results = results
                last_change = time.monotonic()
            if on_tick is not None:
                elapsed = max(0.0, time.time() - self.started_at)
                on_tick(
                    Tick(
                        elapsed_s=elapsed,
                        phase="warming up" if phase == "running" and elapsed < warmup_s else phase,
                        snapshot=snap,
                        # After the input's end its last second would stay on screen.
                        injector=None if phase == "draining" else inj.latest,
                        replicas={i: self._state_text(i, s.status) for i, s in states.items()},
                        faults=self.active_faults(),
                        merger=self._merger_text(),
                        warmup_s=warmup_s,
                        warmup_auto=self.ctx.spec.workload.warmup is None,
                        statuses={i: s.status for i, s in states.items()},
                        restarts={i: s.restarts for i, s in states.items()},
                        injected=self.fault_states() if self.fault_states is not None else [],
                        merger_restarts=self.merger_restarts,
                    )
                )
            if input_done_at is not None and self._drained(
                time.monotonic() - input_done_at,
                time.monotonic() - last_change,
                input_end,
                rejoins,
                gone,
            ):
                return

    def _state_text(self, replica: int, status: str) -> str:
        """The live view's state of a replica: its status, and its lag while it is behind."""
        lag = self.lag.lags.get(replica, 0.0)
        return f"{status}, {lag:.0f}s behind" if lag > self.lag.threshold else status

    def _check_alive(self, states: dict[int, Any]) -> None:
        if not self.merger.alive():
            self._merger_died()
        if self.keep_standby is not None:
            self._standby_text = self.keep_standby()
        dead = [s.replica for s in states.values() if s.status == "dead"]
        if dead and len(dead) == len(states):
            raise DeployError(f"every replica is dead; see {self.runner.log_of(0)} and the journal")

    def _merger_text(self) -> str:
        """The live view's merger: which one serves, and how often one was restarted."""
        restarts = len(self._merger_deaths)
        return (
            f"pid {self.merger.pid}"
            + (f", restarted {restarts}x" if restarts else "")
            + (f", {self._standby_text}" if self._standby_text else "")
        )

    def _merger_died(self) -> None:
        """Start a new merger in the dead one's place (it takes over from Kafka:
        :mod:`arfl.measure.merger.recovery`); a merger that keeps dying fails the run."""
        now = time.time()
        dead = self.merger
        self._merger_deaths = [t for t in self._merger_deaths if now - t < MERGER_LOOP_S] + [now]
        self.ctx.journal.write(Event.MERGER_DIED, pid=dead.pid, exit_code=dead.returncode)
        if self.restart_merger is None or len(self._merger_deaths) > MERGER_RESTARTS:
            raise DeployError(
                f"the merger died (exit {dead.returncode}"
                + (
                    f"; {len(self._merger_deaths)} times within {MERGER_LOOP_S:.0f}s"
                    if self.restart_merger is not None
                    else ""
                )
                + f"); see {dead.log_path}:\n{dead.tail()}"
            )
        self.merger = self.restart_merger()
        self.merger_restarts += 1
        self.ctx.journal.write(
            Event.MERGER_RESTARTED, pid=self.merger.pid, exit_code=dead.returncode
        )
        self.write_state()

    def _note_gone(self, states: dict[int, Any], gone: set[int]) -> None:
        """Journal each replica the supervisor gave up on, once; add it to ``gone``."""
        for i, st in sorted(states.items()):
            if st.status != "dead" or i in gone:
                continue
            gone.add(i)
            left = sorted(set(states) - gone)
            if left:  # with none left, _check_alive fails the run
                self.ctx.journal.write(
                    Event.REPLICA_EXCLUDED,
                    replica=i,
                    remaining=left,
                    message=f"replica {i} gave up; the run continues without it "
                    f"({len(left)} of {len(states)} replicas left)",
                )

    def _drained(
        self,
        waited: float,
        quiet: float,
        input_end: dict[int, int],
        rejoins: RejoinTracker,
        gone: Collection[int] = (),
    ) -> bool:
        # A replica restarted late (a driver kill near the end) gets longer to rejoin: a new
        # driver and its first, cold catch-up batch take minutes on small hosts. One that then
        # gave up never rejoins: no extra time for it.
        rejoining = [r for r in rejoins.rejoining if r not in gone]
        cap = self.drain_s + (REJOIN_GRACE_S if rejoining else 0.0)

        def read_to_end(replica: int) -> bool:
            # A restarted replica counts once its new attempt read to the end (the rejoin
            # tracker's test, marker copies after the restart included): its old attempt's
            # marker copies do not make it caught up.
            return (
                self.ctx.spec.passes_markers
                and replica not in rejoins.rejoining
                and markers_passed(self._marker_copies(replica), input_end, time.time())
            )

        if waited >= cap:
            behind = ", ".join(
                f"replica {r} {lag:.0f} s behind"
                for r, lag in sorted(self.lag.lags.items())
                if lag > 0 and r not in gone
            )
            self.ctx.journal.write(
                Event.WARNING,
                message=f"replicas had not caught up {cap:.0f}s after the input "
                f"ended ({behind or 'lag unknown'}); stopping anyway (results may be missing)",
            )
            return True
        return quiet >= QUIET_S and caught_up(
            self.ctx.spec, self.last_progress, input_end, gone, read_to_end
        )
