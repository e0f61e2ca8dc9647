"""What the supervisor knows of each replica: its public snapshot (:class:`ReplicaState`) and
its bookkeeping between looks (:class:`ReplicaSlot`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

from arfl.processes import ManagedProcess

Status = Literal["starting", "running", "restarting", "dead", "stopped"]


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


class ReplicaSlot:
    """One replica under supervision: its files, current driver process and history."""

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
        self.executor_procs: list[psutil.Process] = []
        """Those executor JVMs, checked one by one between reads of the whole tree."""
        self.executors_read_at = 0.0
        """When the tree was last read for them (``time.monotonic``)."""
