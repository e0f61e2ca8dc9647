"""The check's only I/O: a run directory's names and the records of its two topics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arfl.configs.load import saved_spec
from arfl.configs.spec import Spec
from arfl.errors import ReportError
from arfl.measure.check.compare import Delivered
from arfl.measure.check.evaluate import InputRecord
from arfl.run.events import Event
from arfl.run.state import STATE_FILE, RunState


def run_names(run_dir: Path) -> tuple[Spec, str, str, str]:
    """The spec, Kafka address, input topic and final output topic of a run.

    Topic names come from ``state.json`` (``summary.json`` as a fallback), the address from
    ``state.json``'s ``stack.kafka``.

    Raises:
        ReportError: the run directory lacks them.
    """
    spec_path, state_path = run_dir / "spec.json", run_dir / STATE_FILE
    try:
        spec = saved_spec(json.loads(spec_path.read_text(encoding="utf-8")))
        state = RunState.model_validate_json(state_path.read_bytes())
    except (OSError, ValueError) as e:  # a ValidationError is a ValueError
        raise ReportError(
            f"{run_dir}: cannot read spec.json/state.json ({e}); is it a run directory?"
        ) from None
    topics: dict[str, Any] = state.topics.model_dump() if state.topics else {}
    summary_path = run_dir / "summary.json"
    if not (topics.get("source") and topics.get("sink")) and summary_path.exists():
        topics = dict(json.loads(summary_path.read_text(encoding="utf-8")).get("topics") or {})
    kafka = state.stack.kafka if state.stack else None
    if not (kafka and topics.get("source") and topics.get("sink")):
        raise ReportError(f"{state_path} names no stack.kafka or topics.source/sink")
    return spec, str(kafka), str(topics["source"]), str(topics["sink"])


def replica_topics(run_dir: Path) -> list[str]:
    """The replicas' topics of a run, replica 0 first (``state.json``'s ``topics.replicas``;
    empty when not recorded)."""
    try:
        state = RunState.model_validate_json((run_dir / STATE_FILE).read_bytes())
    except (OSError, ValueError):
        return []
    return list(state.topics.replicas) if state.topics else []


def input_start_ms(run_dir: Path) -> int | None:
    """When the injector's schedule started (its ``injector_started`` ``t0``), epoch ms."""
    from arfl.run.rundir import read_jsonl

    for ev in read_jsonl(run_dir / "journal.jsonl"):
        if ev.get("event") == Event.INJECTOR_STARTED and isinstance(ev.get("t0"), (int, float)):
            return round(float(ev["t0"]) * 1000)
    return None


def read_records(bootstrap: str, topic: str, timeout_s: float = 120.0) -> list[InputRecord]:
    """Every record of ``topic`` from its start to its current end, in offset order per
    partition, with broker timestamps and headers.

    Raises:
        ReportError: Kafka is not reachable, the topic does not exist, or its end was not
            reached within ``timeout_s``.
    """
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

    from arfl.stack.topics import read_to_end

    messages = read_to_end(
        bootstrap, topic, error=ReportError, timeout_s=timeout_s, group_prefix="arfl-check",
        missing_hint="was it deleted? the independent check needs the run's topics",
        unreachable_hint="start the run's stack ('arfl stack up')",
    )  # fmt: skip
    out: list[InputRecord] = []
    for msg in messages:
        part, off = msg.partition(), msg.offset()
        if part is None or off is None:  # read_to_end returns none such; this tells mypy
            continue
        ts_type, ts = msg.timestamp()
        out.append(
            InputRecord(
                part,
                off,
                None if ts_type == TIMESTAMP_NOT_AVAILABLE else int(ts),
                msg.value(),
                _headers(msg.headers()),
                msg.key(),
                ts_type == TIMESTAMP_LOG_APPEND_TIME,
            )
        )
    return out


def delivered(records: list[InputRecord]) -> list[Delivered]:
    """Result ids and data of the final output topic's records (None where unreadable)."""
    out: list[Delivered] = []
    for r in records:
        try:
            obj = json.loads(r.value or b"")
        except ValueError:
            out.append(Delivered(None, None))
            continue
        rid = obj.get("rid") if isinstance(obj, dict) else None
        data = obj.get("data") if isinstance(obj, dict) else None
        if not isinstance(rid, str) or not isinstance(data, dict):
            out.append(Delivered(None, None))
        else:
            out.append(Delivered(rid, data))
    return out


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    items = raw.items() if isinstance(raw, dict) else raw
    return tuple((str(k), v.encode() if isinstance(v, str) else v) for k, v in items)
