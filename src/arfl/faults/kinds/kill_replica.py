"""``kill-replica``: SIGKILL a replica's driver (its executors die with the application)."""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults.base import RESTART_JOURNAL, FaultBase
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo
from arfl.targets.base import Reach, Target
from arfl.targets.local import no_restart_marker


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
        description="Its executors die with its Spark application. The supervisor restarts the "
        "replica, on a ready standby at once or as a new Spark application, where "
        "``replication.resume`` says; with ``restart = false`` it stays dead and the run goes "
        "on without it.",
        reverted="Nothing to undo: the supervisor restarts the replica (unless "
        "``restart = false``).",
        docker="``container.kill``; a ready standby container takes over, else the supervisor "
        "starts a new container",
        journal=RESTART_JOURNAL,
    ),
)
class KillReplica(FaultBase):
    """SIGKILL the driver of ``params.replica`` (on the docker target its container:
    :meth:`arfl.targets.base.Reach.kill`).

    The supervisor (the replica runner) restarts killed drivers on its own. With
    ``restart = false`` a ``no-restart-<replica>`` marker is written into the run directory
    *before* the kill; the supervisor must check it before every restart.
    """

    kind = "kill-replica"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the replica (the leader for kill-leader) and its driver (or container)."""
        replica = self.replica_index(target)
        self.details = {"replica": replica, **target.reach(replica).kill_plan()}
        return {}

    def inject(self, target: Target) -> None:
        """Write the no-restart marker if asked, then SIGKILL the driver."""
        replica = int(self.details["replica"])
        if not self.own(KillReplicaParams).restart:
            marker = no_restart_marker(target.run_dir, replica)
            marker.write_text(f"{time.time():.6f} {self.describe()}\n", encoding="utf-8")
            self.details["no_restart_marker"] = str(marker)
        self.details["killed_at"] = time.time()
        try:
            Reach.of(self.details).kill(self.details)
        except FaultError as e:
            raise FaultError(f"{self.kind}: replica {replica}: {e}") from e
