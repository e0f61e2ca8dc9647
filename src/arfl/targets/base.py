"""What a fault acts on: a deployed run (:class:`Target`) and, per replica, how a fault reaches
it (:class:`Reach`).

A fault kind says what a fault means and asks its target's :meth:`Target.reach` for the how: the
fault primitives (freeze, CPU quota, kill, the link to delay, the cut) for one placement. A new
placement is one new :class:`Reach` subclass, not an edit of every kind. Every plan returns the
record the fault persists before it acts, with ``via`` naming the placement, so that a revert or
``arfl chaos recover`` finds the way back from the record alone (:meth:`Reach.of`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from arfl.errors import FaultError
from arfl.run.state import DockerNetState, IsolationState


@runtime_checkable
class Target(Protocol):
    """A deployment that faults act on: what ``state.json`` says of its replicas, and how a fault
    reaches each one (:meth:`reach`)."""

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

    def merger_pid(self) -> int:
        """Pid of the run's merger (raises FaultError when it is not running)."""
        ...

    def leader(self) -> int | None:
        """The current leader's replica index (active-leader), or None."""
        ...

    def reach(self, replica: int) -> Reach:
        """How faults reach the replica where it runs (its processes, or its container)."""
        ...


Record = dict[str, Any]

_PLACEMENTS = ("arfl.targets.process", "arfl.targets.container")
"""The modules whose :class:`Reach` subclasses :meth:`Reach.of` knows."""


class Reach:
    """The fault primitives of one placement. Instance methods plan (they read the target);
    class methods act on a persisted record (they must work after a restart of arfl)."""

    via: ClassVar[str] = ""
    _known: ClassVar[dict[str, type[Reach]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.via:
            Reach._known[cls.via] = cls

    def __init__(self, target: Target, replica: int) -> None:
        self.target = target
        self.replica = replica

    @staticmethod
    def of(record: Record) -> type[Reach]:
        """The placement that wrote ``record``.

        Raises:
            FaultError: the record names no known placement.
        """
        for module in _PLACEMENTS:
            importlib.import_module(module)
        via = str(record.get("via", ""))
        if via not in Reach._known:
            raise FaultError(f"a fault record names no known placement (via {via!r})")
        return Reach._known[via]

    def where(self) -> Record:
        """What names the placement in a fault's details (``container`` on docker)."""
        return {}

    # --- pause -------------------------------------------------------------------------

    def freeze_plan(self) -> tuple[Record, Record]:
        """(record, details) of freezing every process of the replica."""
        raise NotImplementedError

    @classmethod
    def freeze(cls, record: Record) -> bool:
        """Freeze; True once every process is seen frozen (False: not confirmed in time)."""
        raise NotImplementedError

    @classmethod
    def thaw(cls, record: Record, *, froze: bool) -> bool | None:
        """Thaw what :meth:`freeze` froze (``froze``: it returned); True once confirmed, None
        when there was nothing of this fault's to thaw."""
        raise NotImplementedError

    @classmethod
    def unfreeze(cls, record: Record) -> None:
        """Thaw from the record alone (recover)."""
        raise NotImplementedError

    @classmethod
    def freeze_claims(cls, record: Record) -> frozenset[str]:
        """What a freeze holds while it lasts."""
        raise NotImplementedError

    # --- slow --------------------------------------------------------------------------

    def cpu_plan(self, percent: float) -> tuple[Record, Record]:
        """(record, details) of limiting the replica to ``percent`` % of one CPU."""
        raise NotImplementedError

    @classmethod
    def limit_cpu(cls, record: Record) -> None:
        """Apply the quota."""
        raise NotImplementedError

    @classmethod
    def unlimit_cpu(cls, record: Record) -> None:
        """Lift the quota (from the record alone)."""
        raise NotImplementedError

    @classmethod
    def cpu_claims(cls, record: Record) -> frozenset[str]:
        """What a CPU quota holds while it lasts."""
        raise NotImplementedError

    # --- kill --------------------------------------------------------------------------

    def kill_plan(self) -> Record:
        """What :meth:`kill` needs (the driver pid, or the container), for the details."""
        raise NotImplementedError

    @classmethod
    def kill(cls, plan: Record) -> None:
        """SIGKILL the replica's driver (every process of its container).

        Raises:
            FaultError: the driver is gone already.
        """
        raise NotImplementedError

    # --- network -----------------------------------------------------------------------

    def link_plan(self) -> Record:
        """The host end of the replica's link (``link``), where a qdisc delays its traffic."""
        raise NotImplementedError

    @classmethod
    def link_claims(cls, record: Record) -> frozenset[str]:
        """What a qdisc on that link holds besides the link's root qdisc."""
        return frozenset()

    def cut_plan(self, peers: tuple[int, ...]) -> Record:
        """The record of cutting the replica off (from ``peers`` only, when given)."""
        raise NotImplementedError

    @classmethod
    def cut(cls, record: Record, details: Record) -> None:
        """Apply the cut (``details`` learns what was done, for :meth:`heals`)."""
        raise NotImplementedError

    @classmethod
    def heals(cls, record: Record, details: Record) -> bool:
        """Whether a revert should heal: not a cut whose apply failed (another fault may hold
        it)."""
        return True

    @classmethod
    def heal(cls, record: Record) -> None:
        """Undo the cut from the record alone (idempotent)."""
        raise NotImplementedError

    @classmethod
    def settle_cut(cls, run_dir: Path, record: Record) -> None:
        """After the revert's pending entry is gone: undo what a replica restarted meanwhile
        re-applied from it."""

    @classmethod
    def cut_claims(cls, record: Record) -> frozenset[str]:
        """What a cut holds while it lasts."""
        raise NotImplementedError
