"""``kill-executor``: SIGKILL one executor JVM of a replica; Spark replaces it."""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults.base import FaultBase
from arfl.params import Params
from arfl.processes import wait_until
from arfl.registry import FAULTS, FaultInfo
from arfl.run.events import Event
from arfl.targets import procs
from arfl.targets.base import Target

REPLACEMENT_TIMEOUT_S = 30.0


class KillExecutorParams(Params):
    """``[[chaos]] executor`` / ``--executor``."""

    executor: str | None = Field(
        None,
        description="the executor id; default the lowest",
        json_schema_extra={"metavar": "ID"},
    )

    def describe(self) -> list[str]:
        """``executor 1``."""
        return [f"executor {self.executor}"] if self.executor is not None else []


@FAULTS.register(
    "kill-executor",
    FaultInfo(
        "SIGKILL one executor JVM of a replica",
        takes_duration=False,
        params=KillExecutorParams,
        kills="executor",
        description="Spark starts a replacement executor for the replica's application. A "
        "real-time replica with a ready standby (``replication.standby``) is handed to the "
        "standby instead: arfl kills its driver and the standby takes its place.",
        reverted="Nothing to undo: the revert waits up to "
        f"{REPLACEMENT_TIMEOUT_S:g} s for Spark's replacement executor.",
        requires="a master whose executors are JVMs of their own (``local-cluster[...]``, "
        "``spark://...``); ``local[N]`` has none",
        docker="an executor JVM found among the container's processes (``docker top``)",
        journal=(
            (
                Event.REPLICA_EXECUTOR_LOST,
                "a real-time replica with a ready standby: arfl kills its driver, and what "
                "follows a ``kill-replica`` follows",
            ),
        ),
    ),
)
class KillExecutor(FaultBase):
    """Kill executor ``executor`` (default: the lowest id) of the replica.

    ``revert`` has nothing to undo; it waits (up to 30 s) until Spark runs a replacement
    executor JVM for the same application, so callers can observe recovery. ``details`` then
    holds ``replacement_s`` (None when no replacement appeared).
    """

    kind = "kill-executor"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Pick the executor; no undo needed (killing is final)."""
        replica = self.replica_index(target)
        executors = target.executor_pids(replica)
        if not executors:
            raise FaultError(
                f"kill-executor: replica {replica} of run {target.run} has no executor JVM "
                "(no CoarseGrainedExecutorBackend for its app id); is it running on a cluster "
                "master (local-cluster, standalone)? local[*] has no separate executors"
            )
        exe = self.own(KillExecutorParams).executor
        if exe is None:
            exe = min(executors, key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e))
        if exe not in executors:
            raise FaultError(
                f"kill-executor: replica {replica} has no executor {exe!r} "
                f"(running: {', '.join(sorted(executors))})"
            )
        self.details = {"replica": replica, "executor": exe, "pid": executors[exe]}
        self.details.update(target.reach(replica).where())  # docker: the JVM's container
        return {}

    def inject(self, target: Target) -> None:
        """SIGKILL the executor JVM."""
        self.details["killed_at"] = time.time()
        procs.kill(int(self.details["pid"]), "kill-executor: executor")

    def revert(self, target: Target) -> None:
        """Wait for a replacement executor (a new pid for the same application)."""
        if "killed_at" not in self.details:
            return
        killed = int(self.details["pid"])
        replica = int(self.details["replica"])
        self.details["replacement_s"] = None

        def replaced() -> dict[str, int]:
            # FaultError: the driver itself is gone, nothing will replace the executor
            return {e: p for e, p in target.executor_pids(replica).items() if p != killed}

        try:
            fresh = wait_until(replaced, timeout_s=REPLACEMENT_TIMEOUT_S, interval_s=0.05)
        except (TimeoutError, FaultError):
            return
        exe, pid = min(fresh.items())
        self.details.update(
            replacement_s=round(time.time() - float(self.details["killed_at"]), 3),
            replacement_executor=exe,
            replacement_pid=pid,
        )
