"""The chaos runner: injects faults (scheduled or by hand) and always reverts them.

Guarantees, in order of strength:

* a revert is persisted to ``pending-faults.json`` *before* its fault is injected;
* reverts run in ``finally``: after the duration, on errors, on Ctrl-C, on SIGTERM (with
  :meth:`ChaosRunner.handle_signals` in the main thread) and on :meth:`ChaosRunner.stop`;
* after ``kill -9`` of the injector, :func:`recover` undoes what the file still lists;
* after ``kill -9`` of the deployment's arfl, :func:`recover` also stops the processes it left
  running (replica drivers with their JVMs, merger, injector, the run's own stack; see
  :mod:`arfl.faults.leftovers`) and journals each as ``leftover-stopped``, then removes the
  drivers' CPU-share cgroups (``cpu-shares-removed``) and deletes the run's own SPARK_HOME
  (``spark-home-removed``).

Every injection and revert is journaled (``fault-injected`` / ``fault-reverted``) with the
wall-clock start and end of the action.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from arfl import stack
from arfl.coerce import opt_int
from arfl.errors import FaultError, StackError
from arfl.faults import align, leftovers
from arfl.faults.base import Fault, FaultParams, implementation, make_fault
from arfl.registry import FAULTS
from arfl.run.events import Event
from arfl.run.pending import PendingFaults, injector_alive
from arfl.run.rundir import Journal, RunPaths
from arfl.run.sparkhome import owns_spark_home, retire_unless_used
from arfl.run.state import SharesRecord, load_state
from arfl.targets import docker, netns, shares
from arfl.targets.base import Target


@dataclass
class FaultOutcome:
    """What happened to one fault."""

    params: FaultParams
    description: str
    replica: int | None = None
    injected_at: float | None = None
    reverted_at: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def schedule_order(params: Sequence[FaultParams]) -> list[FaultParams]:
    """Faults sorted by ``at_s``; entries with equal times keep their spec order."""
    return sorted(params, key=lambda p: p.at_s)


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """Hold off Ctrl-C/SIGTERM while a revert runs (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class ChaosRunner:
    """Runs faults against a target and journals them into the run directory."""

    def __init__(self, target: Target, *, start_time: float | None = None) -> None:
        self.target = target
        self.start_time = time.time() if start_time is None else start_time
        self.pending = PendingFaults(target.run_dir)
        self.journal = Journal(RunPaths(target.run_dir).journal)
        self.outcomes: list[FaultOutcome] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # -- one fault ----------------------------------------------------------------------------

    def plan(self, params: FaultParams) -> tuple[Fault, dict[str, Any]]:
        """Resolve a fault without injecting it (``--dry-run``): the fault and its undo record."""
        fault = make_fault(params)
        record = fault.prepare(self.target)
        return fault, record

    def run_fault(
        self,
        params: FaultParams,
        on_injected: Callable[[FaultOutcome], None] | None = None,
    ) -> FaultOutcome:
        """Inject one fault, wait its duration (cut short by :meth:`stop`), revert it.

        Args:
            params: the fault.
            on_injected: called right after the injection (before the duration wait).

        Raises:
            FaultError: preparing, injecting or reverting failed (the revert is attempted anyway).
        """
        fault = make_fault(params)
        params = fault.params  # the kind's defaults filled in
        outcome = FaultOutcome(params=params, description=fault.describe())
        with self._lock:
            self.outcomes.append(outcome)
        if params.after_boundary_s is not None:
            try:
                # What it would hit must exist before the wait (a wrong replica fails now, not
                # after a boundary); it is resolved again after the wait (pids change).
                self.plan(params)
                self._align(params)
            except FaultError as e:
                outcome.error = f"{type(e).__name__}: {e}"
                raise
        record = fault.prepare(self.target)
        replica = fault.details.get("replica")
        outcome.replica = replica
        if fault.details.get("container"):  # the docker target: say which container it hits
            outcome.description = f"{fault.describe()} (container {fault.details['container']})"
        try:
            entry = self._add_pending(fault, params.kind, replica, record) if record else None
        except FaultError as e:
            outcome.error = f"{type(e).__name__}: {e}"
            raise
        inject_start = time.time()
        try:
            try:
                fault.inject(self.target)
            finally:
                outcome.injected_at = time.time()
                self.journal.write(
                    Event.FAULT_INJECTED,
                    kind=params.kind,
                    replica=replica,
                    at_s=round(inject_start - self.start_time, 3),
                    duration_s=params.duration_s,
                    started=inject_start,
                    ended=outcome.injected_at,
                    description=outcome.description,
                    details=dict(fault.details),
                )
            outcome.details = dict(fault.details)
            if on_injected is not None:
                on_injected(outcome)
            if params.duration_s:
                self._stop.wait(params.duration_s)
        except BaseException as e:
            outcome.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            with _signals_blocked():
                self._revert(fault, params, outcome, entry)
        return outcome

    def _align(self, params: FaultParams) -> None:
        """Wait until ``params.after_boundary_s`` after the next batch boundary of the replicas
        :func:`arfl.faults.align.watched_replicas` names; journal ``fault-aligned`` (``boundary``:
        the batch's end by its progress line; ``seen``: when that line was read, later by the
        time the replica takes to write it; a fault is injected no earlier).

        Raises:
            FaultError: no boundary within :data:`arfl.faults.align.WAIT_MAX_S`, or
                :meth:`stop` while waiting (the fault is not injected).
        """
        assert params.after_boundary_s is not None
        began = time.time()
        at_leader = params.replica == "leader" or FAULTS.info(params.kind).targets_leader
        watched = align.watched_replicas(
            self.target.replicas(),
            "leader" if at_leader else params.replica,
            leader=self.target.leader() if at_leader else None,
            peers=params.peers(),
        )
        boundary = align.next_boundary(RunPaths(self.target.run_dir).progress, watched, self._stop)
        names = ", ".join(str(r) for r in watched)
        if boundary is None:
            why = "the run ended" if self._stop.is_set() else f"{align.WAIT_MAX_S:g} s passed"
            raise FaultError(
                f"{params.describe()}: not injected: {why} before a batch boundary of replica "
                f"{names} (progress/replica-N.jsonl)"
            )
        seen = time.time()
        wait = boundary.t + params.after_boundary_s - seen
        if wait > 0 and self._stop.wait(wait):
            raise FaultError(f"{params.describe()}: not injected: the run ended")
        self.journal.write(
            Event.FAULT_ALIGNED,
            kind=params.kind,
            replica=params.replica,
            boundary_replica=boundary.replica,
            boundary=round(boundary.t, 3),
            seen=round(seen, 3),
            after_s=params.after_boundary_s,
            waited_s=round(time.time() - began, 3),
        )

    def refusal(self, fault: Fault, record: dict[str, Any]) -> str | None:
        """Why a planned fault (:meth:`plan`) would be refused now, or None (``--dry-run``)."""
        refuse = self._clash(fault, record, [])
        return next((why for e in self.pending.entries() if (why := refuse(e))), None)

    def _add_pending(
        self, fault: Fault, kind: str, replica: int | None, record: dict[str, Any]
    ) -> str:
        """Persist the revert unless a pending fault holds what this one would (refused). A
        clash with a fault of this very process is waited out for up to
        :data:`OWN_REVERT_WAIT_S`: a schedule's fault that starts as another ends finds the
        other still reverting (its duration is counted from the end of its inject)."""
        deadline = time.monotonic() + OWN_REVERT_WAIT_S
        while True:
            owners: list[int] = []
            try:
                return self.pending.add(
                    kind, replica, record, refuse=self._clash(fault, record, owners)
                )
            except FaultError:
                mine = owners and all(o == os.getpid() for o in owners)
                if not mine or time.monotonic() > deadline or self._stop.wait(0.05):
                    raise

    def _clash(
        self, fault: Fault, record: dict[str, Any], owners: list[int]
    ) -> Callable[[dict[str, Any]], str | None]:
        """Why a pending entry forbids this fault: both hold the same link, route, container
        or pids, so the first revert would lift the other's effect (faults do not stack). The
        owner pid of each clashing entry is appended to ``owners``."""
        mine = type(fault).claims(record)

        def refuse(entry: dict[str, Any]) -> str | None:
            try:
                theirs = implementation(str(entry.get("kind"))).claims(entry.get("record") or {})
            except (FaultError, KeyError, TypeError, ValueError, IndexError):
                return None  # a record this version cannot read holds nothing it knows of
            if not mine & theirs:
                return None
            pid = entry.get("owner_pid")
            owners.append(pid if isinstance(pid, int) else -1)
            if injector_alive(entry):
                until = (
                    f"its injector (pid {pid}) reverts it when its duration ends (if that "
                    f"revert failed: 'arfl chaos recover --force {self.target.run_dir}')"
                )
            else:
                until = (
                    f"its injector (pid {pid}) is gone and the fault is still in place: "
                    f"run 'arfl chaos recover {self.target.run_dir}'"
                )
            return (
                f"{fault.describe()}: refused, replica {entry.get('replica')} is already under "
                f"a {entry.get('kind')} that holds the same {_held(mine & theirs)} (pending "
                f"fault {entry.get('id')}); faults on one resource do not stack (the first "
                f"revert would lift both) — {until}"
            )

        return refuse

    def _revert(
        self, fault: Fault, params: FaultParams, outcome: FaultOutcome, entry: str | None
    ) -> None:
        start = time.time()
        error: str | None = None
        try:
            fault.revert(self.target)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            raise FaultError(
                f"{fault.describe()}: revert failed ({error}); the revert stays in "
                f"{self.pending.path}; run 'arfl chaos recover {self.target.run_dir}'"
            ) from e
        finally:
            outcome.reverted_at = time.time()
            outcome.details = dict(fault.details)
            if entry is not None and error is None:
                self.pending.remove(entry)
                try:
                    type(fault).settle(self.target.run_dir, fault.record)
                except Exception as e:  # owed again: recover can finish it
                    error = f"{type(e).__name__}: {e}"
                    self.pending.add(params.kind, outcome.replica, fault.record)
            self.journal.write(
                Event.FAULT_REVERTED,
                kind=params.kind,
                replica=outcome.replica,
                at_s=round(start - self.start_time, 3),
                duration_s=round(outcome.reverted_at - (outcome.injected_at or start), 3),
                started=start,
                ended=outcome.reverted_at,
                description=outcome.description,
                details=dict(fault.details),
                **({"error": error} if error else {}),
            )

    # -- a spec's schedule --------------------------------------------------------------------

    def start_schedule(self, entries: Sequence[FaultParams]) -> threading.Thread:
        """Run ``entries`` in a background thread, each at ``start_time + at_s``.

        Faults whose windows overlap run concurrently (each in its own thread). Errors are
        journaled as ``fault-failed`` and kept in :attr:`outcomes`; they do not stop the rest.
        """
        ordered = schedule_order(entries)

        def scheduler() -> None:
            for params in ordered:
                delay = self.start_time + params.at_s - time.time()
                if delay > 0 and self._stop.wait(delay):
                    return
                if self._stop.is_set():
                    return
                worker = threading.Thread(
                    target=self._run_logged,
                    args=(params,),
                    name=f"chaos-{params.kind}",
                    daemon=True,
                )
                with self._lock:
                    self._threads.append(worker)
                worker.start()

        thread = threading.Thread(target=scheduler, name="chaos-schedule", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()
        return thread

    def _run_logged(self, params: FaultParams) -> None:
        try:
            self.run_fault(params)
        except Exception as e:  # one failed fault must not end the schedule
            self.journal.write(
                Event.FAULT_FAILED, kind=params.kind, replica=params.replica, error=str(e)
            )

    def stop(self, timeout_s: float = 60.0) -> None:
        """End the schedule: cut running durations short, revert them, wait for the threads."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive or time.monotonic() > deadline:
                return
            alive[0].join(max(0.0, deadline - time.monotonic()))

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until every scheduled fault has run and been reverted."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            alive[0].join(left)

    @staticmethod
    def handle_signals() -> None:
        """Make SIGTERM behave like Ctrl-C (KeyboardInterrupt) so ``finally`` reverts run.

        Call from the main thread of a process that injects faults.
        """
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@dataclass
class RecoveryReport:
    """What :func:`recover` did in one run directory."""

    run_dir: Path
    reverted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    removed_network: list[str] = field(default_factory=list)
    removed_cgroups: list[str] = field(default_factory=list)
    """The dead deployment's CPU-share cgroups (``[placement]``), removed."""
    removed_spark_home: str | None = None
    """The dead deployment's own SPARK_HOME, deleted (its executors' logs kept in the run)."""
    kept: list[str] = field(default_factory=list)
    """What was left for a later recover (a SPARK_HOME some process still uses)."""
    stopped: list[str] = field(default_factory=list)
    """Processes of a dead deployment that were still running, now stopped."""


def recover(run_dir: Path, *, force: bool = False) -> RecoveryReport:
    """Undo every pending revert whose injector is gone (all of them with ``force``); if the
    deployment itself is gone (its arfl, ``state.json`` ``pid``), also stop the processes it
    left running, then delete the run's namespaces, veths and bridge (docker target: its
    containers and network, found by label).

    With ``force``, the processes are stopped even if the deployment's arfl still runs (one
    that hangs, or a pid that was reused): a live arfl would restart its drivers.

    Raises:
        FaultError: some revert failed (it stays pending; the message names it), or a
            process could not be stopped.
    """
    report = RecoveryReport(run_dir)
    pending = PendingFaults(run_dir)
    journal = Journal(RunPaths(run_dir).journal)
    for entry in pending.entries():
        label = f"{entry.get('kind')} replica {entry.get('replica')} ({entry.get('id')})"
        if not force and injector_alive(entry):
            report.skipped.append(f"{label}: injector pid {entry.get('owner_pid')} still runs")
            continue
        start = time.time()
        kind, record = implementation(str(entry["kind"])), dict(entry.get("record") or {})
        try:
            kind.undo(record)
        except Exception as e:
            report.failed.append(f"{label}: {e}")
            continue
        pending.remove(str(entry["id"]))
        try:
            kind.settle(run_dir, record)
        except Exception as e:
            pending.add(str(entry["kind"]), opt_int(entry.get("replica")), record)
            report.failed.append(f"{label}: {e}")
            continue
        report.reverted.append(label)
        journal.write(
            Event.FAULT_REVERTED,
            kind=entry.get("kind"),
            replica=entry.get("replica"),
            at_s=None,
            duration_s=round(time.time() - float(entry.get("t", start)), 3),
            started=start,
            ended=time.time(),
            recovered=True,
            details=entry.get("record"),
        )
    _stop_leftovers(run_dir, journal, report, force)
    report.removed_network = _remove_orphan_network(run_dir)
    _remove_shares(run_dir, journal, report)
    if not report.failed:  # no JVM of it survived that might still write there
        _remove_spark_home(run_dir, journal, report)
    if report.failed:
        raise FaultError(f"{run_dir}: recover could not finish: " + "; ".join(report.failed))
    return report


def _stop_leftovers(run_dir: Path, journal: Journal, report: RecoveryReport, force: bool) -> None:
    """Stop what a dead deployment left running; journal each as ``leftover-stopped``."""
    state = leftovers.read_state(run_dir)
    if state is None:
        return
    run_state, mtime = state
    found = leftovers.find(run_dir)
    own_stack = leftovers.run_stack_running(run_dir)
    if not (found or own_stack):
        return
    if not force and leftovers.deployer_alive(run_state, mtime):
        return  # a live deployment's processes are its own business, not leftovers
    for st in leftovers.stop(found):
        journal.write(
            Event.LEFTOVER_STOPPED,
            process=st.name,
            pid=st.pid,
            pids=st.pids,
            killed=st.killed,
            survivors=st.survivors,
        )
        report.stopped.append(st.describe())
        if st.survivors:
            report.failed.append(f"{st.name}: pids {st.survivors} survived SIGKILL")
    if own_stack:
        # After the drivers: they would only spin on a Kafka that went away.
        try:
            services = stack.down(run_dir / leftovers.RUN_STACK)
        except StackError as e:
            report.failed.append(f"the run's own stack: {e}")
            return
        journal.write(Event.LEFTOVER_STOPPED, process="run-stack", services=services)
        report.stopped.append(f"the run's own {' and '.join(services) or 'stack'}")


def _orphan_shares(run_dir: Path) -> SharesRecord | None:
    """The CPU-share cgroups ``state.json`` names, when the deployment that made them is gone
    and its root group still exists."""
    state = leftovers.read_state(run_dir)
    if state is None or state[0].shares is None or leftovers.deployer_alive(*state):
        return None
    rec = state[0].shares
    roots = [rec.root, *([rec.acct_root] if rec.acct_root else [])]
    return rec if any(Path(r).is_dir() for r in roots) else None


def _remove_shares(run_dir: Path, journal: Journal, report: RecoveryReport) -> None:
    """Remove a dead deployment's CPU-share cgroups (after its processes were stopped; any
    still inside move back to the group its arfl ran in); ``cpu-shares-removed``."""
    rec = _orphan_shares(run_dir)
    if rec is None:
        return
    try:
        removed = shares.remove_recorded(rec)
    except FaultError as e:
        report.failed.append(f"the run's CPU-share cgroups: {e}")
        return
    if removed:
        report.removed_cgroups += removed
        journal.write(Event.SHARES_REMOVED, recovered=True, root=rec.root)


def _deployment_gone(run_dir: Path) -> bool:
    state = leftovers.read_state(run_dir)
    return state is not None and not leftovers.deployer_alive(*state)


def _own_spark_home(run_dir: Path) -> Path | None:
    """The run's own SPARK_HOME as ``state.json`` (``spark_home``) names it, if the deployment
    that made it is gone, and it still exists and is the run's
    (:func:`arfl.run.sparkhome.owns_spark_home`)."""
    state = leftovers.read_state(run_dir)
    if state is None or leftovers.deployer_alive(*state):
        return None
    raw = state[0].spark_home
    if not raw:
        return None
    home = Path(raw)
    return home if home.is_dir() and owns_spark_home(run_dir, home) else None


def _remove_spark_home(run_dir: Path, journal: Journal, report: RecoveryReport) -> None:
    """Delete the run's own SPARK_HOME, keeping its executors' logs, when the deployment that
    made it is gone and no process uses it any more, as its stop would have
    (``spark-home-removed``). A directory ``state.json`` names that is not the run's (its
    ``ARFL_RUN`` names another run, or none) is never touched."""
    home = _own_spark_home(run_dir)
    if home is None:
        return
    done = retire_unless_used(home, run_dir)
    if done.using:
        report.kept.append(f"SPARK_HOME {home}: pids {list(done.using)} still use it")
    elif done.error is not None:
        report.failed.append(f"the run's SPARK_HOME {home}: {done.error}")
    elif done.retired is not None:
        journal.write(Event.SPARK_HOME_REMOVED, recovered=True, **done.retired.to_json())
        report.removed_spark_home = done.retired.home


def _remove_orphan_network(run_dir: Path) -> list[str]:
    """Delete the run's isolation when the deployment that created it is gone."""
    try:
        state = load_state(run_dir)
    except FaultError:
        return []
    if not _deployment_gone(run_dir):
        return []
    removed: list[str] = []
    if state.docker is not None:  # the docker target: its containers and network, by label
        removed += docker.remove_run(state.run)
    elif state.on_docker:  # died before its network was recorded: whatever was made, if any
        with contextlib.suppress(FaultError):  # no daemon: nothing of it can exist either
            removed += docker.remove_run(state.run)
    if state.isolation is not None:
        removed += netns.teardown_isolation(state.isolation)
    from pyroute2 import netns as pr_netns

    for name in netns.namespaces_of_run(state.run):
        pr_netns.remove(name)
        removed.append(name)
    return removed


def _docker_leftovers(run: str, recorded: bool) -> bool:
    """True when the run's containers or network still exist; when no daemon answers to say,
    the ``recorded`` ones (then recover is tried, and says why it cannot finish)."""
    try:
        return bool(docker.run_leftovers(run))
    except FaultError:
        return recorded


def runs_with_pending(root: Path) -> list[Path]:
    """Run directories under ``root`` with something to recover: a pending-faults file, or,
    although the deployment is gone, processes it left running, its network isolation or its
    own SPARK_HOME."""
    if not root.is_dir():
        return []
    found = {p.parent for p in root.glob("*/pending-faults.json")}
    by_session: dict[int, list[psutil.Process]] | None = None
    for state_file in root.glob("*/state.json"):
        run_dir = state_file.parent
        try:
            state = load_state(run_dir)
        except FaultError:
            continue
        if run_dir in found or not _deployment_gone(run_dir):
            continue
        if by_session is None:
            by_session = leftovers.sessions()
        if (
            netns.namespaces_of_run(state.run)
            or (state.on_docker and _docker_leftovers(state.run, state.docker is not None))
            or leftovers.find(run_dir, by_session)
            or leftovers.run_stack_running(run_dir)
            or _own_spark_home(run_dir) is not None
            or _orphan_shares(run_dir) is not None
        ):
            found.add(run_dir)
    return sorted(found)


OWN_REVERT_WAIT_S = 10.0
"""How long a fault waits for a clashing fault of the same process to finish its revert."""


def _held(claims: frozenset[str]) -> str:
    """``link arfl-ab-r0h, route arfl-ab-r1:10.213.0.2`` from claim keys."""
    shown = sorted(c.replace(":", " ", 1) for c in claims)
    return ", ".join(shown[:3]) + (f" (+{len(shown) - 3} more)" if len(shown) > 3 else "")
