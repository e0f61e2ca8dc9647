"""The declared-field generator (arfl.workload.generate), the one definition of a late event,
and the input schema the Spark query and the independent check derive from a declaration.

No Kafka, no Spark session (the query's schema is a ``StructType`` built without one).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_injector import FakeClock, FakeProducer

from arfl.configs.lateness import is_late, late_from_seq, late_lag_ms
from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.configs.workload import field_types
from arfl.measure.check.evaluate import InputRecord, expected_results
from arfl.measure.check.pipeline import input_fields
from arfl.workload.generate import EventGenerator, EventShape
from arfl.workload.injector import Injector, InjectorConfig, intended_ms

T0 = 1_764_000_000_000
RATE = 800
FIELDS: dict[str, Any] = {
    "sku": {"kind": "key", "cardinality": 37, "skew": 1.1},
    "qty": {"kind": "int", "min": 1, "max": 20},
    "price": {"kind": "float", "min": 0.5, "max": 99.5},
    "country": {"kind": "choice", "values": ["se", "be", "fr"], "weights": [5, 3, 2]},
    "event_ts": {"kind": "event-time"},
}


def _spec(seed: int = 1, late: float = 0.01, **workload: Any) -> Spec:
    return parse_spec(
        {
            "name": "gen",
            "source": {"topic": "in", "partitions": 2, "key": "sku", "event_time": "event_ts"},
            "steps": [
                {"filter": "qty > 2"},
                {
                    "window": {
                        "size": "1s",
                        "key": "sku",
                        "watermark": "500ms",
                        "agg": {"revenue": "sum(price)", "n": "count(*)"},
                    }
                },
            ],
            "sink": {"topic": "out"},
            "workload": {
                "rate": RATE,
                "duration": "40s",
                "seed": seed,
                "warmup": "2s",
                "disorder": "200ms",
                "late": late,
                "fields": FIELDS,
                **workload,
            },
        }
    )


def _events(spec: Spec, n: int, start: int = 0) -> list[tuple[bytes, dict[str, Any]]]:
    shape = EventShape.from_spec(spec)
    assert shape is not None
    gen = EventGenerator(shape)
    out = []
    for seq in range(start, start + n):
        ts = intended_ms(T0, seq, RATE)
        key, value = gen.encode(seq, ts, ts + 1)
        out.append((key, json.loads(value)))
    return out


def test_same_seed_same_events_other_seed_other_events() -> None:
    a = _events(_spec(seed=3), 3000)
    assert a == _events(_spec(seed=3), 3000)
    b = _events(_spec(seed=4), 3000)
    for name in ("sku", "qty", "price", "country", "event_ts"):
        assert [e[name] for _, e in a] != [e[name] for _, e in b], name
    # Any event is computed alone, from its seq: no state carried between events.
    assert _events(_spec(seed=3), 5, start=2000) == a[2000:2005]


def test_record_layout_types_and_key() -> None:
    spec = _spec()
    events = _events(spec, 500)
    types = field_types(spec.workload)
    assert list(types) == ["seq", "sku", "qty", "price", "country", "event_ts", "ts", "sent_ms"]
    python = {"string": str, "long": int, "double": float}
    for key, e in events:
        assert list(e) == list(types)  # the order field_types promises
        for name, t in types.items():
            assert type(e[name]) is python[t], (name, e[name])
        assert key == e["sku"].encode()  # the Kafka key is source.key's value
    assert [e["seq"] for _, e in events] == list(range(500))


def test_zipf_key_top_share_and_uniform_keys() -> None:
    events = _events(_spec(), 40_000)
    counts = Counter(e["sku"] for _, e in events)
    assert set(counts) <= {f"s{i}" for i in range(37)} and len(counts) == 37
    harmonic = sum(1 / (i + 1) ** 1.1 for i in range(37))
    assert counts["s0"] / 40_000 == pytest.approx(1 / harmonic, abs=0.01)
    assert counts["s1"] / 40_000 == pytest.approx(2**-1.1 / harmonic, abs=0.01)
    assert counts["s0"] > counts["s1"] > counts["s10"] > counts["s36"]

    uniform = {**FIELDS, "sku": {"kind": "key", "cardinality": 10, "skew": 0.0, "prefix": "k-"}}
    counts = Counter(e["sku"] for _, e in _events(_spec(fields=uniform), 20_000))
    assert set(counts) == {f"k-{i}" for i in range(10)}
    assert max(counts.values()) / min(counts.values()) < 1.1


def test_choice_weights_int_and_float_ranges() -> None:
    events = [e for _, e in _events(_spec(), 40_000)]
    shares = Counter(e["country"] for e in events)
    for value, want in (("se", 0.5), ("be", 0.3), ("fr", 0.2)):
        assert shares[value] / 40_000 == pytest.approx(want, abs=0.01)
    qty = Counter(e["qty"] for e in events)
    assert set(qty) == set(range(1, 21))  # both ends included
    assert max(qty.values()) / min(qty.values()) < 1.2
    prices = [e["price"] for e in events]
    assert all(0.5 <= p < 99.5 for p in prices)
    assert all(abs(p * 100 - round(p * 100)) < 1e-6 for p in prices)  # two decimals
    assert sum(prices) / len(prices) == pytest.approx(50.0, abs=0.5)
    assert min(prices) < 0.6 and max(prices) > 99.4


def test_disorder_bounds_and_the_late_fraction() -> None:
    spec = _spec(late=0.05)
    lag = late_lag_ms(spec)
    # Window 1 s + watermark 0.5 s + disorder 0.2 s + margin 1 s.
    assert lag == 2700
    first = late_from_seq(spec)
    assert first == 2 * RATE  # after the warm-up
    events = [e for _, e in _events(spec, 60_000)]
    behind = [e["ts"] - e["event_ts"] for e in events]
    late = [i for i, e in enumerate(events) if is_late(e["ts"], e["event_ts"], lag)]
    assert late and min(late) >= first  # none during the warm-up and the margin
    late_set = set(late)
    on_time = [b for i, b in enumerate(behind) if i not in late_set]
    assert min(on_time) == 0 and max(on_time) == 200  # disorder: U[0, 200 ms], both ends hit
    # Late: behind the run's first intended time T0 by the lag plus up to the disorder, so
    # the windows of a late event (1 s) end before the watermark any data batch sets
    # (T0 - disorder - watermark).
    assert all(lag <= T0 - events[i]["event_ts"] <= lag + 200 for i in late)
    assert all(T0 - events[i]["event_ts"] - 1000 >= 200 + 500 for i in late)
    assert len(late) / (60_000 - first) == pytest.approx(0.05, abs=0.005)
    # Without late events nothing lags beyond the disorder.
    calm = _spec(late=0.0)
    assert late_lag_ms(calm) is None
    assert max(e["ts"] - e["event_ts"] for _, e in _events(calm, 5000)) <= 200


def test_the_late_lag_follows_the_window() -> None:
    spec = _spec()
    sliding = parse_spec(
        {
            **spec.model_dump(mode="json", exclude_defaults=True),
            "steps": [{"window": {"size": "3s", "slide": "1s", "key": "sku",
                                  "watermark": "2s", "agg": {"n": "count(*)"}}}],
        }
    )  # fmt: skip
    assert late_lag_ms(sliding) == 3000 + 2000 + 200 + 1000
    per_record = parse_spec(
        {**spec.model_dump(mode="json", exclude_defaults=True), "steps": [{"filter": "qty > 1"}]}
    )
    assert late_lag_ms(per_record) == 200 + 1000  # generated, never dropped


def test_the_default_shape_has_no_generator() -> None:
    spec = parse_spec({"name": "d", "source": {"topic": "in"}, "sink": {"topic": "out"}})
    assert EventShape.from_spec(spec) is None
    assert input_fields(spec) == {
        "seq": "long", "user": "string", "amount": "double", "ts": "long", "sent_ms": "long"
    }  # fmt: skip


def test_shape_round_trips_through_the_injector_config_file(tmp_path: Path) -> None:
    shape = EventShape.from_spec(_spec())
    assert shape is not None
    cfg = InjectorConfig(
        bootstrap="127.0.0.1:1", topic="in", rate=RATE, duration_s=1.0, shape=shape
    )
    assert InjectorConfig.read(cfg.write(tmp_path / "injector.json")).shape == shape


def test_the_injector_writes_declared_events_keyed_by_source_key(tmp_path: Path) -> None:
    spec = _spec()
    shape = EventShape.from_spec(spec)
    cfg = InjectorConfig(
        bootstrap="127.0.0.1:1", topic="in", rate=RATE, duration_s=2.0, shape=shape
    )
    clock, prod = FakeClock(), FakeProducer()
    Injector(cfg, producer=prod, clock=clock).run()
    events = prod.events()
    assert len(events) == 2 * RATE
    t0 = round(clock.wall0 * 1000)
    assert shape is not None
    gen = EventGenerator(shape)
    for (_t, key, value), e in zip(prod.records, events, strict=True):
        assert key == e["sku"].encode()
        assert e["ts"] == intended_ms(t0, e["seq"], RATE)
        assert gen.encode(e["seq"], e["ts"], e["sent_ms"]) == (key, value)


def test_query_and_check_schemas_follow_the_declaration() -> None:
    pytest.importorskip("pyspark")
    from arfl.replica import query

    spec = _spec()
    want = {
        "seq": "bigint", "sku": "string", "qty": "bigint", "price": "double",
        "country": "string", "event_ts": "bigint", "ts": "bigint", "sent_ms": "bigint",
    }  # fmt: skip
    assert query.event_fields(spec) == want
    schema = query.event_schema(spec)
    assert schema.fieldNames() == list(want)
    assert [f.dataType.simpleString() for f in schema.fields] == list(want.values())
    # The check: the same names with its own types; no default field sneaks in.
    assert input_fields(spec) == dict(field_types(spec.workload))
    assert "user" not in input_fields(spec) and "amount" not in query.event_fields(spec)
    mixed = {**FIELDS, "size": {"kind": "choice", "values": [1, 2.5]}}
    assert query.event_fields(_spec(fields=mixed))["size"] == "double"


def test_the_check_expects_generated_late_events_dropped() -> None:
    spec = _spec(late=0.03, duration="20s")
    events = _events(spec, 20 * RATE)
    # Records as the broker appends them: at their send time, partitioned by key.
    records: list[InputRecord] = []
    offsets = [0, 0]
    for key, e in events:
        p = hash(key) % 2
        value = json.dumps(e).encode()
        records.append(InputRecord(p, offsets[p], e["sent_ms"], value))
        offsets[p] += 1
    lag = late_lag_ms(spec)
    late = [e for _, e in events if is_late(e["ts"], e["event_ts"], lag) and e["qty"] > 2]
    exp = expected_results(spec, records)
    assert len(late) > 100 and exp.dropped_late == len(late)
    # Every other row is in a window: disorder (200 ms) stays within the watermark (500 ms),
    # so no window is late-affected; without end-of-input markers the last ones stay open.
    assert exp.late == {}
    kept = sum(int(d["n"]) for d in [*exp.judged.values(), *exp.open.values()] if d)
    assert kept == sum(1 for _, e in events if e["qty"] > 2) - len(late)
