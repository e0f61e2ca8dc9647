"""Stand-ins for the processes a :class:`arfl.orchestrate.watch.Watcher` looks at (unit tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arfl.orchestrate.slots import ReplicaState


class FakeRunner:
    """A replica runner whose replicas are in the given states."""

    def __init__(self, states: dict[int, ReplicaState]) -> None:
        self._states = states

    def states(self) -> dict[int, ReplicaState]:
        return dict(self._states)

    def standby_states(self) -> list[Any]:
        return []

    def log_of(self, replica: int) -> Path:
        return Path(f"/nonexistent/replica-{replica}.log")


class FakeProcess:
    """A merger that runs, or an injector that finished its schedule."""

    def __init__(self, alive: bool) -> None:
        self._alive = alive
        self.returncode = None if alive else 0
        self.log_path = Path("/nonexistent.log")
        self.pid = 4242

    def alive(self) -> bool:
        return self._alive

    def tail(self) -> str:
        return ""


class FakeResources:
    """A resource sampler that samples nothing."""

    def sample(self, states: dict[int, Any], standbys: Any = (), standby_ids: Any = ()) -> None:
        del states, standbys, standby_ids
