"""Faults on a replica that runs as local processes (a driver and its descendants), optionally
in a network namespace of its own: signals, a cgroup, the namespace's veth and routes."""

from __future__ import annotations

import signal
from pathlib import Path

from arfl.errors import FaultError
from arfl.run.state import IsolationState, NamespaceState
from arfl.targets import cgroups, netns, procs, shares
from arfl.targets.base import Reach, Record, Target


def namespace_of(target: Target, replica: int) -> tuple[IsolationState, NamespaceState]:
    """The isolation and the replica's namespace entry.

    Raises:
        FaultError: the run has no network isolation for the replica.
    """
    iso = target.isolation()
    if iso is None or replica not in iso.namespaces:
        raise FaultError(
            f"replica {replica} of run {target.run} is not network-isolated "
            "(state.json has no isolation.namespaces entry); network faults need the run to be "
            "deployed with its replicas in namespaces (done automatically when the spec has "
            "partition/delay faults)"
        )
    return iso, iso.namespaces[replica]


class ProcessReach(Reach):
    """A replica as local processes."""

    via = "processes"

    # --- pause: SIGSTOP / SIGCONT ------------------------------------------------------

    def freeze_plan(self) -> tuple[Record, Record]:
        """Every process (pid + create time: a reused pid is another process)."""
        pids = procs.identify(self.target.replica_pids(self.replica))
        return {"via": self.via, "pids": pids}, {"pids": [int(p[0]) for p in pids]}

    @classmethod
    def freeze(cls, record: Record) -> bool:
        """SIGSTOP each recorded process; True once all show state ``T``."""
        stopped = procs.send(record["pids"], signal.SIGSTOP)
        return procs.wait_status(stopped, want_stopped=True) is not None

    @classmethod
    def thaw(cls, record: Record, *, froze: bool) -> bool | None:
        """SIGCONT each recorded process (also after a partial freeze)."""
        resumed = procs.send(record.get("pids", []), signal.SIGCONT)
        return procs.wait_status(resumed, want_stopped=False) is not None

    @classmethod
    def unfreeze(cls, record: Record) -> None:
        """SIGCONT whatever is still there."""
        procs.send(record.get("pids", []), signal.SIGCONT)

    @classmethod
    def freeze_claims(cls, record: Record) -> frozenset[str]:
        """Each stopped process, by pid: a stopped process keeps its pid while the pause holds
        it (its recorded create time moves with a step of the wall clock)."""
        return frozenset(f"stopped:{int(p[0])}" for p in record.get("pids", []))

    # --- slow: a cgroup with a CPU quota -----------------------------------------------

    def cpu_plan(self, percent: float) -> tuple[Record, Record]:
        """Detect the cpu controller and record every process's current group."""
        h = cgroups.detect()
        pids = self.target.replica_pids(self.replica)
        if not pids:
            raise FaultError(
                f"slow: replica {self.replica} of run {self.target.run} has no processes"
            )
        originals: dict[str, str] = {}
        for pid in pids:
            try:
                originals[str(pid)] = h.cgroup_of(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # it ended since the listing (a short-lived child): nothing to slow
        pids = [pid for pid in pids if str(pid) in originals]
        if not pids:
            raise FaultError(
                f"slow: replica {self.replica} of run {self.target.run} has no processes left"
            )
        group = h.group(f"{self.target.run}-r{self.replica}")
        here = originals[str(pids[0])]
        limit = None
        if here.startswith(f"/arfl/{self.target.run}/"):
            # The replica has a CPU share of its own (placement): the slow group nests inside
            # it, beside the processes' leaf, so the share's quota still holds over it; the
            # lower quota is the one that binds (cgroup v1 refuses a child above its parent).
            group = (h.mount / here.lstrip("/")).parent / "slow"
            limit = shares.limit_of(h, here)
        applied = percent if limit is None else min(percent, limit * 100)
        record = {
            "via": self.via,
            "version": h.version,
            "mount": str(h.mount),
            "group": str(group),
            "pids": pids,
            "cpu_percent": applied,
            "originals": originals,
            "fallback": here,
        }
        details = {"cgroup": str(group), "cgroup_version": h.version, "pids": pids}
        if applied != percent:
            details["cpu_percent_applied"] = applied
        return record, details

    @classmethod
    def limit_cpu(cls, record: Record) -> None:
        """Create the limited group and move the processes in."""
        h = cgroups.CpuHierarchy(int(record["version"]), Path(record["mount"]))
        name = Path(record["group"]).relative_to(h.mount / "arfl")
        group = cgroups.create(h, str(name), float(record["cpu_percent"]))
        for pid in record["pids"]:
            cgroups.move(group, int(pid))

    @classmethod
    def unlimit_cpu(cls, record: Record) -> None:
        """Move members back to their original groups and remove the group."""
        mount = Path(record["mount"])
        originals = {
            int(pid): mount / str(path).lstrip("/") for pid, path in record["originals"].items()
        }
        cgroups.remove(
            Path(record["group"]), mount / str(record["fallback"]).lstrip("/"), originals
        )

    @classmethod
    def cpu_claims(cls, record: Record) -> frozenset[str]:
        """The limited group and each process moved into it."""
        held = {f"cpu-group:{record.get('group')}"}
        held.update(f"cpu-pid:{int(pid)}" for pid in record.get("pids", []))
        return frozenset(held)

    # --- kill: SIGKILL the driver ------------------------------------------------------

    def kill_plan(self) -> Record:
        """The driver's pid."""
        return {"via": self.via, "pid": self.target.driver_pid(self.replica)}

    @classmethod
    def kill(cls, plan: Record) -> None:
        """SIGKILL the driver (its executors die with the application)."""
        procs.kill(int(plan["pid"]), "driver")

    # --- network: the namespace's veth and routes --------------------------------------

    def link_plan(self) -> Record:
        """The host end of the namespace's veth."""
        _, ns = namespace_of(self.target, self.replica)
        if not ns.veth_host:
            raise FaultError(f"no veth recorded for replica {self.replica}")
        return {"via": self.via, "link": ns.veth_host}

    def cut_plan(self, peers: tuple[int, ...]) -> Record:
        """The veth to take down, or blackhole routes both ways between the replica's
        namespace and each peer's."""
        netns.require_net_admin("partition")
        iso, ns = namespace_of(self.target, self.replica)
        if not peers:
            if not ns.veth_host:
                raise FaultError(f"partition: no veth recorded for replica {self.replica}")
            return {"via": self.via, "netns": ns.name, "links": [ns.veth_host]}
        routes: list[list[str]] = []
        for peer in peers:
            if peer == self.replica or peer not in iso.namespaces:
                raise FaultError(
                    f"partition: from = {list(peers)}: {peer} is not another "
                    f"isolated replica (isolated: {sorted(iso.namespaces)})"
                )
            other = iso.namespaces[peer]
            routes.append([ns.name, other.address])
            routes.append([other.name, ns.address])
        return {"via": self.via, "netns": ns.name, "routes": routes}

    @classmethod
    def cut(cls, record: Record, details: Record) -> None:
        """Take the link down / add the routes."""
        for link in record.get("links", []):
            if not netns.set_link(link, up=False):
                raise FaultError(f"partition: link {link} does not exist")
        for ns_name, dst in record.get("routes", []):
            netns.add_blackhole(ns_name, dst)

    @classmethod
    def heal(cls, record: Record) -> None:
        """Links up, routes deleted."""
        for link in record.get("links", []):
            netns.set_link(link, up=True)
        for ns_name, dst in record.get("routes", []):
            netns.del_blackhole(ns_name, dst)

    @classmethod
    def cut_claims(cls, record: Record) -> frozenset[str]:
        """Each link, each route (by namespace and destination: ``0 from 1`` and ``1 from 0``
        add the same routes)."""
        held = {f"link:{link}" for link in record.get("links", [])}
        held.update(f"route:{where}:{dst}" for where, dst in record.get("routes", []))
        return frozenset(held)
