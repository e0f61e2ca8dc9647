"""``pause``: SIGSTOP every process of a replica for a duration, then SIGCONT."""

from __future__ import annotations

import signal
import time
from typing import Any

from arfl.faults import docker as dk
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

    On the docker target the container is frozen instead (``container.pause``: the cgroup
    freezer, as ``docker pause`` and Pumba do) and thawed with ``container.unpause``;
    ``stop_ms``/``cont_ms`` are then the SDK calls' durations.
    """

    kind = "pause"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Record the processes (pid + create time) that will be stopped."""
        replica = self.replica_index(target)
        name = target.container(replica)
        if name is not None:
            self.details = {"replica": replica, "container": name}
            self.record = {"container": name}
            return self.record
        pids = procs.identify(target.replica_pids(replica))
        self.details = {"replica": replica, "pids": [int(p[0]) for p in pids]}
        self.record = {"pids": pids}
        return self.record

    def inject(self, target: Target) -> None:
        """SIGSTOP each recorded process (freeze the container)."""
        t0 = time.monotonic()
        if "container" in self.record:
            dk.pause(str(self.record["container"]))
            self.details["paused"] = True
            self.details["stop_ms"] = _ms(t0)
            return
        stopped = procs.send(self.record["pids"], signal.SIGSTOP)
        waited = procs.wait_status(stopped, want_stopped=True)
        self.details["stop_ms"] = _ms(t0) if waited is not None else None

    def revert(self, target: Target) -> None:
        """SIGCONT each recorded process (thaw the container)."""
        t0 = time.monotonic()
        if "container" in self.record:
            if self.details.get("paused"):  # never thaw what another fault froze
                type(self).undo(self.record)
                self.details["cont_ms"] = _ms(t0)
            return
        resumed = procs.send(self.record.get("pids", []), signal.SIGCONT)
        waited = procs.wait_status(resumed, want_stopped=False)
        self.details["cont_ms"] = _ms(t0) if waited is not None else None

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """The frozen container, or each stopped process (pid and create time: a reused pid
        is another process)."""
        if "container" in record:
            return frozenset({f"freezer:{record['container']}"})
        return frozenset(f"stopped:{int(p[0])}@{p[1]}" for p in record.get("pids", []))

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """SIGCONT whatever is still there (unpause the container if it is still paused)."""
        if "container" in record:
            dk.unpause(str(record["container"]))  # gone with its run: nothing is frozen
            return
        procs.send(record.get("pids", []), signal.SIGCONT)


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 2)
