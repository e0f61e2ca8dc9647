"""The replayer: an existing topic, replayed into the run's input topic (``[source.replay]``).

It reads a range of an external topic (:mod:`arfl.configs.replay`: from ``start`` to ``end``,
each resolved to offsets per partition when it starts) and produces each record into the run's
input topic with the same Kafka key, its JSON object extended by the fields every arfl event
carries: ``seq`` (its replay number), ``ts`` (its intended send time on the replay schedule,
epoch ms: every latency is measured from it) and ``sent_ms`` (its actual send time); the user's
fields are kept (a field of those three names is overwritten).

**Schedule.** Records are replayed in the order of their recorded time (``time_field``, else
the Kafka record timestamp), partition heads merged, each partition in offset order. With
``pace = "recorded"`` record ``i`` is due at ``t0 + (recorded_i - recorded_0)``; a record
recorded before its predecessor in its partition is due with that predecessor (the schedule
never goes back). With ``pace = N`` record ``i`` is due at ``t0 + i / N``. As the injector
(:mod:`arfl.workload.injector`), it never skips: a record sent late keeps its intended time.
``workload.duration`` caps the schedule: records due after it are not replayed.

**Bad records.** A record that is not a JSON object, lacks an integer ``time_field`` (or a
Kafka timestamp), or is an end-of-input marker of an earlier run is skipped and counted
(``bad`` in the journal and the stats summary line), never fatal.

It writes what the injector writes, so the watcher, the merger, the report and the
independent check work unchanged: per-second stats lines and a summary line
(:mod:`arfl.run.streams`, plus ``replayed``/``bad`` fields), the journal events
``injector_started`` (``t0``) and ``injector_finished``, and one end-of-input marker per
partition after the last record.

Run as a process with a :class:`ReplayConfig` as JSON (deploy writes
``<run>/config/replayer.json``)::

    python -m arfl.workload.replay --config runs/orders-20261125-213000/config/replayer.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arfl.configs.defaults import INJECTOR_LINGER_MS
from arfl.configs.replay import PositionValue, Replay, parse_position
from arfl.errors import DeployError
from arfl.run.childconfig import ChildConfig, build_from_argv
from arfl.run.events import Event
from arfl.run.records import END_OF_INPUT_LEAD_MS
from arfl.run.rundir import Journal
from arfl.run.streams import InjectorSummary
from arfl.workload.produce import (
    Clock,
    InputProducer,
    SecondStats,
    serve,
)
from arfl.workload.ranges import KafkaRangeReader, RecordSource

if TYPE_CHECKING:
    from arfl.stack.clients import Producer

_CHUNK = 500
"""Records sent between two looks at the clock/stop flag/stats while catching up."""
_MAX_SLEEP_S = 0.05
_MIN_SLEEP_S = 0.0002


def encode(fields: dict[str, Any], seq: int, ts: int, sent_ms: int) -> bytes:
    """The replayed value: the user's fields plus ``seq``, ``ts``, ``sent_ms``."""
    return json.dumps(
        {**fields, "seq": seq, "ts": ts, "sent_ms": sent_ms}, separators=(",", ":")
    ).encode()


class Schedule:
    """Intended send times, as ms after ``t0``, of the records in replay order."""

    def __init__(self, pace: str | int, duration_ms: int) -> None:
        """Args:
        pace: ``"recorded"`` or events per second.
        duration_ms: the cap: records due at or after it are not replayed.
        """
        self.pace = pace
        self.duration_ms = duration_ms
        self._base: int | None = None
        self._last = 0

    def due_ms(self, seq: int, recorded_ms: int) -> int:
        """Record ``seq``'s intended time after ``t0`` (never before its predecessor's)."""
        if isinstance(self.pace, int):
            due = (seq * 1000) // self.pace
        else:
            if self._base is None:
                self._base = recorded_ms
            due = recorded_ms - self._base
        self._last = max(self._last, due)
        return self._last

    def capped(self, due_ms: int) -> bool:
        """True when a record due then is past ``workload.duration``."""
        return due_ms >= self.duration_ms


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class ReplayConfig(ChildConfig):
    """What to replay, where to, and where to report (``python -m arfl.workload.replay
    --config FILE``).

    Attributes:
        source_bootstrap: the replayed topic's Kafka.
        source_topic: the replayed topic.
        bootstrap: the run's Kafka.
        topic: the run's input topic.
        start, end: positions as written in the spec (``end`` None: the end offsets now).
        pace: ``"recorded"`` or events per second.
        time_field: the recorded-time field (None: the record timestamp).
        duration_s: the cap (``workload.duration``).
        stats_path, journal_path: as the injector's.
        linger_ms: producer linger.
        connect_timeout_s: how long to wait for either Kafka at start.
        end_of_input: write an end-of-input marker into every partition at the end.
    """

    module = "arfl.workload.replay"

    source_bootstrap: str
    source_topic: str
    bootstrap: str
    topic: str
    duration_s: float
    start: PositionValue = "earliest"
    end: PositionValue | None = None
    pace: str | int = "recorded"
    time_field: str | None = None
    stats_path: Path | None = None
    journal_path: Path | None = None
    linger_ms: float = INJECTOR_LINGER_MS
    connect_timeout_s: float = 15.0
    end_of_input: bool = True

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise DeployError(f"replay: duration must be positive, got {self.duration_s}s")
        try:
            Replay(
                topic=self.source_topic, start=self.start, end=self.end, pace=self.pace,
                time_field=self.time_field,
            )  # fmt: skip
        except ValueError as e:
            raise DeployError(f"replay: {e}") from None

    @classmethod
    def from_replay(
        cls,
        replay: Replay,
        duration_s: float,
        *,
        bootstrap: str,
        topic: str,
        stats_path: Path | None = None,
        journal_path: Path | None = None,
        linger_ms: float = INJECTOR_LINGER_MS,
    ) -> ReplayConfig:
        """Build from a spec's ``[source.replay]`` (its Kafka defaults to ``bootstrap``)."""
        return cls(
            source_bootstrap=replay.bootstrap or bootstrap,
            source_topic=replay.topic,
            bootstrap=bootstrap,
            topic=topic,
            duration_s=duration_s,
            start=replay.start,
            end=replay.end,
            pace=replay.pace,
            time_field=replay.time_field,
            stats_path=stats_path,
            journal_path=journal_path,
            linger_ms=linger_ms,
        )


class Replayer(InputProducer):
    """Replays the range on its schedule (see the module docstring)."""

    component = "replayer"
    noun = "records"

    def __init__(
        self,
        config: ReplayConfig,
        producer: Producer | None = None,
        source: RecordSource | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Args:
        config: what to replay.
        producer: a confluent-kafka ``Producer`` (default: one connected to the run's Kafka
            after checking the input topic exists).
        source: the records (default: a :class:`KafkaRangeReader` of the configured range).
        clock: time source (default: the system clocks).
        """
        self.config = config
        self.source: RecordSource = source or KafkaRangeReader(
            config.source_bootstrap,
            config.source_topic,
            parse_position(config.start, end=False),
            parse_position(config.end if config.end is not None else "latest", end=True),
            config.time_field,
            config.connect_timeout_s,
        )
        super().__init__(config, producer, clock)
        self.capped = False
        """True when ``duration`` cut the replay short."""
        self.last_due_ms = 0

    def run(self) -> InjectorSummary:
        """Replay every record of the range (or until :meth:`stop` or the duration cap), flush,
        write the end-of-input markers, the stats and the summary."""
        cfg, clock = self.config, self.clock
        journal = Journal(cfg.journal_path) if cfg.journal_path else None
        # A replay's target is what it sent: its schedule is the records it found.
        stats = SecondStats(cfg.stats_path, clock=self.clock)
        schedule = Schedule(cfg.pace, round(cfg.duration_s * 1000))
        records = self.source.records()
        # The first record (every partition's head) is read before the clock starts.
        pending = next(records, None)
        now_wall, now_mono = clock.time(), clock.monotonic()
        t0_ms = round(now_wall * 1000)
        t0_wall = t0_ms / 1000
        t0_mono = now_mono
        stats.start(t0_wall)
        if journal:
            journal.write(
                Event.INJECTOR_STARTED,
                topic=cfg.topic,
                rate=cfg.pace if isinstance(cfg.pace, int) else None,
                duration_s=cfg.duration_s,
                t0=t0_wall,
                linger_ms=cfg.linger_ms,
                replay={
                    "topic": cfg.source_topic,
                    "bootstrap": cfg.source_bootstrap,
                    "pace": cfg.pace,
                    "time_field": cfg.time_field,
                    "offsets": {str(p): list(r) for p, r in sorted(self.source.ranges.items())},
                },
            )
        seq = 0
        last_send_mono = t0_mono
        try:
            due = schedule.due_ms(seq, pending.recorded_ms) if pending is not None else 0
            while pending is not None and not self._stop.is_set():
                if schedule.capped(due):
                    self.capped = True
                    break
                t_rel = clock.monotonic() - t0_mono
                stats.tick(t_rel, seq)
                if due > t_rel * 1000:
                    wait = min((due - t_rel * 1000) / 1000, stats.second - t_rel)
                    # At least a little: a wait rounded to 0 would spin without time passing.
                    clock.sleep(min(max(wait, _MIN_SLEEP_S), _MAX_SLEEP_S))
                    continue
                sent_ms = int(clock.time() * 1000)
                n = 0
                while pending is not None and due <= t_rel * 1000 and n < _CHUNK:
                    if schedule.capped(due):
                        break
                    behind = t_rel * 1000 - due
                    stats.behind_ms = max(stats.behind_ms, behind)
                    self.max_behind_ms = max(self.max_behind_ms, behind)
                    self._produce(
                        value=encode(pending.fields, seq, t0_ms + due, sent_ms),
                        key=pending.key,
                        on_delivery=self._on_delivery,
                    )
                    self.last_due_ms = due
                    seq += 1
                    n += 1
                    pending = next(records, None)
                    if pending is not None:
                        due = schedule.due_ms(seq, pending.recorded_ms)
                stats.sent += n
                self.produced = seq
                last_send_mono = clock.monotonic()
                self._producer.poll(0)
            if cfg.end_of_input:
                self._write_end_of_input(t0_ms + self.last_due_ms + END_OF_INPUT_LEAD_MS)
        finally:
            end_mono = clock.monotonic()
            stats.finish(end_mono - t0_mono, seq)
            self._final_flush()
            self.source.close()
            span_s = (self.last_due_ms + 1) / 1000
            elapsed = max(last_send_mono - t0_mono, span_s, 1e-9)
            summary = self._summary(
                t0_wall,
                end_mono - t0_mono,
                target_rate=round(self.produced / span_s) if self.produced else 0,
                achieved_rate=round(self.produced / elapsed, 2) if self.produced else 0.0,
                duration_s=round(span_s, 3),
                stopped_early=self._stop.is_set() and pending is not None,
            )
            extra = {"replayed": self.produced, "bad": self.source.bad, "capped": self.capped}
            stats.summary(round(clock.time(), 3), summary, extra)
            if journal:
                self._journal_end(journal, summary, extra, t0_ms)
        return summary

    def _journal_end(
        self, journal: Journal, summary: InjectorSummary, extra: dict[str, Any], t0_ms: int
    ) -> None:
        cfg = self.config
        self._warn_if_unsustained(
            journal,
            summary,
            f"the replay sustained only {summary.achieved_rate:.0f} of the recorded "
            f"{summary.target_rate} records/s (max {summary.max_behind_ms:.0f} ms behind "
            "schedule); latencies include the replayer's backlog — set "
            "source.replay.pace to a lower rate",
            max_behind_ms=summary.max_behind_ms,
        )
        if not summary.produced:
            ranges = ", ".join(f"{p}: {a}..{b}" for p, (a, b) in sorted(self.source.ranges.items()))
            self._warn(
                journal,
                f"nothing replayed: no good record of {cfg.source_topic} in the range "
                f"({ranges or 'no partition'}); check source.replay.start/end",
            )
        if self.source.bad:
            why = "; ".join(
                f"{e['partition']}:{e['offset']} {e['why']}" for e in self.source.bad_examples
            )
            self._warn(
                journal,
                f"{self.source.bad} records of {cfg.source_topic} skipped (not a JSON object, "
                f"or no recorded time), e.g. {why}",
                bad=self.source.bad,
            )
        if self.capped:
            self._warn(
                journal,
                f"workload.duration ({cfg.duration_s:g}s) cut the replay of "
                f"{cfg.source_topic} short after {summary.produced} records",
            )
        eoi_ts = t0_ms + self.last_due_ms + END_OF_INPUT_LEAD_MS if cfg.end_of_input else None
        self._journal_finish(
            journal, summary, eoi_ts, {**extra, "bad_examples": self.source.bad_examples}
        )


# --------------------------------------------------------------------------- entry point


def _replayer(cfg: ReplayConfig) -> Replayer:
    """The replayer of ``cfg`` (a position its source cannot resolve: a deploy error)."""
    try:
        return Replayer(cfg)
    except ValueError as e:
        raise DeployError(f"replay: {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Process entry: replay; SIGTERM/SIGINT stop it cleanly (flushing).

    Returns:
        0 when every record was delivered, 4 (deploy error) otherwise.
    """
    replayer = build_from_argv(
        ReplayConfig,
        argv,
        "Replay a range of a topic into another at its recorded pace or a rate.",
        _replayer,
    )
    if isinstance(replayer, int):
        return replayer
    return serve(replayer, "replay", lambda: {"bad": replayer.source.bad})


if __name__ == "__main__":
    sys.exit(main())
