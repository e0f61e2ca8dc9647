"""The final topic's transactions in a run with a standby merger: one a tick, and the fence of
a merger taken over from (docs/design.md, "A standby merger")."""

from __future__ import annotations

import time

from arfl.errors import DeployError
from arfl.measure.merger.kafka import SinkProducer

FENCERS = 4
"""Producers a fence may try (:func:`fence`): one refused while the abort runs is not enough
(docs/benchmarks.md)."""
TRY_S = 0.04
"""How long each producer but the last may wait for its ``init_transactions``."""
COMMIT_TIMEOUT_S = 10.0
"""How long committing a transaction may take (once a tick)."""


class Fenced(Exception):
    """A newer merger fenced this one (its transactional producer's fatal error)."""


def fence(producers: list[SinkProducer], sink: str, timeout_s: float) -> SinkProducer:
    """``init_transactions`` on ``producers`` (the same ``transactional.id``), one after the
    other, until one succeeds: from then on the merger before this one, if any, is fenced (its
    open transaction aborted, its epoch refused). Returns the producer to serve with; drop the
    others before they ask again (they would fence it).

    The first request makes the coordinator abort the old merger's open transaction and is
    answered CONCURRENT_TRANSACTIONS; librdkafka asks again only after a fixed 500 ms, while
    the abort takes milliseconds: the next producer, asking at once, is answered
    (docs/benchmarks.md, "A standby merger takes over a killed one").

    Raises:
        DeployError: none was answered within ``timeout_s``.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    error: Exception | None = None
    for i, p in enumerate(producers):
        last = i == len(producers) - 1
        try:
            p.init_transactions(max(0.0, deadline - time.monotonic()) if last else TRY_S)
        except KafkaException as e:
            error = e
            continue
        return p
    raise DeployError(f"merger: init_transactions on {sink}: {error}")


def commit(producer: SinkProducer, begin: bool = True) -> None:
    """Commit the open transaction and, with ``begin``, begin the next (a transaction open
    longer than the broker's timeout would be aborted).

    Raises:
        Fenced: a newer merger took over.
    """
    from confluent_kafka import KafkaException

    try:
        producer.commit_transaction(COMMIT_TIMEOUT_S)
    except KafkaException as e:
        err = e.args[0]
        if err.fatal():
            raise Fenced(str(err)) from e
        if err.txn_requires_abort():
            # Its records stay appended, and a reader of the sink (read_uncommitted) has them:
            # nothing is forwarded again.
            producer.abort_transaction(COMMIT_TIMEOUT_S)
        else:  # retriable: the next tick commits it
            return
    if begin:
        producer.begin_transaction()
