"""The final topic's transactions in a run with a standby merger: one a tick, and the fence of
a merger taken over from (docs/design.md, "A standby merger")."""

from __future__ import annotations

import time
import warnings
from typing import Any

from arfl.errors import DeployError
from arfl.measure.merger.kafka import SinkProducer

FENCERS = 12
"""Producers a fence uses (:func:`fence`). Twelve idle producers cost ~9 MB and ~0.002 cores."""
SERVERS = 4
"""Of the :data:`FENCERS`, those that ask once the old transaction is aborted (one serves)."""
TRY_S = 0.005
"""How long each producer that asks while the old transaction is aborted may wait: the first
to ask after the abort (~5-50 ms, docs/benchmarks.md) is answered within milliseconds."""
SERVE_TRY_S = 0.02
"""How long each server may wait: long enough for a refusal to come back, so that no request
of a closed server can still be on its way when the next one is answered."""
COMMIT_TIMEOUT_S = 10.0
"""How long committing a transaction may take (once a tick)."""
REFENCE_S = 30.0
"""How long after a fence with racing producers a merger found fenced fences again instead of
stopping: a racer's request still on its way when it was closed can be answered after the
server was chosen, on a broker slow enough. 30 s: sixty times the 500-ms second ask that
carries such a request, far past the slowest fence measured on a stalled broker (1.8 s,
docs/benchmarks.md, "A merger kill at moments nobody chose")."""
MAX_REFENCES = FENCERS - 1
"""Fences again within :data:`REFENCE_S`: each producer of the fence but the server can be
one late answer; a fence past them is not."""


class Fenced(Exception):
    """A newer merger fenced this one (its transactional producer's fatal error)."""


def fence(producers: list[SinkProducer], sink: str, timeout_s: float) -> SinkProducer:
    """Take the ``transactional.id`` that ``producers`` share (none asked yet): from then on
    the merger before this one, if any, is fenced (its open transaction aborted, its epoch
    refused). Returns the producer to serve with; the others are closed.

    The first ``init_transactions`` makes the coordinator abort the old merger's open
    transaction and is answered CONCURRENT_TRANSACTIONS, and librdkafka asks again only after a
    fixed 500 ms, while the abort takes milliseconds. So all producers but the last
    :data:`SERVERS` ask :data:`TRY_S` apart until one is answered: the abort is over then. They
    are closed (before their 500 ms are up: a refused one would ask again and fence the
    winner), and the servers ask :data:`SERVE_TRY_S` apart; the one answered serves. Measured
    in docs/benchmarks.md, "A standby merger takes over a killed one".

    Raises:
        DeployError: no answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s

    def ask(p: SinkProducer, wait_s: float) -> str:
        try:
            p.init_transactions(max(0.0, min(wait_s, deadline - time.monotonic())))
        except KafkaException as e:
            return str(e)  # a message, not the exception: its traceback would keep p alive
        return ""

    def race(asking: list[SinkProducer], try_s: float) -> tuple[SinkProducer | None, str]:
        """The first of ``asking`` to be answered, each asking ``try_s`` after the one before
        (the last until the deadline); the others are closed."""
        winner: SinkProducer | None = None
        error = ""
        for i, p in enumerate(asking):
            error = ask(p, try_s if i < len(asking) - 1 else timeout_s)
            if not error:
                winner = p
                break
        with warnings.catch_warnings():  # "abort_transaction failed during close": none open
            warnings.simplefilter("ignore", RuntimeWarning)
            for p in asking:
                if p is not winner:
                    p.close()
        asking.clear()
        return winner, error

    racers, servers = producers[:-SERVERS], producers[-SERVERS:]
    if racers:
        first, _ = race(racers, TRY_S)
        if first is not None:
            first.close()
    server, error = race(servers, SERVE_TRY_S)
    if server is None:
        raise DeployError(f"merger: init_transactions on {sink}: {error}")
    return server


def fatal(e: BaseException | None) -> bool:
    """Whether ``e`` is the sink producer's fatal error, a fence: raised by ``poll`` or a
    commit, by a ``produce`` after it (code ``_FATAL``, not flagged fatal), or as the cause of
    the ``SystemError`` of a delivery report served in the same ``poll`` after it was raised."""
    from confluent_kafka import KafkaError, KafkaException

    while isinstance(e, SystemError):
        e = e.__cause__
    if not isinstance(e, KafkaException) or not isinstance(e.args[0], KafkaError):
        return False
    err = e.args[0]
    return bool(err.fatal()) or err.code() in (KafkaError._FATAL, KafkaError._FENCED)


def lost_for_good(err: Any) -> bool:
    """Whether a delivery report's error is one no later try can help (a record too large,
    the sink topic gone, no authorization): the record is counted lost, not produced again."""
    from confluent_kafka import KafkaError

    return err.code() in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError._BAD_MSG,
        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION, KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError._INVALID_ARG,
    )  # fmt: skip


def commit(producer: SinkProducer, begin: bool = True, pending: str | None = None) -> str | None:
    """Commit the open transaction (abort it when it failed) and, with ``begin``, begin the
    next (a transaction open longer than the broker's timeout would be aborted).

    Args:
        pending: the call a previous one left in progress (``"commit"``, ``"abort"``): it is
            called again, as librdkafka asks after a timeout.

    Returns:
        None once the transaction ended (and the next began); the call still in progress when
        the broker did not answer within :data:`COMMIT_TIMEOUT_S` (no record may be produced
        until it ends: librdkafka refuses them).

    Raises:
        Fenced: a newer merger took over.
    """
    from confluent_kafka import KafkaException

    if pending != "abort":
        try:
            producer.commit_transaction(COMMIT_TIMEOUT_S)
        except KafkaException as e:
            err = e.args[0]
            if fatal(e):
                raise Fenced(str(err)) from e
            if not err.txn_requires_abort():
                if err.retriable():
                    return "commit"  # called again
                raise
            pending = "abort"
    if pending == "abort":
        # Its records that were appended stay, and a reader of the sink (read_uncommitted)
        # has them; those that failed are produced again (Merger._resend).
        try:
            producer.abort_transaction(COMMIT_TIMEOUT_S)
        except KafkaException as e:
            if fatal(e):
                raise Fenced(str(e.args[0])) from e
            if e.args[0].retriable():
                return "abort"
            raise
    if begin:
        try:
            producer.begin_transaction()
        except KafkaException as e:
            if fatal(e):
                raise Fenced(str(e.args[0])) from e
            raise
    return None
