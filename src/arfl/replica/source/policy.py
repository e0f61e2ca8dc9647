"""Where a batch ends: the interface the replication modes implement.

A :class:`BoundaryPolicy` answers ``latestOffset`` for the reader. Every replication mode
supplies its own (``ReplicationMode.boundary_policy``): :class:`PlainPolicy` (here, modes
``none`` and ``passive``) takes what is available; ``active-leaderless``
(:mod:`arfl.replica.modes.leaderless`) cuts at epoch boundaries found in Kafka's time index;
``active-leader`` (:mod:`arfl.replica.modes.leader`) applies the first decision for each batch
from a shared decision log.
"""

from __future__ import annotations

from typing import Protocol

from arfl.replica.source.kafka import PartitionLog
from arfl.replica.source.offsets import BatchOffset
from arfl.replica.source.options import SourceOptions


class BoundaryPolicy(Protocol):
    """Chooses the end of the next batch."""

    def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
        """The end of the batch that starts at ``start``; ``start`` itself for no batch.

        Args:
            start: where the previous batch ended (or the initial offset).
            max_records: Spark's read limit, if any (``ReadMaxRows``); policies that agree
                with other replicas may ignore it, since a cap would differ between them.
        """
        ...

    def close(self) -> None:
        """Stop threads and clients (the query ended)."""
        ...


def initial_offsets(opts: SourceOptions, log: PartitionLog) -> dict[int, int]:
    """Where every replica's first batch starts: the topic's beginning, or ``starting_offsets``
    (partitions not named: beginning). One definition for the reader's ``initialOffset`` and
    the active-leader decider (its first decision starts there)."""
    from arfl.replica.source.offsets import parse_partition_offsets

    begin = log.low_watermarks()
    if opts.starting_offsets.strip().lower() != "earliest":
        given = parse_partition_offsets(opts.starting_offsets)
        begin = {p: given.get(p, lo) for p, lo in begin.items()}
    return begin


def cap_ends(start: dict[int, int], available: dict[int, int], limit: int | None) -> dict[int, int]:
    """End offsets that take at most ``limit`` log positions in total, fairly per partition.

    Water-filling: every partition gets an equal share; what a partition cannot use goes to
    the others. Deterministic (ascending partition order breaks ties).

    Args:
        start: partition -> first offset of the batch.
        available: partition -> log end (high watermark).
        limit: the cap, or None for everything available.

    Returns:
        Partition -> end offset, ``start[p] <= end[p] <= max(start[p], available[p])``.
    """
    want = {p: max(0, available.get(p, s) - s) for p, s in start.items()}
    if limit is None or sum(want.values()) <= limit:
        return {p: start[p] + want[p] for p in start}
    take = dict.fromkeys(start, 0)
    budget = limit
    hungry = sorted(p for p in start if want[p] > 0)
    while budget > 0 and hungry:
        share, extra = divmod(budget, len(hungry))
        nxt = []
        for i, p in enumerate(hungry):
            give = min(want[p] - take[p], share + (1 if i < extra else 0))
            take[p] += give
            budget -= give
            if take[p] < want[p]:
                nxt.append(p)
        hungry = nxt
    return {p: start[p] + take[p] for p in start}


class PlainPolicy:
    """Take everything available now (capped): Spark's own behaviour, no agreement."""

    def __init__(self, opts: SourceOptions, log: PartitionLog) -> None:
        self._log = log
        self._cap = opts.max_records_per_batch

    def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
        """Up to the high watermarks, at most ``max_records``/``max_records_per_batch``."""
        limit = self._cap if max_records is None else min(self._cap, max_records)
        end = cap_ends(dict(start.offsets), self._log.high_watermarks(), limit)
        if end == dict(start.offsets):
            return start
        return BatchOffset(start.batch + 1, end)

    def close(self) -> None:
        """Nothing to stop."""
