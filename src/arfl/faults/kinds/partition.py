"""``partition``: cut a replica off from the network (or from named peers) for a duration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults import docker as dk
from arfl.faults import netns
from arfl.faults.base import FaultBase, Target
from arfl.faults.pending import PendingFaults
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo
from arfl.run.state import DockerNetState, IsolationState, NamespaceState


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


def docker_net(target: Target) -> DockerNetState:
    """The run's docker network (state.json ``docker``).

    Raises:
        FaultError: the run is not on the docker target.
    """
    net = target.docker()
    if net is None:
        raise FaultError(f"run {target.run} has no docker network in state.json")
    return net


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
        params=PartitionParams,
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
        """Resolve the veth or the routes to add."""
        replica = self.replica_index(target)
        if target.container(replica) is not None:
            return self._prepare_docker(target, replica)
        netns.require_net_admin("partition")
        iso, ns = namespace_of(target, replica, self.kind)
        peers = self.params.peers()
        if not peers:
            if not ns.veth_host:
                raise FaultError(f"partition: no veth recorded for replica {replica}")
            self.record = {"links": [ns.veth_host]}
        else:
            routes: list[list[str]] = []
            for peer in peers:
                if peer == replica or peer not in iso.namespaces:
                    raise FaultError(
                        f"partition: from = {list(peers)}: {peer} is not another "
                        f"isolated replica (isolated: {sorted(iso.namespaces)})"
                    )
                other = iso.namespaces[peer]
                routes.append([ns.name, other.address])
                routes.append([other.name, ns.address])
            self.record = {"routes": routes}
        self.details = {"replica": replica, "netns": ns.name, **self.record}
        return self.record

    def _prepare_docker(self, target: Target, replica: int) -> dict[str, Any]:
        net = docker_net(target)
        name = net.containers[replica]
        peers = self.params.peers()
        if not peers:
            self.record = {
                "disconnect": {
                    "network": net.network,
                    "container": name,
                    "address": net.addresses[replica],
                }
            }
        else:
            netns.require_net_admin("partition")
            # By container id (a restarted replica is a new container, with routes of its
            # own): undo finds the namespace again through the id, never through a stale pid.
            routes: list[list[str]] = []
            own = dk.container(name).id
            for peer in peers:
                if peer == replica or peer not in net.containers:
                    raise FaultError(
                        f"partition: from = {list(peers)}: {peer} is not another "
                        f"replica container (replicas: {sorted(net.containers)})"
                    )
                routes.append([own, net.addresses[peer]])
                routes.append([dk.container(net.containers[peer]).id, net.addresses[replica]])
            self.record = {"container_routes": routes}
        self.details = {"replica": replica, "container": name, **self.record}
        return self.record

    def inject(self, target: Target) -> None:
        """Take the link down / add the routes / disconnect the container."""
        cut = self.record.get("disconnect")
        if cut:
            network, name = str(cut["network"]), str(cut["container"])
            try:
                dk.disconnect(network, name)
            except FaultError:
                # A restart between the pending entry and this call was started cut already
                # (keep_cut): the cut is this fault's. Anything else is an error.
                if dk.connected(network, name) is not False:
                    raise
            self.details["disconnected"] = True
        for cid, dst in self.record.get("container_routes", []):
            netns.add_blackhole(dk.netns_path(dk.container(cid)), dst)
        for link in self.record.get("links", []):
            if not netns.set_link(link, up=False):
                raise FaultError(f"partition: link {link} does not exist")
        for ns_name, dst in self.record.get("routes", []):
            netns.add_blackhole(ns_name, dst)

    def revert(self, target: Target) -> None:
        """Undo; a container this fault did not disconnect (its inject failed) is left as it
        is: another fault may have cut it."""
        if "disconnect" in self.record and not self.details.get("disconnected"):
            return
        super().revert(target)

    @classmethod
    def settle(cls, run_dir: Path, record: dict[str, Any]) -> None:
        """Reconnect the container if a restart racing the revert started it cut (:func:`keep_cut`
        saw the entry before it was removed, or the inject failed on the old container) —
        unless another pending partition still cuts it."""
        cut = record.get("disconnect")
        if not cut:
            return
        network, name = str(cut["network"]), str(cut["container"])
        with PendingFaults(run_dir).holding() as entries:
            if _cutting(entries, network, name) is None:
                dk.reconnect(network, name, str(cut["address"]))

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """The container's place on its network and its veth, each link, each route (by
        namespace or container and destination: ``0 from 1`` and ``1 from 0`` add the same
        routes)."""
        cut = record.get("disconnect")
        held = {f"network:{cut['network']}:{cut['container']}"} if cut else set()
        if cut:  # a reconnect gives the container a new veth: a delay on the old one ends
            held.add(f"veth:{cut['container']}")
        held.update(f"link:{link}" for link in record.get("links", []))
        for where, dst in [*record.get("routes", []), *record.get("container_routes", [])]:
            held.add(f"route:{where}:{dst}")
        return frozenset(held)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Heal: links up, routes deleted, the container reconnected (if it still exists and
        is not connected)."""
        cut = record.get("disconnect")
        if cut:
            dk.reconnect(str(cut["network"]), str(cut["container"]), str(cut["address"]))
        for cid, dst in record.get("container_routes", []):
            try:
                path = dk.netns_path(dk.container(cid))
            except dk.ContainerGone:
                continue  # its namespace went with it
            except FaultError as e:
                if "not running" in str(e):
                    continue
                raise
            netns.del_blackhole(path, dst)
        for link in record.get("links", []):
            netns.set_link(link, up=True)
        for ns_name, dst in record.get("routes", []):
            netns.del_blackhole(ns_name, dst)


def keep_cut(run_dir: Path, network: str, container: str) -> bool:
    """Disconnect replica container ``container`` (created, not started) from ``network`` if a
    pending ``partition`` cut it: a replica restarted during the fault stays partitioned, as it
    does in a network namespace. True when it was cut.

    Runs with the pending-faults lock held; the fault's revert reconnects, removes its entry,
    then reconnects again if needed (:meth:`Partition.settle`), so a restart racing the revert
    is never left cut.
    """
    with PendingFaults(run_dir).holding() as entries:
        if _cutting(entries, network, container) is None:
            return False
        dk.disconnect(network, container)
        return True


def _cutting(entries: list[dict[str, Any]], network: str, container: str) -> str | None:
    """The id of a pending partition entry that disconnects ``container`` from ``network``."""
    for e in entries:
        cut = (e.get("record") or {}).get("disconnect") if e.get("kind") == "partition" else None
        if cut and cut.get("container") == container and cut.get("network") == network:
            return str(e.get("id"))
    return None
