"""Faults on a replica that runs in a docker container (``spark.target = "docker"``): the
cgroup freezer, the container's CPU quota, its veth, its place on the run's network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arfl.errors import FaultError
from arfl.run.pending import PendingFaults
from arfl.run.state import DockerNetState
from arfl.targets import cgroups, netns
from arfl.targets import docker as dk
from arfl.targets.base import Reach, Record, Target

CPU_PERIOD_US = cgroups.PERIOD_US
"""The CFS period of a ``slow`` fault's quota on a container."""


def docker_net(target: Target) -> DockerNetState:
    """The run's docker network (state.json ``docker``).

    Raises:
        FaultError: the run is not on the docker target.
    """
    net = target.docker()
    if net is None:
        raise FaultError(f"run {target.run} has no docker network in state.json")
    return net


class ContainerReach(Reach):
    """A replica as a container (every process of the replica is in it)."""

    via = "container"

    def __init__(self, target: Target, replica: int, name: str) -> None:
        super().__init__(target, replica)
        self.name = name

    def where(self) -> Record:
        """The container's name."""
        return {"container": self.name}

    # --- pause: the cgroup freezer (``docker pause``, as Pumba does) ---------------------

    def freeze_plan(self) -> tuple[Record, Record]:
        """The container."""
        return {"via": self.via, "container": self.name}, {"container": self.name}

    @classmethod
    def freeze(cls, record: Record) -> bool:
        """``container.pause``."""
        dk.pause(str(record["container"]))
        return True

    @classmethod
    def thaw(cls, record: Record, *, froze: bool) -> bool | None:
        """``container.unpause``, only if this fault froze it (never another fault's)."""
        if not froze:
            return None
        cls.unfreeze(record)
        return True

    @classmethod
    def unfreeze(cls, record: Record) -> None:
        """Unpause the container if it is still paused (gone with its run: nothing is
        frozen)."""
        dk.unpause(str(record["container"]))

    @classmethod
    def freeze_claims(cls, record: Record) -> frozenset[str]:
        """The frozen container."""
        return frozenset({f"freezer:{record['container']}"})

    # --- slow: the container's own CPU quota -------------------------------------------

    def cpu_plan(self, percent: float) -> tuple[Record, Record]:
        """The container and the share of a 100-ms period; the revert restores the quota the
        container has now (its ``[placement]`` share, or none)."""
        quota = dk.cpu_quota(self.name)
        own = None if quota is None else list(quota)
        return {"via": self.via, "container": self.name, "cpu_percent": percent, "own": own}, {
            "container": self.name,
            "own": own,
        }

    @classmethod
    def limit_cpu(cls, record: Record) -> None:
        """``container.update`` with ``cpu_period`` 100 ms and ``cpu_quota`` that share, never
        above the container's own quota (a ``slow`` nests inside its placement share)."""
        name = str(record["container"])
        quota = cgroups.quota_us(float(record["cpu_percent"]))
        own = record.get("own")
        if own is not None:  # [period, quota] of its share, compared per 100 ms
            quota = min(quota, int(int(own[1]) * CPU_PERIOD_US / int(own[0])))
        if not dk.set_cpu_quota(name, CPU_PERIOD_US, quota):
            raise FaultError(f"slow: container {name} is gone")

    @classmethod
    def unlimit_cpu(cls, record: Record) -> None:
        """The container's own period and quota again, or quota -1 when it had none (gone with
        its run: nothing is throttled)."""
        own = record.get("own")
        name = str(record["container"])
        if own is None:
            dk.set_cpu_quota(name, CPU_PERIOD_US, -1)
        else:
            dk.set_cpu_quota(name, int(own[0]), int(own[1]))

    @classmethod
    def cpu_claims(cls, record: Record) -> frozenset[str]:
        """The container's CPU quota."""
        return frozenset({f"cpu:{record['container']}"})

    # --- kill: ``container.kill`` --------------------------------------------------------

    def kill_plan(self) -> Record:
        """The container (its launcher ends as if the driver had been SIGKILLed)."""
        return {"via": self.via, "pid": self.target.driver_pid(self.replica), **self.where()}

    @classmethod
    def kill(cls, plan: Record) -> None:
        """SIGKILL every process in the container."""
        dk.kill(str(plan["container"]))

    # --- network: the container's veth, its network, routes in its namespace --------------

    def link_plan(self) -> Record:
        """The host end of the container's ``eth0`` veth."""
        return {"via": self.via, "link": dk.host_veth(dk.container(self.name)), **self.where()}

    @classmethod
    def link_claims(cls, record: Record) -> frozenset[str]:
        """The container's veth, which a ``partition`` that disconnects the container replaces
        (the qdisc would go with it)."""
        return frozenset({f"veth:{record['container']}"})

    def cut_plan(self, peers: tuple[int, ...]) -> Record:
        """Disconnect the container from the run's network; with ``peers``, blackhole routes
        in the containers' namespaces instead, by container id (a restarted replica is a new
        container, with routes of its own: undo finds the namespace through the id, never
        through a stale pid)."""
        net = docker_net(self.target)
        if not peers:
            cut = {"network": net.network, "container": self.name}
            return {"via": self.via, "disconnect": {**cut, "address": net.addresses[self.replica]}}
        netns.require_net_admin("partition")
        routes: list[list[str]] = []
        own = dk.container(self.name).id
        for peer in peers:
            if peer == self.replica or peer not in net.containers:
                raise FaultError(
                    f"partition: from = {list(peers)}: {peer} is not another "
                    f"replica container (replicas: {sorted(net.containers)})"
                )
            routes.append([own, net.addresses[peer]])
            routes.append([dk.container(net.containers[peer]).id, net.addresses[self.replica]])
        return {"via": self.via, "container_routes": routes}

    @classmethod
    def cut(cls, record: Record, details: Record) -> None:
        """Disconnect the container / add the routes."""
        cut = record.get("disconnect")
        if cut:
            network, name = str(cut["network"]), str(cut["container"])
            try:
                dk.disconnect(network, name)
            except FaultError:
                # A restart between the pending entry and this call was started cut already
                # (keep_cut): the cut is this fault's. Anything else is an error.
                if dk.connected(network, name) is not False:
                    raise
            details["disconnected"] = True
        for cid, dst in record.get("container_routes", []):
            netns.add_blackhole(dk.netns_path(dk.container(cid)), dst)

    @classmethod
    def heals(cls, record: Record, details: Record) -> bool:
        """A container this fault did not disconnect (its cut failed) is left as it is."""
        return "disconnect" not in record or bool(details.get("disconnected"))

    @classmethod
    def heal(cls, record: Record) -> None:
        """Reconnect the container (if it still exists and is not connected), delete the
        routes."""
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

    @classmethod
    def settle_cut(cls, run_dir: Path, record: Record) -> None:
        """Reconnect the container if a restart racing the revert started it cut
        (:func:`keep_cut` saw the entry before it was removed, or the cut failed on the old
        container), unless another pending fault still cuts it."""
        cut = record.get("disconnect")
        if not cut:
            return
        network, name = str(cut["network"]), str(cut["container"])
        with PendingFaults(run_dir).holding() as entries:
            if _cutting(entries, network, name) is None:
                dk.reconnect(network, name, str(cut["address"]))

    @classmethod
    def cut_claims(cls, record: Record) -> frozenset[str]:
        """The container's place on its network and its veth (a reconnect gives it a new one:
        a delay on the old one ends), each route."""
        cut = record.get("disconnect")
        held = set()
        if cut:
            held = {f"network:{cut['network']}:{cut['container']}", f"veth:{cut['container']}"}
        held.update(f"route:{where}:{dst}" for where, dst in record.get("container_routes", []))
        return frozenset(held)


def keep_cut(run_dir: Path, network: str, container: str) -> bool:
    """Disconnect replica container ``container`` (created, not started) from ``network`` if a
    pending fault cut it: a replica restarted during the fault stays partitioned, as it does in
    a network namespace. True when it was cut.

    Runs with the pending-faults lock held; the fault's revert reconnects, removes its entry,
    then reconnects again if needed (:meth:`ContainerReach.settle_cut`), so a restart racing the
    revert is never left cut.
    """
    with PendingFaults(run_dir).holding() as entries:
        if _cutting(entries, network, container) is None:
            return False
        dk.disconnect(network, container)
        return True


def _cutting(entries: list[dict[str, Any]], network: str, container: str) -> str | None:
    """The id of a pending entry whose record disconnects ``container`` from ``network``."""
    for e in entries:
        cut = (e.get("record") or {}).get("disconnect")
        if cut and cut.get("container") == container and cut.get("network") == network:
            return str(e.get("id"))
    return None
