"""``[source.replay]``: replay an existing topic into the run's input topic instead of
generating events.

Its presence makes the source external::

    [source.replay]
    topic = "orders"                 # the topic to read (it is never written)
    bootstrap = "10.0.0.5:9092"      # optional; default: the run's Kafka
    start = "2026-01-05T10:00:00Z"   # "earliest" (default), epoch ms, RFC 3339, or offsets
    end = { "0" = 5000, "1" = 4800 } # optional; default: the end offsets when the replay starts
    pace = "recorded"                # or events/s, e.g. 500
    time_field = "created"           # optional; default: the Kafka record timestamp

A position (``start``, ``end``) is ``"earliest"`` (``start`` only), ``"latest"`` (``end``
only: the end offsets when the replay starts), an epoch-ms integer or an RFC 3339 timestamp
(the first offset at or after that time in each partition, Kafka's ``offsets_for_times``), or a
table of partition offsets. Offsets in ``end`` are exclusive (the offset after the last record
replayed). With a table as ``start``, only the partitions it names are replayed.

:func:`parse_position` turns a validated value into a :class:`Position`; the replayer
(:mod:`arfl.workload.replay`) resolves positions into offsets. :func:`replay_problems` holds
the checks across sections (``[workload.fields]`` required, generator-only settings refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOSTPORT_RE = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}(,[A-Za-z0-9.-]+:\d{1,5})*$")

PositionValue = str | int | dict[str, int]
"""A position as written in the spec (see the module docstring)."""

GENERATOR_ONLY = ("rate", "keys", "disorder", "late")
"""``[workload]`` keys that only the generator reads: refused under replay."""


@dataclass(frozen=True)
class Position:
    """A resolved-form position: exactly one of the attributes is set (or ``kind`` says which).

    Attributes:
        kind: ``"earliest"``, ``"latest"``, ``"time"`` or ``"offsets"``.
        time_ms: epoch ms (``kind == "time"``).
        offsets: partition -> offset (``kind == "offsets"``).
    """

    kind: Literal["earliest", "latest", "time", "offsets"]
    time_ms: int | None = None
    offsets: dict[int, int] | None = None


def parse_position(value: PositionValue, *, end: bool) -> Position:
    """A position as written (``"earliest"``, ``"latest"``, epoch ms, RFC 3339, offset table).

    Args:
        value: the spec's value (a string, an integer or a table).
        end: True for ``end`` (``"latest"`` allowed, ``"earliest"`` not), False for ``start``.

    Raises:
        ValueError: with a message naming the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a position, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"an epoch-ms time must be >= 0, got {value}")
        return Position("time", time_ms=value)
    if isinstance(value, dict):
        return Position("offsets", offsets=_offset_table(value))
    if value == ("latest" if end else "earliest"):
        return Position("latest" if end else "earliest")
    if value in ("earliest", "latest"):
        raise ValueError(
            f"{value!r} is not {'an end' if end else 'a start'} position (start: 'earliest'; "
            "end: 'latest', the default)"
        )
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        at = None
    if at is None:
        first = "'latest'" if end else "'earliest'"
        raise ValueError(
            f"unknown position {value!r}: use {first}, epoch ms (1767607200000), an RFC 3339 "
            'time ("2026-01-05T10:00:00Z") or partition offsets ({ "0" = 120, "1" = 98 })'
        )
    if at.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone: add 'Z' or an offset such as '+01:00'")
    return Position("time", time_ms=round(at.timestamp() * 1000))


def _offset_table(table: dict[str, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    bad: list[str] = []
    for p, off in table.items():
        if not p.isdigit():
            bad.append(f"partition {p!r} is not a number")
        elif isinstance(off, bool) or not isinstance(off, int) or off < 0:
            bad.append(f"offset of partition {p} must be an integer >= 0, got {off!r}")
        else:
            out[int(p)] = off
    if bad:
        raise ValueError("; ".join(bad))
    if not out:
        raise ValueError("an offset table names at least one partition")
    return out


class Replay(BaseModel):
    """``[source.replay]``: which topic to replay, from where to where, at what pace."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    topic: str = Field(
        json_schema_extra={"constraint": "letters, digits, '.', '_', '-'; at most 249 characters"}
    )
    """The existing topic to read (never written)."""
    bootstrap: str | None = Field(
        None, json_schema_extra={"constraint": "host:port[,host:port...]"}
    )
    """Its Kafka (default: the run's, embedded or ``[stack] kafka``)."""
    start: PositionValue = "earliest"
    """Where the replay starts: "earliest", epoch ms, an RFC 3339 time, or a table of partition
    offsets."""
    end: PositionValue | None = Field(
        None,
        description='Where the replay ends (exclusive): "latest", epoch ms, an RFC 3339 time, '
        "or a table of partition offsets; unset: the end offsets when the replay starts.",
        json_schema_extra={"constraint": "after start"},
    )
    """Default: the end offsets when the replay starts."""
    pace: str | int = Field(
        "recorded", json_schema_extra={"constraint": '"recorded", or 1 to 1000000'}
    )
    """``"recorded"``: the recorded spacing of the records; an integer: events per second."""
    time_field: str | None = None
    """JSON field holding each record's recorded time in epoch ms (default: the Kafka record
    timestamp); a record without it is skipped and counted as bad."""

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        if not _TOPIC_RE.match(v):
            raise ValueError(f"bad topic name {v!r}: use letters, digits, '.', '_' or '-'")
        return v

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str | None) -> str | None:
        if v is not None and not _HOSTPORT_RE.match(v):
            raise ValueError(f"expected host:port[,host:port...], got {v!r}")
        return v

    @field_validator("start")
    @classmethod
    def _start(cls, v: PositionValue) -> PositionValue:
        parse_position(v, end=False)
        return v

    @field_validator("end")
    @classmethod
    def _end(cls, v: PositionValue | None) -> PositionValue | None:
        if v is not None:
            parse_position(v, end=True)
        return v

    @field_validator("pace")
    @classmethod
    def _pace(cls, v: str | int) -> str | int:
        if isinstance(v, str) and v != "recorded":
            raise ValueError(f'unknown pace {v!r}: use "recorded" or events per second (500)')
        if isinstance(v, int) and not 1 <= v <= 1_000_000:
            raise ValueError(f"events per second must be in 1..1000000, got {v}")
        return v

    @field_validator("time_field")
    @classmethod
    def _time_field(cls, v: str | None) -> str | None:
        if v is not None and not v:
            raise ValueError("name a JSON field, or leave time_field out (the record timestamp)")
        return v

    @model_validator(mode="after")
    def _order(self) -> Replay:
        start = parse_position(self.start, end=False)
        end = parse_position(self.end, end=True) if self.end is not None else None
        if end is None:
            return self
        if start.kind == end.kind == "time":
            assert start.time_ms is not None and end.time_ms is not None
            if end.time_ms <= start.time_ms:
                raise ValueError("end must be after start")
        if start.kind == end.kind == "offsets":
            assert start.offsets is not None and end.offsets is not None
            behind = [p for p, o in end.offsets.items() if o < start.offsets.get(p, 0)]
            if behind:
                raise ValueError(f"end offsets before the start offsets in partition(s) {behind}")
        return self

    def start_position(self) -> Position:
        """``start`` parsed."""
        return parse_position(self.start, end=False)

    def end_position(self) -> Position:
        """``end`` parsed (``latest`` when not given)."""
        return parse_position(self.end if self.end is not None else "latest", end=True)


def replay_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Checks of a spec with ``[source.replay]`` across its sections, on the raw document.

    A replay needs ``[workload.fields]`` (the schema of the replayed records: their kinds give
    the pipeline's types) and takes none of the generator's settings (``workload.rate``,
    ``keys``, ``disorder``, ``late``): the pace is ``source.replay.pace``.
    """
    source = raw.get("source")
    if not isinstance(source, dict) or "replay" not in source:
        return []
    out: list[tuple[str, str]] = []
    workload = raw.get("workload") if isinstance(raw.get("workload"), dict) else {}
    assert isinstance(workload, dict)
    if not workload.get("fields"):
        out.append(
            (
                "workload.fields",
                "a replay needs the replayed records' fields declared, e.g. "
                'user = { kind = "key", cardinality = 100 }, amount = { kind = "float", '
                'min = 0, max = 100 }, created = { kind = "event-time" }',
            )
        )
    for key in GENERATOR_ONLY:
        if key in workload:
            hint = "set source.replay.pace instead" if key == "rate" else "remove it"
            out.append(
                (
                    f"workload.{key}",
                    f"only the generator uses it; under source.replay it is ignored: {hint}",
                )
            )
    replay = source.get("replay")
    fields = workload.get("fields")
    time_field = replay.get("time_field") if isinstance(replay, dict) else None
    if isinstance(time_field, str) and isinstance(fields, dict):
        decl = fields.get(time_field)
        if isinstance(decl, dict) and decl.get("kind") not in ("event-time", "int"):
            out.append(
                (
                    "source.replay.time_field",
                    f"{time_field!r} is declared as a {decl.get('kind')} field; the recorded "
                    "time is epoch ms (kind = 'event-time' or 'int')",
                )
            )
    return out


def drop_generator_problems(
    problems: list[tuple[str, str]], raw: dict[str, Any]
) -> list[tuple[str, str]]:
    """The generator's cross-checks that do not apply to a replay: it keeps each record's own
    Kafka key (so the default ``source.key = "user"`` needs no declared field), and
    :func:`replay_problems` already refuses ``disorder`` and ``late``."""
    source = raw.get("source")
    if not isinstance(source, dict) or "replay" not in source:
        return problems
    return [
        (loc, msg)
        for loc, msg in problems
        if not (loc == "source.key" and "key" not in source)
        and not msg.startswith("disorder and late")
    ]
