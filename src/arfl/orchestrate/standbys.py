"""The standby pool (``replication.standby = N``): N spare drivers, each with its Spark session
up and its executors warm, waiting to take a dead replica over.

Each standby starts its Spark session, warms its executors up and (real-time) rehearses the
pipeline at niceness :data:`STANDBY_NICE` (the replicas keep the CPU), then waits. A replica to
restart is given a ready standby if there is one: its niceness goes back to 0 (at once, or once
it caught up but after :data:`YIELD_MAX_S` at most: ``standby_yield``, only for a replica
resuming at the output frontier: one that replays from a checkpoint covers no one until it is
done), it is sent the replica's config, and it starts the replica's query at once instead of a
new Spark application (25-45 s here under load). A new standby is started
:data:`STANDBY_RESPAWN_DELAY_S` later, so that its start-up does not compete with the promoted
replica's catch-up.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from arfl.configs.spec import Spec
from arfl.errors import DeployError, FaultError
from arfl.orchestrate.drivers import STANDBY, Drivers, rehearsal_events
from arfl.orchestrate.slots import ReplicaSlot
from arfl.priority import can_unnice, set_nice
from arfl.processes import ManagedProcess, process_tree, same_process, signal_all
from arfl.replica.app import DriverConfig
from arfl.run.events import Event
from arfl.run.rundir import Journal, write_json_atomic
from arfl.run.streams import MonitorTail
from arfl.targets.docker import STANDBY_CPU_SHARES

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


@dataclass(frozen=True)
class StandbyState:
    """A live standby driver (``state.json`` ``standbys``)."""

    standby: int
    pid: int
    ready: bool


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


class StandbyPool:
    """``size`` standby slots, refilled after each take-over and after a standby's death.

    Journal events: ``standby-started``, ``standby-ready``, ``standby-died``,
    ``standby-gave-up``, ``standby-stopped``; at a take-over ``replica-started`` (with
    ``standby``) and later ``replica-reniced`` (:mod:`arfl.run.events`).
    """

    def __init__(
        self, spec: Spec, drivers: Drivers, journal: Journal, size: int, respawn_delay_s: float
    ) -> None:
        self.spec = spec
        self.drivers = drivers
        self.paths = drivers.paths
        self.journal = journal
        self.respawn_delay_s = respawn_delay_s
        self._slots = [_Standby() for _ in range(size)]
        self._count = 0
        self._failures = 0
        self.given_up = False
        self._rehearsal_input = rehearsal_events(spec) if size else []
        """What every real-time standby rehearses on: made once, not on the supervision thread
        at each spawn (a skewed key's distribution can take seconds to build)."""
        self._monitor: MonitorTail | None = None
        """The merger's monitor, tailed from the last take-over by a yielding standby on."""

    # --- what the supervisor asks ----------------------------------------------------

    def wanted(self) -> bool:
        """False once standbys were given up (none will come)."""
        return bool(self._slots) and not self.given_up

    def all_ready(self) -> bool:
        """Every slot holds a ready standby."""
        return all(sb.proc is not None and sb.ready for sb in self._slots)

    def ready(self) -> _Standby | None:
        """A live ready standby, if any."""
        for sb in self._slots:
            if sb.proc is not None and sb.ready and sb.proc.alive():
                return sb
        return None

    def states(self) -> list[StandbyState]:
        """The live standby drivers (not yet given a replica)."""
        return [
            StandbyState(sb.sid, sb.proc.pid, sb.ready)
            for sb in self._slots
            if sb.proc is not None and sb.proc.alive()
        ]

    def start_all(self) -> None:
        """Start a standby in every slot."""
        for sb in self._slots:
            self._start(sb)

    def check_all(self, stopping: threading.Event) -> None:
        """One look at every slot: journal readiness and deaths, start what is due (until
        ``stopping`` is set)."""
        for sb in self._slots:
            if stopping.is_set():
                return
            self._check(sb)

    # --- files ---------------------------------------------------------------------

    def _paths(self, sid: int) -> tuple[Path, Path, Path, Path]:
        """(config, app file, assignment, log) of standby ``sid``."""
        rdir = self.paths.root / "replicas"
        return (
            rdir / f"standby-{sid}.json",
            rdir / f"standby-{sid}.app.json",
            rdir / f"standby-{sid}.assign.json",
            self.paths.log(f"standby-{sid}"),
        )

    def _checkpoint(self, sid: int) -> Path:
        """Standby ``sid``'s own checkpoint directory (its rehearsal's)."""
        return self.paths.root / "checkpoints" / f"standby-{sid}"

    # --- life of a standby ---------------------------------------------------------

    def _spawn(self, sb: _Standby) -> None:
        sid = self._count
        self._count += 1
        config, app, assign, log = self._paths(sid)
        config.parent.mkdir(parents=True, exist_ok=True)
        self.drivers.config(
            replica=sid,
            output_topic=f"{self.spec.sink.topic}.standby{sid}",
            checkpoint_dir=self._checkpoint(sid),
            progress_file=self.paths.root / "progress" / f"standby-{sid}.jsonl",
            app_id_file=app,
            mode_options=dict(self.drivers.launch.mode_options),
            standby=True,
            assignment_file=assign,
            rehearsal_input=self._rehearsal_input,
        ).dump(config)
        for f in (app, assign):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"=== arfl: standby {sid} at {time.ctime()} ===\n".encode())
        proc = self.drivers.start(f"standby-{sid}", STANDBY, config, log)
        sb.sid, sb.proc, sb.ready, sb.spawn_at = sid, proc, False, None
        sb.spawned_at = time.time()
        # Before the interpreter starts its JVM: every process and thread after inherits it.
        # Only where it can be undone at the take-over (else the replica would stay niced).
        # Not a container's launcher: the container's processes are not its descendants; the
        # container is created with a low CPU weight instead (targets.docker.STANDBY_CPU_SHARES).
        p = same_process(proc.pid, None)
        local = self.drivers.launch.promote is None
        niced = local and p is not None and can_unnice() and set_nice([p], STANDBY_NICE)
        sb.niced = niced
        self.journal.write(
            Event.STANDBY_STARTED, standby=sid, pid=proc.pid, nice=STANDBY_NICE if niced else 0,
            cpu_shares=None if local else STANDBY_CPU_SHARES,
        )  # fmt: skip

    def _start(self, sb: _Standby) -> None:
        if self.given_up:
            return
        try:
            self._spawn(sb)
        except (OSError, DeployError) as e:  # a spare that cannot start must not stop the rest
            self._give_up(f"cannot start a standby: {e}")

    def _give_up(self, reason: str) -> None:
        self.given_up = True
        for sb in self._slots:
            sb.spawn_at = None
        self.journal.write(Event.STANDBY_GAVE_UP, reason=reason)

    def _check(self, sb: _Standby) -> None:
        now = time.time()
        if sb.proc is None:
            if sb.spawn_at is not None and now >= sb.spawn_at:
                self._start(sb)
            return
        code = sb.proc.returncode
        if code is not None:
            signal_all(sb.proc.descendants(), signal.SIGKILL)
            self.journal.write(Event.STANDBY_DIED, standby=sb.sid, pid=sb.proc.pid, exit_code=code)
            self._retire(sb.sid)
            self._failures = 0 if sb.ready else self._failures + 1
            sb.proc, sb.ready = None, False
            if self._failures >= STANDBY_FAILURE_LIMIT:
                self._give_up(
                    f"{self._failures} standbys died before they were ready; "
                    f"see {self._paths(sb.sid)[3]}"
                )
            elif not self.given_up:
                sb.spawn_at = now + self.respawn_delay_s
            return
        if not sb.ready:
            try:
                info = json.loads(self._paths(sb.sid)[1].read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return
            if isinstance(info, dict) and info.get("ready"):
                sb.ready = True
                self._failures = 0
                self.journal.write(
                    Event.STANDBY_READY,
                    standby=sb.sid,
                    pid=sb.proc.pid,
                    startup_s=round(now - sb.spawned_at, 3),
                )

    # --- take-over -----------------------------------------------------------------

    def take_over(
        self, rep: ReplicaSlot, sb: _Standby, cfg: DriverConfig, *, replays: bool
    ) -> None:
        """Hand replica ``rep``'s config ``cfg`` to the ready standby ``sb``; ``replays``: it
        starts from a checkpoint (its own or a peer's), not at the output frontier."""
        assert sb.proc is not None
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
        log = self._paths(sb.sid)[3]
        banner = (
            f"=== arfl: replica {rep.index} attempt {rep.attempt} at {time.ctime()}: standby "
            f"{sb.sid} (pid {sb.proc.pid}) takes over; its log: {log} ===\n"
        )
        with rep.log_path.open("ab") as out:
            out.write(banner.encode())
        self._place(sb, rep)
        write_json_atomic(self._paths(sb.sid)[2], asdict(cfg))
        self._promote(sb, rep)
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
        sb.spawn_at = None if self.given_up else now + STANDBY_RESPAWN_DELAY_S

    def _place(self, sb: _Standby, rep: ReplicaSlot) -> None:
        """With CPU shares (``[placement]``): the standby's whole tree moves into the replica's
        group, and the standby's group goes. Moved rather than the group renamed: the replica's
        group outlives each of its drivers, so its usage counts the replica's whole run (the
        summary's figure), and the dead driver's leftovers in it need not be gone first."""
        shares = self.drivers.launch.shares
        if shares is None:
            return
        try:
            shares.absorb(f"standby-{sb.sid}", f"replica-{rep.index}")
        except (FaultError, OSError) as e:  # the take-over goes on: unplaced beats none
            self.journal.write(
                Event.WARNING,
                message=f"standby {sb.sid} took replica {rep.index} over outside its CPU "
                f"share: {e}",
            )

    def _promote(self, sb: _Standby, rep: ReplicaSlot) -> None:
        """A standby in a container: its container becomes the replica's (once it was handed
        the assignment, which it acts on meanwhile: the renaming is not on the take-over's
        path). Journaled ``standby-promoted`` with how long it took."""
        promote = self.drivers.launch.promote
        if promote is None:
            return
        t0 = time.monotonic()
        try:
            promote(sb.sid, rep.index)
        except FaultError as e:  # it serves on; faults on the replica will not find it
            self.journal.write(
                Event.WARNING,
                message=f"standby {sb.sid} took replica {rep.index} over, but its container "
                f"was not renamed the replica's: {e}",
            )
            return
        self.journal.write(
            Event.STANDBY_PROMOTED,
            standby=sb.sid,
            replica=rep.index,
            after_s=round(time.monotonic() - t0, 3),
        )

    def _retire(self, sid: int) -> None:
        """With CPU shares: a dead standby's group goes now, not at the run's stop."""
        shares = self.drivers.launch.shares
        if shares is None:
            return
        try:
            shares.retire(f"standby-{sid}")
        except (FaultError, OSError) as e:  # the stop (or recover) removes it then
            self.journal.write(
                Event.WARNING, message=f"standby {sid}'s CPU-share group not removed: {e}"
            )

    def end_yield(self, rep: ReplicaSlot) -> None:
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

    # --- stop ----------------------------------------------------------------------

    def terminate(self) -> list[_Standby]:
        """SIGTERM every live standby (niceness back to 0 first); returns them."""
        live = [sb for sb in self._slots if sb.proc is not None]
        for sb in live:
            assert sb.proc is not None
            if sb.niced:  # at 19 it would hardly get the CPU to exit within its grace
                set_nice(process_tree(sb.proc.pid), 0)
            sb.proc.terminate()
        return live

    def stop(
        self, live: list[_Standby], terminated: float, stop_timeout_s: float, tree_grace_s: float
    ) -> None:
        """Wait for the standbys :meth:`terminate` signalled at ``terminated`` (monotonic) up to
        :data:`STANDBY_STOP_GRACE_S`, kill what is left, journal ``standby-stopped``."""
        deadline = time.monotonic() + min(STANDBY_STOP_GRACE_S, stop_timeout_s)
        for sb in live:
            assert sb.proc is not None
            code = sb.proc.stop(
                grace_s=max(0.1, deadline - time.monotonic()), tree_grace_s=tree_grace_s
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
            shutil.rmtree(self._checkpoint(sb.sid), ignore_errors=True)
        for sb in self._slots:
            sb.proc, sb.spawn_at = None, None
