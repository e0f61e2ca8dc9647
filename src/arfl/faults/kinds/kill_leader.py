"""``kill-leader``: ``kill-replica`` aimed at whichever replica ZooKeeper says leads."""

from __future__ import annotations

from dataclasses import replace

from arfl.faults.base import FaultParams
from arfl.faults.kinds.kill_replica import KillReplica, KillReplicaParams
from arfl.registry import FAULTS, FaultInfo


@FAULTS.register(
    "kill-leader",
    FaultInfo(
        "kill-replica aimed at the current leader (active-leader)",
        takes_duration=False,
        targets_leader=True,
        params=KillReplicaParams,
        kills="replica",
        without_leader="kill-replica",
    ),
)
class KillLeader(KillReplica):
    """The leader is read from the election under ``leader_path`` at prepare time."""

    kind = "kill-leader"

    def __init__(self, params: FaultParams) -> None:
        super().__init__(replace(params, replica="leader"))
