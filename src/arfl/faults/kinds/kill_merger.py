"""``kill-merger``: SIGKILL the run's merger; deploy starts a new one, which takes over from
Kafka (:mod:`arfl.measure.merger.recovery`)."""

from __future__ import annotations

import time
from typing import Any

from arfl.faults.base import FaultBase
from arfl.registry import FAULTS, FaultInfo
from arfl.targets import procs
from arfl.targets.base import Target


@FAULTS.register(
    "kill-merger",
    FaultInfo(
        "SIGKILL the merger; deploy starts a new one, which reads on from its commits",
        takes_duration=False,
        kills="merger",
        on="merger",
    ),
)
class KillMerger(FaultBase):
    """SIGKILL the merger process (every result of every replica passes through it)."""

    kind = "kill-merger"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the merger's pid; no undo (killing is final)."""
        self.details = {"pid": target.merger_pid()}
        return {}

    def inject(self, target: Target) -> None:
        """SIGKILL it."""
        self.details["killed_at"] = time.time()
        procs.kill(int(self.details["pid"]), "kill-merger: merger")
