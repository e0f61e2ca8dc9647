"""The final topic's transactions in a run with a standby merger: one a tick, and the fence of
a merger taken over from (docs/design.md, "A standby merger")."""

from __future__ import annotations

from arfl.errors import DeployError
from arfl.measure.merger.kafka import SinkProducer

COMMIT_TIMEOUT_S = 10.0
"""How long committing a transaction may take (once a tick)."""


class Fenced(Exception):
    """A newer merger fenced this one (its transactional producer's fatal error)."""


def fence(producer: SinkProducer, sink: str, timeout_s: float) -> None:
    """Initialise the transactional producer: the merger before this one, if any, is fenced
    from now on (its open transaction aborted, its epoch refused).

    Raises:
        DeployError: the transaction coordinator did not answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaException

    try:
        producer.init_transactions(timeout_s)
    except KafkaException as e:
        raise DeployError(f"merger: init_transactions on {sink}: {e}") from e


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
