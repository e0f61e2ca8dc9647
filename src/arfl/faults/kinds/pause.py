"""``pause``: freeze every process of a replica for a duration, then thaw it."""

from __future__ import annotations

import time
from typing import Any

from arfl.faults.base import LAG_JOURNAL, FaultBase
from arfl.registry import FAULTS, FaultInfo
from arfl.targets.base import Reach, Target


@FAULTS.register(
    "pause",
    FaultInfo(
        "SIGSTOP a replica's processes for a duration, then SIGCONT",
        takes_duration=True,
        description="Every process of the replica stops: its driver, executors and Python "
        "workers. It falls behind, and catches up once it runs again.",
        reverted="SIGCONT to every process it stopped (never to one another fault stopped).",
        docker="``container.pause``, then ``unpause`` (the cgroup freezer)",
        journal=LAG_JOURNAL,
    ),
)
class Pause(FaultBase):
    """Freeze the driver and every descendant (executors, Python workers): SIGSTOP, then
    SIGCONT; on the docker target the container's cgroup freezer (``docker pause``, as Pumba
    does) and ``unpause`` (:meth:`arfl.targets.base.Reach.freeze`).

    ``details`` holds ``stop_ms``/``cont_ms``: time until every process showed state ``T``
    (stopped) after the signals, and until none did after SIGCONT (on docker: the SDK calls'
    durations).
    """

    kind = "pause"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Record what will be frozen."""
        replica = self.replica_index(target)
        self.record, details = target.reach(replica).freeze_plan()
        self.details = {"replica": replica, **details}
        return self.record

    def inject(self, target: Target) -> None:
        """Freeze."""
        t0 = time.monotonic()
        settled = Reach.of(self.record).freeze(self.record)
        self.details["paused"] = True
        self.details["stop_ms"] = _ms(t0) if settled else None

    def revert(self, target: Target) -> None:
        """Thaw (never what another fault froze)."""
        t0 = time.monotonic()
        froze = bool(self.details.get("paused"))
        settled = Reach.of(self.record).thaw(self.record, froze=froze)
        if settled is not None:
            self.details["cont_ms"] = _ms(t0) if settled else None

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """What is frozen (each process by pid and create time, or the container)."""
        return Reach.of(record).freeze_claims(record)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Thaw whatever is still there."""
        Reach.of(record).unfreeze(record)


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 2)
