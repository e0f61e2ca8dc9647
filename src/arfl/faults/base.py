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

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import ValidationError

from arfl.errors import FaultError
from arfl.params import Params, first_problem
from arfl.registry import FAULTS, FaultInfo, UnknownKind
from arfl.run.events import Event
from arfl.targets.base import Target
from arfl.units import format_duration

P = TypeVar("P", bound=Params)

RESTART_JOURNAL: tuple[tuple[str, str], ...] = (
    (Event.REPLICA_DIED, "the supervisor saw the driver die"),
    (Event.REPLICA_STARTED, "a new driver started, or a standby took the replica over"),
    (Event.REPLICA_RESTARTED, "the replica runs again, with where it resumed"),
    (Event.REPLICA_READY, "a new driver's Spark application is up"),
    (Event.REPLICA_CAUGHT_UP, "it processed what had arrived by its restart"),
    (Event.REPLICA_NOT_CAUGHT_UP, "it had not by the end of the run"),
    (Event.REPLICA_GAVE_UP, "restart = false, or its restarts kept failing"),
    (Event.REPLICA_EXCLUDED, "the run goes on without it"),
)
"""What follows a replica's death (``FaultInfo.journal`` of the kinds that kill one)."""

LAG_JOURNAL: tuple[tuple[str, str], ...] = (
    (Event.REPLICA_BEHIND, "the replica's lag passed the threshold"),
    (Event.REPLICA_BACK, "its lag came back below half the threshold"),
)
"""What follows a fault that holds a replica back (``FaultInfo.journal``)."""


@dataclass(frozen=True)
class FaultParams:
    """What to inject: the kind, what every kind takes (the replica, when, how long) and the
    kind's own parameters (:attr:`arfl.registry.FaultInfo.params`), from a spec's ``[[chaos]]``
    or the CLI."""

    kind: str
    replica: int | Literal["leader"] | None = None
    duration_s: float | None = None
    at_s: float = 0.0
    after_boundary_s: float | None = None
    """Inject this long after the first batch boundary from ``at_s`` on
    (:mod:`arfl.faults.align`)."""
    options: Params | None = None
    """The kind's parameters (None: the kind's defaults, see :meth:`resolved`)."""

    @classmethod
    def of(
        cls,
        kind: str,
        *,
        replica: int | Literal["leader"] | None = None,
        duration_s: float | None = None,
        at_s: float = 0.0,
        after_boundary_s: float | None = None,
        **options: Any,
    ) -> FaultParams:
        """Build with the kind's parameters as keywords (``cpu=5``, ``from_=(1,)``,
        ``delay="50ms"``: a duration as a spec writes it), validated by the kind's model,
        which converts ``"5"`` to 5.0 (lenient, unlike a spec).

        Raises:
            FaultError: an unknown kind, or parameters its model refuses.
        """
        model = _info(kind).params
        try:
            opts = model.model_validate(options, strict=False)
        except ValidationError as e:
            raise FaultError(f"{kind}: {_problem(e)}") from None
        return cls(kind, replica, duration_s, at_s, after_boundary_s, opts)

    @classmethod
    def from_chaos(cls, entry: Any) -> FaultParams:
        """Convert a validated spec entry (:class:`arfl.configs.spec.Chaos`)."""
        return cls(
            kind=entry.fault,
            replica=entry.replica,
            duration_s=entry.duration,
            at_s=entry.at,
            after_boundary_s=entry.after_boundary,
            options=entry.params,
        )

    def resolved(self) -> FaultParams:
        """These parameters with the kind's defaults filled in.

        Raises:
            FaultError: an unknown kind, options of another kind's model, or a kind whose
                parameters have no default (``delay`` needs its latency).
        """
        model = _info(self.kind).params
        if isinstance(self.options, model):
            return self
        if self.options is not None:
            raise FaultError(
                f"{self.kind}: parameters of type {type(self.options).__name__}, not "
                f"{model.__name__}"
            )
        try:
            return replace(self, options=model())
        except ValidationError as e:
            raise FaultError(f"{self.kind}: {_problem(e)}") from None

    def peers(self) -> tuple[int, ...]:
        """Replicas the fault involves besides its target (:meth:`arfl.params.Params.peers`)."""
        return self.options.peers() if self.options is not None else ()

    def describe(self) -> str:
        """A one-line human rendering, e.g. ``pause replica 1 for 10s``."""
        parts = [self.kind]
        if self.replica is not None:
            parts.append(f"replica {self.replica}")
        if self.options is not None:
            parts.extend(self.options.describe())
        if self.after_boundary_s is not None:
            parts.append(f"{format_duration(self.after_boundary_s)} after a batch boundary")
        if self.duration_s is not None:
            parts.append(f"for {format_duration(self.duration_s)}")
        return " ".join(parts)


def _problem(err: ValidationError) -> str:
    where, what = first_problem(err)
    return f"{where}: {what}" if where else what


def _info(kind: str) -> FaultInfo:
    try:
        return FAULTS.info(kind)
    except UnknownKind as e:
        raise FaultError(str(e)) from None


class Fault(Protocol):
    """One injectable, revertible fault."""

    kind: ClassVar[str]
    params: FaultParams
    record: dict[str, Any]
    details: dict[str, Any]

    def __init__(self, params: FaultParams) -> None:
        """Built from the fault's parameters (the kind's defaults filled in)."""
        ...

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

    def own(self, model: type[P]) -> P:
        """The kind's parameters as its model (filled in by :func:`make_fault`)."""
        opts = self.params.options
        if not isinstance(opts, model):
            raise FaultError(f"{self.kind}: no {model.__name__} (built without make_fault?)")
        return opts

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
        FaultError: the kind is unknown (the message lists the known ones), its parameters
            are missing one without a default, or it names a replica for a fault that acts on
            the merger.
    """
    impl = implementation(params.kind)
    on = FAULTS.info(params.kind).on
    if on != "replica" and params.replica is not None:
        raise FaultError(f"{params.kind} acts on the {on}, not on a replica: drop --replica")
    fault: Fault = impl(params.resolved())
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
