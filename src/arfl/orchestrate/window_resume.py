"""Where a restarted windowed replica starts when it resumes at a window's start
(``replication.resume = "window"``, :mod:`arfl.configs.window_start`): a window boundary ``S``
and, per input partition, the offset of its first event of time ``S`` or later.

``S`` lies :data:`~arfl.configs.window_start.WINDOW_START_MARGIN_MS` behind the oldest of every
other replica's newest result (its ``last_src_ts`` in the merger's latest monitor line),
rounded down to the window size. The injector sends events in event-time order, so every event
before that result's was sent before it, and the margin covers the partitions' producer
batches: every window before ``S`` has all its events in the input and read by every other
replica, which finish it; every window from ``S`` on is read whole by the newcomer. A
partition's first event at or after ``S`` is found from Kafka's time index (a record's
timestamp is its send time, never before its event time) and a short scan of all partitions at
once. Anything that cannot be placed (a replica with no result, or one whose newest is old: far
behind, or the input ended; an input record without the event time; Kafka not answering in
time) is a reason, and the caller resumes from a peer's checkpoint instead.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from arfl.configs.window_start import WINDOW_START_MARGIN_MS
from arfl.run.records import END_OF_INPUT_FIELD

TIMESTAMP_SLACK_MS = 1_000
"""How far before ``S`` Kafka's time index is asked: a record's timestamp (its producer's clock
at the send) is at or after its event time, give or take the clocks' milliseconds."""
PLACE_TIMEOUT_S = 2.0
"""How long placing may take in all: the standby waits for it."""
INPUT_ENDED = "the input has ended"
"""What :func:`_event_time` says of an end-of-input marker (a day past the last event: at or
after any start)."""
POLL_S = 0.01
"""One poll of the scan: what arrived by then is read, and the scan goes on."""
MAX_BEHIND_MARGINS = 3
"""Another replica's newest result older than this many margins (plus a window) means it is
behind, or the input ended: a peer's checkpoint is the better start then."""


@dataclass(frozen=True)
class WindowStart:
    """A placed start: the window boundary and each partition's first offset at or after it."""

    start_ms: int
    offsets: dict[int, int]
    replay: dict[int, int]
    """Per partition, how many records the newcomer reads again up to the input's end now."""


def newest_results(monitor: Path, others: list[int]) -> dict[int, int | None]:
    """Each of ``others``' newest result's ``src_ts`` (ms) in the merger's latest monitor line
    (None: none yet, or no line)."""
    try:
        with monitor.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            lines = f.read().splitlines()
    except OSError:
        return dict.fromkeys(others)
    for raw in reversed(lines):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        replicas = line.get("replicas") if isinstance(line, dict) else None
        if isinstance(replicas, dict):
            out: dict[int, int | None] = {}
            for r in others:
                ts = (replicas.get(str(r)) or {}).get("last_src_ts")
                out[r] = int(ts) if isinstance(ts, (int, float)) else None
            return out
    return dict.fromkeys(others)


def _event_time(value: bytes | None, field: str) -> int | str:
    """A record's event time (ms), or why it has none."""
    try:
        event = json.loads(value or b"")
    except ValueError:
        return "an input record is not JSON"
    if not isinstance(event, dict):
        return "an input record is not a JSON object"
    if event.get(END_OF_INPUT_FIELD) is True:
        return INPUT_ENDED
    et = event.get(field)
    if isinstance(et, bool) or not isinstance(et, (int, float)):
        return f"an input record has no numeric {field!r}"
    return int(et)


def _first_at_or_after(
    consumer: Any,
    topic: str,
    positions: Mapping[int, tuple[int, int]],
    field: str,
    start_ms: int,
    deadline: float,
) -> dict[int, int] | str:
    """Each partition's first offset in ``[from, end)`` (``positions``) whose event time is at
    least ``start_ms`` (``end`` when none is), reading all partitions at once; or why not."""
    found = {p: end for p, (at, end) in positions.items() if at >= end}
    todo = {p: (at, end) for p, (at, end) in positions.items() if at < end}
    if not todo:
        return found
    consumer.assign([TopicPartition(topic, p, at) for p, (at, _) in sorted(todo.items())])
    try:
        while todo:
            left = deadline - time.monotonic()
            if left <= 0:
                return "the input was not read in time"
            # consume() waits for all num_messages or the timeout: short polls return sooner.
            for msg in consumer.consume(num_messages=500, timeout=min(left, POLL_S)):
                p = msg.partition()
                if msg.error() is not None or p not in todo:
                    continue
                et = _event_time(msg.value(), field)
                if isinstance(et, str) and et != INPUT_ENDED:
                    return et
                # An end-of-input marker lies a day past the last event: at or after any start.
                if et == INPUT_ENDED or (isinstance(et, int) and et >= start_ms):
                    found[p] = msg.offset()
                    del todo[p]
                elif msg.offset() + 1 >= todo[p][1]:
                    found[p] = todo[p][1]
                    del todo[p]
    finally:
        consumer.unassign()
    return found


def place(
    consumer: Any,
    topic: str,
    floors: Mapping[int, int],
    field: str,
    size_ms: int,
    others_newest: Mapping[int, int | None],
    timeout_s: float = PLACE_TIMEOUT_S,
    now_ms: int | None = None,
) -> WindowStart | str:
    """Place a start (module docstring) on ``topic``'s partitions, none before its ``floors``
    offset (deploy's start offsets); ``others_newest``: every other replica's newest result's
    ``src_ts`` (ms); ``now_ms``: the clock (tests).

    Returns:
        The start, or why none could be placed.
    """
    deadline = time.monotonic() + timeout_s
    behind = [r for r, ts in sorted(others_newest.items()) if ts is None]
    if behind or not others_newest:
        return f"replica {behind[0] if behind else '-'} has delivered no result yet"
    anchor = min(ts for ts in others_newest.values() if ts is not None)
    now = round(time.time() * 1000) if now_ms is None else now_ms
    if now - anchor > size_ms + MAX_BEHIND_MARGINS * WINDOW_START_MARGIN_MS:
        return (
            f"the other replicas' newest result is {(now - anchor) / 1000:.1f} s old "
            "(behind, or the input has ended)"
        )
    start = (anchor - WINDOW_START_MARGIN_MS) // size_ms * size_ms
    try:
        ends: dict[int, tuple[int, int]] = {}
        for p, floor in sorted(floors.items()):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=max(0.1, deadline - time.monotonic())
            )
            ends[p] = (max(low, floor), high)
        asked = consumer.offsets_for_times(
            [TopicPartition(topic, p, start - TIMESTAMP_SLACK_MS) for p in sorted(ends)],
            timeout=max(0.1, deadline - time.monotonic()),
        )
        positions = {}
        for tp in asked:
            first, high = ends[tp.partition]
            positions[tp.partition] = (high if tp.offset < 0 else max(first, tp.offset), high)
        offsets = _first_at_or_after(consumer, topic, positions, field, start, deadline)
    except KafkaException as e:
        return f"the input was not read in time ({e})"
    if isinstance(offsets, str):
        return offsets
    return WindowStart(start, offsets, {p: ends[p][1] - o for p, o in sorted(offsets.items())})


PlaceStart = Callable[
    [str, Mapping[int, int], str, int, Mapping[int, int | None]], "WindowStart | str"
]
"""Places a window start: ``(topic, floors, field, size_ms, others_newest)`` -> a
:class:`WindowStart` or why not (:class:`Placer`, over its consumer)."""


class Placer:
    """:func:`place` over one consumer kept connected for the run (a take-over waits for the
    placing: a consumer started then added ~0.2 s to it); :meth:`close` it."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._consumer: Any | None = None

    def connect(self) -> None:
        """Start the consumer and its connection to Kafka now, before a restart needs it."""
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": "arfl-window-start",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 10,
                }
            )
            with contextlib.suppress(KafkaException):
                self._consumer.list_topics(timeout=PLACE_TIMEOUT_S)

    def __call__(
        self,
        topic: str,
        floors: Mapping[int, int],
        field: str,
        size_ms: int,
        others_newest: Mapping[int, int | None],
    ) -> WindowStart | str:
        """:func:`place` over the placer's consumer."""
        self.connect()
        return place(self._consumer, topic, floors, field, size_ms, others_newest)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
