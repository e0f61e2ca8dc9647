"""Record formats shared by the injector, the Spark replicas and the merger.

Input event (injector -> source topic). Kafka key: the event's key field (UTF-8). Value: JSON::

    {"seq": 17, "user": "u42", "amount": 37.5, "ts": 1764106200123, "sent_ms": 1764106200125}

``ts`` is the **intended** send time in epoch ms (fixed-rate schedule; also the event time),
``sent_ms`` the actual send time. The headline latency is measured from ``ts``
(coordinated-omission safe); results carry ``sent_ms`` on as ``sent_ts`` for a second reading.

End-of-input marker (injector -> source topic, one per partition after the last event, written
with an explicit partition and no key). Value: JSON::

    {"eoi": true, "ts": 1764192600123}

``ts`` is the marker's event time, whatever field ``source.event_time`` names: far past every
event (the last intended send time + 1 day), so the watermark passes every window and a finite
run emits its last windows. Replicas let it through their steps as far as the watermark and drop
it right after: it never reaches an aggregation and yields no result. A record is a marker only
when ``eoi`` is JSON ``true``. In a per-record real-time pipeline of filter and select steps
(:attr:`arfl.configs.spec.Spec.passes_markers`) the marker goes on to the replica's topic as a
*marker copy* (below): a real-time batch reports its progress only when it ends, up to an
interval after the input did, while the marker copy says at once that the replica has read its
partition to the end (the drain's test, :func:`arfl.orchestrate.watch.markers_passed`).

Replica output (replica N -> its own topic ``replica_topic(sink, N)``). Key: the result id.
Value: JSON::

    {"rid": "2:1234", "src_ts": 1764106200123, "sent_ts": 1764106200125, "replica": 0,
     "hash": "9f2c...", "data": {...the result's columns...}}

* ``rid``: deterministic result id: ``"<partition>:<offset>"`` of the input record for
  per-record pipelines, ``"<window start ms>-<window end ms>:<key>"`` for window aggregates,
  and ``"<window start ms>-<window end ms>"`` (no ``:``) when the window's key is null, so a
  null key never shares an id with the string ``"null"``. A step that turns one input record
  into several rows (``explode``, ``stack``, ...) would give them one id: it is refused.
  Window aggregates under real-time mode (``replication.trigger = "realtime"``, update output
  mode) emit one *update* per input record that reaches the window; its rid is the window's
  followed by ``#<n>``, n = records aggregated into the window so far (1, 2, ...; see
  :func:`update_rid`). The update with the largest n is the window's final value. Such a
  replica's Kafka key is the *window* rid (without ``#n``), so a compacted topic keeps each
  window's final value, as a Spark user of update mode expects.
* ``src_ts``: the newest contributing event's intended send time (``ts``, ms).
* ``sent_ts``: the newest contributing event's actual send time (``sent_ms``, ms): the event's
  own for a per-record result, the maximum over the window's events for a window. Absent
  (read as ``None``) when the contributing events carry no ``sent_ms`` (a user's own topic).
* ``hash``: SHA-256 (hex) of the canonical JSON of ``data`` as Spark's ``to_json`` renders it;
  copies of one rid from different replicas must carry the same hash (divergence check).
* ``eoi``: present (JSON ``true``) only on a *marker copy*: the end-of-input marker of the
  input partition its rid names, passed through the steps (its ``data`` holds only what the
  steps make of the marker's ``ts`` and its null fields: nothing is read from it). The
  merger counts it for the replica and never forwards it: it is no result.

Final output (merger -> the spec's sink topic): the first copy of each rid, unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson

from arfl.coerce import opt_int

END_OF_INPUT_FIELD = "eoi"
"""Input field that marks an end-of-input marker (JSON ``true``)."""
END_OF_INPUT_LEAD_MS = 86_400_000
"""How far past the last event's intended time an end-of-input marker's event time lies."""


def end_of_input_marker(event_time_ms: int) -> bytes:
    """The JSON value of an end-of-input marker whose event time is ``event_time_ms``."""
    return json.dumps(
        {END_OF_INPUT_FIELD: True, "ts": int(event_time_ms)}, separators=(",", ":")
    ).encode()


UPDATE_SEP = "#"
"""Separator between a window's rid and the update number n in an update rid."""


def update_rid(window_rid: str, n: int) -> str:
    """Result id of the n-th update (n >= 1) of a window under real-time mode."""
    return f"{window_rid}{UPDATE_SEP}{n}"


def split_update(rid: str) -> tuple[str, int | None]:
    """``(window rid, n)`` of an update rid; ``(rid, None)`` for any other rid.

    The window key may itself contain ``#``: only a trailing ``#<digits>`` is the update number.
    """
    head, sep, tail = rid.rpartition(UPDATE_SEP)
    if sep and tail.isdigit() and head:
        return head, int(tail)
    return rid, None


class HasRid(Protocol):
    """Anything that carries a result id (a :class:`Result`, the check's delivered records)."""

    @property
    def rid(self) -> str | None: ...


_R = TypeVar("_R", bound=HasRid)


def final_values(results: Iterable[_R]) -> dict[str, _R]:
    """Each window's final value: window rid -> its update with the largest n.

    Only update rids (``<window>#<n>``) count: per-record and append-mode window results, and
    records without a rid, are left out. Of several copies of the final update, the first
    is kept (copies of one rid carry one value in a correct run; the divergence and
    correctness checks judge copies).
    """
    best: dict[str, tuple[int, _R]] = {}
    for r in results:
        if r.rid is None:
            continue
        window, n = split_update(r.rid)
        if n is not None and (window not in best or n > best[window][0]):
            best[window] = (n, r)
    return {window: r for window, (_, r) in best.items()}


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
    sent_ts: int | None = None
    """Actual send time (ms) of the newest contributing event, when the input carried it."""
    eoi: bool = False
    """A marker copy (module docstring): no result."""


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
        # orjson: the merger parses every copy (two a result at R=2); the stdlib's parser cost
        # it ~10 % of its Python thread (docs/benchmarks.md, "Where the merger's cores go").
        obj = orjson.loads(value)
        return Result(
            rid=str(obj["rid"]),
            src_ts=int(obj["src_ts"]),
            replica=int(obj["replica"]),
            hash=str(obj["hash"]),
            data=dict(obj.get("data") or {}),
            sent_ts=opt_int(obj.get("sent_ts")),
            eoi=obj.get(END_OF_INPUT_FIELD) is True,
        )
    except (ValueError, KeyError, TypeError) as e:
        raise BadRecord(f"not a result record: {e}") from None


class Copy(NamedTuple):
    """What the merger decides one copy on: :class:`Result` without its data."""

    rid: str
    src_ts: int
    hash: str
    sent_ts: int | None
    eoi: bool = False
    """A marker copy (module docstring): no result."""


def parse_copy(value: bytes | None) -> Copy:
    """:func:`parse_result`'s checks, without building the result's data: the merger reads
    every copy (two a result at R=2) and needs the data only of a divergent one
    (:func:`copy_data`).

    Raises:
        BadRecord: what :func:`parse_result` refuses.
    """
    if value is None:
        raise BadRecord("empty value")
    try:
        obj = orjson.loads(value)
        int(obj["replica"])
        data = obj.get("data")
        if data and not isinstance(data, dict):
            dict(data)
        sent = obj.get("sent_ts")
        return Copy(
            str(obj["rid"]), int(obj["src_ts"]), str(obj["hash"]),
            None if sent is None else int(sent), obj.get(END_OF_INPUT_FIELD) is True,
        )  # fmt: skip
    except (ValueError, KeyError, TypeError) as e:
        raise BadRecord(f"not a result record: {e}") from None


def copy_data(value: bytes | None) -> dict[str, Any] | None:
    """The data of a copy :func:`parse_copy` accepted (None for anything else)."""
    try:
        return parse_result(value).data
    except BadRecord:
        return None
