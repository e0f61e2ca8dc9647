"""``slow``: throttle a replica's CPU with a cgroup quota for a duration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults import cgroups
from arfl.faults import docker as dk
from arfl.faults.base import FaultBase, Target
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo

CPU_PERIOD_US = 100_000

SLOW_CPU_PERCENT = 10.0
"""The quota when the spec or the command line names none, in percent of one CPU."""

SLOW_CPU_RANGE = (1.0, 100.0)
"""The quotas ``slow`` takes: at least the kernel's and docker's smallest (1 ms per 100-ms
period), at most one CPU."""


class SlowParams(Params):
    """``[[chaos]] cpu`` / ``--cpu``."""

    cpu: float = Field(
        SLOW_CPU_PERCENT,
        ge=SLOW_CPU_RANGE[0],
        le=SLOW_CPU_RANGE[1],
        description=f"the CPU quota in % of one CPU, {SLOW_CPU_RANGE[0]:g}-"
        f"{SLOW_CPU_RANGE[1]:g}; default {SLOW_CPU_PERCENT:g}",
        json_schema_extra={"metavar": "PERCENT"},
    )

    def describe(self) -> list[str]:
        """``to 5% of a CPU``."""
        return [f"to {self.cpu:g}% of a CPU"]


@FAULTS.register(
    "slow",
    FaultInfo(
        "throttle a replica's CPU to cpu % of one CPU (cgroup cpu quota; default 10) for a "
        "duration",
        takes_duration=True,
        params=SlowParams,
    ),
)
class Slow(FaultBase):
    """Move every process of the replica into ``arfl/<run>-r<N>`` limited to ``cpu`` % of one
    CPU (:class:`SlowParams`).

    Revert moves each process back to the group it came from and removes the group.

    On the docker target the container's own CPU quota is set instead (``container.update``
    with ``cpu_period`` 100 ms and ``cpu_quota`` that share of it) and lifted on revert
    (quota -1).
    """

    kind = "slow"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Detect the cpu controller and record every process's current group."""
        replica = self.replica_index(target)
        percent = self.own(SlowParams).cpu
        name = target.container(replica)
        if name is not None:
            self.details = {"replica": replica, "container": name, "cpu_percent": percent}
            self.record = {"container": name, "cpu_percent": percent}
            return self.record
        h = cgroups.detect()
        pids = target.replica_pids(replica)
        if not pids:
            raise FaultError(f"slow: replica {replica} of run {target.run} has no processes")
        originals = {str(pid): h.cgroup_of(pid) for pid in pids}
        group = h.group(f"{target.run}-r{replica}")
        self.details = {
            "replica": replica,
            "cgroup": str(group),
            "cgroup_version": h.version,
            "cpu_percent": percent,
            "pids": pids,
        }
        self.record = {
            "version": h.version,
            "mount": str(h.mount),
            "group": str(group),
            "pids": pids,
            "cpu_percent": percent,
            "originals": originals,
            "fallback": originals[str(pids[0])],
        }
        return self.record

    def inject(self, target: Target) -> None:
        """Create the limited group and move the processes in (set the container's quota)."""
        percent = float(self.record.get("cpu_percent", SLOW_CPU_PERCENT))
        if "container" in self.record:
            name = str(self.record["container"])
            quota = max(1000, int(CPU_PERIOD_US * percent / 100))
            if not dk.set_cpu_quota(name, CPU_PERIOD_US, quota):
                raise FaultError(f"slow: container {name} is gone")
            return
        h = cgroups.CpuHierarchy(int(self.record["version"]), Path(self.record["mount"]))
        group = cgroups.create(h, Path(self.record["group"]).name, percent)
        for pid in self.record["pids"]:
            cgroups.move(group, int(pid))

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """The container's CPU quota, or the limited group and each process moved into it."""
        if "container" in record:
            return frozenset({f"cpu:{record['container']}"})
        held = {f"cpu-group:{record.get('group')}"}
        held.update(f"cpu-pid:{int(pid)}" for pid in record.get("pids", []))
        return frozenset(held)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Move members back to their original groups and remove the group (lift the
        container's quota)."""
        if "container" in record:  # gone with its run: nothing is throttled
            dk.set_cpu_quota(str(record["container"]), CPU_PERIOD_US, -1)
            return
        mount = Path(record["mount"])
        originals = {
            int(pid): mount / str(path).lstrip("/") for pid, path in record["originals"].items()
        }
        cgroups.remove(
            Path(record["group"]), mount / str(record["fallback"]).lstrip("/"), originals
        )
