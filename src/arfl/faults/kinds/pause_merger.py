"""``pause-merger``: SIGSTOP the run's merger for a duration, then SIGCONT."""

from __future__ import annotations

import signal
from typing import Any

from arfl.faults.base import FaultBase
from arfl.registry import FAULTS, FaultInfo
from arfl.run.events import Event
from arfl.targets import procs
from arfl.targets.base import Target


@FAULTS.register(
    "pause-merger",
    FaultInfo(
        "SIGSTOP the merger for a duration, then SIGCONT",
        takes_duration=True,
        on="merger",
        description="Without a standby merger the output stops, and at SIGCONT the merger "
        "forwards what queued up in the replica topics. With one, the standby kills the paused "
        "merger once a result it owes is later than ``[merger] lease``, and takes over.",
        reverted="SIGCONT to the merger, if it is still there.",
        journal=(
            (Event.MERGER_TOOK_OVER, "with a standby: the lease ran out and it took over"),
            (Event.MERGER_DIED, "with a standby: deploy saw the paused merger killed"),
            (Event.MERGER_RESTARTED, "with a standby: the standby serves"),
        ),
    ),
)
class PauseMerger(FaultBase):
    """Freeze the merger: no result reaches the sink meanwhile; at SIGCONT it forwards what
    queued up in the replica topics."""

    kind = "pause-merger"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Record the merger (pid + create time)."""
        pids = procs.identify([target.merger_pid()])
        self.details = {"pids": [int(p[0]) for p in pids]}
        self.record = {"pids": pids}
        return self.record

    def inject(self, target: Target) -> None:
        """SIGSTOP it."""
        procs.send(self.record["pids"], signal.SIGSTOP)

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """The stopped merger, by pid: a stopped process keeps its pid while the pause holds it
        (its recorded create time moves with a step of the wall clock)."""
        return frozenset(f"stopped:{int(p[0])}" for p in record.get("pids", []))

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """SIGCONT it if it is still there."""
        procs.send(record.get("pids", []), signal.SIGCONT)
