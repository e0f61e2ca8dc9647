"""Reading Spark's ``StreamingQueryProgress`` lines (``progress/replica-N.jsonl``).

A source's ``endOffset`` is JSON whose shape depends on the source: Spark's Kafka source writes
``{"<topic>": {"<partition>": offset}}``, arfl's source ``{"batch": k, "offsets":
{"<partition>": offset}}`` (where ``batch`` is a batch or epoch number, not an offset).

**Late drops.** ``stateOperators[i].numRowsDroppedByWatermark`` counts the rows stateful operator
``i`` dropped in *that* batch as older than the batch's watermark: Spark reads it from the SQL
metrics of the batch's own execution (``StateStoreWriter.getProgress``) and reports 0 for a
trigger that executed nothing (``ProgressReporter.extractStateOperatorMetrics``), so it is per
batch, never cumulative. Where a replica's batches end decides its watermarks, so one replica may
drop a row another keeps (docs/design.md §2.4): :func:`late_drops` is the one reading of it, used by
the watcher (journal ``late-drop``) and by the report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from arfl.run.events import Event


def batch_timing(progress: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(start epoch s, duration ms)`` of a batch: its ``timestamp`` (when the trigger fired)
    and ``durationMs.triggerExecution``; None if the line has no readable timestamp."""
    try:
        ts = str(progress["timestamp"]).replace("Z", "+00:00")
        start = datetime.fromisoformat(ts).timestamp()
        dur = float((progress.get("durationMs") or {}).get("triggerExecution", 0.0))
    except (KeyError, TypeError, ValueError):
        return None
    return start, dur


def batch_ends(lines: Iterable[Mapping[str, Any]]) -> list[float]:
    """When each batch of one replica's progress lines ended, epoch seconds, in time order.

    A batch ends at its ``timestamp`` (when its trigger fired; ISO 8601, Spark writes UTC with
    ``Z``; a time without a zone counts as UTC) plus ``batchDuration`` ms (the whole trigger,
    progress reporting included), or ``durationMs.triggerExecution`` for a line without
    ``batchDuration``. Where a replica's batches end decides its watermarks and when its
    results come out, so the report marks these ends on the latency plot. A line without a
    readable timestamp or duration is skipped.

    Args:
        lines: progress lines, in any order.
    """
    out: list[float] = []
    for line in lines:
        duration: Any = line.get("batchDuration")
        if duration is None:
            timings = line.get("durationMs")
            duration = timings.get("triggerExecution") if isinstance(timings, Mapping) else None
        try:
            start = datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00"))
            ms = float(duration)
        except (KeyError, TypeError, ValueError):
            continue
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        if math.isfinite(ms) and ms >= 0:
            out.append(start.timestamp() + ms / 1000.0)
    return sorted(out)


def end_offsets(progress: Mapping[str, Any]) -> dict[int, int]:
    """Per input partition, the offset (exclusive) a batch read up to."""
    out: dict[int, int] = {}
    for src in progress.get("sources", []) or []:
        end = src.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if not isinstance(end, dict):
            continue
        offsets = end.get("offsets")
        maps = [offsets] if isinstance(offsets, dict) else [v for v in end.values()
                                                              if isinstance(v, dict)]  # fmt: skip
        for m in maps:
            for p, o in m.items():
                try:
                    part, off = int(p), int(o)
                except (TypeError, ValueError):
                    continue
                out[part] = max(out.get(part, off), off)
    return out


NOT_CATCHING_UP = "not-catching-up"
"""The ``kind`` of the journal ``warning`` the deploy's lag watch writes for a replica that is
behind the input and not catching up (the report lists these warnings)."""


def reached(progress: Mapping[str, Any], ends: Mapping[int, int]) -> bool:
    """True when the batch read every partition up to at least ``ends``."""
    got = end_offsets(progress)
    return all(got.get(p, 0) >= off for p, off in ends.items())


LATE_METRICS = "arfl_late"
"""Name of the ``observe()`` metric (in a progress line's ``observedMetrics``) with ``rows``:
the (row, window) pairs a windowed query dropped behind the agreed watermark
(:mod:`arfl.replica.source.late`), before Spark's own watermark saw them."""
AGREED_WATERMARK = -1
""":attr:`LateDrop.operators` key of the rows the agreed watermark dropped."""


@dataclass(frozen=True)
class LateDrop:
    """Rows one batch of one replica dropped because they were older than its watermark.

    Attributes:
        replica: the replica index.
        batch: the batch id (``batchId``; it continues from the checkpoint after a restart).
        rows: rows dropped in the batch, every stateful operator together.
        operators: stateful operator index (in ``stateOperators``) -> rows it dropped, for
            each operator that dropped any; :data:`AGREED_WATERMARK` for the rows the agreed
            watermark dropped (observed metric :data:`LATE_METRICS`).
        operator_name: the name of the first operator that dropped (``stateStoreSave``, ...).
        watermark: the batch's watermark (``eventTime.watermark``), when the line has one.
        timestamp: when the batch's trigger fired (``timestamp``), when the line has one.
    """

    replica: int
    batch: int
    rows: int
    operators: dict[int, int]
    operator_name: str | None = None
    watermark: str | None = None
    timestamp: str | None = None

    @property
    def operator(self) -> int:
        """The index of the first stateful operator that dropped rows
        (:data:`AGREED_WATERMARK` when only the agreed watermark did)."""
        spark_own = [i for i in self.operators if i != AGREED_WATERMARK]
        return min(spark_own) if spark_own else AGREED_WATERMARK

    def journal_fields(self) -> dict[str, Any]:
        """The fields of the ``late-drop`` journal event (see :func:`from_journal`)."""
        fields: dict[str, Any] = {
            "replica": self.replica,
            "batch": self.batch,
            "rows": self.rows,
            "operator": self.operator,
            "operator_name": self.operator_name,
            "operators": {str(k): v for k, v in sorted(self.operators.items())},
        }
        if self.watermark is not None:
            fields["watermark"] = self.watermark
        if self.timestamp is not None:
            fields["batch_timestamp"] = self.timestamp
        if self.operators.keys() == {AGREED_WATERMARK}:
            fields["message"] = (
                f"replica {self.replica} batch {self.batch}: {self.rows} row(s) dropped behind "
                "the agreed watermark (every replica drops the same ones)"
            )
            return fields
        where = f"operator {self.operator}" + (
            f" ({self.operator_name})" if self.operator_name else ""
        )
        fields["message"] = (
            f"replica {self.replica} batch {self.batch}: {self.rows} row(s) dropped by the "
            f"watermark in {where}; replicas whose batches end elsewhere may keep them"
        )
        return fields


def batch_late_drop(progress: Mapping[str, Any], replica: int) -> LateDrop | None:
    """The late drop of one progress line; None when it dropped nothing or is unreadable."""
    try:
        batch = int(progress["batchId"])
    except (KeyError, TypeError, ValueError):
        return None
    operators: dict[int, int] = {}
    name: str | None = None
    ops = progress.get("stateOperators")
    for i, op in enumerate(ops if isinstance(ops, list) else []):
        if not isinstance(op, Mapping):
            continue
        try:
            rows = int(op.get("numRowsDroppedByWatermark") or 0)
        except (TypeError, ValueError):
            continue
        if rows > 0:
            operators[i] = rows
            if name is None and op.get("operatorName") is not None:
                name = str(op["operatorName"])
    observed = progress.get("observedMetrics")
    agreed = observed.get(LATE_METRICS) if isinstance(observed, Mapping) else None
    if isinstance(agreed, Mapping):
        try:
            rows = int(agreed.get("rows") or 0)
        except (TypeError, ValueError):
            rows = 0
        if rows > 0:
            operators[AGREED_WATERMARK] = rows
            name = name or "agreed watermark"
    if not operators:
        return None
    event_time = progress.get("eventTime")
    watermark = event_time.get("watermark") if isinstance(event_time, Mapping) else None
    ts = progress.get("timestamp")
    return LateDrop(
        replica=replica,
        batch=batch,
        rows=sum(operators.values()),
        operators=operators,
        operator_name=name,
        watermark=None if watermark is None else str(watermark),
        timestamp=None if ts is None else str(ts),
    )


def late_drops(
    lines: Iterable[Mapping[str, Any]], replica: int, seen: Collection[int] = ()
) -> list[LateDrop]:
    """Every batch of one replica's progress lines that dropped rows, once per batch id.

    A batch id can appear on more than one line (a trigger that executed nothing repeats the
    last id with no drops; a batch re-run after a restart from the checkpoint keeps its id and,
    with it, its watermark from the offset log): the first line that dropped rows counts.

    Args:
        lines: progress lines, in file order.
        replica: the replica they belong to.
        seen: batch ids already accounted for (left out).
    """
    out: list[LateDrop] = []
    done = set(seen)
    for line in lines:
        drop = batch_late_drop(line, replica)
        if drop is None or drop.batch in done:
            continue
        done.add(drop.batch)
        out.append(drop)
    return out


def from_journal(event: Mapping[str, Any]) -> LateDrop | None:
    """A ``late-drop`` journal event read back; None for another event or an unreadable one."""
    if event.get("event") != Event.LATE_DROP:
        return None
    try:
        replica, batch, rows = int(event["replica"]), int(event["batch"]), int(event["rows"])
        raw = event.get("operators") or {str(event.get("operator", 0)): rows}
        operators = {int(k): int(v) for k, v in dict(raw).items()}
    except (KeyError, TypeError, ValueError):
        return None
    if rows <= 0 or not operators:
        return None
    wm, ts, name = event.get("watermark"), event.get("batch_timestamp"), event.get("operator_name")
    return LateDrop(
        replica=replica,
        batch=batch,
        rows=rows,
        operators=operators,
        operator_name=None if name is None else str(name),
        watermark=None if wm is None else str(wm),
        timestamp=None if ts is None else str(ts),
    )


def unreported_batches(
    lines: Iterable[Mapping[str, Any]], not_run: Iterable[int] = ()
) -> list[int]:
    """Batch ids a replica's queries ran without a progress line: within each query (its
    ``id``, which a restart from the checkpoint keeps), the ids from 0 to the newest one that
    no line names. A driver killed right after a commit leaves such a hole: Spark calls the
    progress listener after the commit, and the restart goes on with the next id. Lines without
    a query id or a readable batch id make no holes up. ``not_run``: ids the replica never ran
    (a peer's batches it took with a copy of the peer's checkpoint, ``resume: peer``).

    Returns:
        The missing ids, query by query in file order, each query's ascending.
    """
    seen: dict[str, set[int]] = {}
    for line in lines:
        query = line.get("id")
        try:
            batch = int(line["batchId"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(query, str) and query and batch >= 0:
            seen.setdefault(query, set()).add(batch)
    skip = set(not_run)
    return [b for ids in seen.values() for b in range(max(ids)) if b not in ids and b not in skip]


def peer_batches(restarts: Iterable[Mapping[str, Any]]) -> list[int]:
    """Batch ids a replica took from a peer's checkpoint instead of running them: for each of
    its ``replica-restarted`` events with ``resume: peer``, the ids after its own last committed
    batch (``own_batch``, none: -1) up to the copy's (``batch``)."""
    out: list[int] = []
    for e in restarts:
        if e.get("resume") != "peer":
            continue
        try:
            own = -1 if e.get("own_batch") is None else int(e["own_batch"])
            out.extend(range(own + 1, int(e["batch"]) + 1))
        except (KeyError, TypeError, ValueError):
            continue
    return out
