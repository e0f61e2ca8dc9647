"""When a restarted replica has caught up: the other half of a rejoin (down time is the runner's).

A replica restarted from its checkpoint re-reads what arrived while it was down (and re-emits
results the others already delivered; the merger drops them). It has *caught up* once its
query has processed, in every input partition, everything that had arrived in the input topic
when it was restarted: from then on it competes for first copies again and R is restored.
``replica-caught-up`` is journaled with the seconds from the restart to the end of that batch.
It is the drain's test (commits), not the report's ``caught_up_s``: a real-time replica commits
at its batch's end, long after its output was current again
(:func:`arfl.report.verdicts.caught_up_at` reads the output). Where the pipeline passes
end-of-input markers on (marker copies, :mod:`arfl.run.records`), a marker copy of every
partition appended after the restart says it as well (``by = "markers"``): the drain may
end before the restarted query's first batch does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from arfl.run.events import Event
from arfl.run.progress import batch_timing, reached
from arfl.run.rundir import Journal


@dataclass(frozen=True)
class _Pending:
    restarted_at: float
    target: dict[int, int]
    """Input end offsets per partition at the restart."""


class RejoinTracker:
    """Fed once per tick with each replica's restart count.

    Args:
        journal: where ``replica-caught-up`` / ``replica-not-caught-up`` go.
        input_ends: the input topic's end offsets per partition, now.
        last_progress: replica -> its newest progress line (None before its first batch).
        markers: replica -> input partition -> when its latest marker copy of it was appended
            (epoch s; the merger's monitor line), where the pipeline passes markers on.
    """

    def __init__(
        self,
        journal: Journal,
        input_ends: Callable[[], dict[int, int]],
        last_progress: Callable[[int], Mapping[str, Any] | None],
        markers: Callable[[int], Mapping[int, float]] | None = None,
    ) -> None:
        self.journal = journal
        self._input_ends = input_ends
        self._last_progress = last_progress
        self._markers = markers
        self._restarts: dict[int, int] = {}
        self._pending: dict[int, _Pending] = {}

    @property
    def rejoining(self) -> list[int]:
        """Replicas restarted and not caught up yet."""
        return sorted(self._pending)

    def observe(self, now: float, restarts: Mapping[int, int]) -> None:
        """Note new restarts; journal replicas that caught up since the last call."""
        for r, n in restarts.items():
            if n > self._restarts.get(r, 0):
                self._pending[r] = _Pending(now, self._input_ends())
            self._restarts[r] = n
        self._check_pending()

    def _check_pending(self) -> None:
        for r, p in list(self._pending.items()):
            done = self._by_progress(r, p) or self._by_markers(r, p)
            if done is not None:
                done_at, by = done
                self.journal.write(
                    Event.REPLICA_CAUGHT_UP,
                    replica=r,
                    catchup_s=round(max(0.0, done_at - p.restarted_at), 3),
                    offsets={str(k): v for k, v in sorted(p.target.items())},
                    by=by,
                )
                del self._pending[r]

    def _by_progress(self, r: int, p: _Pending) -> tuple[float, str] | None:
        """When the restarted query's batch that reached the target ended."""
        progress = self._last_progress(r)
        if progress is None or _progress_time(progress) < p.restarted_at:
            return None  # no batch of the restarted query yet
        return (_progress_time(progress), "progress") if reached(progress, p.target) else None

    def _by_markers(self, r: int, p: _Pending) -> tuple[float, str] | None:
        """When the last marker copy was appended, if one of every partition was after the
        restart (the replica then read past the target: the markers end the input)."""
        ends = self._markers(r) if self._markers is not None else {}
        if not p.target or any(ends.get(k, 0.0) < p.restarted_at for k in p.target):
            return None
        return max(ends[k] for k in p.target), "markers"

    def finish(self) -> None:
        """Journal the replicas that never caught up before the run ended (after a last look
        at their progress: a batch may have ended since the last tick)."""
        self._check_pending()
        for r, p in self._pending.items():
            self.journal.write(
                Event.REPLICA_NOT_CAUGHT_UP,
                replica=r,
                restarted_at=p.restarted_at,
                offsets={str(k): v for k, v in sorted(p.target.items())},
            )
        self._pending.clear()


def _progress_time(progress: Mapping[str, Any]) -> float:
    """Epoch seconds when the batch ended (0 when the line says nothing readable)."""
    timing = batch_timing(progress)
    return 0.0 if timing is None else timing[0] + timing[1] / 1000.0
