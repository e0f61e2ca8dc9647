"""The registry of fault kinds: one entry per kind, filled by ``@register``.

The spec validator reads the metadata (does the kind take a duration, does it need network
isolation) without importing any implementation; the chaos runner looks up the implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class FaultKind:
    """What the spec validator and the CLI need to know about a fault kind."""

    name: str
    summary: str
    takes_duration: bool
    network: bool = False
    targets_leader: bool = False


KINDS: dict[str, FaultKind] = {}
IMPLEMENTATIONS: dict[str, type] = {}

T = TypeVar("T", bound=type)


def declare(kind: FaultKind) -> None:
    """Make a fault kind known (metadata only)."""
    KINDS[kind.name] = kind


def register(name: str) -> Callable[[T], T]:
    """Class decorator: ``@register("kill-executor")`` binds an implementation to a kind."""

    def wrap(cls: T) -> T:
        if name not in KINDS:
            raise KeyError(f"fault kind {name!r} is not declared")
        IMPLEMENTATIONS[name] = cls
        return cls

    return wrap


def known() -> list[str]:
    """Sorted names of every declared fault kind."""
    return sorted(KINDS)


for _kind in (
    FaultKind("kill-executor", "SIGKILL one executor JVM of a replica", takes_duration=False),
    FaultKind(
        "kill-replica",
        "SIGKILL a replica's driver; the supervisor restarts it",
        takes_duration=False,
    ),
    FaultKind(
        "kill-leader",
        "kill-replica aimed at the current leader (active-leader)",
        takes_duration=False,
        targets_leader=True,
    ),
    FaultKind(
        "pause", "SIGSTOP a replica's processes for a duration, then SIGCONT", takes_duration=True
    ),
    FaultKind(
        "slow", "throttle a replica's CPU (cgroup cpu quota) for a duration", takes_duration=True
    ),
    FaultKind(
        "partition",
        "cut a replica off from Kafka and ZooKeeper for a duration",
        takes_duration=True,
        network=True,
    ),
    FaultKind(
        "delay",
        "add network latency to a replica's traffic (tc netem) for a duration",
        takes_duration=True,
        network=True,
    ),
):
    declare(_kind)
