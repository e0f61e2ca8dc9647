"""``kill-leader``: ``kill-replica`` aimed at whichever replica ZooKeeper says leads."""

from __future__ import annotations

from dataclasses import replace

from arfl.faults.base import FaultParams
from arfl.faults.kill_replica import KillReplica
from arfl.faults.registry import register


@register("kill-leader")
class KillLeader(KillReplica):
    """The leader is read from the election under ``leader_path`` at prepare time."""

    kind = "kill-leader"

    def __init__(self, params: FaultParams) -> None:
        super().__init__(replace(params, replica="leader"))
