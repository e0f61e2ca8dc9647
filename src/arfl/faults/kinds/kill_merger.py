"""``kill-merger``: SIGKILL the run's merger; deploy starts a new one, which takes over from
Kafka (:mod:`arfl.measure.merger.recovery`)."""

from __future__ import annotations

import time
from typing import Any

from arfl.faults.base import FaultBase
from arfl.registry import FAULTS, FaultInfo
from arfl.run.events import Event
from arfl.targets import procs
from arfl.targets.base import Target


@FAULTS.register(
    "kill-merger",
    FaultInfo(
        "SIGKILL the serving merger; its standby takes over, or deploy starts a new one",
        takes_duration=False,
        kills="merger",
        on="merger",
        description="Every result of every replica passes through the merger. With "
        "``[merger] standby = 1`` the standby takes over at once, fencing the dead one, and a new "
        "standby follows; without, deploy starts a new merger, which reads on from the "
        "positions the dead one committed and takes the sink's tail into its dedup memory. "
        "Either way no result is lost or written twice.",
        reverted="Nothing to undo: the standby, or a new merger, takes over.",
        journal=(
            (Event.MERGER_DIED, "deploy saw the merger die"),
            (Event.MERGER_RESTARTED, "the standby serves, or a new merger started"),
            (Event.MERGER_TOOK_OVER, "with a standby: it took over (how long it took)"),
            (Event.MERGER_RECOVERED, "without: the new merger read on from the commits"),
        ),
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
