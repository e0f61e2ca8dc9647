"""The merger process: :class:`Merger` runs :class:`~arfl.measure.merger.core.MergeCore`
against Kafka and writes the run directory's files; :func:`main` is ``python -m
arfl.measure.merger``."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from arfl.errors import DeployError
from arfl.measure import frontier as frontier_file
from arfl.measure.histogram import (
    INTERVAL_S,
    LatencyLogWriter,
)
from arfl.measure.merger import recovery, transactions
from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.core import (
    MAX_JOURNALED_DIVERGENCES,
    InputWindow,
    MergeCore,
    Outcome,
)
from arfl.measure.merger.kafka import (
    TRANSACTION_TIMEOUT_MS,
    Consumer,
    SinkProducer,
    append_time_s,
    kafka_consumer,
    kafka_producer,
    next_messages,
)
from arfl.measure.merger.recovery import SEQ_HEADER, Taken
from arfl.measure.merger.standby import Follower, TakeOver
from arfl.measure.merger.transactions import Fenced
from arfl.processes import same_process, stop_on_termination
from arfl.run.childconfig import build_from_argv
from arfl.run.events import Event
from arfl.run.records import BadRecord, parse_result
from arfl.run.rundir import Journal, RunPaths, write_json_atomic
from arfl.run.streams import InjectorStatsTail

SENT_HLOG = RunPaths(Path(".")).hlog_sent.name
"""The interval log of latencies measured from the actual send time (``sent_ts``)."""
FRESH_ENV = "ARFL_MERGER_FRESH"
"""Set to ``0``, a standby forwards nothing before its fence ends (what
``bench/merger_takeover.py`` compares against)."""
OWNER_CHECK_S = 1.0
"""How often the merger checks that its owner (the deploy process) still runs."""
STATS_STALE_S = 2.5
"""An injector stats file silent this long (and without a summary) means input stopped."""
RESEND_READ_S = 5.0
"""How long reading the sink for failed writes may take at a tick; past it, the next tick
tries again for that much longer."""
RESEND_READ_MAX_S = 60.0
"""The longest such read."""
RESEND_MARGIN_MS = 1000
"""The sink is read from this long before the earliest failed record was created."""
RESEND_LOOKBACK_MS = 600_000
"""How far back the sink is read for a failed record without a timestamp: ten times the
transaction timeout after which a record times out (the idempotent producer's never do)."""
FINAL_RESENDS = 3
"""Rounds of writing failed records again and flushing at the merger's end."""


class Merger:
    """Runs :class:`MergeCore` against Kafka and writes the run directory's files."""

    def __init__(
        self,
        config: MergerConfig,
        consumer: Consumer | None = None,
        producer: SinkProducer | None = None,
    ) -> None:
        """Args:
        config: what to merge.
        consumer: a confluent-kafka ``Consumer`` (default: one with :func:`consumer_config`).
        producer: a confluent-kafka ``Producer`` for the sink (default: a new one).
        """
        self.config = config
        self._stop = threading.Event()
        group = config.group_id or f"arfl-merger-{uuid.uuid4().hex[:12]}"
        # "is None", not "or": a producer with nothing queued is falsy (its __len__).
        self._consumer: Consumer = (
            consumer
            if consumer is not None
            else kafka_consumer(config.bootstrap, group, config.fetch_wait_ms)
        )
        self._producer: SinkProducer = producer if producer is not None else kafka_producer(
            config.bootstrap, config.sink, config.connect_timeout_s, config.linger_ms,
            config.transactional_id, config.transaction_timeout_ms,
        )  # fmt: skip
        self._topic_index = {t: i for i, t in enumerate(config.topics())}
        self._unassigned: list[str] = config.topics()
        self.core: MergeCore | None = None
        self._lost = 0
        """Records whose write failed for good (:func:`transactions.lost_for_good`), or not
        produced because the merger had to stop while the sink was away."""
        self._failed: list[Any] = []
        """Records whose write failed and that are not known to be in the sink yet
        (:meth:`_resend`): no position is committed while there are any."""
        self._resending = 0
        """Records produced again and not acknowledged yet."""
        self._unread = 0
        """Ticks in a row whose read of the sink for failed writes did not finish."""
        self.consumer_errors = 0
        self.stop_reason: str | None = None
        self._first_delivery_error: str | None = None
        self._positions: dict[tuple[str, int], int] = {}
        """Where a restarted merger reads on (:mod:`.recovery`); empty: from the beginning."""
        self._produced = 0
        self._acked = 0
        self._to_commit: tuple[int, list[Any]] | None = None
        """(results produced before it, positions): committed once all of those are acked."""
        self._fresh_producer: Any = None
        """The producer a standby forwarded with during its take-over's fence, until its
        records are acknowledged (:mod:`.standby`)."""
        self._refence_until: float | None = None
        """Until when a fence found on the server is a racer's late answer (:meth:`_refence`)."""
        self._refences = 0
        self._txn_pending: str | None = None
        """The transaction call the broker did not answer in time (:func:`transactions.commit`)."""
        self._txn_timeout_s = (config.transaction_timeout_ms or TRANSACTION_TIMEOUT_MS) / 1000
        self._txn_began: float | None = None
        """When the open transaction began (None: none is open): one open past the broker's
        timeout may have been aborted by the broker (:meth:`_refence`)."""
        self._journal: Journal | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to finish (thread-safe); it flushes and writes ``merger.json``."""
        self._stop.set()

    @property
    def delivery_failures(self) -> int:
        """Records whose write failed and that are not known to be in the sink (yet)."""
        return self._lost + len(self._failed)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        self._acked += 1
        if err is None:
            return
        if self._first_delivery_error is None:
            self._first_delivery_error = str(err)
        if msg is None or transactions.lost_for_good(err):
            self._lost += 1
        else:
            self._failed.append(msg)

    def _on_resent(self, err: Any, msg: Any) -> None:
        self._resending -= 1
        self._on_delivery(err, msg)

    def _resend(self) -> None:
        """Produce again each record whose write failed and that the sink does not hold.

        A failed write may have been appended all the same (a timeout in flight, a record of a
        transaction aborted after it was appended): the sink, read ``read_uncommitted`` from
        the earliest failed record's creation, says which. Run where no earlier request for
        those records can still be appended: after the transaction's abort (which waits for
        its requests in flight) or a new fence, or on the idempotent producer, which times
        nothing out (:func:`kafka.sink_producer_config`). A sink that cannot be read keeps
        them for the next tick, which reads longer (docs/design.md, "A write that failed").
        """
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaException

        if not self._failed:
            return
        cfg = self.config
        now_ms = int(time.time() * 1000)
        created = [
            ts if kind != TIMESTAMP_NOT_AVAILABLE else now_ms - RESEND_LOOKBACK_MS
            for kind, ts in (m.timestamp() for m in self._failed)
        ]
        partitions = {m.partition() for m in self._failed}
        try:
            in_sink = recovery.sink_rids_since(
                cfg.bootstrap, cfg.sink, min(created) - RESEND_MARGIN_MS,
                min(RESEND_READ_S * (1 + self._unread), RESEND_READ_MAX_S),
                None if -1 in partitions else partitions,
            )  # fmt: skip
        except (KafkaException, TimeoutError, DeployError):
            self._unread += 1
            return
        self._unread = 0
        # No delivery report is served while this runs: nothing joins the list meanwhile.
        failed, self._failed = self._failed, []
        found = again = 0
        try:
            for i, msg in enumerate(failed):
                with contextlib.suppress(BadRecord):
                    if parse_result(msg.value()).rid in in_sink:
                        found += 1
                        continue
                try:
                    self._produce_again(msg)
                except BufferError:  # the merger must stop: they count as failed
                    self._failed = failed[i:] + self._failed
                    return
                except BaseException as e:
                    self._failed = failed[i:] + self._failed
                    # A re-fence produces them again on the new server.
                    if not isinstance(e, Exception) or not transactions.fatal(e):
                        raise
                    if not self._refence(e):
                        raise
                    return
                again += 1
        finally:
            if self._journal is not None:
                self._journal.write(
                    Event.MERGER_RESENT, failed=len(failed), in_sink=found, again=again
                )

    def _produce_again(self, msg: Any) -> None:
        """Produce a failed record again.

        Raises:
            BufferError: the queue is full and the merger must stop (:meth:`_must_stop`).
        """
        self._produced += 1
        self._resending += 1
        try:
            while True:
                try:
                    self._producer.produce(
                        msg.topic(), value=msg.value(), key=msg.key(), headers=msg.headers(),
                        on_delivery=self._on_resent,
                    )  # fmt: skip
                    return
                except BufferError:
                    if self._must_stop():
                        raise
                    self._producer.poll(0.005)
        except BaseException:
            self._produced -= 1
            self._resending -= 1
            raise

    def _assign(self, journal: Journal | None, timeout_s: float) -> None:
        """Assign, from their beginning, the partitions of replica topics not assigned yet.

        The first call sets the assignment (possibly empty); later calls only add partitions
        of topics that appeared meanwhile, so a partition already being read is never reset to
        its beginning. A topic missing at the first call is journaled (with ``journal``).
        """
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        first = len(self._unassigned) == len(self._topic_index)
        new: list[Any] = []
        missing: list[str] = []
        for topic in self._unassigned:
            try:
                meta = self._consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            except KafkaException:
                meta = None
            if meta is None or meta.error is not None or not meta.partitions:
                missing.append(topic)
                continue
            new += [
                TopicPartition(topic, p, self._positions.get((topic, p), OFFSET_BEGINNING))
                for p in sorted(meta.partitions)
            ]
            if self.core is not None:
                self.core.frontier.set_partitions(self._topic_index[topic], len(meta.partitions))
        self._unassigned = missing
        if first:
            self._consumer.assign(new)
            if missing and journal is not None:
                journal.write(
                    Event.WARNING,
                    component="merger",
                    message=f"replica topics {', '.join(missing)} do not exist yet at "
                    f"{self.config.bootstrap}; reading them from their beginning once they do",
                )
        elif new:
            self._consumer.incremental_assign(new)

    def _owner_gone(self) -> bool:
        cfg = self.config
        return cfg.owner_pid is not None and (
            same_process(cfg.owner_pid, cfg.owner_create_time) is None
        )

    def _update_window(
        self, window: InputWindow, tail: InjectorStatsTail | None, now: float
    ) -> None:
        cfg = self.config
        if tail is not None:
            tail.poll()
            if tail.t0 is not None:
                window.start = tail.t0
            if tail.summary is not None:
                window.end = tail.summary.end
            elif tail.latest is not None and now - tail.latest.t > STATS_STALE_S:
                window.end = tail.latest.t  # the injector went silent: input stopped
            else:
                window.end = None
        if cfg.input_start is not None:
            window.start = cfg.input_start
        if cfg.input_end is not None:
            window.end = cfg.input_end

    def _should_stop(
        self, now: float, last_record: float | None, window: InputWindow, started: float
    ) -> str | None:
        """Why the merger should stop now (``merger.json``'s ``stop_reason``), or None."""
        cfg = self.config
        if self._stop.is_set():
            return "signal"
        if cfg.until is not None and now >= cfg.until:
            return "until"
        if cfg.idle_s is not None:
            input_over = (
                (window.end is not None and now > window.end)
                if (
                    cfg.input_stats is not None
                    or cfg.input_start is not None
                    or cfg.input_end is not None
                )
                else last_record is not None
            )
            quiet_since = last_record if last_record is not None else started
            if input_over and now - quiet_since >= cfg.idle_s:
                return "idle"
        return None

    def run(self) -> dict[str, Any]:
        """Merge until stopped (:meth:`stop`, ``until``, ``idle_s`` or the owner's death).

        Returns:
            The final counts (also written to ``merger.json``).
        """
        from confluent_kafka import KafkaException

        cfg = self.config
        paths = cfg.paths
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        journal = Journal(paths.journal)
        started = time.time()
        # Intervals end on whole wall-clock seconds so runs line up with each other.
        start_s = started
        next_tick = math.floor(started) + INTERVAL_S
        next_owner_check = started
        next_frontier = started
        frontier_path = frontier_file.path_in(cfg.run_dir)
        window = InputWindow()
        tail = InjectorStatsTail(cfg.input_stats) if cfg.input_stats else None
        self._update_window(window, tail, started)
        core = self.core = MergeCore(
            cfg.replicas, start_s, percentiles=cfg.percentiles, window=window,
        )  # fmt: skip
        took: TakeOver | None = None
        follower: Follower | None = None
        if cfg.standby:
            follower = self._follower(core, journal)
            took = follower.follow(self._committed_positions())
            if took is None:  # stopped while standing by: it wrote nothing and writes nothing
                self.stop_reason = follower.stop_reason
                follower.close()
                self._consumer.close()
                return {"stop_reason": self.stop_reason, "standby": True}
            taken = follower.take_over(took)
            self._producer = follower.producer  # the one whose fence succeeded
            self._raced(journal)
            # The serving merger's counts and intervals start now: those of the follower were
            # not its own.
            started = start_s = next_owner_check = next_frontier = took.detected_at
            next_tick = math.floor(started) + INTERVAL_S
            served = MergeCore(cfg.replicas, start_s, percentiles=cfg.percentiles, window=window)
            served.dedup, served.frontier = core.dedup, core.frontier
            core = self.core = served
            if taken.tail:  # the gap across the take-over runs from the dead one's last forward
                core.gaps.last_output = max(r.timestamp_ms for r in taken.tail) / 1000.0
            self._update_window(window, tail, time.time())  # a follower never reads it
            # What went out at once during the fence, then what the merger taken over from
            # owed; files can wait.
            for src_ts, sent_ts, at in follower.fresh:
                core.forwarded(src_ts, sent_ts, at)
            self._produced += len(follower.fresh)
            self._fresh_producer = follower.fresh_producer
            self._begin()
            owed = follower.forward(
                core, taken, lambda key, value, n: self._produce(cfg.sink, key, value, n)
            )
            self._poll()
            taken.counts = recovery.last_counts(cfg.paths.monitor)
            recovery.apply_counts(core, taken, cfg.paths.monitor)
            journal.write(
                Event.MERGER_TOOK_OVER, pid=cfg.serving_pid, why=took.why, owed=owed,
                detected=round(took.detected_at, 3), init_s=round(took.init_s, 3),
                fenced_s=round(took.fenced_s, 3), took_s=round(took.took_s, 3),
                fresh=took.fresh,
                fresh_s=None if took.fresh_s is None else round(took.fresh_s, 3),
                results=core.results,
            )  # fmt: skip
        else:
            taken = self._take_over(core, journal, started)
            if cfg.transactional_id is not None:
                # A merger before this one left a transaction open: the next producer asks at
                # once where one would wait 500 ms (transactions.fence).
                n = transactions.FENCERS - 1 if taken.positions else 0
                more = [self._new_producer() for _ in range(n)]
                self._producer = transactions.fence(
                    [self._producer, *more], cfg.sink, cfg.connect_timeout_s
                )
                if more:
                    self._raced(journal)
                self._begin()
        resume = taken.counts is not None
        # The logs of the merger before this one were read by the standby as they grew, or
        # are read beside the loop (a take-over's results flow meanwhile: reading them first
        # stalled the output ~0.3 s, docs/benchmarks.md); stitched in before the first
        # interval is written.
        past = None
        if resume:
            past = (
                follower.past
                if follower is not None
                else recovery.Past(paths.hlog, paths.hlog_sent, thread=True)
            )
        hlog = LatencyLogWriter(
            paths.hlog, start_s,
            comment=f"arfl merger: end-to-end latency (us) of first copies from their intended "
            f"send time, sink {cfg.sink}", resume=resume,
        )  # fmt: skip
        sent_hlog = LatencyLogWriter(
            cfg.run_dir / SENT_HLOG, start_s,
            comment=f"arfl merger: end-to-end latency (us) of first copies from their actual "
            f"send time, sink {cfg.sink}", resume=resume,
        )  # fmt: skip

        def stitch() -> None:
            nonlocal past
            if past is not None and taken.counts is not None:
                past.stitch(core, taken, start_s, hlog, sent_hlog)
            past = None

        monitor: IO[str] = open(paths.monitor, "a", encoding="utf-8")  # noqa: SIM115
        self._journal = journal
        journal.write(
            Event.MERGER_STARTED,
            sink=cfg.sink,
            replicas=cfg.replicas,
            topics=cfg.topics(),
            recent_s=core.dedup.recent_s,
            owner_pid=cfg.owner_pid,
            fetch_wait_ms=cfg.fetch_wait_ms,
            linger_ms=cfg.linger_ms,
        )
        journaled = 0
        error_codes: set[str] = set()
        last_record: float | None = None
        consumer, sink = self._consumer, cfg.sink
        topic_index = self._topic_index
        self.stop_reason = "error"  # unless the loop ends normally
        try:
            self._assign(journal, min(cfg.connect_timeout_s, 5.0))
            while True:
                msgs = next_messages(consumer, 0.05)
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        self.consumer_errors += 1
                        code = str(err.name() if hasattr(err, "name") else err)
                        if code not in error_codes:  # journal each kind once
                            error_codes.add(code)
                            journal.write(
                                Event.WARNING,
                                component="merger",
                                message=f"consumer error: {err}",
                                code=code,
                            )
                        continue
                    arrival = time.time()
                    last_record = arrival
                    replica = topic_index.get(msg.topic(), -1)
                    value = msg.value()
                    outcome, div = core.on_record(replica, value, arrival, msg.partition())
                    if outcome is Outcome.FIRST:
                        self._produce(sink, msg.key(), value, core.results)
                    elif outcome is Outcome.MARKER:
                        core.date_marker(append_time_s(msg))
                    elif div is not None:
                        journaled += 1
                        if journaled <= MAX_JOURNALED_DIVERGENCES:
                            journal.write(Event.DIVERGENCE, **div.to_dict())
                        elif journaled == MAX_JOURNALED_DIVERGENCES + 1:
                            journal.write(
                                Event.DIVERGENCE_SUPPRESSED,
                                message=f"more than {MAX_JOURNALED_DIVERGENCES} divergent "
                                "copies; only counting from now on (see merger.json)",
                            )
                now = time.time()
                if msgs:
                    self._poll()
                    core.housekeep(now, len(msgs))
                    if self._fresh_producer is not None:
                        self._fresh_producer.poll(0)
                if now >= next_frontier and core.frontier.changed:
                    next_frontier = now + frontier_file.WRITE_INTERVAL_S
                    core.frontier.changed = False
                    frontier_file.write_frontier(frontier_path, core.frontier.safe(), now)
                if now >= next_tick:
                    stitch()
                    self._update_window(window, tail, now)
                    while now >= next_tick:
                        tick = core.tick(next_tick)
                        hlog.write(tick.interval)
                        sent_hlog.write(tick.sent_interval)
                        monitor.write(json.dumps(tick.line) + "\n")
                        next_tick += INTERVAL_S
                    monitor.flush()
                    if self._fresh_producer is not None and len(self._fresh_producer) == 0:
                        self._fresh_producer = None  # every record acknowledged
                    self._commit()
                    gc.collect(1)
                    if self._unassigned:
                        self._assign(None, 0.5)
                if now >= next_owner_check:
                    next_owner_check = now + OWNER_CHECK_S
                    if self._owner_gone():
                        self.stop_reason = "orphaned"
                        journal.write(
                            Event.MERGER_ORPHANED,
                            owner_pid=cfg.owner_pid,
                            owner_create_time=cfg.owner_create_time,
                            message=f"the process that started the merger (pid "
                            f"{cfg.owner_pid}) is gone; flushing and exiting",
                        )
                        break
                reason = self._should_stop(now, last_record, window, started)
                if reason is not None:
                    self.stop_reason = reason
                    break
            stitch()
        except (Fenced, KafkaException, SystemError) as e:
            if not isinstance(e, Fenced) and not transactions.fatal(e):
                raise
            # Another merger took over: anything written now would count a second twice.
            self.stop_reason = "fenced"
            journal.write(Event.MERGER_FENCED, message=f"fenced by the merger that took over: {e}")
        finally:
            if self.stop_reason == "fenced":
                for f in (hlog, sent_hlog, monitor):
                    f.close()
                consumer.close()
            else:
                final = self._finish(core, window, tail, hlog, sent_hlog, monitor, journal)
        return {"stop_reason": "fenced"} if self.stop_reason == "fenced" else final

    def _finish(
        self,
        core: MergeCore,
        window: InputWindow,
        tail: InjectorStatsTail | None,
        hlog: LatencyLogWriter,
        sent_hlog: LatencyLogWriter,
        monitor: IO[str],
        journal: Journal,
    ) -> dict[str, Any]:
        """The last interval, the flush, the last commit, ``merger.json`` (none when the
        flush finds the merger fenced for good, nor the last interval: what it forwarded then
        counts for the one that took over, as in :meth:`run`'s fenced stop)."""
        from confluent_kafka import KafkaException

        cfg, consumer = self.config, self._consumer
        sink = cfg.sink
        end = time.time()
        self._update_window(window, tail, end)
        tick = core.tick(end) if end > core.recorder.interval_start_s else None
        fenced: Fenced | None = None
        try:
            # Records still queued after the flush were never acknowledged: lost writes too.
            remaining = self._flush_last()
        except Fenced as e:
            fenced, remaining = e, 0
        rounds = 0
        while fenced is None and not remaining and self._failed and rounds < FINAL_RESENDS:
            # Written again (a transaction's records after its commit, or its abort) and
            # flushed before the last commits.
            rounds += 1
            try:
                self._commit()
                remaining = self._flush_last()
            except Fenced as e:
                fenced, remaining = e, 0
        # Nothing is flushed after the last commits: a late racer's fence found there stays
        # a fence (the broker's abort of a transaction open past its timeout is still fenced
        # again, :meth:`_refence`).
        self._refence_until = None
        if tick is not None and fenced is None:
            hlog.write(tick.interval)
            sent_hlog.write(tick.sent_interval)
            monitor.write(json.dumps(tick.line) + "\n")
        for f in (hlog, sent_hlog, monitor):
            f.close()
        if fenced is not None:
            self.stop_reason = "fenced"
            journal.write(Event.MERGER_FENCED, message=f"fenced while finishing: {fenced}")
            consumer.close()
            return {"stop_reason": "fenced"}
        if self._fresh_producer is not None:
            remaining += self._fresh_producer.flush(30.0)
        if remaining == 0 and not self._failed:
            # Everything forwarded is written: read on from here.
            self._to_commit = None
            with contextlib.suppress(Fenced):
                self._commit()
                self._commit(last=True)
        elif remaining == 0 and cfg.transactional_id is not None:
            # No position past what failed; what the last rounds wrote is committed.
            with contextlib.suppress(Fenced, KafkaException):
                transactions.commit(self._producer, begin=False, pending=self._txn_pending)
        consumer.close()
        final = core.final(end)
        final["delivery_failures"] = self.delivery_failures + remaining
        final["complete_output"] = final["delivery_failures"] == 0
        final["consumer_errors"] = self.consumer_errors
        final["stop_reason"] = self.stop_reason
        final["recent_s"] = core.dedup.recent_s
        final["sink"] = sink
        write_json_atomic(cfg.result_path, final)
        journal.write(Event.MERGER_FINISHED, **{k: final[k] for k in (
            "results", "duplicates", "divergent", "bad", "uncompared", "longest_gap_ms",
            "delivery_failures", "complete_output", "stop_reason",
        )})  # fmt: skip
        if final["delivery_failures"]:
            journal.write(
                Event.WARNING,
                component="merger",
                message=f"{final['delivery_failures']} results not written to "
                f"{sink}: {self._first_delivery_error or 'flush timed out'}",
            )
        return final

    def _flush_last(self) -> int:
        """Flush the server at the end; returns the records still queued after it.

        A fence its flush serves within :data:`transactions.REFENCE_S` of a raced fence is a
        racer's late answer as during the run (:meth:`_refence`): the merger fences again and
        flushes the records the fence failed on the new server. Stopping there as fenced would
        leave them unwritten with no merger to write them.

        Raises:
            Fenced: fenced for good (or fencing again failed partway).
        """
        from confluent_kafka import KafkaException

        while True:
            try:
                return int(self._producer.flush(30.0))
            except (KafkaException, SystemError) as e:  # the flush served a fence
                if not transactions.fatal(e):
                    raise
                if not self._refence(e):
                    raise Fenced(str(e)) from e

    def _commit(self, last: bool = False) -> None:
        """Commit the positions taken at the last tick once every result forwarded before
        them is acknowledged by the sink, then take the current ones: a restarted merger reads
        on from there (:mod:`.recovery`) and loses nothing that was not written. The open
        transaction is committed first (and, unless ``last``, the next one begun)."""
        from confluent_kafka import KafkaException

        if self.config.transactional_id is not None:
            try:
                self._txn_pending = transactions.commit(
                    self._producer, begin=not last, pending=self._txn_pending
                )
            except Fenced as e:
                if last or not self._refence(e):
                    raise  # a re-fence began its own transaction
            else:
                if self._txn_pending is None:
                    self._txn_began = None if last else time.monotonic()
            if self._refence_until is not None and time.time() > self._refence_until:
                self._refence_until = None
            if self._txn_pending is not None:
                return  # the broker did not answer: nothing is produced or committed yet
        self._resend()
        if self._failed or self._resending:
            return  # a restarted merger must read those again: no position past them
        if self._to_commit is not None and self._acked >= self._to_commit[0]:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.commit(offsets=self._to_commit[1], asynchronous=True)
            self._to_commit = None
        if self._to_commit is None:
            with contextlib.suppress(KafkaException, RuntimeError):
                positions = [tp for tp in self._consumer.position(self._consumer.assignment())
                             if tp.offset >= 0]  # fmt: skip
                if positions:
                    self._to_commit = (self._produced, positions)

    def _committed_positions(self) -> dict[tuple[str, int], int]:
        """The serving merger's committed positions, where :meth:`_assign` reads on from."""
        cfg = self.config
        parts = [(t, p) for t in cfg.topics() for p in self._partitions(t)]
        self._positions = recovery.committed(self._consumer, parts, cfg.connect_timeout_s)
        return self._positions

    def _follower(self, core: MergeCore, journal: Journal) -> Follower:
        def assign() -> None:
            self._assign(journal, min(self.config.connect_timeout_s, 5.0))

        return Follower(
            self.config, self._consumer, self._producer, core,
            stop=self._stop, owner_gone=self._owner_gone, assign=assign,
            make_producer=self._new_producer,
            make_fresh=None if os.environ.get(FRESH_ENV) == "0" else self._fresh_clients,
            on_delivery=self._on_delivery,
        )  # fmt: skip

    def _fresh_clients(self) -> tuple[Any, Any]:
        """A standby's idempotent sink producer (no ``transactional.id``) and admin client,
        connected ahead (:mod:`.standby`)."""
        from confluent_kafka.admin import AdminClient

        c = self.config
        producer = kafka_producer(c.bootstrap, c.sink, c.connect_timeout_s, c.linger_ms, None)
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "client.id": "arfl-merger"})
        admin.list_topics(timeout=c.connect_timeout_s)
        return producer, admin

    def _new_producer(self) -> SinkProducer:
        c = self.config
        p: SinkProducer = kafka_producer(
            c.bootstrap, c.sink, c.connect_timeout_s, c.linger_ms, c.transactional_id,
            c.transaction_timeout_ms,
        )  # fmt: skip
        return p

    def _take_over(self, core: MergeCore, journal: Journal, started: float) -> Taken:
        """What the merger before this one left (nothing at a run's first start): positions,
        the sink's tail into the dedup's exact memory, its counts into the core."""
        cfg = self.config
        parts = [(t, p) for t in cfg.topics() for p in self._partitions(t)]
        taken = Taken(positions=recovery.committed(self._consumer, parts, cfg.connect_timeout_s))
        if not taken.positions:
            return taken
        t0 = time.monotonic()
        taken.tail = recovery.sink_tail(cfg.bootstrap, cfg.sink, cfg.connect_timeout_s)
        taken.counts = recovery.last_counts(cfg.paths.monitor)
        for rec in taken.tail:
            with contextlib.suppress(BadRecord):
                r = parse_result(rec.value)
                core.dedup.remember(r.rid, r.hash, started, rec.partition)
        recovery.apply_counts(core, taken, cfg.paths.monitor)
        self._positions = taken.positions
        journal.write(
            Event.MERGER_RECOVERED,
            positions=len(taken.positions),
            tail=len(taken.tail),
            results=core.results,
            recover_s=round(time.monotonic() - t0, 3),
        )
        return taken

    def _partitions(self, topic: str) -> list[int]:
        from confluent_kafka import KafkaException

        try:
            meta = self._consumer.list_topics(topic, timeout=5.0).topics.get(topic)
        except KafkaException:
            return []
        return sorted(meta.partitions) if meta is not None and meta.partitions else []

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, n: int) -> None:
        """Forward result number ``n`` of the run (header :data:`recovery.SEQ_HEADER`).

        Raises:
            KafkaException: fatal when a newer merger fenced this one (:meth:`run` stops).
        """
        from confluent_kafka import KafkaException

        self._produced += 1
        headers = [(SEQ_HEADER, str(n).encode())]
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=headers, on_delivery=self._on_delivery
                )
                return
            except BufferError:  # the sink away long enough to fill the queue
                if self._must_stop():
                    self._produced -= 1
                    self._lost += 1
                    return
                self._poll(0.005)
            except (KafkaException, SystemError) as e:  # after a re-fence: produce it again
                if self._refused_in_transaction(e):
                    # librdkafka takes no record while a transaction call is in progress or
                    # after a record of it failed: end it first.
                    if not self._end_transaction():
                        self._produced -= 1
                        self._lost += 1
                        return
                    continue
                if not transactions.fatal(e) or not self._refence(e):
                    raise

    def _refused_in_transaction(self, e: BaseException) -> bool:
        from confluent_kafka import KafkaError, KafkaException

        return (
            self.config.transactional_id is not None
            and isinstance(e, KafkaException)
            and isinstance(e.args[0], KafkaError)
            and e.args[0].code() == KafkaError._STATE
        )

    def _must_stop(self) -> bool:
        """Asked to stop, past ``until`` or orphaned: what a wait for the sink gives up for."""
        until = self.config.until
        return (
            self._stop.is_set()
            or (until is not None and time.time() >= until)
            or self._owner_gone()
        )

    def _end_transaction(self) -> bool:
        """End the open transaction (the one a tick's commit left in progress with the broker
        away, or one a failed record made abortable) and begin the next, waiting for the
        broker as long as it takes; False when the merger must stop first (:meth:`_must_stop`).

        Raises:
            Fenced: a newer merger took over.
        """
        pending: str | None = self._txn_pending or "commit"
        while pending is not None:
            if self._must_stop():
                self._txn_pending = pending
                return False
            try:
                pending = transactions.commit(self._producer, pending=pending)
            except Fenced as e:
                if not self._refence(e):
                    raise
                pending = None  # the new server began its own
        self._txn_pending = None
        self._txn_began = time.monotonic()
        return True

    def _poll(self, timeout_s: float = 0) -> None:
        """Serve the server's delivery reports; its fatal error (a fence) is raised here."""
        from confluent_kafka import KafkaException

        try:
            self._producer.poll(timeout_s)
        except (KafkaException, SystemError) as e:
            if not transactions.fatal(e) or not self._refence(e):
                raise

    def _begin(self) -> None:
        """Begin the server's first transaction (a re-fence begins its own)."""
        from confluent_kafka import KafkaException

        try:
            self._producer.begin_transaction()
            self._txn_began = time.monotonic()
        except (KafkaException, SystemError) as e:
            if not transactions.fatal(e) or not self._refence(e):
                raise

    def _raced(self, journal: Journal) -> None:
        """The fence just made raced producers: for :data:`transactions.REFENCE_S` a fence
        found on the server is taken for a racer's late answer (:meth:`_refence`)."""
        self._refence_until = time.time() + transactions.REFENCE_S
        self._journal = journal

    def _refence(self, error: Exception) -> bool:
        """Fence again when the server was fenced soon after the fence that chose it, or when
        its transaction was open past the broker's timeout; returns False (stay fenced)
        otherwise.

        A producer the fence raced and closed may have had its second ``init_transactions``
        on the way: a slow broker can answer it after the server was chosen, and its epoch
        fences the server. No merger of the run fences a live one (a standby kills the serving
        merger before it fences), so a fence within :data:`transactions.REFENCE_S` of this
        merger's own is that late answer. The new fence aborts the server's open transaction;
        its records that were appended stay in the log (the sink is read
        ``read_uncommitted``), those that were not are produced again: the sink, read after
        the new fence, says which (:meth:`_resend`; docs/design.md, "A standby merger").

        A broker that did not answer for longer than the transaction timeout aborts the open
        transaction itself once it answers again (its periodic sweep) and bumps the epoch:
        librdkafka then ends in a fatal error (``INVALID_TXN_STATE`` or a fence) though no
        merger took over. Only a transaction open that long can have been aborted so (the
        broker counts from its first partition, which comes after the begin counted here).
        These re-fences are not counted against :data:`transactions.MAX_REFENCES`, at the end
        either: each needs another transaction open past the timeout.
        """
        began = self._txn_began
        expired = began is not None and time.monotonic() - began >= self._txn_timeout_s
        until = self._refence_until
        late = until is not None and time.time() <= until
        if late and not expired:
            if self._refences >= transactions.MAX_REFENCES:
                return False  # not a late answer after all: stay fenced
            self._refences += 1
        elif not expired:
            return False
        why = "its transaction outlived the broker's timeout" if expired else (
            "fenced soon after its own fence"
        )  # fmt: skip
        try:
            self._fence_again(error, why)
        except Exception as e:  # stop as fenced: no position is committed past what failed
            raise Fenced(f"fenced, and fencing again failed: {e}") from e
        return True

    def _fence_again(self, error: Exception, why: str) -> None:
        """:meth:`_refence`'s work, once it decided to fence again."""
        from confluent_kafka import KafkaException

        t0 = time.time()
        cfg, old = self.config, self._producer
        with contextlib.suppress(KafkaException, RuntimeError):
            old.purge()  # queued and in-flight records: their reports come back failed
        deadline = time.monotonic() + cfg.connect_timeout_s
        while len(old) and time.monotonic() < deadline:
            with contextlib.suppress(KafkaException, SystemError):  # its fatal error, once
                old.poll(0.01)
        with warnings.catch_warnings():  # "abort_transaction failed during close": fenced
            warnings.simplefilter("ignore", RuntimeWarning)
            old.close()  # serves the last reports too
        # One producer: the late answer has aborted the server's transaction already (so no
        # 500-ms wait as a rule), and none is left racing to fence it in turn.
        self._producer = self._new_producer()
        self._producer.init_transactions(cfg.connect_timeout_s)
        self._producer.begin_transaction()
        self._txn_began = time.monotonic()
        self._txn_pending = None
        # Those appended before the fence stay; the others go out again on the new server.
        unsent, produced = len(self._failed), self._produced
        self._resend()
        again = self._produced - produced
        self._to_commit = None  # positions taken before: some of their results go out again
        if self._journal is not None:
            self._journal.write(
                Event.MERGER_REFENCED, message=f"{why}: {error}",
                unsent=unsent, again=again, refence_s=round(time.time() - t0, 3),
            )  # fmt: skip


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Process entry, ``python -m arfl.measure.merger --config FILE`` (a :class:`MergerConfig`
    as JSON): merge until SIGTERM/SIGINT, ``until``, ``idle_s`` or the owner's death.

    Returns:
        0; 2 for a config file that does not validate; 4 (deploy error) when the broker or the
        sink is missing, or results could not be written to the sink (``merger.json``:
        ``complete_output`` false).
    """
    merger = build_from_argv(
        MergerConfig,
        argv,
        "Merge replica outputs (first copy wins) and measure end-to-end latency.",
        Merger,
    )
    if isinstance(merger, int):
        return merger
    cfg = merger.config
    stop_on_termination(merger.stop)
    # Python's full collections walk the dedup's memory (a minute of results) with the loop
    # stopped: 70-190 ms, every few seconds to minutes (docs/benchmarks.md). The loop collects
    # the young generations at each tick instead; it makes no lasting cycles.
    gc.disable()
    try:
        final = merger.run()
    except DeployError as e:  # e.g. what a merger before it left cannot be read
        print(f"error: {e}", file=sys.stderr)
        return int(DeployError.exit_code)
    # A standby stopped while standing by, or a fenced merger, has no counts: its stop reason.
    shown = ("results", "duplicates", "divergent", "bad", "uncompared", "latency_ms")
    print(json.dumps({k: final[k] for k in shown} if "results" in final else final), flush=True)
    if final.get("delivery_failures"):
        print(
            f"error: merger: {final['delivery_failures']} results not written to "
            f"{cfg.sink} at {cfg.bootstrap}",
            file=sys.stderr,
        )
        return int(DeployError.exit_code)
    return 0
