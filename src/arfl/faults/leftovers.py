"""The processes a deployment left running when its own arfl died (``kill -9``, a crash).

Replica drivers, the merger and the injector each lead a session of their own (so that a
Ctrl-C in the terminal reaches only arfl, which then stops them by pid). When arfl dies
without stopping them, nothing else does: the drivers keep their driver and executor JVMs and
Python workers running, the merger keeps consuming, the injector keeps producing. A
network-isolated run also keeps its own ZooKeeper and Kafka (``<run dir>/stack``).

Everything is found through ``state.json`` and nothing else:

* each recorded process (``replicas.N.driver_pid``, ``standbys.K.pid``, ``merger_pid``,
  ``injector_pid``) is
  trusted only together with its recorded create time (a pid without one is never signalled:
  it may have been reused);
* with it go its descendants, and the other members of the session it leads: a driver that
  died orphaned its JVM, whose session id is still the driver's pid. A session id stays taken
  while any member lives, so such members are the driver's own (members created before the
  recorded process are not taken, to be safe).

They are stopped only when the deployment's arfl (``state.json`` ``pid``, with
``pid_create_time`` when recorded) is gone, unless forced.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from arfl.errors import StackError
from arfl.processes import (
    CREATE_TIME_SLACK_S,
    ProcessId,
    create_time,
    is_running,
    kill_all,
    process_tree,
    same_process,
    signal_all,
    wait_gone,
)
from arfl.run.state import STATE_FILE, RunState
from arfl.stack.lifecycle import layout_of
from arfl.stack.lifecycle import load_state as load_stack_state
from arfl.stack.processes import is_alive as stack_process_alive

RUN_STACK = "stack"
"""The run's own ZooKeeper + Kafka state directory (network-isolated runs)."""

GRACE_S = 15.0
"""How long a recorded process may take to exit after SIGTERM (a driver stops its query)."""
TREE_GRACE_S = 5.0
"""Then how long its descendants (JVMs exit once their Python parent is gone) may take."""


@dataclass(frozen=True)
class Recorded(ProcessId):
    """A process ``state.json`` names, by its identity."""

    name: str = ""
    """``replica-N``, ``standby-K``, ``merger`` or ``injector``."""


@dataclass
class Leftover:
    """A recorded process (or what it orphaned) that still runs."""

    recorded: Recorded
    processes: list[psutil.Process]
    """The recorded process (when it still runs) first, then its tree and session."""
    root_alive: bool


@dataclass
class Stopped:
    """What stopping one leftover did."""

    name: str
    pid: int
    pids: list[int]
    """Every pid signalled: the recorded process and what belonged to it."""
    killed: list[int] = field(default_factory=list)
    """Those that needed SIGKILL."""
    survivors: list[int] = field(default_factory=list)
    """Those that survived SIGKILL (normally none)."""

    def describe(self) -> str:
        """One line for the terminal."""
        others = [p for p in self.pids if p != self.pid]
        return (
            f"{self.name} (pid {self.pid}"
            + ("" if self.pid in self.pids else " already gone")
            + (f", with {' '.join(map(str, others))}" if others else "")
            + (f"; killed {' '.join(map(str, self.killed))}" if self.killed else "")
            + ")"
        )


def read_state(run_dir: Path) -> tuple[RunState, float] | None:
    """``state.json`` and its modification time; None when missing, unreadable or not a run
    state."""
    path = run_dir / STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        mtime = path.stat().st_mtime
        return RunState.model_validate(raw), mtime
    except (OSError, ValueError):  # a ValidationError is a ValueError
        return None


def recorded_processes(state: RunState) -> list[Recorded]:
    """The processes ``state.json`` names with a create time: injector, drivers, standby
    drivers, merger."""
    out: list[Recorded] = []

    def add(name: str, pid: int | None, create_time: float | None) -> None:
        if pid is not None and create_time is not None:  # a pid alone is no identity
            out.append(Recorded(pid, create_time, name=name))

    add("injector", state.injector_pid, state.injector_create_time)
    for i, rep in sorted(state.replicas.items()):
        add(f"replica-{i}", rep.driver_pid, rep.driver_create_time)
    for k, sb in sorted(state.standbys.items()):
        add(f"standby-{k}", sb.pid, sb.create_time)
    add("merger-standby", state.merger_standby_pid, state.merger_standby_create_time)
    add("merger", state.merger_pid, state.merger_create_time)
    # A standby promoted since the last write is recorded twice (as the replica and the
    # standby): stop it once.
    seen: set[tuple[int, float]] = set()
    unique = []
    for r in out:
        if (r.pid, r.create_time) not in seen:
            seen.add((r.pid, r.create_time))
            unique.append(r)
    return unique


def deployer_alive(state: RunState, state_mtime: float) -> bool:
    """Whether the arfl process that runs the deployment (``state.json`` ``pid``) still runs.

    Without a recorded create time, a live process with that pid counts as the owner unless it
    was created after ``state.json`` was last written (then it cannot have written it).
    """
    pid, recorded = state.pid, state.pid_create_time
    if pid is None:
        return False
    proc = same_process(pid, recorded)
    if proc is None:
        return False
    if recorded is None:
        with contextlib.suppress(psutil.Error):
            return create_time(proc) <= state_mtime + CREATE_TIME_SLACK_S
    return True


def _protected() -> set[int]:
    """This process and its ancestors: never signalled, whatever a state file says."""
    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids.update(p.pid for p in me.parents())
    return pids


def _created_since(p: psutil.Process, t: float) -> bool:
    try:
        return create_time(p) >= t - CREATE_TIME_SLACK_S
    except psutil.Error:
        return False


def sessions() -> dict[int, list[psutil.Process]]:
    """Every process by session id (one scan, to share between several :func:`find` calls)."""
    by_sid: dict[int, list[psutil.Process]] = {}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            by_sid.setdefault(os.getsid(p.pid), []).append(p)
    return by_sid


def find(
    run_dir: Path, by_session: dict[int, list[psutil.Process]] | None = None
) -> list[Leftover]:
    """The recorded processes of ``run_dir`` that still run, with their trees and sessions
    (whoever owns the deployment; see :func:`deployer_alive`).

    Args:
        run_dir: the run directory.
        by_session: a :func:`sessions` scan to reuse; default a new one.
    """
    state = read_state(run_dir)
    if state is None:
        return []
    recorded = recorded_processes(state[0])
    if not recorded:
        return []
    by_sid = sessions() if by_session is None else by_session
    protected = _protected()
    found: list[Leftover] = []
    for rec in recorded:
        if rec.pid in protected:  # nor is anything below it: that would include its other work
            continue
        try:
            if abs(create_time(rec.pid) - rec.create_time) > CREATE_TIME_SLACK_S:
                continue  # the pid belongs to another process now, and so does its session
        except psutil.Error:
            pass  # gone: what it orphaned may still run in its session
        root = same_process(rec.pid, rec.create_time)  # None if a zombie
        procs: dict[int, psutil.Process] = {}
        if root is not None:
            procs.update((p.pid, p) for p in process_tree(rec.pid))
        for p in by_sid.get(rec.pid, []):
            if p.pid not in procs and _created_since(p, rec.create_time):
                procs[p.pid] = p
        live = [p for p in procs.values() if p.pid not in protected and is_running(p)]
        if live:
            live.sort(key=lambda p: p.pid != rec.pid)  # the recorded process first
            found.append(Leftover(rec, live, root_alive=root is not None))
    return found


def stop(
    leftovers: list[Leftover], grace_s: float | None = None, tree_grace_s: float | None = None
) -> list[Stopped]:
    """Stop every leftover at once: SIGCONT everything (a paused process cannot act on
    SIGTERM), SIGTERM each recorded process (each member, where it is gone), up to ``grace_s``
    (default :data:`GRACE_S`) for them, ``tree_grace_s`` (default :data:`TREE_GRACE_S`) more
    for their descendants, then SIGKILL what is left."""
    grace_s = GRACE_S if grace_s is None else grace_s
    tree_grace_s = TREE_GRACE_S if tree_grace_s is None else tree_grace_s
    everything = [p for lo in leftovers for p in lo.processes]
    signal_all(everything, signal.SIGCONT)
    first: list[psutil.Process] = []
    for lo in leftovers:
        first += lo.processes[:1] if lo.root_alive else lo.processes
    signal_all(first, signal.SIGTERM)
    wait_gone(first, grace_s)
    wait_gone(everything, tree_grace_s)
    still = [p for p in everything if is_running(p)]
    survivors = {p.pid for p in kill_all(still)}
    killed = {p.pid for p in still}
    return [
        Stopped(
            name=lo.recorded.name,
            pid=lo.recorded.pid,
            pids=[p.pid for p in lo.processes],
            killed=sorted(p.pid for p in lo.processes if p.pid in killed),
            survivors=sorted(p.pid for p in lo.processes if p.pid in survivors),
        )
        for lo in leftovers
    ]


def run_stack_running(run_dir: Path) -> bool:
    """Whether the run's own ZooKeeper or Kafka (network-isolated runs) still runs."""
    try:
        st = load_stack_state(layout_of(run_dir / RUN_STACK))
    except StackError:  # unreadable: 'down' says so
        return (run_dir / RUN_STACK).is_dir()
    return st is not None and any(stack_process_alive(r) for r in st.services.values())
