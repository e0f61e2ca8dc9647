"""Keep real-time replicas' batch boundaries apart for the whole run.

At every boundary of a real-time batch a replica's output stalls (0.3-0.6 s here: commit,
planning, task launch). With R replicas whose boundaries lie ``period / R`` apart, one
replica's stall is covered by the others. A start delay sets that phase once, but it does not
last (measured here, R=2, 5-s interval): batch lengths differ between replicas by 0.1-0.5 s
per batch, and once two replicas' boundaries met they stayed together for the rest of the run,
both stalling at once.

So each replica's driver holds its next batch back when that batch would start too soon after
another replica's: if a peer's boundary (read from its progress file, projected by its own
batch length) comes less than ``period / R`` before this replica's next one, this replica
freezes its own driver JVM (SIGSTOP, then SIGCONT) across that boundary for the difference,
capped. The executors' tasks end on their own at the batch's end time; Spark commits, plans and
launches the next batch only after the thaw, so that batch starts, and ends, that much later.
Only the replica that comes too close *after* another holds back, so two replicas never both
wait; the hold lengthens only its own stall, which the others cover. A peer that restarted (a
standby took its place, or a new application; its app file says so) has no phase until its
new query reports a batch, and a planned hold is checked again just before the freeze with the
peers as known then (without that check a survivor held its boundary 6.8 s away from a replica
killed after the plan, onto the newcomer's first boundary; docs/benchmarks.md). Spark offers no
hook between two real-time batches (no ``foreachBatch``, a Kafka source, listeners run
asynchronously and late), hence the freeze. A ``pause`` fault freezes the driver's whole process
tree; a hold that overlaps one can thaw the driver JVM early (a window of microseconds: the
fault signals every process at once).
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from arfl.run.streams import JsonlTail

HOLD_CAP_FRACTION = 0.25
"""Longest hold at one boundary, as a fraction of the period (the replica's output stops for
the hold, covered by the others)."""
TOLERANCE_FRACTION = 0.1
"""A replica at least ``(1 - this) * period / R`` behind every other one does not hold."""


def batch_span(progress: dict[str, Any]) -> tuple[float, float] | None:
    """``(start, end)`` in epoch seconds of the batch a progress event reports (its
    ``timestamp`` and ``durationMs.triggerExecution``), None when either is missing."""
    ts = progress.get("timestamp")
    dur = (progress.get("durationMs") or {}).get("triggerExecution")
    if not isinstance(ts, str) or not isinstance(dur, int | float):
        return None
    try:
        start = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return start, start + dur / 1000.0


def hold_back_s(mine: float, peer_starts: list[float], period: float, replicas: int) -> float:
    """How long a replica whose next batch would start at ``mine`` should hold it back:
    until ``period / replicas`` after every peer batch that started at most that long before
    ``mine`` (capped at ``HOLD_CAP_FRACTION * period``); 0 when it is far enough behind every
    one of them.

    ``peer_starts`` are the peers' current batches' starts. A peer whose batch started after
    ``mine`` is the one too close behind: it holds back itself, so two replicas never both
    wait. A peer whose batch started more than ``period / replicas`` ago is far enough ahead.
    """
    if period <= 0 or replicas < 2:
        return 0.0
    spacing = period / replicas
    need = 0.0
    for s in peer_starts:
        since = mine - s
        if 0 <= since < spacing * (1 - TOLERANCE_FRACTION):
            need = max(need, spacing - since)
    return min(need, HOLD_CAP_FRACTION * period)


def _restarted(app: Path | None, last_end: float) -> bool:
    """Whether the peer whose app file is ``app`` restarted after its batch that ended at
    ``last_end``: the supervisor deleted the file (a standby is being promoted or a new
    application starts), or the peer's new driver rewrote it later (``t``, ``query_started``).
    Such a peer replays or catches up before it covers anything; its phase comes with its next
    progress line."""
    if app is None:
        return False
    try:
        info = json.loads(app.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict):
        return False
    return any(
        isinstance(info.get(k), int | float) and info[k] > last_end for k in ("t", "query_started")
    )


def boundary_before(t: float, start: float, period: float) -> float | None:
    """The latest batch boundary at or before ``t`` of a replica whose current batch started at
    ``start`` and whose batches last ``period`` (None if ``start`` is after ``t``)."""
    if start > t or period <= 0:
        return None
    return start + math.floor((t - start) / period) * period


MARGIN_S = 0.5
"""The driver JVM is frozen at least this long before the predicted end of its batch, plus the
spread of its recent batch lengths (:meth:`PhaseKeeper.margin`), so that the end falls inside
the freeze. Freezing the driver early costs nothing: the executors' tasks go on writing results
(a replica's output kept its rate and 9-42 ms lag through an 11.5-s freeze in mid-batch;
docs/benchmarks.md)."""


def _first_of_run(progress: dict[str, Any], last_run: object) -> bool:
    """Whether a progress event is its query run's first (a new ``runId``): that batch includes
    the query's start-up, or a restarted query's replay, and says nothing of the period."""
    return progress.get("runId") != last_run


_NO_RUN = object()
"""No query run seen yet (a progress event without ``runId`` still starts one)."""


class PhaseKeeper:
    """Holds this replica's batches back (see the module docstring).

    A listener's progress event reaches the driver's Python 2-3 s after the batch ended
    (measured here), too late to hold back the batch that follows. So the keeper predicts its
    next boundary (the last one plus its median batch length), decides from the peers'
    progress files whether that boundary falls too soon after one of theirs, and if so freezes
    the driver JVM from :meth:`margin` before it until the hold has passed: the tasks end on
    their own (executors keep running), the driver commits and plans only after the thaw.

    Args:
        jvm_pid: the driver JVM's pid.
        peers: the other replicas' progress files.
        replicas: R.
        log: where a hold is reported.
        peer_apps: the other replicas' app files, in ``peers``' order (None: restarts are
            seen only from the progress files).
    """

    def __init__(
        self,
        jvm_pid: int,
        peers: list[Path],
        replicas: int,
        log: Callable[[str], None],
        peer_apps: list[Path] | None = None,
    ) -> None:
        if peer_apps is not None and len(peer_apps) != len(peers):
            raise ValueError("peer_apps must name one app file per peer")
        self.jvm_pid = jvm_pid
        self.peers = peers
        self.peer_apps: list[Path | None] = list(peer_apps) if peer_apps else [None] * len(peers)
        self.replicas = replicas
        self.log = log
        self.holds: list[float] = []
        self._periods: deque[float] = deque(maxlen=5)
        """Lengths of its last batches, none a query run's first (:func:`_first_of_run`)."""
        self._query_run: object = _NO_RUN
        self._frozen_at: float | None = None
        """When its last hold began: the batch that ends after it was held, its length is no
        period (an earlier batch's line may still come after the freeze began)."""
        # Each peer's progress file, read incrementally; its last few batches kept, as
        # (start, end, first of its query run).
        self._peer_tails = [JsonlTail(p) for p in peers]
        self._peer_spans: list[deque[tuple[float, float, bool]]] = [deque(maxlen=6) for _ in peers]
        self._peer_runs: list[object] = [_NO_RUN for _ in peers]
        self._last_end: float | None = None
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arfl-phase", daemon=True)

    def start(self) -> None:
        """Start the keeper's thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the keeper (a freeze under way is thawed first)."""
        self._stop.set()
        self._pending.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def on_progress(self, progress: dict[str, Any]) -> None:
        """A batch of this replica ended (called from the progress listener)."""
        span = batch_span(progress)
        if span is None:
            return
        start, end = span
        first = _first_of_run(progress, self._query_run)
        self._query_run = progress.get("runId")
        held = self._frozen_at is not None and end >= self._frozen_at
        if held:
            self._frozen_at = None
        if not first and not held:
            self._periods.append(end - start)
        self._last_end = end
        self._pending.set()

    def period(self) -> float | None:
        """This replica's batch period: the median (high) of its last batches' lengths, a query
        run's first batch and a batch it held back left out (None before it had another)."""
        return statistics.median_high(self._periods) if self._periods else None

    def margin(self) -> float:
        """How long before its predicted boundary the driver is frozen: :data:`MARGIN_S` plus
        the spread of its recent batch lengths, at most a quarter of its period."""
        period = self.period()
        if period is None:
            return MARGIN_S
        spread = max(self._periods) - min(self._periods)
        return max(MARGIN_S, min(MARGIN_S + spread, period / 4))

    def peer_phases(self, now: float) -> list[tuple[float, float]]:
        """``(current batch start, period)`` of every peer still running: the end of its last
        reported batch and its median batch length, if that end is less than two periods ago
        (a dead or restarting peer has no phase to keep away from). Nor has a peer whose app
        file says it restarted after that batch, until its new query reports a batch: while it
        replays or catches up it covers nobody's stall, and a hold toward it would lengthen
        one that nothing covers."""
        out = []
        for i, (tail, spans, app) in enumerate(
            zip(self._peer_tails, self._peer_spans, self.peer_apps, strict=True)
        ):
            for progress in tail.read_new():
                span = batch_span(progress)
                if span is None:
                    continue
                first = _first_of_run(progress, self._peer_runs[i])
                self._peer_runs[i] = progress.get("runId")
                spans.append((*span, first))
            lengths = [e - s for s, e, first in spans if not first]
            if not lengths:
                continue
            period = statistics.median_high(lengths)
            last_end = spans[-1][1]
            if _restarted(app, last_end):
                continue
            if now - last_end < 2 * period:
                out.append((last_end, period))
        return out

    def hold_for(self, mine: float, now: float) -> float:
        """How long to hold this replica's boundary at ``mine`` back, from the peers' phases as
        they are at ``now`` (0: not at all)."""
        period = self.period()
        if period is None:
            return 0.0
        peers = [boundary_before(mine, s, p) for s, p in self.peer_phases(now)]
        return hold_back_s(mine, [b for b in peers if b is not None], period, self.replicas)

    def plan(self, now: float) -> tuple[float, float] | None:
        """``(next boundary, hold)`` when this replica's predicted next boundary falls too
        soon after a peer's and there is still time to freeze before it; else None."""
        period, last_end = self.period(), self._last_end
        if period is None or last_end is None:
            return None
        mine = last_end + period
        if mine - now < self.margin():
            return None
        hold = self.hold_for(mine, now)
        return (mine, hold) if hold > 0 else None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._pending.wait()
            self._pending.clear()
            if self._stop.is_set():
                return
            planned = self.plan(time.time())
            if planned is None:
                continue
            self._carry_out(*planned)

    def _carry_out(self, mine: float, planned: float) -> None:
        """Wait until :meth:`margin` before the boundary at ``mine``, look at the peers again
        (one may have died or restarted since the plan, a period ago) and hold for what they ask
        now."""
        margin = self.margin()
        if self._stop.wait(max(0.0, mine - margin - time.time())):
            return
        hold = self.hold_for(mine, time.time())
        if hold <= 0:
            self.log(
                f"dropped a planned hold of {planned:.2f}s: the peers' boundaries as known now "
                "do not ask for it (a newer progress line, a restart or a death since the plan)"
            )
            return
        self._frozen_at = time.time()
        self._hold(margin + hold, hold)

    def _hold(self, freeze: float, hold: float) -> None:
        """Freeze the driver JVM for ``freeze`` seconds (to hold its next batch ``hold``)."""
        try:
            os.kill(self.jvm_pid, signal.SIGSTOP)
        except OSError as e:
            self.log(f"cannot hold the next batch back: {e}")
            return
        try:
            self._stop.wait(freeze)  # stop() thaws at once
        finally:
            os.kill(self.jvm_pid, signal.SIGCONT)
        self.holds.append(hold)
        self.log(
            f"held the next batch back {hold:.2f}s (another replica's boundary came less than "
            f"1/{self.replicas} of a period before this one's)"
        )
