"""Processes arfl starts and stops, and waiting for a condition.

One lifecycle for every child arfl runs (stack JVMs, replica drivers, merger, injector, Spark
daemons in tests): :class:`ManagedProcess` starts it with its output in a log file and stops it
with SIGTERM, a grace period, then SIGKILL of whatever is left of its process tree. A process
known only from a state file (a pid and a create time) is stopped with :func:`stop_pid`.

A pid alone is not an identity: after a crash and a reboot (or simply a long time) the pid in a
state file can belong to an unrelated process. :func:`same_process` therefore also compares the
create time (:func:`create_time`: the start since boot plus a boot time fixed once per boot, so
that no step of the wall clock moves it), so a recycled pid is never signalled.

This is a base-layer module: it imports only the standard library, psutil and arfl's other
base-layer modules (:mod:`arfl.paths`, :mod:`arfl.priority`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import psutil

from arfl.paths import state_dir
from arfl.priority import set_group_nice

T = TypeVar("T")

CREATE_TIME_SLACK_S = 3.0
"""How far two create times may differ and still name the same process: JSON rounding, and a
create time recorded with psutil's own (``btime`` as read then, which steps of the wall clock
move) against :func:`create_time`. A reused pid would need the pid space to wrap within it."""

_KILL_WAIT_S = 10.0  # how long a SIGKILLed process may take to disappear
_POLL_S = 0.05


def is_running(p: psutil.Process) -> bool:
    """Whether ``p`` (the very process, not a later one with its pid) still runs.

    A zombie whose thread group is empty has exited. A JVM's main thread, though, can be a
    zombie while its other threads still run the shutdown hooks: that is still running.
    """
    try:
        if not p.is_running():  # also False when the pid now belongs to another process
            return False
        return p.status() != psutil.STATUS_ZOMBIE or p.num_threads() > 1
    except psutil.Error:
        return False


def started_since_boot(pid: int) -> float:
    """Seconds from boot to ``pid``'s start (``starttime`` in ``/proc/<pid>/stat``): the kernel's
    count, which no step of the wall clock moves.

    Raises:
        psutil.NoSuchProcess: ``pid`` is gone.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise psutil.NoSuchProcess(pid) from e
    return int(_stat_fields(data)[19]) / _CLK_TCK


def _stat_fields(stat: bytes) -> list[bytes]:
    """The fields of a ``/proc/<pid>/stat`` after the command name, the state first: the name
    (field 2) may hold spaces and parentheses, so they are counted from its last ")"."""
    return stat[stat.rindex(b")") + 2 :].split()


_CLK_TCK = os.sysconf("SC_CLK_TCK")
BOOT_ANCHOR_FILE = "boot-anchor.json"
"""Under :func:`arfl.paths.state_dir`: this boot's id and the boot time first read in it."""
_anchor: float | None = None
"""This process's :func:`boot_anchor` (a process lives within one boot: read once)."""


def boot_anchor() -> float:
    """The boot time (epoch seconds) every arfl process of this boot adds to a start since boot.

    psutil adds ``/proc/stat``'s ``btime``, which every step of the wall clock moves (a VM's
    clock stepped 14 s in one run: every recorded process then looked gone). The first read in a
    boot is kept in :data:`BOOT_ANCHOR_FILE`, keyed by the kernel's boot id, and every process
    reads it from there. Without a writable state directory: ``btime`` as read now."""
    global _anchor
    if _anchor is not None:
        return _anchor
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return psutil.boot_time()
    path = state_dir() / BOOT_ANCHOR_FILE
    value = _read_anchor(path, boot_id)
    if value is None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"boot_id": boot_id, "btime": psutil.boot_time()}))
            if _read_anchor(path, boot_id) is None:  # another process may have written it
                os.replace(tmp, path)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        value = _read_anchor(path, boot_id)
        if value is None:
            return psutil.boot_time()
    _anchor = value
    return value


def _read_anchor(path: Path, boot_id: str) -> float | None:
    try:
        data = json.loads(path.read_text())
        return float(data["btime"]) if data.get("boot_id") == boot_id else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def create_time(p: psutil.Process | int) -> float:
    """``p``'s create time as arfl records and compares it: its start since boot plus
    :func:`boot_anchor` (epoch seconds that no later step of the wall clock moves).

    Raises:
        psutil.NoSuchProcess: the process is gone.
    """
    pid = p if isinstance(p, int) else p.pid
    return started_since_boot(pid) + boot_anchor()


def start_key(p: psutil.Process) -> tuple[int, float]:
    """``p``'s pid and start in seconds since boot: the same key for the same process whatever
    steps the wall clock takes between two reads."""
    return p.pid, round(started_since_boot(p.pid), 2)


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants, root first (empty if it is gone).

    Exited (zombie) members are included; filter with :func:`is_running` where that matters.
    """
    return process_trees([pid])[pid]


def process_trees(roots: Sequence[int]) -> dict[int, list[psutil.Process]]:
    """:func:`process_tree` of each of ``roots``, from one pass over ``/proc`` where each
    :func:`process_tree` makes its own (~8 ms with a run's ~100 processes)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, list[psutil.Process]] = {}
    for root in roots:
        try:
            tree = [psutil.Process(root)]
        except psutil.Error:
            out[root] = []
            continue
        todo = list(tree)
        while todo:
            parent = todo.pop()
            for pid in children.get(parent.pid, ()):
                try:
                    child = psutil.Process(pid)
                    # a child older than its parent is a reused pid (psutil's own rule)
                    if child.create_time() < parent.create_time():
                        continue
                except psutil.Error:
                    continue
                tree.append(child)
                todo.append(child)
        out[root] = tree
    return out


def _parents() -> dict[int, int]:
    """Every process's parent pid, from ``/proc/<pid>/stat``: psutil's public way
    (``process_iter``) builds an object per process and takes ~4 times as long."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        out[int(name)] = int(_stat_fields(stat)[1])
    return out


def same_process(
    pid: int, recorded: float | None, *, slack_s: float = CREATE_TIME_SLACK_S
) -> psutil.Process | None:
    """The live process ``pid`` if it is still the one that was recorded, else None.

    Args:
        pid: the recorded pid.
        recorded: the recorded create time (:func:`create_time`); None accepts any live
            process with ``pid``.
        slack_s: how far the create times may differ.

    Returns:
        None when the pid is gone, has exited (see :func:`is_running`), or now belongs to a
        process created at another time (a reused pid).
    """
    try:
        p = psutil.Process(pid)
        if recorded is not None and abs(create_time(p) - recorded) > slack_s:
            return None
    except psutil.Error:
        return None
    return p if is_running(p) else None


@dataclass(frozen=True)
class ProcessId:
    """A process as arfl records it: its pid and create time (:func:`create_time`; a pid alone is
    reused).

    Every record of a process (``state.json``, ``stack.json``, a fault's undo record) holds one,
    and :meth:`find` is the one test that a live pid is still the recorded process."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        """The identity of live process ``pid`` (None: it is gone)."""
        try:
            return cls(pid, create_time(pid))
        except psutil.Error:
            return None

    @classmethod
    def from_pair(cls, pair: Sequence[float]) -> ProcessId:
        """From its JSON form ``[pid, create_time]``."""
        return cls(int(pair[0]), float(pair[1]))

    def to_pair(self) -> list[float]:
        """Its JSON form ``[pid, create_time]``."""
        return [self.pid, self.create_time]

    def find(self, slack_s: float = CREATE_TIME_SLACK_S) -> psutil.Process | None:
        """The live process if it is still this one (:func:`same_process`)."""
        return same_process(self.pid, self.create_time, slack_s=slack_s)

    def alive(self, slack_s: float = CREATE_TIME_SLACK_S) -> bool:
        """Whether it still runs."""
        return self.find(slack_s) is not None


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its live descendants (exited ones left out; empty when ``pid`` is gone)."""
    return [p.pid for p in process_tree(pid) if is_running(p)]


def signal_all(procs: Iterable[psutil.Process], sig: int) -> list[int]:
    """Send ``sig`` to each process that still exists; returns the pids signalled."""
    done: list[int] = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)  # psutil refuses a pid that was reused meanwhile
            done.append(p.pid)
    return done


def _await_nice(pid: int, nice: int, argv: Sequence[str], timeout_s: float = 5.0) -> None:
    """Wait until ``nice(1)`` has run in the child started as ``nice -n <nice> argv``: its
    niceness is ``nice``, or (where it may not be lowered) it already runs ``argv``, or it is
    gone. Popen returns once ``nice`` is exec'ed, before it set anything: a reader of the
    niceness right after the start read 0 on a busy host."""

    def set_or_gone() -> bool:
        try:
            p = psutil.Process(pid)
            return p.nice() == nice or p.cmdline() == list(argv) or p.status() == "zombie"
        except psutil.Error:
            return True

    with contextlib.suppress(TimeoutError):
        wait_until(set_or_gone, timeout_s=timeout_s, interval_s=0.005)


def _reap(pid: int) -> None:
    # Our own children must be waited for, or they linger as zombies until we exit.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _in_table(p: psutil.Process) -> bool:
    # Still in the process table, if only as a zombie (same identity, not a reused pid).
    try:
        return p.is_running()
    except psutil.Error:
        return False


def wait_gone(
    procs: Iterable[psutil.Process], timeout_s: float, *, reaped: bool = False
) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for every process to exit; returns those still running.

    Exit is detected by polling (gone, reused pid, or a zombie), not by ``wait``: a process may
    be our child, an orphan adopted by init, or a zombie nobody reaps yet, and waiting on a
    zombie that is not our child would block until the timeout. Zombies that are our children
    are reaped on the way.

    Args:
        procs: the processes.
        timeout_s: how long to wait.
        reaped: also wait (within ``timeout_s``) until exited processes are gone from the
            process table, i.e. their parent (often init) reaped them. A zombie left at the
            deadline has exited all the same and is not returned.
    """
    pending = list(procs)
    running: list[psutil.Process] = []

    def all_gone() -> bool:
        nonlocal pending, running
        running, zombies = [], []
        for p in pending:
            if is_running(p):
                running.append(p)
            else:
                _reap(p.pid)
                if reaped and _in_table(p):
                    zombies.append(p)
        pending = running + zombies
        return not pending

    try:
        wait_until(all_gone, timeout_s=timeout_s, interval_s=_POLL_S)
    except TimeoutError:
        return running
    return []


def await_exit(pid: int, create_time: float | None, stop: threading.Event) -> bool:
    """Block until the recorded process ``pid`` exits (True) or ``stop`` is set (False).

    A pidfd (Linux 5.3+) turns readable the moment the process exits, whoever its parent is
    and whether or not it is reaped; elsewhere the process is polled every 5 ms. The pidfd is
    opened before the identity is checked, so a pid reused later can never be waited on.
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        if same_process(pid, create_time) is None:
            return True
        if fd is None:
            while same_process(pid, create_time) is not None:
                if stop.wait(0.005):
                    return False
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll(100):
            if stop.is_set():
                return False
        return True
    finally:
        if fd is not None:
            os.close(fd)


class ExitWatch:
    """Sets ``wake`` the moment any of the processes ``pids()`` names exits: a thread polls a
    pidfd of each (Linux 5.3+; elsewhere it does nothing and the caller's own polling sees the
    death). ``pids`` is asked again every :data:`EXIT_WATCH_REFRESH_S`, so processes started
    later are watched too."""

    def __init__(
        self, pids: Callable[[], Iterable[int]], wake: threading.Event, stop: threading.Event
    ) -> None:
        self._pids, self._wake, self._stop = pids, wake, stop
        self._fds: dict[int, int] = {}
        self._thread = threading.Thread(target=self._run, name="arfl-exit-watch", daemon=True)

    def start(self) -> None:
        """Start watching (until ``stop`` is set)."""
        if hasattr(os, "pidfd_open"):
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                wanted = set(self._pids())
                for pid in set(self._fds) - wanted:
                    os.close(self._fds.pop(pid))
                for pid in wanted - set(self._fds):
                    with contextlib.suppress(OSError):
                        self._fds[pid] = os.pidfd_open(pid)
                poller = select.poll()
                for fd in self._fds.values():
                    poller.register(fd, select.POLLIN)
                ready = {fd for fd, _ in poller.poll(EXIT_WATCH_REFRESH_S * 1000)}
                for pid, fd in list(self._fds.items()):
                    if fd in ready:
                        os.close(self._fds.pop(pid))
                        self._wake.set()
                if ready:  # a dead pid stays in pids() until the caller has seen it
                    self._stop.wait(EXIT_WATCH_REFRESH_S)
        finally:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


EXIT_WATCH_REFRESH_S = 0.2
"""How often :class:`ExitWatch` asks which processes to watch."""


def kill_all(procs: Iterable[psutil.Process], wait_s: float = _KILL_WAIT_S) -> list[psutil.Process]:
    """SIGKILL every process that still runs and wait up to ``wait_s`` for all of them to be
    gone from the process table (reaped).

    Returns:
        The processes that survived SIGKILL (normally none).
    """
    present = [p for p in procs if _in_table(p)]
    signal_all([p for p in present if is_running(p)], signal.SIGKILL)
    return wait_gone(present, wait_s, reaped=True)


def stop_pid(
    pid: int, create_time: float | None = None, *, grace_s: float = 10.0, tree: bool = True
) -> bool:
    """Stop a process known only by pid (and create time), e.g. from a state file.

    SIGCONT (a paused process cannot act on SIGTERM) and SIGTERM to the process (with
    ``tree``: to it and every descendant at once), up to ``grace_s`` to exit, then SIGKILL to
    whatever is left. Nothing is signalled unless pid and create time match.

    Args:
        pid: the process.
        create_time: its recorded create time; None trusts the pid.
        grace_s: seconds between SIGTERM and SIGKILL.
        tree: also stop its descendants.

    Returns:
        True if the process was running, False if it was not (any more). Whether it is gone
        now can be checked with :func:`same_process`: a process may survive SIGKILL (stuck in
        the kernel).

    A process that is our own child is reaped here: a ``Popen`` still held for it then reports
    exit code 0. Stop a process started as :class:`ManagedProcess` with its :meth:`stop`.
    """
    root = same_process(pid, create_time)
    if root is None:
        _reap(pid)  # it may be our own zombie child
        return False
    procs = process_tree(pid) if tree else [root]
    procs = [p for p in procs if is_running(p)] or [root]
    signal_all(procs, signal.SIGCONT)
    signal_all(procs, signal.SIGTERM)
    left = wait_gone(procs, grace_s)
    if left:
        kill_all(left)
    return True


def stop_on_termination(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM and SIGINT (a component process's graceful end: deploy
    SIGTERMs its merger and injector, a user Ctrl-Cs them)."""

    def handler(_signum: int, _frame: object) -> None:
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def wait_until(
    check: Callable[[], T | bool | None],
    *,
    timeout_s: float,
    interval_s: float = 0.2,
    what: str = "",
    stop: threading.Event | None = None,
    error: Callable[[], Exception] | None = None,
) -> T:
    """Call ``check`` until it returns a truthy value, and return that value.

    ``check`` is called at least once, and once more at the deadline. An exception it raises
    propagates at once (a check can fail fast, e.g. when the process it waits for died). Every
    deadline loop of arfl goes through here.

    Args:
        check: returns a falsy value (None, False, empty) while not ready.
        timeout_s: how long to keep trying.
        interval_s: pause between two calls (0: call again at once, for a check that blocks).
        what: names the awaited thing in the error message.
        stop: an event that ends the wait early (:class:`Stopped`).
        error: builds the exception raised at the timeout instead (the caller's own, with
            what it knows then).

    Raises:
        TimeoutError: ``<what> not ready after <timeout_s>s`` (or what ``error`` builds).
        Stopped: ``stop`` was set.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return cast(T, value)
        left = deadline - time.monotonic()
        if left <= 0:
            if error is not None:
                raise error()
            raise TimeoutError(f"{what or 'condition'} not ready after {timeout_s:.0f}s")
        pause = min(interval_s, left)
        if stop is None:
            time.sleep(pause)
        elif stop.wait(pause):
            raise Stopped(f"stopped waiting for {what or 'a condition'}")


class Stopped(TimeoutError):
    """:func:`wait_until` was told to stop before its check held."""


class ManagedProcess:
    """A child process whose output goes to a log file, known by pid + create time.

    Example::

        merger = ManagedProcess.start("merger", argv, run_dir / "logs" / "merger.log")
        ...
        code = merger.stop(grace_s=15)   # SIGTERM, 15 s, then SIGKILL of what is left

    Attributes:
        name: for messages.
        log_path: the file stdout and stderr are appended to.
        popen: the underlying :class:`subprocess.Popen` (its exit code is kept: nothing else
            waits on the process).
        graceful: after :meth:`stop`: whether the process exited within the grace period.
        survivors: after :meth:`stop`: pids of descendants that survived SIGKILL.
    """

    def __init__(
        self, name: str, popen: subprocess.Popen[bytes], log_path: Path, *, new_session: bool
    ) -> None:
        """Wrap a started process; use :meth:`start` to start one."""
        self.name = name
        self.popen = popen
        self.log_path = log_path
        self.graceful: bool | None = None
        self.survivors: list[int] = []
        self._new_session = new_session
        self._exit_code: int | None = None
        self._terminated = False
        self._seen: set[psutil.Process] = set()
        try:
            self._create_time: float | None = create_time(popen.pid)
        except psutil.Error:
            self._create_time = None

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        new_session: bool = True,
        nice: int = 0,
    ) -> ManagedProcess:
        """Start ``argv`` with stdin from /dev/null and stdout + stderr appended to ``log``.

        Args:
            name: for messages.
            argv: the command.
            log: the log file (created with its directory; appended to).
            env: the environment; default this process's.
            cwd: the working directory; default this process's.
            new_session: start it in its own session, so that a Ctrl-C in the terminal does
                not reach it (it is stopped by :meth:`stop`) and its orphans can be found.
            nice: its niceness (every thread it starts inherits it, through ``nice``) and its
                session group's (:func:`arfl.priority.set_nice`); where it may not be lowered
                it stays 0 (the command still runs; :func:`arfl.priority.priority_of` tells).

        Raises:
            OSError: the executable cannot be started (callers turn it into their error).
        """
        log.parent.mkdir(parents=True, exist_ok=True)
        command = ["nice", "-n", str(nice), *argv] if nice else list(argv)
        # The child gets its own descriptor; the parent keeps none open.
        with log.open("ab") as out:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=new_session,
            )
        if nice:
            _await_nice(popen.pid, nice, argv)
        if nice and new_session:
            # ``nice`` set the threads'; across sessions the kernel weighs the session's group.
            with contextlib.suppress(psutil.Error):
                set_group_nice([psutil.Process(popen.pid)], nice)
        return cls(name, popen, log, new_session=new_session)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    @property
    def create_time(self) -> float | None:
        """psutil's create time, read at start (None if the process was already gone)."""
        return self._create_time

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while it runs (polls)."""
        return self.popen.poll()

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.popen.poll() is None

    def descendants(self) -> list[psutil.Process]:
        """Its live descendants: the current ones, those seen earlier (orphaned when their
        parent exited) and, when it leads its own session, the session's other members."""
        if self.popen.poll() is None:
            # Not reaped yet, so the pid is still ours and its tree is its tree.
            self._seen.update(process_tree(self.pid)[1:])
        found = set(self._seen)
        if self._new_session:
            found.update(self._session_members())
        return [p for p in found if p.pid != self.pid and is_running(p)]

    def _session_members(self) -> list[psutil.Process]:
        leader = same_process(self.pid, None)
        if leader is not None and self.create_time is not None:
            with contextlib.suppress(psutil.Error):
                if abs(create_time(leader) - self.create_time) > CREATE_TIME_SLACK_S:
                    return []  # the pid, and so the session id, now belong to someone else
        out: list[psutil.Process] = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if p.pid != os.getpid() and os.getsid(p.pid) == self.pid:
                    out.append(p)
        return out

    def terminate(self) -> None:
        """SIGCONT and SIGTERM, without waiting (several processes can then be awaited in
        turn by :meth:`stop`). Its descendants are noted first: they may be orphaned soon.

        Sent once: a second SIGTERM could hit a process that is already shutting down with
        its default handlers restored (Python does so) and kill it.
        """
        if self._terminated or self.popen.poll() is not None:
            return
        self._terminated = True
        kids = self.descendants()
        signal_all(kids, signal.SIGCONT)  # a paused tree could not shut down gracefully
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGCONT)
            self.popen.send_signal(signal.SIGTERM)

    def stop(self, grace_s: float = 15.0, *, tree_grace_s: float = 0.0) -> int:
        """Stop it: SIGTERM, up to ``grace_s`` to exit, then SIGKILL; then its whole tree.

        Idempotent: a second call returns the same exit code and signals nothing.

        Args:
            grace_s: seconds between SIGTERM and SIGKILL of the process.
            tree_grace_s: after the process exited by itself, how long its descendants may
                take to follow (a driver's JVM exits once its parent is gone) before they are
                SIGKILLed; 0 kills them at once.

        Returns:
            The exit code (negative: killed by that signal).
        """
        if self._exit_code is not None:
            return self._exit_code
        self.terminate()
        graceful = True
        try:
            self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            graceful = False
            self.popen.kill()
            self.popen.wait()
        # Only the descendants go through psutil: psutil waiting on the process itself would
        # reap it behind Popen's back and lose the exit code.
        leftovers = self.descendants()
        if graceful and tree_grace_s > 0:
            wait_gone(leftovers, tree_grace_s)
        self.survivors = [p.pid for p in kill_all(leftovers)]
        self.graceful = graceful
        self._exit_code = int(self.popen.returncode)
        return self._exit_code

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of its log ("" if unreadable)."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, returncode={self.returncode})"
