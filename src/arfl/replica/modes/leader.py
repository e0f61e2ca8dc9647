"""active-leader (KaZoo on Spark): a ZooKeeper-elected leader decides, a Kafka log decides order.

The leader (kazoo ``Election`` at the run's election path, identifier = replica index) decides
where batch ``k`` ends — the input's high watermarks, capped at ``max_records_per_batch`` — and
appends ``{"k", "epoch", "leader", "start", "end"}`` to a one-partition decision topic with an
idempotent, ``acks=all`` producer. Every replica, the leader included, consumes that log and
applies the **first** entry for each ``k`` (:class:`DecisionBook`). Consistency comes from the
single log, not from a single leader: a deposed leader that still appends a decision for ``k``
is harmless, because everyone ignores every entry for ``k`` after the first. A new leader reads
the log to its end before proposing.

The leader decides on **its own clock**, apart from its Spark query: a :class:`Decider` thread
appends one decision per ``batch_interval`` (aligned to wall-clock multiples of it). Its own
query applies the decisions like any follower's, so a leader whose Spark is slow (an executor
lost, CPU throttled) does not pace the followers (a leader that proposed inside its own
``latestOffset`` would make every follower wait for its batches).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import ModeBase, ReplicaContext, arfl_source_options
from arfl.replica.source import read_stream
from arfl.replica.source.decisions import (
    DECISION_WAIT_S,
    Decision,
    DecisionLog,
)
from arfl.replica.source.kafka import REQUEST_TIMEOUT_S, PartitionLog
from arfl.replica.source.offsets import AgreedGroup, BatchOffset
from arfl.replica.source.options import (
    DEFAULT_SESSION_TIMEOUT_S,
    SourceOptions,
)
from arfl.replica.source.policy import cap_ends, initial_offsets
from arfl.run.names import decision_topic, leader_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class LeaderElection:
    """This replica's candidacy at the run's election path (kazoo ``Election``).

    ``Election(zk, path).contenders()[0]`` is the current leader's replica index (a string).
    Leadership is given up as soon as the session is suspended or lost; the candidacy is
    renewed automatically when a new session is established.

    Args:
        zookeeper: ZooKeeper ``host:port``.
        path: the run's election path (:func:`arfl.run.names.leader_path`).
        replica: this replica's index (the identifier).
        session_timeout_s: requested ZooKeeper session timeout (the server clamps it to
            ``[2, 20] * tickTime``).
    """

    def __init__(
        self, zookeeper: str, path: str, replica: int, session_timeout_s: float = 2.0
    ) -> None:
        from kazoo.client import KazooClient

        if not path:
            raise DeployError("active-leader: no election path (source option election_path)")
        self.path = path
        self.replica = replica
        self._zk = KazooClient(hosts=zookeeper, timeout=session_timeout_s)
        try:
            self._zk.start(timeout=REQUEST_TIMEOUT_S)
        except Exception as e:
            with contextlib.suppress(Exception):
                self._zk.stop()
                self._zk.close()
            raise DeployError(
                f"zookeeper at {zookeeper} not reachable: {e}; run 'arfl stack up' or set "
                "stack.zookeeper"
            ) from None
        self._zk.add_listener(self._on_state)
        self._election = self._zk.Election(self.path, identifier=str(replica))
        self._leading = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._resign = threading.Event()
        self._stop = threading.Event()
        self.epoch = -1
        self.terms = 0
        self._thread = threading.Thread(
            target=self._run, name=f"arfl-election-r{replica}", daemon=True
        )
        self._thread.start()

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the election node on a live session."""
        return self._leading.is_set() and self._connected.is_set()

    def contenders(self) -> list[str]:
        """Identifiers of all candidates, the leader first."""
        return [str(c) for c in self._election.contenders()]

    def _on_state(self, state: str) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
            if state == KazooState.LOST:
                self._resign.set()

    def _lead(self) -> None:
        node = getattr(self._election.lock, "node", None) or ""
        m = re.search(r"(\d+)$", str(node))
        self.epoch = int(m.group(1)) if m else self.terms
        self.terms += 1
        self._resign.clear()
        self._leading.set()
        log.info("replica %d leads %s (epoch %d)", self.replica, self.path, self.epoch)
        try:
            while not (self._stop.is_set() or self._resign.is_set()):
                self._stop.wait(0.1)
        finally:
            self._leading.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._election.run(self._lead)
            except Exception as e:  # session lost mid-election: retry on the next session
                if self._stop.is_set():
                    break
                log.info("election at %s interrupted (%s); running again", self.path, e)
                self._stop.wait(0.2)

    def close(self) -> None:
        """Withdraw and close the session (its ephemeral nodes vanish immediately)."""
        self._stop.set()
        with contextlib.suppress(Exception):
            self._election.cancel()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._zk.stop()
            self._zk.close()


class Decider:
    """The leader's decisions, made on its own clock (a thread), apart from its Spark query.

    While this replica holds the election, every ``interval_s`` (aligned to wall-clock
    multiples) it reads the decision log to its end and appends the next decision: batch
    ``k = last decided + 1`` from the last decision's end (or the run's initial offsets) to the
    input's high watermarks, capped at ``max_records_per_batch``; nothing when no input arrived.

    Args:
        opts: source options (replica, cap, ``batch_interval_s``).
        log: the input topic.
        decisions: its own decision log client (a Kafka consumer is not shared between
            threads).
        election: the replica's candidacy.
        initial: partition -> the first batch's start (every replica's initial offset).
    """

    def __init__(
        self,
        opts: SourceOptions,
        log: PartitionLog,
        decisions: DecisionLog,
        election: LeaderElection,
        initial: Mapping[int, int],
    ) -> None:
        self._opts = opts
        self._input = log
        self.decisions = decisions
        self.election = election
        self.initial = dict(initial)
        self.interval_s = max(0.01, opts.batch_interval_s)
        self.proposed = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Decider:
        """Decide in a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._run, name=f"arfl-decider-r{self._opts.replica}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while True:
                now = time.time()
                wake = (int(now / self.interval_s) + 1) * self.interval_s
                if self._stop.wait(max(0.0, wake - now)):
                    return
                if not self.election.is_leader:
                    continue
                try:
                    self.decide_once()
                except Exception as e:  # keep deciding: a broker hiccup must not stop it
                    self.errors += 1
                    log.warning("decision failed: %s", e)
        finally:
            # Closed by the thread that uses it: never under a decision in progress.
            self.decisions.close()

    def decide_once(self) -> Decision | None:
        """Append the next decision if input arrived since the last one; returns it (the one
        that holds for its ``k``: another leader's, if that one came first)."""
        self.decisions.catch_up()
        k = self.decisions.book.max_k + 1
        prev = self.decisions.book.get(k - 1) if k > 0 else None
        start = dict(prev.end) if prev is not None else dict(self.initial)
        end = cap_ends(start, self._input.high_watermarks(), self._opts.max_records_per_batch)
        if end == start:
            return None  # nothing new: no decision, no batch
        self.decisions.append(Decision(k, self.election.epoch, self._opts.replica, start, end))
        self.proposed += 1
        return self.decisions.wait_for(k, DECISION_WAIT_S)

    def close(self) -> None:
        """Stop the thread (it closes its decision log client on its way out)."""
        self._stop.set()
        if self._thread is None:
            self.decisions.close()
        elif self._thread is not threading.current_thread():
            self._thread.join(timeout=DECISION_WAIT_S)


class LeaderPolicy:
    """``active-leader``: the next batch is the first decision for it in the log.

    Args:
        opts: source options (zookeeper, decision_topic, session timeout, cap, replica).
        log: the input topic.
        decisions: the decision log (default: a :class:`DecisionLog` on ``decision_topic``).
        election: the candidacy (default: a :class:`LeaderElection` in ``zookeeper``).
        decider: the leader's decisions (default: a :class:`Decider` thread with its own
            decision log client; tests pass one and call ``decide_once``).
    """

    def __init__(
        self,
        opts: SourceOptions,
        log: PartitionLog,
        decisions: DecisionLog | None = None,
        election: LeaderElection | None = None,
        decider: Decider | None = None,
    ) -> None:
        self._input = log
        self._opts = opts
        self.decisions = decisions or DecisionLog(opts.bootstrap, opts.decision_topic, opts.replica)
        self.decider: Decider | None = None
        try:
            self.election = election or LeaderElection(
                opts.zookeeper, opts.election_path, opts.replica, opts.session_timeout_s
            )
            if decider is None:
                own = DecisionLog(opts.bootstrap, opts.decision_topic, opts.replica, "decider")
                try:
                    decider = Decider(opts, log, own, self.election, initial_offsets(opts, log))
                except BaseException:
                    own.close()
                    raise
                decider.start()
            self.decider = decider
        except BaseException:
            self.close()
            raise

    def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
        """The decided end of batch ``start.batch + 1``; ``start`` while none is decided. With
        ``merge_decisions`` (``Spec.merges_agreed_batches``) the end of the newest decision
        that continues it without a gap, within ``max_records_per_batch`` (the batch index is
        that decision's).

        Raises:
            DeployError: the decision's start differs from ours (a different initial offset or
                a checkpoint from another run: the replicas would diverge).
        """
        del max_records  # the leader's cap is in the decision; Spark's would differ per replica
        k = start.batch + 1
        self.decisions.poll(0)
        d = self.decisions.book.get(k)
        if d is None:
            d = self.decisions.wait_for(k, self._opts.follower_wait_s)
        if d is None:
            return start
        if dict(d.start) != dict(start.offsets):
            raise DeployError(
                f"decision {k} in {self.decisions.topic!r} starts at {dict(d.start)} but this "
                f"replica is at {dict(start.offsets)}: replicas disagree on their start; use "
                "the same starting offsets and a fresh decision topic per run"
            )
        if not self._opts.merge_decisions:
            return BatchOffset(k, d.end)
        # Catch up (Spec.merges_agreed_batches): every further decision that is here and
        # continues this one joins the batch, up to the per-batch cap; where each begins is
        # kept (the agreed watermark of a windowed pipeline is per decision).
        merged = BatchOffset(k, d.end)
        while (nxt := self.decisions.book.get(merged.batch + 1)) is not None and dict(
            nxt.start
        ) == dict(merged.offsets):
            longer = BatchOffset(
                nxt.k, nxt.end, groups=(*merged.groups, AgreedGroup(dict(nxt.start)))
            )
            if start.records_until(longer) > self._opts.max_records_per_batch:
                break
            merged = longer
        return merged

    @property
    def proposed(self) -> int:
        """Decisions this replica's decider appended."""
        return 0 if self.decider is None else self.decider.proposed

    def close(self) -> None:
        """Stop the decider, leave the election and close the decision log."""
        try:
            if self.decider is not None:
                self.decider.close()
        finally:
            try:
                election = getattr(self, "election", None)
                if election is not None:
                    election.close()
            finally:
                self.decisions.close()


def source_options(spec: Spec, ctx: ReplicaContext) -> SourceOptions:
    """The reader options of one active-leader replica.

    Mode options: ``zookeeper`` (required, ``host:port``), ``run_id`` (names the decision
    topic and the election path; the same for all replicas of a run), ``source.<option>``
    overrides.

    Raises:
        DeployError: no ZooKeeper address was given.
    """
    zk = ctx.options.get("zookeeper", "")
    run_id = ctx.options.get("run_id", "run")
    if not zk:
        raise DeployError(
            "mode 'active-leader' needs a ZooKeeper address (mode option 'zookeeper'); "
            "run 'arfl stack up' or set stack.zookeeper"
        )
    return arfl_source_options(
        spec,
        ctx,
        "active-leader",
        zookeeper=zk,
        session_timeout_s=spec.replication.session_timeout or DEFAULT_SESSION_TIMEOUT_S,
        decision_topic=decision_topic(spec.name, run_id),
        election_path=leader_path(spec.name, run_id),
        batch_interval_s=spec.agreed_batch_interval,
        merge_decisions=spec.merges_agreed_batches,
    )


@MODES.register(
    "active-leader",
    ModeInfo(
        "R replicas applying a ZooKeeper-elected leader's batch decisions from a Kafka log",
        min_replicas=2,
        max_replicas=None,
        options=frozenset({"session_timeout", "batch_interval", "catch_up"}),
        active=True,
        leader=True,
        order=3,
        async_progress=True,
    ),
)
class ActiveLeaderReplication(ModeBase):
    """R replicas applying the first decision per batch from a leader-written log."""

    name = "active-leader"

    def source(self, spark: SparkSession, spec: Spec, ctx: ReplicaContext) -> DataFrame:
        """The arfl-kafka source following the decision log (and running for leader)."""
        return read_stream(spark, source_options(spec, ctx))

    def boundary_policy(self, opts: SourceOptions, log: PartitionLog) -> LeaderPolicy:
        """See :class:`LeaderPolicy`."""
        return LeaderPolicy(opts, log)
