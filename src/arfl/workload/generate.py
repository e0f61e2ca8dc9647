"""Declared events: the value of every ``[workload.fields]`` field of event ``seq``.

Each value is a pure function of ``(seed, seq, field name)`` (and, for the event-time field, of
the event's intended send time ``ts``): a 64-bit hash of the three (splitmix64's finaliser,
as :func:`arfl.workload.injector.event_fields`), so any process can recompute any event
without generating the ones before it, and the same seed gives the same events.

Kinds (:mod:`arfl.configs.workload`):

* ``key``: rank ``i`` drawn by inverting the Zipf(``skew``) CDF over ``[0, cardinality)``
  (precomputed, ``bisect``), written ``<prefix><i>``: ``<prefix>0`` is the hottest key;
* ``int``: ``min + h mod (max - min + 1)``;
* ``float``: a uniform point of the grid ``10**-decimals`` in ``[min, max)``, written as
  Python's shortest round-trip ``repr`` (Spark's JSON parser reads back the same double);
* ``choice``: ``values[i]`` with ``i`` drawn by the cumulative ``weights``;
* ``event-time``: ``ts - U[0, disorder]``; a fraction ``late`` of the events from
  :func:`arfl.configs.lateness.late_from_seq` on, chosen by a hash of their own, is
  ``t0 - late_lag_ms - U[0, disorder]`` instead (``t0``: the run's first intended time,
  recomputed from ``ts``, ``seq`` and the rate), behind every watermark
  (:func:`arfl.configs.lateness.late_lag_ms`).

The Kafka key of an event is the text of its ``source.key`` field (a string as it is, a number
as JSON writes it); the producer partitions it with murmur2 as Java clients do.
"""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from arfl.configs.lateness import late_from_seq, late_lag_ms
from arfl.configs.workload import (
    ChoiceField,
    EventTimeField,
    FloatField,
    IntField,
    KeyField,
    Workload,
)
from arfl.errors import DeployError

if TYPE_CHECKING:
    from arfl.configs.spec import Spec

_MASK64 = (1 << 64) - 1
_U53 = 2.0**-53
_PRECOMPUTED_KEYS = 1 << 17
"""Key fields up to this cardinality have their JSON texts precomputed."""

Value = str | int | float
_Draw = Callable[[int, int], str]
"""``(seq, ts) -> JSON text of the value``."""


def _mix64(x: int) -> int:
    """splitmix64's finaliser (the same as :mod:`arfl.workload.injector`'s)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def field_base(seed: int, name: str) -> int:
    """The per-(seed, field) constant hashed with ``seq`` (stable across processes, unlike
    Python's salted ``hash``)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return _mix64(_mix64(seed & _MASK64) ^ int.from_bytes(digest, "little"))


@dataclass(frozen=True)
class EventShape:
    """What the generator needs from a spec; travels to the injector in its config file.

    Attributes:
        workload: the ``[workload]`` section (``fields`` not empty).
        key: the field whose value is the Kafka key (``source.key``).
        late_lag_ms: how far late events lie behind their send time (None: no late events).
        late_from_seq: the first event that may be late.
    """

    workload: Workload
    key: str
    late_lag_ms: int | None = None
    late_from_seq: int = 0

    def __post_init__(self) -> None:
        if self.key not in self.workload.fields:
            raise DeployError(f"injector: shape key {self.key!r} is not a declared field")

    @classmethod
    def from_spec(cls, spec: Spec) -> EventShape | None:
        """The shape of ``spec``'s declared fields, or None for the default shape."""
        if not spec.workload.declared:
            return None
        return cls(spec.workload, spec.source.key, late_lag_ms(spec), late_from_seq(spec))


class EventGenerator:
    """Encodes declared events (see the module docstring)."""

    def __init__(self, shape: EventShape) -> None:
        """Precompute CDFs and JSON texts for every field of ``shape``."""
        wl = shape.workload
        self.shape = shape
        self._draws: list[tuple[str, _Draw]] = [
            (name, self._compile(name, decl, wl)) for name, decl in wl.fields.items()
        ]
        self._writers = [(f'"{name}":', draw) for name, draw in self._draws]
        key_draw = dict(self._draws)[shape.key]
        # The key's text: a JSON string decoded (memoised: keys repeat), a number as written.
        keys: dict[str, bytes] = {}

        def key(seq: int) -> bytes:
            text = key_draw(seq, 0)
            out = keys.get(text)
            if out is None:
                out = keys[text] = _key_text(text)
            return out

        self._key: Callable[[int], bytes] = key

    def key(self, seq: int) -> bytes:
        """The Kafka key of event ``seq``."""
        return self._key(seq)

    def values(self, seq: int, ts: int) -> dict[str, Value]:
        """The declared fields of event ``seq`` (intended send time ``ts``), decoded."""
        out: dict[str, Value] = json.loads(self.encode(seq, ts, ts)[1])
        return {name: out[name] for name, _ in self._draws}

    def encode(self, seq: int, ts: int, sent_ms: int) -> tuple[bytes, bytes]:
        """``(Kafka key, JSON value)`` of event ``seq``: ``seq``, the declared fields in
        declaration order, then ``ts`` and ``sent_ms``."""
        body = ",".join([head + draw(seq, ts) for head, draw in self._writers])
        value = f'{{"seq":{seq},{body},"ts":{ts},"sent_ms":{sent_ms}}}'
        return self._key(seq), value.encode()

    def _compile(self, name: str, decl: Any, wl: Workload) -> _Draw:
        base = field_base(wl.seed, name)
        if isinstance(decl, KeyField):
            return _key_draw(base, decl, decl.prefix if decl.prefix is not None else name[0])
        if isinstance(decl, IntField):
            lo, span = decl.min, decl.max - decl.min + 1
            return lambda seq, ts: str(lo + _mix64(base ^ seq) % span)
        if isinstance(decl, FloatField):
            return _float_draw(base, decl)
        if isinstance(decl, ChoiceField):
            texts = [json.dumps(v) for v in decl.values]
            weights = decl.weights or [1.0] * len(texts)
            return _weighted(base, texts, weights)
        assert isinstance(decl, EventTimeField)
        return self._event_time_draw(base, wl)

    def _event_time_draw(self, base: int, wl: Workload) -> _Draw:
        jitter = round(wl.disorder * 1000) + 1
        lag, first = self.shape.late_lag_ms, self.shape.late_from_seq
        if lag is None:
            return lambda seq, ts: str(ts - _mix64(base ^ seq) % jitter)
        late_base = field_base(wl.seed, "\0late")
        # An event is late when the top 53 bits of its own hash, as a fraction, are below
        # ``late``: compare integers, no float per event.
        cut = math.floor(wl.late * (1 << 53))
        rate = wl.rate

        def draw(seq: int, ts: int) -> str:
            j = _mix64(base ^ seq) % jitter
            if seq >= first and _mix64(late_base ^ seq) >> 11 < cut:
                # Behind the run's first intended time t0 (intended_ms: ts = t0 + seq*1000//rate).
                return str(ts - (seq * 1000) // rate - lag - j)
            return str(ts - j)

        return draw


def _key_text(json_text: str) -> bytes:
    value = json.loads(json_text)
    return (value if isinstance(value, str) else json_text).encode()


def _key_draw(base: int, decl: KeyField, prefix: str) -> _Draw:
    n = decl.cardinality
    texts = [json.dumps(f"{prefix}{i}") for i in range(n)] if n <= _PRECOMPUTED_KEYS else None

    def text(i: int) -> str:
        return texts[i] if texts is not None else json.dumps(f"{prefix}{i}")

    if decl.skew == 0:
        return lambda seq, ts: text(_mix64(base ^ seq) % n)
    weights = (1.0 / (i + 1) ** decl.skew for i in range(n))
    cdf = array("d", accumulate(weights))
    total, last = cdf[-1], n - 1

    def draw(seq: int, ts: int) -> str:
        u = (_mix64(base ^ seq) >> 11) * _U53 * total
        return text(min(bisect_right(cdf, u), last))

    return draw


def _weighted(base: int, texts: list[str], weights: list[float]) -> _Draw:
    cum = list(accumulate(float(w) for w in weights))
    total = cum[-1]
    # Values of weight 0 are never drawn: bisect_right skips their equal cumulative entries.
    last = max(i for i, w in enumerate(weights) if w > 0)

    def draw(seq: int, ts: int) -> str:
        u = (_mix64(base ^ seq) >> 11) * _U53 * total
        return texts[min(bisect_right(cum, u), last)]

    return draw


def _float_draw(base: int, decl: FloatField) -> _Draw:
    scale = 10**decl.decimals
    lo = math.ceil(round(decl.min * scale, 6))
    hi = math.ceil(round(decl.max * scale, 6))  # exclusive
    if hi <= lo:
        # [min, max) holds no point of the grid: the rounded min is the only value.
        only = repr(round(decl.min, decl.decimals) * 1.0)
        return lambda seq, ts: only
    span = hi - lo
    # int / int is the correctly rounded double of the decimal, and repr its shortest text.
    return lambda seq, ts: repr((lo + _mix64(base ^ seq) % span) / scale)
