"""What the injector and the replayer share: producing the run's input and reporting on it.

Both :class:`~arfl.workload.injector.Injector` and :class:`~arfl.workload.replay.Replayer`
write events into the run's input topic on a schedule, and both report the same way, so the
watcher, the merger, the report and the independent check read either unchanged:

* :class:`InputProducer`, their base: produce with a retry while the local queue is full,
  delivery counts, one **end-of-input marker** per partition once every event is acknowledged
  (no marker while any is still in flight), the final flush, ``stop()``, and the journal's
  closing warnings and ``injector_finished`` event.
* :class:`SecondStats`: the per-second stats lines and the summary line
  (:mod:`arfl.run.streams`).
* The process's side: what both do once started (:func:`serve`: run, print the summary, exit
  code).
* The seams: :class:`Clock` (a fake in unit tests) and :func:`connect_producer`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Protocol

from arfl.configs.defaults import INJECTOR_LINGER_MS
from arfl.errors import DeployError
from arfl.processes import stop_on_termination
from arfl.run.events import Event
from arfl.run.records import end_of_input_marker
from arfl.run.rundir import Journal
from arfl.run.streams import InjectorSummary
from arfl.stack.clients import producer_config

if TYPE_CHECKING:
    from arfl.stack.clients import Producer

SUSTAIN_FRACTION = 0.95
"""Below this fraction of the target rate the run journal gets a warning."""
_FLUSH_S = 30.0


# --------------------------------------------------------------------------- seams


class Clock(Protocol):
    """Time source (a fake in unit tests)."""

    def time(self) -> float:
        """Wall clock, epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for pacing."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...


CLOCK_READ_SPREAD_S = 0.0002
"""A reading of the wall clock against the monotonic one counts when the two monotonic reads
around it lie this close (a preemption between the reads would show as a clock move)."""


def clock_offset_ms(clock: Clock) -> float:
    """The wall clock minus the monotonic clock, ms: constant unless something (NTP, the
    hypervisor, an operator) adjusted the wall clock. The tightest of three readings."""
    best: tuple[float, float] | None = None
    for _ in range(3):
        m1 = clock.monotonic()
        w = clock.time()
        m2 = clock.monotonic()
        if best is None or m2 - m1 < best[0]:
            best = (m2 - m1, 1000.0 * (w - (m1 + m2) / 2))
        if m2 - m1 <= CLOCK_READ_SPREAD_S:
            break
    assert best is not None
    return best[1]


class SystemClock:
    """The real clocks."""

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep()``."""
        time.sleep(seconds)


MARKER_GAP_S = 0.002
"""How long the end-of-input markers wait after every event was acknowledged: their append
time is then a later millisecond than every event's (``_write_end_of_input``)."""


def connect_producer(
    bootstrap: str, topic: str, linger_ms: float = INJECTOR_LINGER_MS, timeout_s: float = 15.0
) -> Any:
    """A confluent-kafka producer, after checking the broker answers and the topic exists.

    Raises:
        DeployError: the broker is unreachable or the topic does not exist.
    """
    from confluent_kafka import Producer

    from arfl.stack.topics import require_topic

    producer = Producer(producer_config(bootstrap, linger_ms))
    require_topic(
        producer,
        bootstrap,
        topic,
        timeout_s,
        error=DeployError,
        who="injector: ",
        missing_hint="create it first (arfl.stack.topics.ensure_topic) or check source.topic",
    )
    return producer


# --------------------------------------------------------------------------- stats


class SecondStats:
    """The per-second stats lines of a run and its closing summary line.

    The run adds what it sent (``sent``) and how far behind schedule it was (``behind_ms``,
    the worst) during the current second; :meth:`tick` writes a line for each second boundary
    passed, :meth:`finish` the last, partial second, :meth:`summary` the summary line.
    Without a path nothing is written, but the counts still reset at each line.
    """

    def __init__(
        self,
        path: Path | None,
        target: Callable[[int, float, bool], int] | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Open the stats file (appending, its folder created).

        Args:
            path: the stats JSONL file, or ``None``.
            target: events due in the second from ``start`` (whole seconds after ``t0``) to
                ``end`` (the line's time), ``final`` for the last, partial second; ``None``:
                what was sent.
            clock: when given, each line has ``clock_ms``: how far the wall clock moved
                against the monotonic one since :meth:`start` (:func:`clock_offset_ms`).
                Latencies are wall-clock differences and the schedule is monotonic, so a move
                is an error in every latency across it (the report's verdicts weigh it).
        """
        self._file: IO[str] | None = None
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._target = target
        self.t0 = 0.0
        """The schedule's start, epoch seconds (set by :meth:`start`)."""
        self.second = 1
        """Index of the next second boundary (``t0 + second``)."""
        self.sent = 0
        self.behind_ms = 0.0
        self._clock = clock
        self._offset0 = 0.0

    def start(self, t0: float) -> None:
        """Set the schedule's start, epoch seconds."""
        self.t0 = t0
        if self._clock is not None:
            self._offset0 = clock_offset_ms(self._clock)

    def tick(self, t_rel: float, total: int) -> None:
        """A line for every second boundary up to ``t_rel`` (seconds after ``t0``).

        Args:
            t_rel: now, seconds after ``t0``.
            total: events sent since ``t0``.
        """
        while t_rel >= self.second:
            self._write(self.second, total)
            self.second += 1

    def finish(self, t_rel: float, total: int) -> None:
        """The last, partial second's line, if anything was sent or late in it."""
        if self.sent or self.behind_ms:
            self._write(min(t_rel, float(self.second)), total, final=True)

    def summary(self, t: float, summary: InjectorSummary, extra: dict[str, Any]) -> None:
        """Write the summary line (``extra`` fields after the summary's) and close."""
        if self._file is not None:
            line = {"type": "summary", "t": t, **summary.to_dict(), **extra}
            self._file.write(json.dumps(line) + "\n")
            self._file.close()

    def _write(self, t_rel: float, total: int, final: bool = False) -> None:
        if self._file is not None:
            target = (
                self.sent if self._target is None else self._target(self.second - 1, t_rel, final)
            )
            line = {
                "type": "second", "t": round(self.t0 + t_rel, 3), "t0": self.t0,
                "sent": self.sent, "target": target,
                "behind_ms": round(self.behind_ms, 3), "total": total,
            }  # fmt: skip
            if self._clock is not None:
                line["clock_ms"] = round(clock_offset_ms(self._clock) - self._offset0, 2)
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()
        self.sent = 0
        self.behind_ms = 0.0


# --------------------------------------------------------------------------- producing


class InputTarget(Protocol):
    """Where the events go: what the injector's and the replayer's configs both say."""

    @property
    def bootstrap(self) -> str:
        """The run's Kafka, ``host:port[,...]``."""
        ...

    @property
    def topic(self) -> str:
        """The run's input topic."""
        ...

    @property
    def linger_ms(self) -> float:
        """Producer linger."""
        ...

    @property
    def connect_timeout_s(self) -> float:
        """How long to wait for the broker at start (and for the topic's partitions)."""
        ...


class InputProducer:
    """Base of the injector and the replayer: produces into the run's input topic.

    Subclasses implement :meth:`run`: they send with :meth:`_produce` and
    :meth:`_on_delivery`, call :meth:`_write_end_of_input` after the last event,
    :meth:`_final_flush` at the end, build the summary with :meth:`_summary` and journal it
    with :meth:`_journal_finish` last.

    Attributes:
        bootstrap, topic: the run's Kafka and input topic.
        produced, delivered, failed: events handed to the producer, acknowledged, lost.
        first_error: the first delivery error.
        max_behind_ms: the furthest behind schedule an event was sent.
        markers: end-of-input markers written (one per partition), 0 until the end.
        markers_failed, marker_error: markers not delivered, and why (or why none was written).
    """

    component: ClassVar[str]
    """Who journal warnings name (``injector``, ``replayer``)."""
    noun: ClassVar[str]
    """What it sends, in messages (``events``, ``records``)."""

    def __init__(self, target: InputTarget, producer: Producer | None, clock: Clock | None) -> None:
        """Args:
        target: where to produce.
        producer: a confluent-kafka ``Producer`` (default: one connected to
            ``target.bootstrap`` after checking the topic exists).
        clock: time source (default: the system clocks).

        Raises:
            DeployError: no producer given, and the broker is unreachable or the topic missing.
        """
        self.clock: Clock = clock or SystemClock()
        # "is None", not "or": a producer with nothing queued is falsy (its __len__).
        self._producer: Producer = (
            producer
            if producer is not None
            else connect_producer(
                target.bootstrap, target.topic, target.linger_ms, target.connect_timeout_s
            )
        )
        self.bootstrap = target.bootstrap
        self.topic = target.topic
        self._metadata_timeout_s = target.connect_timeout_s
        self._stop = threading.Event()
        self.produced = 0
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None
        self.max_behind_ms = 0.0
        self.markers = 0
        self.markers_failed = 0
        self.marker_error: str | None = None

    def run(self) -> InjectorSummary:
        """Send everything (or until :meth:`stop`), flush, write the stats and the journal."""
        raise NotImplementedError

    def stop(self) -> None:
        """Ask :meth:`run` to stop after the current chunk (it still flushes); thread-safe."""
        self._stop.set()

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = str(err)

    def _on_marker_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.markers_failed += 1
            self.marker_error = self.marker_error or str(err)

    def _produce(self, **kw: Any) -> None:
        while True:
            try:
                self._producer.produce(self.topic, **kw)
                return
            except BufferError:
                # Local queue full: the broker is slower than the schedule. Wait for room;
                # the event keeps its intended time, so the wait shows up as latency.
                self._producer.poll(0.005)

    def _write_end_of_input(self, event_time_ms: int) -> None:
        """One marker per partition of the topic, after every event was acknowledged."""
        remaining = self._producer.flush(_FLUSH_S)
        if remaining:
            # Events still in flight could land behind a marker: better no marker than one
            # that makes them late. The final flush counts them as failed.
            self.marker_error = f"{remaining} {self.noun} still undelivered; no marker written"
            return
        # Every event is appended now. A marker appended in the same millisecond as another
        # partition's last event would share its LogAppendTime (the final flush sends markers
        # without linger: seen on a fast host), and the independent check, which orders the
        # partitions by append time, could not tell whether a batch held the marker without
        # that event; the event's window then went unjudged. Past the next millisecond, no.
        self.clock.sleep(MARKER_GAP_S)
        meta = self._producer.list_topics(self.topic, timeout=self._metadata_timeout_s)
        partitions = sorted(meta.topics[self.topic].partitions)
        value = end_of_input_marker(event_time_ms)
        for p in partitions:
            self._produce(value=value, partition=p, on_delivery=self._on_marker_delivery)
        self.markers = len(partitions)

    def _final_flush(self) -> None:
        """Wait for the last acknowledgements; what is still in flight counts as failed."""
        remaining = self._producer.flush(_FLUSH_S)
        if remaining:
            self.failed += remaining
            self.first_error = self.first_error or (
                f"{remaining} {self.noun} still undelivered after 30s flush"
            )

    def _summary(
        self,
        t0: float,
        ran_s: float,
        *,
        target_rate: int,
        achieved_rate: float,
        duration_s: float,
        stopped_early: bool,
    ) -> InjectorSummary:
        """The run's summary: the counts so far, and how the schedule was kept.

        Args:
            t0: the schedule's start, epoch seconds.
            ran_s: seconds from ``t0`` to the end of the run.
            target_rate, achieved_rate, duration_s, stopped_early: as in the summary.
        """
        return InjectorSummary(
            t0=t0,
            end=round(t0 + ran_s, 3),
            produced=self.produced,
            delivered=self.delivered,
            failed=self.failed,
            target_rate=target_rate,
            achieved_rate=achieved_rate,
            max_behind_ms=round(self.max_behind_ms, 3),
            duration_s=duration_s,
            stopped_early=stopped_early,
        )

    def _warn(self, journal: Journal, message: str, **fields: Any) -> None:
        journal.write(Event.WARNING, component=self.component, message=message, **fields)

    def _warn_if_unsustained(
        self, journal: Journal, summary: InjectorSummary, message: str, **fields: Any
    ) -> None:
        """Journal ``message`` when the run fell below :data:`SUSTAIN_FRACTION` of its rate."""
        if summary.produced and summary.achieved_rate < SUSTAIN_FRACTION * summary.target_rate:
            self._warn(journal, message, **fields)

    def _journal_finish(
        self,
        journal: Journal,
        summary: InjectorSummary,
        end_of_input_ts: int | None,
        extra: dict[str, Any],
    ) -> None:
        """Warn of lost events and missing markers, then write ``injector_finished``.

        Args:
            journal: the run journal.
            summary: the run's summary.
            end_of_input_ts: the markers' event time; ``None`` when markers are turned off.
            extra: fields of ``injector_finished`` after the summary's.
        """
        if summary.failed:
            self._warn(
                journal,
                f"{summary.failed} {self.noun} were not delivered: {self.first_error}",
                failed=summary.failed,
            )
        end: dict[str, Any] = {}
        if end_of_input_ts is not None:
            if self.markers_failed or not self.markers:
                self._warn(
                    journal,
                    f"end-of-input markers not written to every partition of {self.topic}: "
                    f"{self.marker_error}; the last windows may never be emitted",
                )
            end = {
                "end_of_input_markers": self.markers - self.markers_failed,
                "end_of_input_ts": end_of_input_ts,
            }
        journal.write(Event.INJECTOR_FINISHED, **summary.to_dict(), **extra, **end)


# --------------------------------------------------------------------------- process


def serve(
    runner: InputProducer, who: str, printed: Callable[[], dict[str, Any]] | None = None
) -> int:
    """The process, once started: run (SIGTERM/SIGINT stop it cleanly, flushing), print the
    summary as one JSON line, and say on stderr what was lost.

    Args:
        runner: the injector or the replayer.
        who: the prefix of the error message (``injector``, ``replay``).
        printed: fields printed after the summary's, read after the run.

    Returns:
        0 when everything was delivered, 4 (deploy error) otherwise.
    """
    stop_on_termination(runner.stop)
    summary = runner.run()
    print(json.dumps({**summary.to_dict(), **(printed() if printed else {})}), flush=True)
    if summary.failed:
        print(
            f"error: {who}: {summary.failed} {runner.noun} not delivered to {runner.topic} at "
            f"{runner.bootstrap}: {runner.first_error}",
            file=sys.stderr,
        )
        return int(DeployError.exit_code)
    return 0
