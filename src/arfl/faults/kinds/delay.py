"""``delay``: add latency to a replica's traffic with a netem qdisc for a duration."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from arfl.faults.base import LAG_JOURNAL, FaultBase
from arfl.params import Duration, Params
from arfl.registry import FAULTS, FaultInfo
from arfl.targets import netns
from arfl.targets.base import Reach, Target
from arfl.units import format_duration


class DelayParams(Params):
    """``[[chaos]] delay`` / ``--delay``: no default, a delay fault must say how much."""

    delay: Duration = Field(
        gt=0,
        description="the added latency, e.g. 50ms",
        json_schema_extra={"metavar": "DURATION"},
    )

    def describe(self) -> list[str]:
        """``+50ms``."""
        return [f"+{format_duration(self.delay)}"]


@FAULTS.register(
    "delay",
    FaultInfo(
        "add network latency to a replica's traffic (tc netem) for a duration",
        takes_duration=True,
        network=True,
        params=DelayParams,
        description="A netem qdisc on the host end of the replica's veth delays every packet "
        "towards the replica by ``delay``, so each of its round trips grows by it.",
        reverted="The qdisc is deleted, if this fault added it.",
        requires="the kernel's ``sch_netem`` module",
        docker="netem on the host end of the container's veth; not during a ``partition`` "
        "without ``from`` of the same container, whose reconnect replaces the veth",
        journal=LAG_JOURNAL,
    ),
)
class Delay(FaultBase):
    """``netem delay`` on the host end of the replica's veth: every packet towards the replica
    waits ``delay``, so each round trip grows by it. Revert deletes the qdisc. On the docker
    target the link is the host end of the container's ``eth0`` veth."""

    kind = "delay"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the replica's host-side link."""
        netns.require_net_admin("delay")
        replica = self.replica_index(target)
        self.record = target.reach(replica).link_plan()
        self.details = {"replica": replica, **self.record, "delay_s": self.own(DelayParams).delay}
        return self.record

    def inject(self, target: Target) -> None:
        """Add the qdisc."""
        netns.add_netem(str(self.record["link"]), self.own(DelayParams).delay)
        self.details["added"] = True

    def revert(self, target: Target) -> None:
        """Delete the qdisc if this fault added it (never someone else's)."""
        if self.details.get("added"):
            type(self).undo(self.record)

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """The link's root qdisc; on the docker target also the container's veth, which a
        ``partition`` that disconnects the container replaces (the qdisc would go with it)."""
        return frozenset({f"qdisc:{record.get('link')}"}) | Reach.of(record).link_claims(record)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Delete the netem root qdisc."""
        if netns.root_qdisc(str(record["link"])) == "netem":
            netns.del_root_qdisc(str(record["link"]))
