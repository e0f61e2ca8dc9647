"""The injector: input events at a fixed rate, timestamped with their *intended* send time.

Coordinated-omission safe (as wrk2): event ``i`` is due at ``t0 + i / rate`` whatever happened
before it. When the injector falls behind (GC pause, a full producer queue, a slow broker) it
sends the backlog as fast as it can, each event still carrying its original intended time in
``ts``, so the stall shows up as latency downstream instead of silently thinning the load.
The actual send time is kept in ``sent_ms``.

Event content is a pure function of ``(seed, seq)``: the same seed gives the same events.
Without declared fields an event is ``seq, user, amount, ts, sent_ms`` keyed by ``user``
(:func:`event_fields`); with ``[workload.fields]`` the deploy passes the declaration
(``--shape``, :class:`~arfl.workload.generate.EventShape`) and
:class:`~arfl.workload.generate.EventGenerator` writes the declared fields, keyed by the
``source.key`` field.

After the last event (or an early stop) it flushes, then writes one **end-of-input marker**
per partition (:func:`arfl.run.records.end_of_input_marker`, explicit partition, no key), with
an event time one day past the last scheduled event's intended time. The watermark of every
replica then passes every window, so a finite run emits its last windows too. Markers are
written only once every event is acknowledged, so a batch boundary cut by time (the leaderless
mode's) that includes one partition's marker includes every partition's last event.
``end_of_input = false`` leaves them out.

Run as a process with an :class:`InjectorConfig` as JSON (deploy writes
``<run>/config/injector.json``)::

    python -m arfl.workload.injector --config runs/clicks-20261125-213000/config/injector.json

or in-process with :class:`Injector` (``Injector(config).run()``; ``stop()`` from another
thread ends it early, flushing what was produced).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from arfl.configs.defaults import INJECTOR_LINGER_MS
from arfl.configs.workload import Workload
from arfl.errors import DeployError
from arfl.run.childconfig import ChildConfig, build_from_argv
from arfl.run.events import Event
from arfl.run.records import END_OF_INPUT_LEAD_MS
from arfl.run.rundir import Journal
from arfl.run.streams import InjectorSummary
from arfl.workload.generate import EventGenerator, EventShape
from arfl.workload.produce import (
    Clock,
    InputProducer,
    SecondStats,
    serve,
)

if TYPE_CHECKING:
    from arfl.stack.clients import Producer

_CHUNK = 500
"""Events sent between two looks at the clock/stop flag/stats while catching up."""
_MAX_SLEEP_S = 0.05
_MASK64 = (1 << 64) - 1


# --------------------------------------------------------------------------- content


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a fast, well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def event_fields(seed: int, seq: int, keys: int) -> tuple[str, float]:
    """The deterministic content of event ``seq``: its user key and amount.

    Args:
        seed: the workload seed.
        seq: the event's sequence number (0-based).
        keys: how many distinct users (``u0`` .. ``u{keys-1}``).

    Returns:
        ``(user, amount)`` with ``amount`` in ``[0, 100)`` and two decimals.
    """
    h = _mix64(_mix64(seed & _MASK64) ^ seq)
    return f"u{h % keys}", ((h >> 32) % 10_000) / 100


def intended_ms(t0_ms: int, seq: int, rate: int) -> int:
    """Event ``seq``'s intended send time in epoch ms on the fixed-rate schedule."""
    return t0_ms + (seq * 1000) // rate


def end_of_input_ms(t0_ms: int, rate: int, duration_s: float) -> int:
    """The event time of the end-of-input markers: the last scheduled event's intended time
    plus a day (a function of the schedule, not of when the injector stopped)."""
    last = max(event_count(rate, duration_s) - 1, 0)
    return intended_ms(t0_ms, last, rate) + END_OF_INPUT_LEAD_MS


def event_encoder(
    seed: int, keys: int, shape: EventShape | None
) -> Callable[[int, int, int], tuple[bytes, bytes]]:
    """How the injector encodes event ``seq`` with intended time ``ts`` and send time
    ``sent_ms``: ``encode(seq, ts, sent_ms) -> (Kafka key, JSON value)`` — the declared fields
    of ``shape``, or the default ``user``/``amount`` event (``keys`` users, ``seed``)."""
    if shape is not None:
        return EventGenerator(shape).encode

    def encode(seq: int, ts: int, sent_ms: int) -> tuple[bytes, bytes]:
        user, amount = event_fields(seed, seq, keys)
        return user.encode(), encode_event(seq, user, amount, ts, sent_ms)

    return encode


def sample_events(
    workload: Workload, shape: EventShape | None, n: int, ts_ms: int
) -> list[tuple[bytes, bytes]]:
    """Events ``0 .. n-1`` as the injector sends them for this workload and shape
    (:func:`event_encoder`), every one at intended and send time ``ts_ms`` (a standby
    rehearses its pipeline on them, :func:`arfl.replica.standby.rehearse`)."""
    encode = event_encoder(workload.seed, workload.keys, shape)
    return [encode(seq, ts_ms, ts_ms) for seq in range(n)]


def event_count(rate: int, duration_s: float) -> int:
    """How many events a run of ``duration_s`` at ``rate`` events/s sends."""
    return round(rate * duration_s)


def encode_event(seq: int, user: str, amount: float, ts: int, sent_ms: int) -> bytes:
    """The JSON value of an input event (the format of :mod:`arfl.run.records`)."""
    # An f-string is ~3x faster than json.dumps here and the fields need no escaping.
    return (
        f'{{"seq":{seq},"user":"{user}","amount":{amount},"ts":{ts},"sent_ms":{sent_ms}}}'
    ).encode()


# --------------------------------------------------------------------------- injector


@dataclass(frozen=True)
class InjectorConfig(ChildConfig):
    """What to inject, where, and where to report (``python -m arfl.workload.injector --config
    FILE``).

    Attributes:
        bootstrap: Kafka ``host:port[,...]``.
        topic: the source topic.
        rate: events per second (fixed-rate schedule).
        duration_s: how long; ``round(rate * duration_s)`` events in all.
        keys: number of distinct user keys.
        seed: content seed.
        stats_path: per-second stats JSONL (see :mod:`arfl.run.streams`), or ``None``.
        journal_path: the run journal for warnings and start/finish events, or ``None``.
        linger_ms: producer linger (small: latency matters more than batching).
        start_at: epoch seconds to start the schedule at (``None``: now); lets several
            processes share one schedule.
        connect_timeout_s: how long to wait for the broker at start.
        end_of_input: write an end-of-input marker into every partition at the end.
        shape: the declared fields (None: the default shape, ``keys`` users).
    """

    module = "arfl.workload.injector"

    bootstrap: str
    topic: str
    rate: int
    duration_s: float
    keys: int = 100
    seed: int = 1
    stats_path: Path | None = None
    journal_path: Path | None = None
    linger_ms: float = INJECTOR_LINGER_MS
    start_at: float | None = None
    connect_timeout_s: float = 15.0
    end_of_input: bool = True
    shape: EventShape | None = None

    def __post_init__(self) -> None:
        if self.rate < 1:
            raise DeployError(f"injector: rate must be >= 1 event/s, got {self.rate}")
        if not self.duration_s > 0:
            raise DeployError(f"injector: duration must be positive, got {self.duration_s}s")
        if self.keys < 1:
            raise DeployError(f"injector: keys must be >= 1, got {self.keys}")

    @classmethod
    def from_workload(
        cls,
        workload: Workload,
        *,
        bootstrap: str,
        topic: str,
        stats_path: Path | None = None,
        journal_path: Path | None = None,
        shape: EventShape | None = None,
    ) -> InjectorConfig:
        """Build from a spec's ``[workload]`` section (and its declared fields' ``shape``,
        :meth:`EventShape.from_spec <arfl.workload.generate.EventShape.from_spec>`)."""
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            rate=workload.rate,
            duration_s=workload.duration,
            keys=workload.keys,
            seed=workload.seed,
            linger_ms=workload.linger_ms,
            stats_path=stats_path,
            journal_path=journal_path,
            shape=shape,
        )


class Injector(InputProducer):
    """Produces the workload on a fixed-rate schedule (see the module docstring)."""

    component = "injector"
    noun = "events"

    def __init__(
        self,
        config: InjectorConfig,
        producer: Producer | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Args:
        config: what to send.
        producer: a confluent-kafka ``Producer`` (default: one connected to
            ``config.bootstrap`` after checking the topic exists).
        clock: time source (default: the system clocks).
        """
        self.config = config
        super().__init__(config, producer, clock)
        self.total = event_count(config.rate, config.duration_s)
        self._encode = event_encoder(config.seed, config.keys, config.shape)

    def _send(self, seq: int, t0_ms: int, sent_ms: int) -> None:
        key, value = self._encode(seq, intended_ms(t0_ms, seq, self.config.rate), sent_ms)
        self._produce(value=value, key=key, on_delivery=self._on_delivery)

    def run(self) -> InjectorSummary:
        """Send every event (or until :meth:`stop`), flush, write stats and the summary.

        Returns:
            What was produced and how well the schedule was kept.
        """
        cfg, clock = self.config, self.clock
        rate, total = cfg.rate, self.total

        def _before(t_rel: float) -> int:
            """Events due in [0, t_rel): the target of a stats interval."""
            return min(total, max(0, math.ceil(t_rel * rate - 1e-9)))

        def _due(t_rel: float) -> int:
            """Events due in [0, t_rel]: intended time <= t_rel."""
            if t_rel < 0:
                return 0
            return min(total, math.floor(t_rel * rate + 1e-9) + 1)

        def target(start: int, end: float, final: bool) -> int:
            # A full second's target is what was due in [k-1, k); the last, partial one
            # also owns the event due exactly at its end.
            return (_due(end) if final else _before(end)) - _before(start)

        journal = Journal(cfg.journal_path) if cfg.journal_path else None
        stats = SecondStats(cfg.stats_path, target, clock)
        now_wall, now_mono = clock.time(), clock.monotonic()
        t0_wall = cfg.start_at if cfg.start_at is not None else now_wall
        t0_mono = now_mono + (t0_wall - now_wall)
        # Intended times are whole milliseconds from here on, so align t0 to a millisecond.
        t0_ms = round(t0_wall * 1000)
        t0_wall = t0_ms / 1000
        stats.start(t0_wall)
        if journal:
            journal.write(
                Event.INJECTOR_STARTED,
                topic=cfg.topic,
                rate=rate,
                duration_s=cfg.duration_s,
                events=total,
                t0=t0_wall,
                seed=cfg.seed,
                linger_ms=cfg.linger_ms,
            )

        seq = 0
        last_send_mono = t0_mono
        try:
            while seq < total and not self._stop.is_set():
                now = clock.monotonic()
                t_rel = now - t0_mono
                stats.tick(t_rel, seq)  # one line per completed second
                due = _due(t_rel)
                if seq < due:
                    behind = (t_rel - seq / rate) * 1000.0
                    stats.behind_ms = max(stats.behind_ms, behind)
                    self.max_behind_ms = max(self.max_behind_ms, behind)
                    end = min(due, seq + _CHUNK)
                    sent_ms = int(clock.time() * 1000)
                    for i in range(seq, end):
                        self._send(i, t0_ms, sent_ms)
                    stats.sent += end - seq
                    seq = end
                    self.produced = seq
                    last_send_mono = clock.monotonic()
                    self._producer.poll(0)
                else:
                    wait = min(seq / rate, stats.second) - t_rel
                    clock.sleep(min(max(wait, 0.0), _MAX_SLEEP_S))
            if cfg.end_of_input:
                self._write_end_of_input(end_of_input_ms(t0_ms, rate, cfg.duration_s))
        finally:
            end_mono = clock.monotonic()
            stats.finish(end_mono - t0_mono, seq)
            self._final_flush()
            elapsed = max(last_send_mono - t0_mono + 1.0 / rate, 1e-9)
            summary = self._summary(
                t0_wall,
                end_mono - t0_mono,
                target_rate=rate,
                achieved_rate=round(self.produced / elapsed, 2) if self.produced else 0.0,
                duration_s=cfg.duration_s,
                stopped_early=seq < total,
            )
            stats.summary(round(clock.time(), 3), summary, {})
            if journal:
                self._journal_end(journal, summary, end_of_input_ms(t0_ms, rate, cfg.duration_s))
        return summary

    def _journal_end(
        self, journal: Journal, summary: InjectorSummary, end_of_input_ts: int
    ) -> None:
        self._warn_if_unsustained(
            journal,
            summary,
            f"injector sustained only {summary.achieved_rate:.0f} of "
            f"{summary.target_rate} events/s (max {summary.max_behind_ms:.0f} ms behind "
            "schedule); latencies are measured from intended send times, so they "
            "include the injector's own backlog — lower workload.rate",
            achieved_rate=summary.achieved_rate,
            target_rate=summary.target_rate,
            max_behind_ms=summary.max_behind_ms,
        )
        eoi_ts = end_of_input_ts if self.config.end_of_input else None
        self._journal_finish(journal, summary, eoi_ts, {})


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Process entry: run the injector; SIGTERM/SIGINT stop it cleanly (flushing).

    Returns:
        0 when every event was delivered, 4 (deploy error) otherwise.
    """
    injector = build_from_argv(
        InjectorConfig,
        argv,
        "Produce JSON input events at a fixed rate (coordinated-omission safe).",
        Injector,
    )
    if isinstance(injector, int):
        return injector
    return serve(injector, "injector")


if __name__ == "__main__":
    sys.exit(main())
