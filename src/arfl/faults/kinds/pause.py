"""``pause``: SIGSTOP every process of a replica for a duration, then SIGCONT."""

from __future__ import annotations

import signal
import time
from typing import Any

from arfl.faults import procs
from arfl.faults.base import FaultBase, Target
from arfl.registry import FAULTS, FaultInfo


@FAULTS.register(
    "pause",
    FaultInfo("SIGSTOP a replica's processes for a duration, then SIGCONT", takes_duration=True),
)
class Pause(FaultBase):
    """Freeze the driver and every descendant (executors, Python workers).

    ``details`` holds ``stop_ms``/``cont_ms``: time until every process showed state ``T``
    (stopped) after the signals, and until none did after SIGCONT.
    """

    kind = "pause"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Record the processes (pid + create time) that will be stopped."""
        replica = self.replica_index(target)
        pids = procs.identify(target.replica_pids(replica))
        self.details = {"replica": replica, "pids": [int(p[0]) for p in pids]}
        self.record = {"pids": pids}
        return self.record

    def inject(self, target: Target) -> None:
        """SIGSTOP each recorded process."""
        t0 = time.monotonic()
        stopped = procs.send(self.record["pids"], signal.SIGSTOP)
        waited = procs.wait_status(stopped, want_stopped=True)
        self.details["stop_ms"] = _ms(t0) if waited is not None else None

    def revert(self, target: Target) -> None:
        """SIGCONT each recorded process."""
        t0 = time.monotonic()
        resumed = procs.send(self.record.get("pids", []), signal.SIGCONT)
        waited = procs.wait_status(resumed, want_stopped=False)
        self.details["cont_ms"] = _ms(t0) if waited is not None else None

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """SIGCONT whatever is still there."""
        procs.send(record.get("pids", []), signal.SIGCONT)


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 2)
