"""Key skew of the input: records per partition and per Kafka key, with the hot keys.

The independent check counts every record of the input topic except arfl's own markers
(leaderless heartbeats, end-of-input markers): a hot key or a hot partition explains one slow
task, one replica's lag, or a window that waits. Keys are the Kafka record keys (as the
partitioner saw them), decoded as UTF-8; keyless records are counted apart.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from arfl.measure.check.evaluate import MARKER_HEADER, InputRecord
from arfl.run.records import END_OF_INPUT_FIELD

TOP_KEYS = 10
"""Hot keys kept in the summary."""


@dataclass(frozen=True)
class HotKey:
    """One of the most frequent keys: its text, records and share of the keyed records."""

    key: str
    records: int
    share: float


@dataclass(frozen=True)
class InputSkew:
    """How the input spreads over partitions and keys.

    Attributes:
        records: input records counted (markers left out).
        partitions: partition -> records (every partition of the topic, empty ones as 0).
        keys: distinct Kafka keys.
        keyless: records without a key.
        top_keys: the :data:`TOP_KEYS` most frequent keys, most frequent first (ties: key
            order).
        key_max_mean: the most frequent key's records over the mean per key (1.0: uniform;
            None without keys).
        partition_max_mean: the fullest partition's records over the mean per partition
            (None without records).
    """

    records: int
    partitions: dict[int, int]
    keys: int
    keyless: int
    top_keys: list[HotKey] = field(default_factory=list)
    key_max_mean: float | None = None
    partition_max_mean: float | None = None


def is_marker(rec: InputRecord) -> bool:
    """A leaderless heartbeat (header) or an end-of-input marker (``{"eoi": true, ...}``)."""
    if any(name == MARKER_HEADER for name, _ in rec.headers):
        return True
    value = rec.value
    if rec.key is not None or value is None or END_OF_INPUT_FIELD.encode() not in value:
        return False
    try:
        obj = json.loads(value)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get(END_OF_INPUT_FIELD) is True


def input_skew(records: Iterable[InputRecord], partitions: int = 0) -> InputSkew:
    """Count ``records`` per partition and per key.

    Args:
        records: the input topic's records.
        partitions: the topic's partition count (partitions ``0 .. partitions - 1`` are listed
            even when empty).
    """
    per_partition: Counter[int] = Counter({p: 0 for p in range(partitions)})
    per_key: Counter[str] = Counter()
    keyless = total = 0
    for rec in records:
        if is_marker(rec):
            continue
        total += 1
        per_partition[rec.partition] += 1
        if rec.key is None:
            keyless += 1
        else:
            per_key[rec.key.decode("utf-8", errors="replace")] += 1
    keyed = total - keyless
    top = sorted(per_key.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_KEYS]
    return InputSkew(
        records=total,
        partitions=dict(sorted(per_partition.items())),
        keys=len(per_key),
        keyless=keyless,
        top_keys=[HotKey(k, n, round(n / keyed, 4)) for k, n in top],
        key_max_mean=_max_mean(per_key.values()),
        partition_max_mean=_max_mean(per_partition.values()) if total else None,
    )


def _max_mean(counts: Iterable[int]) -> float | None:
    values = list(counts)
    if not values or not sum(values):
        return None
    return round(max(values) * len(values) / sum(values), 3)
