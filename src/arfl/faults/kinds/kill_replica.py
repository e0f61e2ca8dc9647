"""``kill-replica``: SIGKILL a replica's driver (its executors die with the application)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults import docker as dk
from arfl.faults.base import FaultBase, Target
from arfl.faults.local import no_restart_marker
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo


class KillReplicaParams(Params):
    """``[[chaos]] restart`` / ``--no-restart``."""

    restart: bool = Field(True, description="restart the killed replica; default yes")

    def describe(self) -> list[str]:
        """``no restart``."""
        return [] if self.restart else ["no restart"]


@FAULTS.register(
    "kill-replica",
    FaultInfo(
        "SIGKILL a replica's driver; the supervisor restarts it",
        takes_duration=False,
        params=KillReplicaParams,
        kills="replica",
    ),
)
class KillReplica(FaultBase):
    """SIGKILL the driver of ``params.replica``.

    On the docker target the replica's container is killed (``container.kill``, SIGKILL to
    every process in it); its launcher ends as if the driver had been SIGKILLed.

    The supervisor (the replica runner) restarts killed drivers on its own. With
    ``restart = false`` a ``no-restart-<replica>`` marker is written into the run directory
    *before* the kill; the supervisor must check it before every restart.
    """

    kind = "kill-replica"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the replica (the leader for kill-leader) and its driver pid."""
        replica = self.replica_index(target)
        self.details = {"replica": replica, "pid": target.driver_pid(replica)}
        name = target.container(replica)
        if name is not None:
            self.details["container"] = name
        return {}

    def inject(self, target: Target) -> None:
        """Write the no-restart marker if asked, then SIGKILL the driver."""
        replica = int(self.details["replica"])
        if not self.own(KillReplicaParams).restart:
            marker = no_restart_marker(target.run_dir, replica)
            marker.write_text(f"{time.time():.6f} {self.describe()}\n", encoding="utf-8")
            self.details["no_restart_marker"] = str(marker)
        self.details["killed_at"] = time.time()
        if "container" in self.details:
            dk.kill(str(self.details["container"]))
            return
        try:
            os.kill(int(self.details["pid"]), signal.SIGKILL)
        except ProcessLookupError as e:
            raise FaultError(
                f"{self.kind}: driver pid {self.details['pid']} of replica {replica} vanished "
                "before the kill"
            ) from e
