"""``kill-executor``: kill one executor of a replica; Spark replaces it.

Two ways: SIGKILL of the executor JVM (a crash; the JVM is a process of this host or of the
replica's container), or a request to the replica's driver, which asks the cluster manager
(:mod:`arfl.replica.control`): the only way to an executor of a cluster arfl did not start.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults.base import FaultBase
from arfl.params import Params
from arfl.processes import wait_until
from arfl.registry import FAULTS, FaultInfo
from arfl.run import control
from arfl.run.events import Event
from arfl.run.rundir import RunPaths
from arfl.run.state import load_state
from arfl.targets import procs
from arfl.targets.base import Target

REPLACEMENT_TIMEOUT_S = 30.0

Via = Literal["auto", "signal", "spark"]


class KillExecutorParams(Params):
    """``[[chaos]] executor`` / ``--executor``, ``via`` / ``--via``."""

    executor: str | None = Field(
        None,
        description="the executor id; default the lowest",
        json_schema_extra={"metavar": "ID"},
    )
    via: Via = Field(
        "auto",
        description="``signal``: SIGKILL the executor JVM on this host; ``spark``: the "
        "replica's driver asks the cluster manager to kill it and launch a replacement "
        "(``SparkContext.killAndReplaceExecutor``); ``auto``: ``spark`` on a ``spark://`` "
        "cluster, whose executors belong to its cluster manager, else ``signal``",
    )

    def describe(self) -> list[str]:
        """``executor 1``, ``via spark``."""
        out = [f"executor {self.executor}"] if self.executor is not None else []
        return out + ([f"via {self.via}"] if self.via != "auto" else [])


def resolve_via(via: Via, master: str) -> Literal["signal", "spark"]:
    """``auto``: through the cluster manager on a ``spark://`` master, else a signal."""
    if via != "auto":
        return via
    return "spark" if master.startswith("spark://") else "signal"


@FAULTS.register(
    "kill-executor",
    FaultInfo(
        "kill one executor of a replica (SIGKILL, or through the cluster manager)",
        takes_duration=False,
        params=KillExecutorParams,
        kills="executor",
        description="Spark starts a replacement executor for the replica's application. On a "
        "``spark://`` cluster the replica's driver asks the cluster manager to kill the executor "
        "(its executors need not be processes of this host); elsewhere arfl SIGKILLs the JVM. A "
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
    executor for the same application, so callers can observe recovery. ``details`` then
    holds ``replacement_s`` (None when no replacement appeared).
    """

    kind = "kill-executor"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Pick the executor and the way to it; no undo needed (killing is final)."""
        replica = self.replica_index(target)
        params = self.own(KillExecutorParams)
        via = resolve_via(params.via, load_state(target.run_dir).master)
        if via == "spark":
            self.details = {"replica": replica, "via": via}
            running = self._ask(target, {"op": "executors"})["executors"]
            exe = self._pick(replica, params.executor, running)
            self.details["executor"] = exe
            return {}
        executors = target.executor_pids(replica)
        if not executors:
            raise FaultError(
                f"kill-executor: replica {replica} of run {target.run} has no executor JVM "
                "(no CoarseGrainedExecutorBackend for its app id); is it running on a cluster "
                "master (local-cluster, standalone)? local[*] has no separate executors"
            )
        exe = self._pick(replica, params.executor, executors)
        self.details = {"replica": replica, "executor": exe, "pid": executors[exe], "via": via}
        self.details.update(target.reach(replica).where())  # docker: the JVM's container
        return {}

    @staticmethod
    def _pick(replica: int, wanted: str | None, executors: Iterable[str]) -> str:
        ids = sorted(executors, key=control.executor_order)
        if not ids:
            raise FaultError(f"kill-executor: replica {replica}'s application has no executor")
        exe = wanted if wanted is not None else ids[0]
        if exe not in ids:
            raise FaultError(
                f"kill-executor: replica {replica} has no executor {exe!r} "
                f"(running: {', '.join(ids)})"
            )
        return exe

    def _ask(self, target: Target, request: dict[str, Any]) -> dict[str, Any]:
        where = RunPaths(target.run_dir).control(int(self.details["replica"]))
        try:
            return control.ask(where, request)
        except FaultError as e:
            raise FaultError(
                f"kill-executor via spark: replica {self.details['replica']}: {e}"
            ) from e

    def inject(self, target: Target) -> None:
        """SIGKILL the executor JVM, or ask the driver to have the cluster manager kill it."""
        if self.details.get("via") == "spark":
            asked = time.time()
            answer = self._ask(
                target, {"op": "kill-executor", "executor": self.details["executor"]}
            )
            self.details["executors_before"] = list(answer.get("executors", []))
            if not answer.get("accepted"):
                raise FaultError(
                    f"kill-executor via spark: the cluster manager did not accept killing "
                    f"executor {self.details['executor']} of replica {self.details['replica']}"
                )
            # Only a kill that was asked for and accepted has a replacement to wait for.
            self.details["killed_at"] = asked
            return
        self.details["killed_at"] = time.time()
        procs.kill(int(self.details["pid"]), "kill-executor: executor")

    def revert(self, target: Target) -> None:
        """Wait for a replacement executor (a new pid, or a new id, for the same application)."""
        if "killed_at" not in self.details:
            return
        replica = int(self.details["replica"])
        self.details["replacement_s"] = None
        if self.details.get("via") == "spark":
            before = set(self.details.get("executors_before", [])) | {self.details["executor"]}

            def replaced() -> dict[str, int]:
                # Spark never reuses an executor id: a replacement is one not running before.
                running = self._ask(target, {"op": "executors"})["executors"]
                return {e: 0 for e in running if e not in before}

        else:
            pid = int(self.details["pid"])

            def replaced() -> dict[str, int]:
                # FaultError: the driver itself is gone, nothing will replace the executor
                return {e: p for e, p in target.executor_pids(replica).items() if p != pid}

        try:
            fresh = wait_until(replaced, timeout_s=REPLACEMENT_TIMEOUT_S, interval_s=0.05)
        except (TimeoutError, FaultError):
            return
        exe = min(fresh, key=control.executor_order)
        self.details.update(
            replacement_s=round(time.time() - float(self.details["killed_at"]), 3),
            replacement_executor=exe,
        )
        if fresh[exe]:
            self.details["replacement_pid"] = fresh[exe]
