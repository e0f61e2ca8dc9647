"""How far behind the input each replica is, in seconds, and a warning when one is not catching up.

A replica's **lag** is how long the oldest input record it has not processed yet has been in the
input topic: ``now - t``, ``t`` the first moment (sampled about once a second) when the input
topic held a record beyond what the replica's last finished batch read, in any partition. That
is Kafka consumer lag expressed in time (as Burrow and most lag exporters report it), measured
from the replica's own progress (its batches' end offsets), so a batch that is still running
counts as not done. It is 0 while the replica has read everything that had arrived.

``replica-behind`` is journaled when a running replica's lag exceeds the threshold (the larger
of :data:`MIN_THRESHOLD_S` and :data:`CADENCES` batch cadences: a healthy replica is always up
to a batch behind), ``replica-back`` when it falls below half of it again, with how long the
episode lasted and its largest lag. Once per episode, a replica that has been behind for
:data:`TREND_S` seconds since its first batch of its current driver, its lag shrinking neither
over those seconds nor over their second half, gets a ``warning``: it is not catching up.
Once the input has ended, records appended after it (the leaderless mode's heartbeats) no longer
count.
In the agreed-batch modes (``active-leader``, ``active-leaderless``) a replica that runs one Spark
batch per agreed batch (``replication.catch_up = "aligned"``, or a ``transform`` step) never
catches up when a batch costs longer than ``replication.batch_interval``; the warning says so
(with the default ``"auto"`` a replica of filters, selects and windows merges the ready batches,
:attr:`arfl.configs.spec.Spec.merges_agreed_batches`).

Real-time-mode replicas are not watched: their progress comes at the end of each long batch, so
their offsets say nothing about their lag in between.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from arfl.configs.spec import Spec
from arfl.registry import MODES
from arfl.run.events import Event
from arfl.run.progress import NOT_CATCHING_UP, batch_timing, end_offsets
from arfl.run.rundir import Journal

MIN_THRESHOLD_S = 10.0
"""A replica less than this far behind is never reported."""
CADENCES = 3
"""...nor one less than this many batch cadences behind."""
TREND_S = 60.0
"""How long a replica must have been behind and running, its lag not shrinking, to be warned
about (long enough for a restarted replica's cold first batches, which take tens of seconds on
small hosts, not to count as falling behind)."""
SAMPLE_S = 1.0
"""How often the input topic's end offsets are sampled."""
HISTORY_S = 3600.0
"""Samples older than this are forgotten (a lag beyond it is reported as at least this)."""


def cadence_s(spec: Spec) -> float:
    """How often a replica starts a batch when it keeps up: the agreed batch interval, else the
    trigger interval (0 for as-fast-as-possible micro-batches)."""
    if MODES.info(spec.replication.mode).agreed_batches:
        return spec.agreed_batch_interval
    return float(spec.replication.trigger_interval or 0.0)


def threshold_s(spec: Spec) -> float:
    """The lag above which a replica counts as behind."""
    return max(MIN_THRESHOLD_S, CADENCES * cadence_s(spec))


@dataclass
class _Episode:
    since: float
    max_lag: float
    lags: deque[tuple[float, float]] = field(default_factory=deque)
    warned: bool = False


class LagWatch:
    """Fed once per tick; journals ``replica-behind`` / ``replica-back`` and the not-catching-up
    warning. :attr:`lags` holds each replica's latest lag (seconds) for the live view.

    Args:
        journal: where the events go.
        spec: the run's spec (mode, batch interval, trigger).
        input_ends: the input topic's end offsets per partition, now.
        last_progress: replica -> its newest progress line (None before its first batch).
    """

    def __init__(
        self,
        journal: Journal,
        spec: Spec,
        input_ends: Callable[[], dict[int, int]],
        last_progress: Callable[[int], Mapping[str, Any] | None],
    ) -> None:
        self.journal = journal
        self.threshold = threshold_s(spec)
        # One agreed batch per Spark batch, never merged (Spec.merges_agreed_batches).
        self.agreed = (
            MODES.info(spec.replication.mode).agreed_batches and not spec.merges_agreed_batches
        )
        self.batch_interval = cadence_s(spec)
        self.enabled = spec.replication.trigger != "realtime"
        self._input_ends = input_ends
        self._last_progress = last_progress
        self._samples: deque[tuple[float, dict[int, int]]] = deque()
        self._last_sample = float("-inf")
        self._episodes: dict[int, _Episode] = {}
        self._cap: dict[int, int] | None = None
        self.lags: dict[int, float] = {}
        self.max_lags: dict[int, float] = {}

    def input_ended(self, ends: Mapping[int, int]) -> None:
        """The input is complete at ``ends``: records appended later (the leaderless mode's
        heartbeats go on until the replicas stop) no longer count as input a replica lags on."""
        self._cap = dict(ends)

    def lag(self, now: float, consumed: Mapping[int, int]) -> float:
        """Seconds the oldest record beyond ``consumed`` has been in the input (0: none)."""
        cap = self._cap

        def unread(ends: Mapping[int, int]) -> bool:
            return any(
                (off if cap is None else min(off, cap.get(p, off))) > consumed.get(p, 0)
                for p, off in ends.items()
            )

        # End offsets only grow: nothing beyond ``consumed`` in the newest sample, none in any
        # older one (the common case of a replica keeping up costs one sample, not the history).
        if not self._samples or not unread(self._samples[-1][1]):
            return 0.0
        for t, ends in self._samples:
            if unread(ends):
                return max(0.0, now - t)
        return 0.0

    def observe(self, now: float, running_since: Mapping[int, float | None]) -> None:
        """One tick. ``running_since``: replica -> when its current driver started (None while
        it is not running). A replica counts as up once it finished a batch since then: until
        its first batch (minutes for a cold restart on a small host) it keeps its lag and
        episode but its trend is not judged."""
        if not self.enabled:
            return
        if now - self._last_sample >= SAMPLE_S:
            self._last_sample = now
            # A missed sample only blurs the lag by a second; the next tick asks again.
            with contextlib.suppress(KafkaException):
                self._samples.append((now, dict(self._input_ends())))
            while self._samples and now - self._samples[0][0] > HISTORY_S:
                self._samples.popleft()
        for r, since in sorted(running_since.items()):
            progress = self._last_progress(r)
            lag = self.lag(now, end_offsets(progress) if progress is not None else {})
            self.lags[r] = lag
            self.max_lags[r] = max(self.max_lags.get(r, 0.0), lag)
            timing = batch_timing(progress) if progress is not None else None
            up = since is not None and timing is not None and timing[0] >= since
            self._step(r, now, lag, up)

    def _step(self, r: int, now: float, lag: float, up: bool) -> None:
        ep = self._episodes.get(r)
        if ep is None:
            if lag > self.threshold:
                self._episodes[r] = _Episode(since=now, max_lag=lag, lags=deque([(now, lag)]))
                self.journal.write(
                    Event.REPLICA_BEHIND, replica=r, lag_s=round(lag, 1), threshold_s=self.threshold
                )
            return
        ep.max_lag = max(ep.max_lag, lag)
        if not up:  # the trend counts from when it runs again
            ep.lags.clear()
            return
        ep.lags.append((now, lag))
        if lag < self.threshold / 2:
            self.journal.write(
                Event.REPLICA_BACK,
                replica=r,
                lag_s=round(lag, 1),
                behind_s=round(now - ep.since, 1),
                max_lag_s=round(ep.max_lag, 1),
            )
            del self._episodes[r]
            return
        while len(ep.lags) > 1 and now - ep.lags[1][0] >= TREND_S:
            ep.lags.popleft()
        t0, lag0 = ep.lags[0]
        if ep.warned or now - t0 < TREND_S or lag < lag0:
            return
        # Not shrinking over the last half window either: a lag that peaked (an executor
        # replaced mid-window) and is coming down is catching up.
        mid = next(v for t, v in ep.lags if now - t <= TREND_S / 2)
        if lag >= mid:
            ep.warned = True
            self.journal.write(
                Event.WARNING,
                kind=NOT_CATCHING_UP,
                replica=r,
                message=self._message(r, lag0, lag, now - t0),
            )

    def _message(self, r: int, before: float, lag: float, span: float) -> str:
        text = (
            f"replica {r} is {lag:.0f} s behind the input and not catching up "
            f"({before:.0f} s {span:.0f} s ago)"
        )
        if self.agreed:
            text += (
                f": it runs one agreed batch per {self.batch_interval:g} s and a batch costs it "
                "longer; raise replication.batch_interval (or give it more cores)"
            )
        return text

    def finish(self, now: float) -> None:
        """Journal ``replica-behind-at-end`` for each replica still behind when the run ends,
        then ``replica-lag``: each replica's largest lag over the run."""
        for r, ep in sorted(self._episodes.items()):
            self.journal.write(
                Event.REPLICA_BEHIND_AT_END,
                replica=r,
                lag_s=round(self.lags.get(r, ep.max_lag), 1),
                behind_s=round(now - ep.since, 1),
                max_lag_s=round(ep.max_lag, 1),
            )
        self._episodes.clear()
        if self.enabled:
            self.journal.write(
                Event.REPLICA_LAG,
                max_lag_s={str(r): round(v, 1) for r, v in sorted(self.max_lags.items())},
                threshold_s=self.threshold,
            )
