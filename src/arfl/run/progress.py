"""Reading Spark's ``StreamingQueryProgress`` lines (``progress/replica-N.jsonl``).

A source's ``endOffset`` is JSON whose shape depends on the source: Spark's Kafka source writes
``{"<topic>": {"<partition>": offset}}``, arfl's source ``{"batch": k, "offsets":
{"<partition>": offset}}`` (where ``batch`` is a batch or epoch number, not an offset).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any


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


def reached(progress: Mapping[str, Any], ends: Mapping[int, int]) -> bool:
    """True when the batch read every partition up to at least ``ends``."""
    got = end_offsets(progress)
    return all(got.get(p, 0) >= off for p, off in ends.items())
