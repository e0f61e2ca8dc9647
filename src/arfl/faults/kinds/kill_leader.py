"""``kill-leader``: ``kill-replica`` aimed at whichever replica ZooKeeper says leads."""

from __future__ import annotations

from dataclasses import replace

from arfl.faults.base import RESTART_JOURNAL, FaultParams
from arfl.faults.kinds.kill_replica import KillReplica, KillReplicaParams
from arfl.registry import FAULTS, FaultInfo
from arfl.run.events import Event


@FAULTS.register(
    "kill-leader",
    FaultInfo(
        "kill-replica aimed at the current leader (active-leader)",
        takes_duration=False,
        targets_leader=True,
        params=KillReplicaParams,
        kills="replica",
        without_leader="kill-replica",
        description="The leader is the contender ZooKeeper's election lists first when the "
        "fault is injected; the other replicas elect a new one.",
        reverted="Nothing to undo: the supervisor restarts the replica (unless "
        "``restart = false``).",
        docker="``container.kill``; a ready standby container takes over, else the supervisor "
        "starts a new container",
        journal=(
            (Event.LEADER_ELECTED, "another replica leads"),
            *RESTART_JOURNAL,
        ),
    ),
)
class KillLeader(KillReplica):
    """The leader is read from the election under ``leader_path`` at prepare time."""

    kind = "kill-leader"

    def __init__(self, params: FaultParams) -> None:
        super().__init__(replace(params, replica="leader"))
