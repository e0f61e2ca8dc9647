"""``slow``: throttle a replica's CPU with a cgroup quota for a duration."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from arfl.faults.base import LAG_JOURNAL, FaultBase
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo
from arfl.targets.base import Reach, Target

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
        description="Every process of the replica moves into a cgroup whose CPU quota is "
        "``cpu`` % of one CPU (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``). How much a "
        "quota slows a replica depends on the host and the load.",
        reverted="The processes move back out of the cgroup, which is removed.",
        requires="cgroup v2 with the cpu controller, or a v1 cpu hierarchy, writable by arfl "
        "(root)",
        docker="the container's own CPU quota (``container.update``), inside its "
        "``[placement]`` share; back to the share (or none) after",
        journal=LAG_JOURNAL,
    ),
)
class Slow(FaultBase):
    """Limit every process of the replica to ``cpu`` % of one CPU (:class:`SlowParams`): a
    cgroup ``arfl/<run>-r<N>`` that the processes move into and back out of, or on the docker
    target the container's own quota (:meth:`arfl.targets.base.Reach.limit_cpu`)."""

    kind = "slow"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Record where each process is now (or the container)."""
        replica = self.replica_index(target)
        percent = self.own(SlowParams).cpu
        self.record, details = target.reach(replica).cpu_plan(percent)
        self.details = {"replica": replica, "cpu_percent": percent, **details}
        return self.record

    def inject(self, target: Target) -> None:
        """Apply the quota."""
        Reach.of(self.record).limit_cpu(self.record)

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """The quota (the group and each process moved into it, or the container's)."""
        return Reach.of(record).cpu_claims(record)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Lift the quota."""
        Reach.of(record).unlimit_cpu(record)
