"""What a fault acts on: a deployed run (:class:`Target`) and, per replica, how a fault reaches
it (:class:`Reach`, :mod:`arfl.targets.reach`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from arfl.run.state import DockerNetState, IsolationState

if TYPE_CHECKING:
    from arfl.targets.reach import Reach


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

    def leader(self) -> int | None:
        """The current leader's replica index (active-leader), or None."""
        ...

    def reach(self, replica: int) -> Reach:
        """How faults reach the replica where it runs (its processes, or its container)."""
        ...
