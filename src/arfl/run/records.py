"""Record formats shared by the injector, the Spark replicas and the merger.

Input event (injector -> source topic). Kafka key: the event's key field (UTF-8). Value: JSON::

    {"seq": 17, "user": "u42", "amount": 37.5, "ts": 1764106200123, "sent_ms": 1764106200125}

``ts`` is the **intended** send time in epoch ms (fixed-rate schedule; also the event time),
``sent_ms`` the actual send time. Latency is measured from ``ts`` (coordinated-omission safe).

Replica output (replica N -> its own topic ``replica_topic(sink, N)``). Key: the result id.
Value: JSON::

    {"rid": "2:1234", "src_ts": 1764106200123, "replica": 0, "hash": "9f2c...",
     "data": {...the result's columns...}}

* ``rid``: deterministic result id: ``"<partition>:<offset>"`` of the input record for
  per-record pipelines, ``"<window start ms>-<window end ms>:<key>"`` for window aggregates.
* ``src_ts``: the newest contributing event's intended send time (ms).
* ``hash``: SHA-256 (hex) of the canonical JSON of ``data`` as Spark's ``to_json`` renders it;
  copies of one rid from different replicas must carry the same hash (divergence check).

Final output (merger -> the spec's sink topic): the first copy of each rid, unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def replica_topic(sink_topic: str, replica: int) -> str:
    """The output topic of one replica."""
    return f"{sink_topic}.r{replica}"


@dataclass(frozen=True, slots=True)
class Result:
    """One replica output record, parsed."""

    rid: str
    src_ts: int
    replica: int
    hash: str
    data: dict[str, Any]


class BadRecord(ValueError):
    """A record that is not a replica output record (counted and skipped, never a crash)."""


def parse_result(value: bytes | None) -> Result:
    """Parse a replica output record.

    Raises:
        BadRecord: not JSON, or a field is missing or of the wrong type.
    """
    if value is None:
        raise BadRecord("empty value")
    try:
        obj = json.loads(value)
        return Result(
            rid=str(obj["rid"]),
            src_ts=int(obj["src_ts"]),
            replica=int(obj["replica"]),
            hash=str(obj["hash"]),
            data=dict(obj.get("data") or {}),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise BadRecord(f"not a result record: {e}") from None
