"""The interfaces faults are written against: :class:`Fault` and the :class:`Target` it acts on.

A fault's life, driven by :class:`arfl.faults.runner.ChaosRunner`:

1. ``prepare(target)`` resolves what the fault will touch (pids, cgroup, veth, routes) and
   returns an *undo record*: plain JSON that is enough to revert the fault without the target
   and without the process that injected it. The runner persists it before step 2.
2. ``inject(target)``.
3. for duration faults, the runner waits.
4. ``revert(target)``: always called, also when ``inject`` failed half-way. It is idempotent.

``undo(record)`` is the class-level revert used by ``arfl chaos recover`` after arfl itself was
killed; ``revert`` normally calls it with the record from step 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from arfl.errors import FaultError
from arfl.faults.docker import DockerNetState
from arfl.faults.state import IsolationState
from arfl.registry import FAULTS, UnknownKind
from arfl.units import format_duration


@dataclass(frozen=True)
class FaultParams:
    """What to inject: the kind and its parameters (from a spec's ``[[chaos]]`` or the CLI)."""

    kind: str
    replica: int | Literal["leader"] | None = None
    duration_s: float | None = None
    restart: bool = True
    executor: str | None = None
    delay_s: float | None = None
    cpu_percent: float | None = None
    """``slow``: the replica's CPU quota in percent of one CPU (None: 10 %,
    :data:`arfl.configs.defaults.SLOW_CPU_PERCENT`)."""
    from_: tuple[int, ...] = ()
    at_s: float = 0.0
    after_boundary_s: float | None = None
    """Inject this long after the first batch boundary from ``at_s`` on
    (:mod:`arfl.faults.align`)."""

    @classmethod
    def from_chaos(cls, entry: Any) -> FaultParams:
        """Convert a validated spec entry (:class:`arfl.configs.spec.Chaos`)."""
        return cls(
            kind=entry.fault,
            replica=entry.replica,
            duration_s=_seconds(entry.duration),
            restart=bool(entry.restart),
            executor=entry.executor,
            delay_s=_seconds(entry.delay),
            cpu_percent=entry.cpu,
            from_=tuple(entry.from_ or ()),
            at_s=_seconds(entry.at) or 0.0,
            after_boundary_s=_seconds(entry.after_boundary),
        )

    def describe(self) -> str:
        """A one-line human rendering, e.g. ``pause replica 1 for 10s``."""
        parts = [self.kind]
        if self.replica is not None:
            parts.append(f"replica {self.replica}")
        if self.executor is not None:
            parts.append(f"executor {self.executor}")
        if self.delay_s is not None:
            parts.append(f"+{format_duration(self.delay_s)}")
        if self.cpu_percent is not None:
            parts.append(f"to {self.cpu_percent:g}% of a CPU")
        if self.from_:
            parts.append("from " + ",".join(str(i) for i in self.from_))
        if not self.restart:
            parts.append("no restart")
        if self.after_boundary_s is not None:
            parts.append(f"{format_duration(self.after_boundary_s)} after a batch boundary")
        if self.duration_s is not None:
            parts.append(f"for {format_duration(self.duration_s)}")
        return " ".join(parts)


def _seconds(value: Any) -> float | None:
    """Durations in spec models are floats (seconds) or strings with units."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    from arfl.units import parse_duration

    return parse_duration(str(value))


@runtime_checkable
class Target(Protocol):
    """A deployment that faults act on (local processes; later docker, remote)."""

    @property
    def run_dir(self) -> Path:
        """The run directory (markers and the pending-faults file live there)."""
        ...

    @property
    def run(self) -> str:
        """The run's name."""
        ...

    def replicas(self) -> list[int]:
        """Indices of the replicas the deployment has."""
        ...

    def driver_pid(self, replica: int) -> int:
        """Pid of the replica's driver process (raises FaultError when it is not running)."""
        ...

    def replica_pids(self, replica: int) -> list[int]:
        """The driver and all its descendants (executor JVMs, Python workers)."""
        ...

    def executor_pids(self, replica: int) -> dict[str, int]:
        """Executor id -> pid of the replica's ``CoarseGrainedExecutorBackend`` JVMs."""
        ...

    def netns(self, replica: int) -> str | None:
        """Name of the replica's network namespace, if it runs in one."""
        ...

    def container(self, replica: int) -> str | None:
        """The replica's container on the docker target (None: a local process)."""
        ...

    def docker(self) -> DockerNetState | None:
        """The run's docker network and containers (the docker target), if any."""
        ...

    def isolation(self) -> IsolationState | None:
        """The bridge and namespaces created for this run, if any."""
        ...

    def leader(self) -> int | None:
        """The current leader's replica index (active-leader), or None."""
        ...


class Fault(Protocol):
    """One injectable, revertible fault."""

    kind: ClassVar[str]
    params: FaultParams
    record: dict[str, Any]
    details: dict[str, Any]

    def prepare(self, target: Target) -> dict[str, Any]:
        """Resolve what to touch; return the undo record (JSON) persisted before inject."""
        ...

    def inject(self, target: Target) -> None:
        """Apply the fault."""
        ...

    def revert(self, target: Target) -> None:
        """Undo the fault (idempotent; safe after a failed or partial inject)."""
        ...

    @classmethod
    def settle(cls, run_dir: Path, record: dict[str, Any]) -> None:
        """After a revert's pending entry is gone (runner and recover): undo what a replica
        restart may have re-applied from that entry meanwhile (a container started cut)."""
        ...

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """What the fault holds while it lasts (a link, a route, a container's network, frozen
        pids, a cgroup): two pending faults whose claims meet would undo each other — the first
        revert lifts the second's effect — so the runner refuses the second."""
        ...

    def describe(self) -> str:
        """One line for humans and the journal."""
        ...

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Revert from the persisted record alone (used by recover)."""
        ...


@dataclass
class FaultBase:
    """Shared plumbing for implementations: params, undo record, details for the journal."""

    kind: ClassVar[str] = ""
    params: FaultParams
    record: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for humans and the journal."""
        return self.params.describe()

    def replica_index(self, target: Target) -> int:
        """The replica this fault aims at (``"leader"`` resolved through the target)."""
        r = self.params.replica
        if r == "leader":
            leader = target.leader()
            if leader is None:
                raise FaultError(
                    f"{self.kind}: no leader found for run {target.run}; is the deployment in "
                    "mode active-leader and has it elected a leader?"
                )
            return leader
        if r is None:
            raise FaultError(f"{self.kind}: which replica? pass --replica N (or replica = N)")
        if r not in target.replicas():
            raise FaultError(
                f"{self.kind}: run {target.run} has no replica {r} "
                f"(replicas: {', '.join(map(str, target.replicas())) or 'none'})"
            )
        return r

    def revert(self, target: Target) -> None:
        """Undo through :meth:`undo` with the record from :meth:`prepare`."""
        if self.record:
            type(self).undo(self.record)

    @classmethod
    def settle(cls, run_dir: Path, record: dict[str, Any]) -> None:
        """Nothing is re-applied from a pending entry by default."""
        return None

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        """Nothing held by default (kills are over once injected)."""
        return frozenset()

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        """Nothing to undo by default (kills)."""
        return None


def make_fault(params: FaultParams) -> Fault:
    """Instantiate the implementation registered for ``params.kind``.

    Raises:
        FaultError: the kind is unknown (the message lists the known ones).
    """
    try:
        cls = FAULTS.get(params.kind)
    except UnknownKind as e:
        raise FaultError(str(e)) from None
    fault: Fault = cls(params)
    return fault


def implementation(kind: str) -> type[Fault]:
    """The class registered for ``kind`` (also used by recover).

    Raises:
        FaultError: unknown kind.
    """
    try:
        impl: type[Fault] = FAULTS.get(kind)
    except UnknownKind as e:
        raise FaultError(str(e)) from None
    return impl
