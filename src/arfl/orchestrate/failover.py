"""Executor failover: a real-time replica that lost an executor JVM waits for Spark to start a
new one and re-run its tasks (13 s measured, docs/benchmarks.md); a ready standby resumes it
sooner, so the supervisor kills its driver and the usual take-over follows."""

from __future__ import annotations

import contextlib

import psutil

from arfl.processes import is_running, process_tree
from arfl.targets.local import EXECUTOR_MAIN, not_forked_from_another

TREE_READ_S = 2.0
"""How often the supervisor reads a replica's whole process tree for its executor JVMs (a pass
over all of ``/proc``, ~8 ms with a run's ~100 processes); between reads it checks the ones
it knows one by one, so a lost one is still seen within the supervision period, a new one
within this. Every 0.2 s for each replica, the reads were most of ``arfl deploy``'s CPU
(docs/benchmarks.md, "arfl's own processes")."""


def executor_jvms(driver_pid: int) -> tuple[list[psutil.Process], set[int]] | None:
    """The live tree of a driver (driver first) and the pids of its executor JVMs; None when
    the driver itself is gone (its death is the supervisor's to handle).

    Executor JVMs are found by their main class; not their children, which carry the same
    command line from fork to exec (a windowed replica's executors start hundreds: Hadoop's
    local file system runs readlink/chmod/rm at each state checkpoint) and then vanish:
    counted, they looked lost."""
    tree = [p for p in process_tree(driver_pid) if is_running(p)]
    if not tree or tree[0].pid != driver_pid:
        return None
    parent_of: dict[int, int] = {}
    for p in tree[1:]:
        with contextlib.suppress(psutil.Error):
            if EXECUTOR_MAIN in " ".join(p.cmdline()[:200]):
                parent_of[p.pid] = p.ppid()
    return tree, not_forked_from_another(parent_of)
