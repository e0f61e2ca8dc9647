"""``partition``: cut a replica off from the network (or from named peers) for a duration."""

from __future__ import annotations

from typing import Any

from arfl.errors import FaultError
from arfl.faults import netns
from arfl.faults.base import FaultBase, Target
from arfl.faults.state import IsolationState, NamespaceState
from arfl.registry import FAULTS, FaultInfo


def namespace_of(target: Target, replica: int, kind: str) -> tuple[IsolationState, NamespaceState]:
    """The isolation and the replica's namespace entry.

    Raises:
        FaultError: the run has no network isolation for the replica.
    """
    iso = target.isolation()
    if iso is None or replica not in iso.namespaces:
        raise FaultError(
            f"{kind}: replica {replica} of run {target.run} is not network-isolated "
            "(state.json has no isolation.namespaces entry); network faults need the run to be "
            "deployed with its replicas in namespaces (done automatically when the spec has "
            "partition/delay faults)"
        )
    return iso, iso.namespaces[replica]


@FAULTS.register(
    "partition",
    FaultInfo(
        "cut a replica off from Kafka and ZooKeeper for a duration",
        takes_duration=True,
        network=True,
    ),
)
class Partition(FaultBase):
    """Without ``from``: the host end of the replica's veth goes down — no Kafka, ZooKeeper or
    peers. With ``from = [i, j]``: /32 blackhole routes between the replica and those peers, both
    directions; everything else still flows. Revert brings the link up / deletes the routes."""

    kind = "partition"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the veth or the routes to add."""
        netns.require_net_admin("partition")
        replica = self.replica_index(target)
        iso, ns = namespace_of(target, replica, self.kind)
        if not self.params.from_:
            if not ns.veth_host:
                raise FaultError(f"partition: no veth recorded for replica {replica}")
            self.record = {"links": [ns.veth_host]}
        else:
            routes: list[list[str]] = []
            for peer in self.params.from_:
                if peer == replica or peer not in iso.namespaces:
                    raise FaultError(
                        f"partition: from = {list(self.params.from_)}: {peer} is not another "
                        f"isolated replica (isolated: {sorted(iso.namespaces)})"
                    )
                other = iso.namespaces[peer]
                routes.append([ns.name, other.address])
                routes.append([other.name, ns.address])
            self.record = {"routes": routes}
        self.details = {"replica": replica, "netns": ns.name, **self.record}
        return self.record

    def inject(self, target: Target) -> None:
        """Take the link down / add the routes."""
        for link in self.record.get("links", []):
            if not netns.set_link(link, up=False):
                raise FaultError(f"partition: link {link} does not exist")
        for ns_name, dst in self.record.get("routes", []):
            netns.add_blackhole(ns_name, dst)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Heal: links up, routes deleted."""
        for link in record.get("links", []):
            netns.set_link(link, up=True)
        for ns_name, dst in record.get("routes", []):
            netns.del_blackhole(ns_name, dst)
