"""Expected results of a pipeline, computed from its input records without Spark.

:func:`expected_results` applies the spec's steps to the input topic's records and returns
every result the pipeline should deliver, keyed by result id, split by whether the check can
judge it:

* ``judged``: results the final output must hold, exactly once and with this value;
* ``late``: windows that Spark may have cut short because some of their rows arrived after the
  watermark had passed the window (see below); delivered or not, their value is not judged;
* ``open``: windows the final watermark never passed (Spark emits a window once it is final),
  not required either.

**Lateness.** Spark drops a row from a window when the window's end is at or before the
watermark, and the watermark of a micro-batch is the newest event time seen in *earlier*
batches minus ``window.watermark``. Batch boundaries are not visible from the topics, so the
check takes every record that was appended to the input topic before a row (by broker
timestamp; the input topic uses ``LogAppendTime``) as possibly being in an earlier batch. A
(row, window) pair is *late* when ``window end <= newest event time appended before the row -
watermark``, and a window with a late pair is "late-affected, not judged". This over-counts
(records appended before a row may still share its batch), never under-counts, as long as a
batch only holds records appended before it was planned (true of Spark's Kafka source and of
arfl's, except when ``max_records_per_batch`` cuts a partition short).

**Generated late events** (``workload.late``). An event whose event time lags its ``ts`` by
:func:`arfl.configs.lateness.late_lag_ms` or more (the one definition the generator and the
offline recomputation share) lies before the run's first event, behind the watermark of any
replica that has run a batch with data: the check expects it dropped from every window the
model above finds it possibly late for (a window it is surely on time for keeps it) and does
not count those windows late-affected. A replica started without a checkpoint mid-run
(watermark 0 in its first batch) may still keep one: its copy of the window then differs,
which the divergence check reports.

**Finality.** A window is required when it ends before the final watermark: the newest event
time among the rows that reach the window (Spark pushes a filter that does not read the event
time below its watermark, so filtered-out rows may never advance it) and end-of-input markers,
minus the delay. Lateness, on the other side, counts every row's event time: both choices
over-estimate what the check may not judge.

**Updates** (``spec.emits_updates``: a window under real-time mode, update output mode).
Spark emits one updated row per row that reaches the window, at once, without waiting for the
watermark. The check keeps running aggregates per (window, key) and, for the n-th row
aggregated into it, expects the update ``"<window rid>#<n>"`` (:func:`arfl.run.records.update_rid`)
holding the running values after those n rows, with the steps after the window applied (an
update they drop is not expected, so some n may be missing). Rows are counted in offset order
of their partition: the window key is the partitioning key, so one (window, key) reads one
partition, and every replica counts its rows in the same order; a (window, key) fed by two
partitions has no such order and makes the check unsupported. Lateness is modelled as above
(the watermark is fixed within a batch in real-time mode too): every update of a late-affected
window is "late, not judged", because a dropped row shifts the n of the rows after it. Every
update of any other window is judged, whether or not the final watermark passed the window:
update mode has no "open" windows. The window's *final value* is its update with the largest
n that the steps after the window keep (:attr:`Expected.final`).

Records are read in offset order per partition; marker records are skipped: leaderless
heartbeats (header ``arfl-marker``) and end-of-input markers (a JSON value with ``"eoi": true``,
see :mod:`arfl.run.records`; their event time still advances the watermark, as it does in the
replicas).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from arfl.configs.expr import (
    Type,
    Unsupported,
    Value,
)
from arfl.configs.lateness import is_late
from arfl.configs.spec import Spec
from arfl.measure.check.pipeline import Agg, Pipeline, RowStep, RowT, Windowing, compile_pipeline
from arfl.run.records import END_OF_INPUT_FIELD, split_update, update_rid

MARKER_HEADER = "arfl-marker"
"""Header that marks a replication-layer record (the same name as
``arfl.replica.source.markers.MARKER_HEADER``, repeated here: the check imports no replica code)."""
TS_FIELD = "ts"
"""The injector's intended send time (ms): a record without an integer ``ts`` is not an event."""


def record_rid(partition: int, offset: int) -> str:
    """Result id of a per-record result: ``"<partition>:<offset>"``."""
    return f"{partition}:{offset}"


def window_rid(start_ms: int, end_ms: int, key: Value) -> str:
    """Result id of a window result: ``"<start ms>-<end ms>:<key>"``, the key as Spark casts
    it to a string; ``"<start ms>-<end ms>"`` when the key is null."""
    if key is None:
        return f"{start_ms}-{end_ms}"
    return f"{start_ms}-{end_ms}:{_key_text(key)}"


def _key_text(key: Value) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | str):
        return str(key)
    raise Unsupported(f"window key value {key!r}: Spark's string form is not modelled")


# --- input ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One record of the input topic, as read from Kafka."""

    partition: int
    offset: int
    timestamp_ms: int | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    key: bytes | None = None
    log_append_time: bool = False
    """``timestamp_ms`` is the broker's (``LogAppendTime``), not the producer's."""


@dataclass(frozen=True)
class Expected:
    """What the pipeline should have delivered (see the module docstring).

    Attributes:
        judged: rid -> the result's data (NULL columns left out, as Spark's ``to_json`` does).
            Update rids (``<window>#<n>``) when ``updates``.
        late: rid -> data computed from every row, for late-affected windows (None when a
            step after the window drops it); with ``updates``, every update 1..N of such a
            window (N = all its rows).
        open: rid -> data (or None, likewise), for windows the final watermark never passed
            (always empty with ``updates``: updates do not wait for the watermark).
        input_records: records read from the input topic, markers included.
        markers: heartbeat and end-of-input markers skipped.
        bad: records that are not events (not a JSON object, no integer ``ts``/event time).
        final_watermark_ms: the newest event time among rows that reach the window and
            end-of-input markers, minus the watermark delay (window pipelines).
        updates: the window emits updates (real-time mode, update output mode).
        final: window rid -> (update rid, data) of the window's expected final value: its
            judged update with the largest n (``updates`` only; windows whose every update
            the steps after the window drop have none).
    """

    judged: dict[str, dict[str, Value]]
    late: dict[str, dict[str, Value] | None] = field(default_factory=dict)
    open: dict[str, dict[str, Value] | None] = field(default_factory=dict)
    input_records: int = 0
    markers: int = 0
    bad: int = 0
    final_watermark_ms: int | None = None
    updates: bool = False
    final: dict[str, tuple[str, dict[str, Value]]] = field(default_factory=dict)
    dropped_late: int = 0
    """Generated late events (:func:`arfl.configs.lateness.late_lag_ms`) left out of every
    window, as Spark's watermark drops them."""

    @property
    def late_windows(self) -> int:
        """Late-affected windows (``late`` holds one rid per update of each with ``updates``)."""
        if not self.updates:
            return len(self.late)
        return len({split_update(rid)[0] for rid in self.late})


def _is_heartbeat(rec: InputRecord) -> bool:
    return any(name == MARKER_HEADER for name, _ in rec.headers)


def _typed(value: Any, typ: Type, name: str, where: str) -> Value:
    """A JSON value as a field of ``typ`` reads it (Spark's from_json, PERMISSIVE)."""
    if value is None:
        return None
    if typ == "long":
        # from_json leaves a long field NULL for anything but a JSON integer.
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if typ == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            raise Unsupported(f"input {where}: field {name!r} is a string; Spark's reading of "
                              "strings as doubles is not modelled")  # fmt: skip
        return None
    if isinstance(value, str):
        return value
    raise Unsupported(
        f"input {where}: field {name!r} is a JSON {type(value).__name__}; Spark renders it "
        "as a string in a way the check does not model"
    )


def parse_event(rec: InputRecord, pipeline: Pipeline) -> tuple[RowT, int | None] | None:
    """An input record as the pipeline sees it: ``(row, event time ms)``, or None if Spark's
    parser drops it (not a JSON object, no integer ``ts``, no event time for a window)."""
    if rec.value is None:
        return None
    try:
        obj = json.loads(rec.value)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    where = record_rid(rec.partition, rec.offset)
    row = {n: _typed(obj.get(n), t, n, where) for n, t in pipeline.fields.items()}
    if row[TS_FIELD] is None:
        return None
    et: int | None = None
    if pipeline.window is not None:
        assert pipeline.event_time is not None
        raw_et = row[pipeline.event_time]
        if raw_et is None:
            return None
        assert isinstance(raw_et, int)
        et = raw_et
    return row, et


def _end_of_input(rec: InputRecord, pipeline: Pipeline) -> tuple[bool, int | None]:
    """Whether ``rec`` is an end-of-input marker, and the event time it carries (its
    event-time field, else ``ts``, as arfl.run.records describes; None without either)."""
    if rec.value is None or b'"' + END_OF_INPUT_FIELD.encode() + b'"' not in rec.value:
        return False, None
    try:
        obj = json.loads(rec.value)
    except ValueError:
        return False, None
    if not isinstance(obj, dict) or obj.get(END_OF_INPUT_FIELD) is not True:
        return False, None
    for name in (pipeline.event_time, TS_FIELD):
        v = obj.get(name) if name else None
        if isinstance(v, int) and not isinstance(v, bool):
            return True, v
    return True, None


# --- evaluation -------------------------------------------------------------------------


def _run(steps: Sequence[RowStep], row: RowT | None) -> RowT | None:
    for s in steps:
        if row is None:
            return None
        row = s.apply(row)
    return row


def _data(row: RowT) -> dict[str, Value]:
    return {k: v for k, v in row.items() if v is not None}


def expected_results(spec: Spec, records: Iterable[InputRecord]) -> Expected:
    """Every result ``spec`` should produce from ``records`` (the whole input topic).

    Args:
        spec: the pipeline (topic names do not matter).
        records: the input topic's records, in offset order within each partition (the
            partitions may be interleaved in any way).

    Raises:
        Unsupported: the spec, or a value in the input, is outside what the check models.
    """
    pipeline = compile_pipeline(spec)
    by_partition: dict[int, list[InputRecord]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    if pipeline.window is None:
        return _per_record(pipeline, by_partition)
    return _windowed(pipeline, pipeline.window, by_partition)


def _per_record(pipeline: Pipeline, parts: dict[int, list[InputRecord]]) -> Expected:
    judged: dict[str, dict[str, Value]] = {}
    total = markers = bad = 0
    for p in sorted(parts):
        for rec in parts[p]:
            total += 1
            if _is_heartbeat(rec) or _end_of_input(rec, pipeline)[0]:
                markers += 1
                continue
            parsed = parse_event(rec, pipeline)
            if parsed is None:
                bad += 1
                continue
            out = _run(pipeline.before, parsed[0])
            if out is not None:
                judged[record_rid(rec.partition, rec.offset)] = _data(out)
    return Expected(judged, input_records=total, markers=markers, bad=bad)


def _arrival_order(parts: dict[int, list[InputRecord]]) -> Iterator[list[InputRecord]]:
    """Records grouped by broker timestamp, oldest first (offset order kept per partition)."""
    lists = [[(r.timestamp_ms or 0, r.partition, r.offset, r) for r in rs] for rs in parts.values()]
    merged = heapq.merge(*lists)
    group: list[InputRecord] = []
    for ts, _, _, rec in merged:
        if group and (group[0].timestamp_ms or 0) != ts:
            yield group
            group = []
        group.append(rec)
    if group:
        yield group


class _AggState:
    """Running aggregates of one (window, key)."""

    def __init__(self, aggs: tuple[Agg, ...]) -> None:
        self.aggs = aggs
        self.rows = 0
        self.count = [0] * len(aggs)
        self.acc: list[Any] = [None] * len(aggs)

    def add(self, row: RowT) -> None:
        self.rows += 1
        for i, a in enumerate(self.aggs):
            if a.column is None:
                continue
            v = row[a.column]
            if v is None:
                continue
            self.count[i] += 1
            cur = self.acc[i]
            if a.fn in ("sum", "avg"):
                exact = _exact(v)
                self.acc[i] = exact if cur is None else cur + exact
            elif a.fn == "min":
                self.acc[i] = v if cur is None or v < cur else cur
            elif a.fn == "max":
                self.acc[i] = v if cur is None or v > cur else cur

    def values(self) -> list[Value]:
        out: list[Value] = []
        for i, a in enumerate(self.aggs):
            if a.fn == "count":
                out.append(self.rows if a.column is None else self.count[i])
            elif self.acc[i] is None:
                out.append(None)
            elif a.fn == "sum":
                out.append(_sum_value(self.acc[i], a.type))
            elif a.fn == "avg":
                out.append(_avg_value(self.acc[i], self.count[i], a.type))
            else:
                out.append(self.acc[i])
        return out


_SCALE_10 = Decimal("1e-10")
_SCALE_14 = Decimal("1e-14")


def _exact(v: Value) -> int | Decimal:
    """A value to sum exactly: a double as Spark casts it to ``decimal(38,10)`` (its shortest
    decimal form, rounded half up to 10 places), integers and decimals as they are."""
    if isinstance(v, float):
        return Decimal(repr(v)).quantize(_SCALE_10, rounding=ROUND_HALF_UP)
    assert isinstance(v, int | Decimal) and not isinstance(v, bool)
    return v


def _sum_value(acc: int | Decimal, typ: Type) -> Value:
    if typ == "double":
        return float(acc)
    if typ == "long":
        assert isinstance(acc, int)
        if not -(1 << 63) <= acc < (1 << 63):
            raise Unsupported(f"a long sum overflows 64 bits ({acc})")
        return acc
    return acc


def _avg_value(acc: int | Decimal, n: int, typ: Type) -> Value:
    del typ
    if isinstance(acc, int):
        # Spark averages a long column in double arithmetic.
        return float(acc) / n
    with localcontext() as ctx:
        ctx.prec = 80
        # avg over decimal(38,10) is decimal(38,14), rounded half up, then cast to double.
        return float((acc / n).quantize(_SCALE_14, rounding=ROUND_HALF_UP))


def _group_bounds(group: list[tuple[int, int]], newest: int | None) -> list[int | None]:
    """For each ``(partition, event time)`` of one timestamp group (offset order within a
    partition): the newest event time of the group's other partitions, of the earlier records
    of its own partition, and ``newest`` (everything appended before the group)."""
    top: dict[int, int] = {}
    for part, et in group:
        top[part] = max(top.get(part, et), et)
    ranked = sorted(top.items(), key=lambda kv: kv[1], reverse=True)
    out: list[int | None] = []
    own: dict[int, int] = {}
    for part, et in group:
        # The newest of the other partitions: the top one unless it is this partition.
        others = next((e for p, e in ranked if p != part), None)
        cands = [c for c in (newest, others, own.get(part)) if c is not None]
        out.append(max(cands) if cands else None)
        own[part] = max(own.get(part, et), et)
    return out


def _window_starts(et: int, size: int, slide: int) -> list[int]:
    last = et - et % slide  # floor, also for event times before 1970
    out = []
    start = last
    while start > et - size:
        out.append(start)
        start -= slide
    return out


_GroupKey = tuple[int, int, Value]
"""(window start ms, window end ms, key)."""


def _windowed(pipeline: Pipeline, w: Windowing, parts: dict[int, list[InputRecord]]) -> Expected:
    states: dict[_GroupKey, _AggState] = {}
    late: set[_GroupKey] = set()
    # Update mode: the data of update n at index n - 1 (None when a step after the window
    # drops it), and the partition that feeds each (window, key).
    history: dict[_GroupKey, list[dict[str, Value] | None]] = {}
    partition_of: dict[_GroupKey, int] = {}
    total = markers = bad = dropped_late = 0
    newest: int | None = None  # newest event time among records appended before this group
    # Spark pushes filters that do not read the event time below the watermark: only rows
    # that reach the window (and end-of-input markers) are sure to advance it.
    newest_kept: int | None = None
    for group in _arrival_order(parts):
        seen: list[tuple[InputRecord, RowT | None, int]] = []
        for rec in group:
            total += 1
            if _is_heartbeat(rec):
                markers += 1
                continue
            eoi, eoi_time = _end_of_input(rec, pipeline)
            if eoi:
                # Not a result, but its event time advances the watermark as in the replicas.
                markers += 1
                if eoi_time is not None:
                    seen.append((rec, None, eoi_time))
                continue
            parsed = parse_event(rec, pipeline)
            if parsed is None:
                bad += 1
                continue
            assert parsed[1] is not None
            seen.append((rec, parsed[0], parsed[1]))
        # Within one timestamp, a record of another partition (or an earlier offset of the
        # same one) may have been in an earlier batch too: the newest event time among those
        # and everything appended earlier bounds the row's watermark.
        bounds = _group_bounds([(rec.partition, et) for rec, _, et in seen], newest)
        for (rec, event, et), bound in zip(seen, bounds, strict=True):
            if event is None:
                newest_kept = et if newest_kept is None else max(newest_kept, et)
                continue
            out = _run(pipeline.before, event)
            if out is None:
                continue
            newest_kept = et if newest_kept is None else max(newest_kept, et)
            key = out[w.key_column]
            ts = event[TS_FIELD]
            generated_late = isinstance(ts, int) and is_late(ts, et, pipeline.late_lag_ms)
            kept = False
            for start in _window_starts(et, w.size_ms, w.slide_ms):
                gk = (start, start + w.size_ms, key)
                possibly_late = bound is not None and start + w.size_ms <= bound - w.delay_ms
                if possibly_late and generated_late:
                    continue  # built to be behind the watermark: expected dropped
                kept = True
                st = states.setdefault(gk, _AggState(w.aggs))
                st.add(out)
                if possibly_late:
                    late.add(gk)
                if pipeline.updates:
                    # _arrival_order keeps each partition's offset order: this is row n.
                    _one_partition(partition_of, gk, rec.partition)
                    history.setdefault(gk, []).append(_window_output(pipeline, w, gk, st))
            dropped_late += not kept
        if seen:
            top = max(e for _, _, e in seen)
            newest = top if newest is None else max(newest, top)
    final_wm = None if newest_kept is None else newest_kept - w.delay_ms
    order = sorted(states, key=lambda gk: (gk[0], str(gk[2])))
    if pipeline.updates:
        judged_u, late_u, final = _expected_updates(order, history, late)
        return Expected(
            judged_u, late_u, {}, total, markers, bad, final_wm, updates=True, final=final,
            dropped_late=dropped_late,
        )  # fmt: skip
    judged: dict[str, dict[str, Value]] = {}
    late_out: dict[str, dict[str, Value] | None] = {}
    open_out: dict[str, dict[str, Value] | None] = {}
    for gk in order:
        rid = window_rid(*gk)
        data = _window_output(pipeline, w, gk, states[gk])
        if gk in late:
            late_out[rid] = data
        elif final_wm is None or not gk[1] < final_wm:
            # A window ending exactly at the final watermark may or may not have been emitted.
            open_out[rid] = data
        elif data is not None:
            judged[rid] = data
    return Expected(
        judged, late_out, open_out, total, markers, bad, final_wm, dropped_late=dropped_late
    )


def _window_output(
    pipeline: Pipeline, w: Windowing, gk: _GroupKey, st: _AggState
) -> dict[str, Value] | None:
    """The window's row with the aggregates so far, through the steps after the window."""
    start, end, key = gk
    result: RowT = {"window_start": start, "window_end": end, w.key_name: key}
    result.update(zip([a.name for a in w.aggs], st.values(), strict=True))
    out = _run(pipeline.after, result)
    return _data(out) if out is not None else None


def _one_partition(partition_of: dict[_GroupKey, int], gk: _GroupKey, partition: int) -> None:
    """Refuse a (window, key) fed by two partitions: the order in which Spark interleaves
    them, and so the n of each update, is not determined."""
    first = partition_of.setdefault(gk, partition)
    if first != partition:
        raise Unsupported(
            f"window {window_rid(*gk)} has rows in partitions {first} and {partition}: the "
            "order of its updates is not determined (update mode needs the window key to be "
            "the input's partitioning key)"
        )


def _expected_updates(
    order: list[_GroupKey],
    history: dict[_GroupKey, list[dict[str, Value] | None]],
    late: set[_GroupKey],
) -> tuple[
    dict[str, dict[str, Value]],
    dict[str, dict[str, Value] | None],
    dict[str, tuple[str, dict[str, Value]]],
]:
    """``(judged, late, final)`` of update mode (module docstring, "Updates"): every update
    of a window that is not late-affected is judged, and its last kept update is the
    window's final value."""
    judged: dict[str, dict[str, Value]] = {}
    late_out: dict[str, dict[str, Value] | None] = {}
    final: dict[str, tuple[str, dict[str, Value]]] = {}
    for gk in order:
        window = window_rid(*gk)
        updates = [(update_rid(window, n), d) for n, d in enumerate(history[gk], start=1)]
        if gk in late:
            late_out.update(updates)
            continue
        for rid, data in updates:
            if data is not None:
                judged[rid] = data
                final[window] = (rid, data)
    return judged, late_out, final
