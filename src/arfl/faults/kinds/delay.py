"""``delay``: add latency to a replica's traffic with a netem qdisc for a duration."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from arfl.errors import FaultError
from arfl.faults import docker as dk
from arfl.faults import netns
from arfl.faults.base import FaultBase, Target
from arfl.faults.kinds.partition import namespace_of
from arfl.params import Duration, Params
from arfl.registry import FAULTS, FaultInfo
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
    ),
)
class Delay(FaultBase):
    """``netem delay`` on the host end of the replica's veth: every packet towards the replica
    waits ``delay``, so each round trip grows by it. Revert deletes the qdisc. On the docker
    target the link is the host end of the container's ``eth0`` veth."""

    kind = "delay"

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve the replica's host-side veth."""
        netns.require_net_admin("delay")
        replica = self.replica_index(target)
        name = target.container(replica)
        if name is not None:
            link = dk.host_veth(dk.container(name))
        else:
            _, ns = namespace_of(target, replica, self.kind)
            if not ns.veth_host:
                raise FaultError(f"delay: no veth recorded for replica {replica}")
            link = ns.veth_host
        self.record = {"link": link}
        self.details = {"replica": replica, "link": link, "delay_s": self.own(DelayParams).delay}
        if name is not None:
            self.record["container"] = name
            self.details["container"] = name
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
        held = {f"qdisc:{record.get('link')}"}
        if record.get("container"):
            held.add(f"veth:{record['container']}")
        return frozenset(held)

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Delete the netem root qdisc."""
        if netns.root_qdisc(str(record["link"])) == "netem":
            netns.del_root_qdisc(str(record["link"]))
