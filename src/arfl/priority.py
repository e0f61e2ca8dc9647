"""Process priority: the niceness of a process tree and of the kernel's session groups
(autogroups), which the scheduler weighs before a thread's own niceness."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable
from pathlib import Path

import psutil


def set_nice(procs: Iterable[psutil.Process], value: int) -> bool:
    """Set the scheduling niceness of every thread of ``procs`` (Linux keeps it per thread: a
    JVM's threads took their creator's at birth, so setting the process's alone changes one
    thread), and of the autogroups they run in other than this process's own.

    With the kernel's autogroup on (``/proc/sys/kernel/sched_autogroup_enabled``), the CPU is
    shared between sessions first and a thread's niceness only weighs inside its session: a
    child started in a session of its own (every :class:`ManagedProcess` by default) took a full
    share at niceness 19 until its session's group was niced too.

    True when every live thread and group took it; lowering a thread's niceness needs root
    (CAP_SYS_NICE)."""
    ok = True
    procs = list(procs)
    for p in procs:
        try:
            tids = [t.id for t in p.threads()]
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            ok = False
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, value)
            except ProcessLookupError:
                continue
            except OSError:
                ok = False
    return set_group_nice(procs, value) and ok


def set_group_nice(procs: Iterable[psutil.Process], value: int) -> bool:
    """Nice the autogroups ``procs`` run in, once each, except this process's own."""
    ok = True
    own = _autogroup(os.getpid())
    groups: dict[str, int] = {}
    for p in procs:
        group = _autogroup(p.pid)
        if group is not None and (own is None or group[0] != own[0]):
            groups.setdefault(group[0], p.pid)
    for pid in groups.values():
        ok = _set_autogroup_nice(pid, value) and ok
    return ok


def _autogroup(pid: int) -> tuple[str, int] | None:
    """The autogroup ``pid`` runs in: its name (``/autogroup-N``) and its niceness; None without
    one (the kernel has none, or the process is gone)."""
    try:
        fields = Path(f"/proc/{pid}/autogroup").read_text().split()
        return fields[0], int(fields[-1])
    except (OSError, ValueError, IndexError):
        return None


def _set_autogroup_nice(pid: int, value: int) -> bool:
    """Nice the autogroup of ``pid``. Without CAP_SYS_ADMIN the kernel takes one such write per
    0.1 s (EAGAIN before): a few retries."""
    for _ in range(5):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(value))
            return True
        except FileNotFoundError:
            return True  # gone meanwhile
        except BlockingIOError:
            time.sleep(0.11)
        except OSError:
            return False
    return False


def priority_of(pid: int) -> dict[str, int | None]:
    """The niceness ``pid`` runs at: its main thread's and its session group's (None where the
    kernel has no autogroup); both None when the process is gone."""
    try:
        nice = int(psutil.Process(pid).nice())
    except psutil.Error:
        return {"nice": None, "group_nice": None}
    group = _autogroup(pid)
    return {"nice": nice, "group_nice": None if group is None else group[1]}


def can_unnice() -> bool:
    """Whether this process may lower a niceness back to 0 (root, or an RLIMIT_NICE that
    allows it): else a process niced now could not be given its full share again."""
    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or soft >= 20
