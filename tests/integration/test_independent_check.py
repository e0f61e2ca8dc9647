"""The independent check (arfl.measure.check) against real Spark and a real run.

* The evaluator agrees with Spark: the replicas' own query code, run as a batch job on a local
  session over the same records, yields the same result ids and values for the modelled
  subset (a test of the evaluator; the check itself never runs Spark).
* On a real ``none`` deployment it finds nothing missing, extra, duplicated or wrong, and it
  reports a forged wrong result written into the final output topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_checks import windowed_spec

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.measure.check import InputRecord, check_run
from arfl.measure.check.compare import same_data
from arfl.measure.check.evaluate import expected_results
from arfl.measure.check.kafka import delivered, read_records
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.stack import StackInfo

pytestmark = pytest.mark.integration

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402

T0 = 1_764_000_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from arfl.testing.spark import local_session

    with local_session(app_name="arfl-test-independent-check") as session:
        yield session


def _inputs() -> list[InputRecord]:
    """Events over 2 partitions, in event-time order, with some NULL and negative fields."""
    out: list[InputRecord] = []
    for i in range(240):
        ev: dict[str, Any] = {
            "seq": i - 30,
            "user": None if i % 17 == 0 else f"u{i % 5}",
            "amount": None if i % 13 == 0 else round((i * 7.31) % 50 - 5, 2),
            "ts": T0 + 37 * i,
            "sent_ms": T0 + 37 * i + 2,
        }
        p = i % 2
        out.append(InputRecord(p, i // 2, T0 + 37 * i, json.dumps(ev).encode()))
    out.append(InputRecord(0, 120, T0 + 10**5, b"not json"))
    return out


def _spec(steps: list[dict[str, Any]]) -> Spec:
    return parse_spec(
        {
            "name": "diff",
            "source": {"topic": "in", "partitions": 2, "event_time": "ts"},
            "steps": steps,
            "sink": {"topic": "out"},
        }
    )


AGGS = {
    "n": "count(*)",
    "k": "count(amount)",
    "total": "sum(amount)",
    "mean": "avg(amount)",
    "lo": "min(amount)",
    "hi": "max(amount)",
    "s": "sum(seq)",
    "m": "avg(seq)",
    "first": "min(user)",
}

SPECS = {
    "per-record": [
        {"filter": "amount > 3 AND NOT (seq % 4 = 1) OR user IS NULL"},
        {
            "select": [
                "user",
                "amount * 2",
                "seq % 3",
                "seq / 4 AS q",
                "seq * 1.5 + 0.25",
                "-amount",
                "amount >= 10",
                "AMOUNT",
                "'x' AS tag",
            ]
        },
    ],
    "tumbling": [
        {"filter": "amount IS NULL OR amount > -2"},
        {"window": {"size": "1s", "key": "user", "watermark": "500ms", "agg": AGGS}},
    ],
    "sliding": [
        {"select": ["user", "amount * 3 AS a3", "seq"]},
        {
            "window": {
                "size": "1s",
                "slide": "300ms",
                "key": "user",
                "agg": {"n": "count(*)", "t": "sum(a3)", "hi": "max(seq)"},
            }
        },
        {"filter": "n > 1"},
        {"select": ["user", "window_end", "t / n AS mean", "hi"]},
    ],
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_evaluator_agrees_with_spark_on_the_subset(spark: SparkSession, name: str) -> None:
    from arfl.replica import query
    from arfl.run.records import parse_result

    spec = _spec(SPECS[name])
    inputs = _inputs()
    raw = spark.createDataFrame(
        [(r.value, r.partition, r.offset) for r in inputs],
        "value binary, partition int, offset long",
    )
    rows = query.build_output(query.parse_events(raw, spec), spec, 0).collect()
    spark_results = {r.key: parse_result(r.value.encode()).data for r in rows}
    exp = expected_results(spec, inputs)
    # A batch job drops no late row and emits every window, final or not.
    assert not exp.late
    ours = {**exp.judged, **{r: d for r, d in exp.open.items() if d is not None}}
    assert len(ours) > 10
    assert set(ours) == set(spark_results), (
        sorted(set(ours) ^ set(spark_results))[:5],
        sorted(ours)[:3],
        sorted(spark_results)[:3],
    )
    differ = {
        rid: (ours[rid], spark_results[rid])
        for rid in ours
        if not same_data(ours[rid], spark_results[rid])
    }
    assert not differ, list(differ.items())[:3]


def test_a_real_run_checks_out_and_a_forged_wrong_result_is_reported(
    stack: StackInfo, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    aggs = {"n": "count(*)", "total": "sum(amount)", "mean": "avg(amount)",
            "lo": "min(amount)", "hi": "max(amount)"}  # fmt: skip
    spec = windowed_spec(
        "check-none",
        duration="20s",
        steps=[
            {"filter": "amount > 10"},
            {"window": {"size": "1s", "key": "user", "watermark": "500ms", "agg": aggs}},
        ],
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    assert result.summary["produced"] == 200 * 20

    res = check_run(result.run_dir)
    assert res.unsupported is None, res.unsupported
    assert (res.missing, res.extra, res.duplicates, res.wrong) == (0, 0, 0, 0), res.examples
    assert res.expected is not None and res.expected > 100
    assert res.input_records is not None and res.input_records >= 200 * 20
    assert res.ok is True

    # A forged copy of a delivered window, with one more row counted, and an id nobody made.
    state = json.loads((result.run_dir / "state.json").read_text())
    sink = state["topics"]["sink"]
    first = delivered(read_records(stack.kafka, sink))[0]
    assert first.rid is not None and first.data is not None
    forged = {"rid": first.rid, "src_ts": T0, "replica": 0, "hash": "forged",
              "data": {**first.data, "n": 10**6}}  # fmt: skip
    stray = {**forged, "rid": "0-1000:nobody"}
    producer = Producer({"bootstrap.servers": stack.kafka})
    for rec in (forged, stray):
        producer.produce(sink, json.dumps(rec).encode(), key=str(rec["rid"]).encode())
    assert producer.flush(30) == 0

    after = check_run(result.run_dir)
    assert (after.wrong, after.duplicates, after.extra, after.missing) == (1, 1, 1, 0)
    assert after.examples["wrong"][0]["rid"] == first.rid
    assert after.examples["wrong"][0]["got"]["n"] == 10**6
    assert after.examples["extra"][0]["rid"] == "0-1000:nobody"
    assert after.ok is False
