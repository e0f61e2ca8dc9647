"""``partition``: cut a replica off from the network (or from named peers) for a duration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from arfl.faults.base import LAG_JOURNAL, FaultBase
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo
from arfl.targets.base import Reach, Target


class PartitionParams(Params):
    """``[[chaos]] from`` / ``--from``: the peers to cut the replica from (none: everything)."""

    from_: list[int] = Field(
        default_factory=list,
        alias="from",
        description="cut only these peers, e.g. 1,2; default cut the replica off",
        json_schema_extra={"metavar": "N,N"},
    )

    def describe(self) -> list[str]:
        """``from 0,2``."""
        return ["from " + ",".join(map(str, self.from_))] if self.from_ else []

    def peers(self) -> tuple[int, ...]:
        """The peers named in ``from``."""
        return tuple(self.from_)


@FAULTS.register(
    "partition",
    FaultInfo(
        "cut a replica off from Kafka, ZooKeeper and its peers (from: only those peers) for a "
        "duration",
        takes_duration=True,
        network=True,
        params=PartitionParams,
        description="Without ``from``: the host end of the replica's veth goes down, cutting it "
        "off from Kafka, ZooKeeper and its peers. With ``from = [...]``: blackhole routes "
        "between the replica and those peers, both ways; everything else still flows.",
        reverted="The link comes back up, or the routes are deleted.",
        docker="without ``from``: ``network.disconnect``, then ``connect`` with the same "
        "address; with ``from``: blackhole routes inside the containers' network namespaces",
        journal=LAG_JOURNAL,
    ),
)
class Partition(FaultBase):
    """Without ``from``: the host end of the replica's veth goes down — no Kafka, ZooKeeper or
    peers. With ``from = [i, j]``: /32 blackhole routes between the replica and those peers, both
    directions; everything else still flows. Revert brings the link up / deletes the routes.

    On the docker target: without ``from`` the container is disconnected from the run's
    network (``network.disconnect``; revert reconnects it with its address), with ``from`` the
    blackhole routes go into the containers' network namespaces."""

    kind = "partition"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the link, the routes or the network place to cut."""
        replica = self.replica_index(target)
        reach = target.reach(replica)
        self.record = reach.cut_plan(self.params.peers())
        self.details = {"replica": replica, **reach.where(), **self.record}
        return self.record

    def inject(self, target: Target) -> None:
        """Cut."""
        Reach.of(self.record).cut(self.record, self.details)

    def revert(self, target: Target) -> None:
        """Heal; a cut whose apply failed is left as it is: another fault may hold it."""
        if Reach.of(self.record).heals(self.record, self.details):
            super().revert(target)

    @classmethod
    def settle(cls, run_dir: Path, record: dict[str, Any]) -> None:
        """Undo what a replica restarted while the revert ran re-applied from the entry."""
        Reach.of(record).settle_cut(run_dir, record)

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """Each link, route or network place cut."""
        return Reach.of(record).cut_claims(record)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Heal: links up, routes deleted, the container reconnected."""
        Reach.of(record).heal(record)
