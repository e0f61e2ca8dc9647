"""The ``[workload]`` section: rate, duration, seed, and the events' declared fields.

Without ``[workload.fields]`` the generator produces today's shape (``seq, user, amount, ts,
sent_ms``: :data:`DEFAULT_FIELDS`). With it, every record carries the declared fields plus the
reserved ones (:data:`RESERVED`): ``seq`` (the event's number), ``ts`` (its intended send time,
epoch ms, the basis of every latency) and ``sent_ms`` (its actual send time).

Field kinds (``kind = ...``):

* ``key``: a string ``<prefix><i>``, ``i`` in ``[0, cardinality)``, Zipf-distributed with
  exponent ``skew`` (0: uniform);
* ``int``: an integer in ``[min, max]``, uniform;
* ``float``: a float in ``[min, max)``, uniform, rounded to ``decimals``;
* ``choice``: one of ``values`` (strings or numbers of one type), with optional ``weights``;
* ``event-time``: epoch ms, the intended send time minus up to ``workload.disorder`` (uniform),
  and for a fraction ``workload.late`` of the events after the warm-up further back than any
  watermark the pipeline uses (late events, :func:`arfl.configs.lateness.late_lag_ms`).

The types each field has in the pipeline (:func:`field_types`) are neutral names
(``string``, ``long``, ``double``) that the Spark query and the independent check each map to
their own.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from arfl.configs.defaults import AUTO_WARMUP_FLOOR_S, INJECTOR_LINGER_MS
from arfl.units import format_duration, parse_duration

_Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]


def _kafka_linger(v: float) -> float:
    if not 0 <= v <= 900:
        raise ValueError(f"must be from 0 to 900s (Kafka's linger.ms), got {format_duration(v)}")
    return v


LingerDuration = Annotated[
    _Duration,
    AfterValidator(_kafka_linger),
    Field(json_schema_extra={"constraint": "0ms to 900s"}),
]
"""A producer's ``linger.ms`` as a spec duration (0 to 900 s)."""

FieldType = Literal["string", "long", "double"]
"""A field's type in the pipeline: Spark ``string``/``bigint``/``double``."""

RESERVED: dict[str, FieldType] = {"seq": "long", "ts": "long", "sent_ms": "long"}
"""Fields every generated event carries; a declaration may not redefine them."""

DEFAULT_FIELDS: dict[str, FieldType] = {"user": "string", "amount": "double"}
"""The declared fields of the default shape (``user`` = ``u<i>`` over ``workload.keys`` keys,
uniform; ``amount`` in ``[0, 100)`` with two decimals)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class KeyField(_Model):
    """A key: ``<prefix><i>`` with ``i`` Zipf(``skew``) over ``[0, cardinality)``."""

    kind: Literal["key"]
    cardinality: int = Field(ge=1, le=10_000_000)
    """How many distinct keys."""
    skew: float = Field(0.0, ge=0.0, le=10.0)
    """Zipf exponent: the i-th most frequent key has weight ``1 / (i + 1) ** skew``."""
    prefix: str | None = None
    """Text before the number (default: the field name's first letter)."""


class IntField(_Model):
    """An integer, uniform in ``[min, max]``."""

    kind: Literal["int"]
    min: int = 0
    """The smallest value."""
    max: int = Field(json_schema_extra={"constraint": ">= min"})
    """The largest value."""

    @model_validator(mode="after")
    def _range(self) -> IntField:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class FloatField(_Model):
    """A float, uniform in ``[min, max)``, rounded to ``decimals``."""

    kind: Literal["float"]
    min: float = 0.0
    """The smallest value."""
    max: float = Field(json_schema_extra={"constraint": "> min"})
    """The bound the values stay below."""
    decimals: int = Field(2, ge=0, le=9)
    """The decimal places a value is rounded to."""

    @model_validator(mode="after")
    def _range(self) -> FloatField:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max}) must be above min ({self.min})")
        return self


class ChoiceField(_Model):
    """One of ``values``, drawn with ``weights`` (default: equal)."""

    kind: Literal["choice"]
    values: list[str] | list[int] | list[float] = Field(min_length=1)
    """The values drawn: strings, or numbers."""
    weights: list[float] | None = Field(
        None, json_schema_extra={"constraint": "one per value, >= 0, not all 0"}
    )
    """How often each value is drawn, relative to the others; unset: equally often."""

    @model_validator(mode="after")
    def _weights(self) -> ChoiceField:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"weights has {len(self.weights)} entries for {len(self.values)} values"
                )
            if any(w < 0 for w in self.weights) or not sum(self.weights) > 0:
                raise ValueError("weights must be >= 0 and not all 0")
        return self


class EventTimeField(_Model):
    """The event time (epoch ms): send time minus disorder; late events further back."""

    kind: Literal["event-time"]


FieldDecl = Annotated[
    KeyField | IntField | FloatField | ChoiceField | EventTimeField,
    Field(discriminator="kind"),
]


def field_type(decl: KeyField | IntField | FloatField | ChoiceField | EventTimeField) -> FieldType:
    """The pipeline type of a declared field."""
    if isinstance(decl, KeyField):
        return "string"
    if isinstance(decl, IntField | EventTimeField):
        return "long"
    if isinstance(decl, FloatField):
        return "double"
    first = decl.values[0]
    if isinstance(first, str):
        return "string"
    if isinstance(first, int) and all(isinstance(v, int) for v in decl.values):
        return "long"
    return "double"


class Workload(_Model):
    """What the injector produces."""

    rate: int = Field(1000, ge=1, le=1_000_000)
    """Events per second (fixed-rate schedule)."""
    duration: _Duration = Field(60.0, json_schema_extra={"constraint": "> 0"})
    """How long the input lasts."""
    keys: int = Field(100, ge=1)
    """Distinct ``user`` keys of the default shape (ignored when ``fields`` is given)."""
    seed: int = 1
    """The seed of the generated events: the same seed, the same events."""
    warmup: _Duration | None = Field(
        None, json_schema_extra={"constraint": '"auto" (as unset), or shorter than duration'}
    )
    """The start of the input excluded from the steady state (and so from every verdict's
    bar). None (unset, or ``"auto"``): until every replica has passed its first batch boundary
    after the input started and the output has settled after it, at least
    :data:`~arfl.configs.defaults.AUTO_WARMUP_FLOOR_S` (:func:`arfl.run.steady.resolve_warmup`)."""
    fields: dict[str, FieldDecl] = Field(default_factory=dict)
    """Declared event fields (empty: the default shape)."""
    disorder: _Duration = Field(0.0, json_schema_extra={"constraint": ">= 0"})
    """The event-time field lags the send time by up to this much (uniform)."""
    late: float = Field(0.0, ge=0.0, le=0.5)
    """Fraction of events whose event time is behind any watermark of the pipeline."""
    linger: LingerDuration = INJECTOR_LINGER_MS / 1000
    """The injector's (or replayer's) producer ``linger.ms``: an event waits up to this long
    for others to share its produce request."""

    @field_validator("warmup", mode="before")
    @classmethod
    def _auto(cls, v: object) -> object:
        return None if v == "auto" else v

    @model_validator(mode="after")
    def _positive(self) -> Workload:
        if self.duration <= 0:
            raise ValueError("duration must be positive")
        if self.warmup is not None and self.warmup >= self.duration:
            raise ValueError("warmup must be shorter than duration")
        if self.disorder < 0:
            raise ValueError("disorder must be >= 0")
        return self

    @property
    def least_warmup_s(self) -> float:
        """The warm-up as known before the run: ``warmup``, or the automatic one's floor."""
        return self.warmup if self.warmup is not None else AUTO_WARMUP_FLOOR_S

    @property
    def linger_ms(self) -> float:
        """The producer's ``linger.ms``."""
        return self.linger * 1000

    @property
    def declared(self) -> bool:
        """True when the spec declares its own fields."""
        return bool(self.fields)

    def event_time_field(self) -> str | None:
        """The declared ``event-time`` field, if any."""
        return next((n for n, d in self.fields.items() if isinstance(d, EventTimeField)), None)


def field_types(workload: Workload) -> dict[str, FieldType]:
    """Every field of a generated event with its pipeline type, reserved ones included, in
    the order the generator writes them (``seq`` first, ``ts`` and ``sent_ms`` last)."""
    declared = (
        {n: field_type(d) for n, d in workload.fields.items()}
        if workload.fields
        else dict(DEFAULT_FIELDS)
    )
    return {"seq": "long", **declared, "ts": "long", "sent_ms": "long"}


def workload_problems(
    raw_workload: object, source_key: object, event_time: object
) -> list[tuple[str, str]]:
    """Cross-checks of the declared fields against ``[source]``, on the raw dicts (reported
    with the other problems of the spec, each with its key path).

    Args:
        raw_workload: the raw ``[workload]`` table.
        source_key: ``source.key`` as written (default ``"user"``).
        event_time: ``source.event_time`` as written.
    """
    out: list[tuple[str, str]] = []
    if not isinstance(raw_workload, dict):
        return out
    fields = raw_workload.get("fields")
    disordered = _nonzero(raw_workload)
    if not fields:
        if disordered:
            out.append(
                (
                    "workload.fields",
                    "disorder and late need an event-time field: declare one, e.g. "
                    'event_ts = { kind = "event-time" }, and set source.event_time to it',
                )
            )
        return out
    if not isinstance(fields, dict):
        return out
    for name in fields:
        if name in RESERVED:
            out.append(
                (
                    f"workload.fields.{name}",
                    f"{name!r} is reserved (every event carries seq, ts = intended send time in "
                    "epoch ms, sent_ms = actual send time); use another name",
                )
            )
        elif not _ident(name):
            out.append(
                (f"workload.fields.{name}", "use a plain name (letters, digits, '_'; not '__...')")
            )
    event_fields = [
        n for n, d in fields.items() if isinstance(d, dict) and d.get("kind") == "event-time"
    ]
    for extra in event_fields[1:]:
        out.append((f"workload.fields.{extra}", "only one event-time field per workload"))
    known = ", ".join(sorted(fields))
    key = "user" if source_key is None else source_key
    if isinstance(key, str):
        decl = fields.get(key)
        if decl is None:
            out.append(
                (
                    "source.key",
                    f"{key!r} is not a declared field (declared: {known}); the Kafka key must be "
                    "one of them",
                )
            )
        elif isinstance(decl, dict) and decl.get("kind") in ("event-time", "float"):
            out.append(
                (
                    "source.key",
                    f"{key!r} is a {decl.get('kind')} field; key records by a key, choice or int "
                    "field",
                )
            )
    if isinstance(event_time, str) and event_time != "ts":
        decl = fields.get(event_time)
        if decl is None:
            out.append(
                (
                    "source.event_time",
                    f"{event_time!r} is not a declared field (declared: {known}; or 'ts', the "
                    "send time)",
                )
            )
        elif isinstance(decl, dict) and decl.get("kind") != "event-time":
            out.append(
                (
                    "source.event_time",
                    f"{event_time!r} is a {decl.get('kind')} field, not kind = 'event-time'",
                )
            )
    if disordered and not event_fields:
        out.append(
            (
                "workload.fields",
                "disorder and late need an event-time field, e.g. "
                'event_ts = { kind = "event-time" }',
            )
        )
    elif disordered and event_time == "ts":
        out.append(
            (
                "source.event_time",
                "'ts' is the send time, never disordered: use the event-time field "
                f"{event_fields[0]!r} to see disorder and late events",
            )
        )
    return out


def _nonzero(raw_workload: dict[str, object]) -> bool:
    """True when the raw section asks for disorder or late events."""
    try:
        disorder = parse_duration(raw_workload.get("disorder", 0))
    except (ValueError, TypeError):
        disorder = 0.0
    late = raw_workload.get("late", 0)
    return disorder > 0 or (isinstance(late, int | float) and late > 0)


def _ident(name: str) -> bool:
    return (
        bool(name)
        and not name.startswith("__")
        and name.replace("_", "a").isalnum()
        and name.isascii()
        and not name[0].isdigit()
    )
