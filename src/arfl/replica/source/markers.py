"""Marker (heartbeat) records written into input partitions by the replication layer.

A marker carries the Kafka header ``arfl-marker`` (its value names the kind, ``heartbeat``)
and a JSON value ``{"__arfl_epoch": e, "replica": r}``. It never reaches the user's pipeline:
the source drops every record with that header in ``read``. The header is what identifies a
marker, so a user event that happens to contain ``__arfl_epoch`` is still delivered.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

MARKER_HEADER = "arfl-marker"
HEARTBEAT = b"heartbeat"
EPOCH_FIELD = "__arfl_epoch"

Headers = Sequence[tuple[str, bytes | None]]


def heartbeat(epoch: int, replica: int) -> tuple[bytes, list[tuple[str, str | bytes | None]]]:
    """A heartbeat marker's value and headers.

    Args:
        epoch: the epoch the marker announces (``floor(now / interval)``).
        replica: the writing replica's index (diagnostics only; duplicates are harmless).

    Returns:
        ``(value, headers)`` ready for ``Producer.produce``.
    """
    value = json.dumps({EPOCH_FIELD: epoch, "replica": replica}, separators=(",", ":"))
    return value.encode(), [(MARKER_HEADER, HEARTBEAT)]


def is_marker(headers: Headers | None) -> bool:
    """True when a record's headers mark it as an arfl marker."""
    if not headers:
        return False
    return any(name == MARKER_HEADER for name, _ in headers)


def marker_epoch(value: bytes | None) -> int | None:
    """The epoch a marker's value announces, or None if it is not a marker value."""
    if value is None:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get(EPOCH_FIELD), int):
        return int(data[EPOCH_FIELD])
    return None
