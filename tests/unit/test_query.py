"""Query building on static DataFrames with one local[1] SparkSession per module."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.replica import query
from arfl.run.records import parse_result
from arfl.testing.spark import local_session

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import DataFrame, SparkSession  # noqa: E402


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_session(app_name="arfl-test-query") as session:
        yield session


def _event(seq: int, user: str, amount: float, ts: int) -> str:
    return json.dumps({"seq": seq, "user": user, "amount": amount, "ts": ts, "sent_ms": ts + 1})


def _raw(spark: SparkSession, values: list[str | None], partition: int = 0) -> DataFrame:
    rows = [(None if v is None else v.encode(), partition, i) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "value binary, partition int, offset long")


def _spec(steps: list[dict[str, Any]], event_time: str | None = "ts") -> Spec:
    source: dict[str, Any] = {"topic": "in"}
    if event_time:
        source["event_time"] = event_time
    return parse_spec({"name": "t", "source": source, "sink": {"topic": "out"}, "steps": steps})


def _results(df: DataFrame, spec: Spec, replica: int = 0) -> dict[str, Any]:
    out = query.build_output(query.parse_events(df, spec), spec, replica)
    results = {}
    for row in out.collect():
        res = parse_result(row.value.encode())
        assert row.key == res.rid
        assert res.rid not in results, f"duplicate rid {res.rid}"
        results[res.rid] = res
    return results


def test_per_record_filter_select_keeps_rid_and_src_ts_after_select_drops_ts(
    spark: SparkSession,
) -> None:
    events = [_event(i, f"u{i % 2}", float(i), 1000 + i) for i in range(6)]
    spec = _spec([{"filter": "amount >= 3"}, {"select": ["user", "amount * 2 AS double_amount"]}])
    res = _results(_raw(spark, events, partition=2), spec, replica=1)
    assert sorted(res) == ["2:3", "2:4", "2:5"]
    r = res["2:4"]
    assert r.src_ts == 1004
    assert r.replica == 1
    assert r.data == {"user": "u0", "double_amount": 8.0}
    canonical = json.dumps(r.data, separators=(",", ":"))
    assert r.hash == hashlib.sha256(canonical.encode()).hexdigest()


def test_select_star_does_not_duplicate_hidden_columns(spark: SparkSession) -> None:
    spec = _spec([{"select": ["*"]}])
    res = _results(_raw(spark, [_event(1, "a", 5.0, 10)]), spec)
    assert res["0:0"].data == {"seq": 1, "user": "a", "amount": 5.0, "ts": 10, "sent_ms": 11}


def test_unparseable_records_are_dropped_and_counted(spark: SparkSession) -> None:
    values: list[str | None] = [
        _event(0, "a", 1.0, 5),
        "not json",
        None,
        '{"seq": 3}',
        _event(4, "b", 2.0, 9),
    ]
    spec = _spec([])
    parsed = query.parse_events(_raw(spark, values), spec)
    assert sorted(r["__offset"] for r in parsed.collect()) == [0, 4]
    res = _results(_raw(spark, values), spec)
    assert sorted(res) == ["0:0", "0:4"]


def test_tumbling_window_counts_sums_and_max_ts(spark: SparkSession) -> None:
    # user a: ts 100, 900 in [0,1000); 1500 in [1000,2000). user b: 200 in [0,1000).
    events = [
        _event(0, "a", 1.0, 100),
        _event(1, "b", 10.0, 200),
        _event(2, "a", 2.0, 900),
        _event(3, "a", 4.0, 1500),
    ]
    spec = _spec(
        [
            {"select": ["user", "amount"]},
            {
                "window": {
                    "size": "1s",
                    "key": "user",
                    "agg": {
                        "n": "count(*)",
                        "total": "sum(amount)",
                        "mean": "avg(amount)",
                        "lo": "min(amount)",
                        "hi": "max(amount)",
                    },
                }
            },
        ]
    )
    res = _results(_raw(spark, events), spec)
    assert sorted(res) == ["0-1000:a", "0-1000:b", "1000-2000:a"]
    a0 = res["0-1000:a"]
    assert a0.src_ts == 900
    assert a0.data == {
        "window_start": 0,
        "window_end": 1000,
        "user": "a",
        "n": 2,
        "total": 3.0,
        "mean": 1.5,
        "lo": 1.0,
        "hi": 2.0,
    }
    assert res["1000-2000:a"].data["n"] == 1


def test_sliding_window_assigns_each_event_to_every_covering_window(spark: SparkSession) -> None:
    spec = _spec(
        [{"window": {"size": "2s", "slide": "1s", "key": "user", "agg": {"n": "count(*)"}}}]
    )
    res = _results(_raw(spark, [_event(0, "a", 1.0, 1500)]), spec)
    assert sorted(res) == ["0-2000:a", "1000-3000:a"]


def test_steps_after_a_window_filter_on_aggregates(spark: SparkSession) -> None:
    events = [_event(i, "a" if i < 3 else "b", 1.0, 100 * i) for i in range(4)]
    spec = _spec(
        [
            {"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}},
            {"filter": "n > 1"},
            {"select": ["n"]},
        ]
    )
    res = _results(_raw(spark, events), spec)
    assert list(res) == ["0-1000:a"]
    assert res["0-1000:a"].data == {"n": 3}
    assert res["0-1000:a"].src_ts == 200


def _add_flag(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.withColumn("big", F.col("amount") > 5)


def _drop_hidden(df: DataFrame) -> DataFrame:
    return df.select("user")


@pytest.fixture
def transforms(monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module ``arfl_test_transforms`` holding the transforms above."""
    mod = types.ModuleType("arfl_test_transforms")
    mod.add_flag = _add_flag  # type: ignore[attr-defined]
    mod.drop_hidden = _drop_hidden  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod.__name__


def test_transform_step_is_imported_and_applied(spark: SparkSession, transforms: str) -> None:
    spec = _spec([{"transform": f"{transforms}:add_flag"}, {"select": ["user", "big"]}])
    res = _results(_raw(spark, [_event(0, "a", 9.0, 1)]), spec)
    assert res["0:0"].data == {"user": "a", "big": True}


def test_transform_dropping_hidden_columns_is_a_deploy_error(
    spark: SparkSession, transforms: str
) -> None:
    spec = _spec([{"transform": f"{transforms}:drop_hidden"}])
    with pytest.raises(DeployError, match="dropped hidden column"):
        _results(_raw(spark, [_event(0, "a", 9.0, 1)]), spec)


def test_transform_that_cannot_be_imported_names_the_step(spark: SparkSession) -> None:
    spec = _spec([{"transform": "no_such_module_xyz:f"}])
    with pytest.raises(DeployError, match=r"steps\[0\]\.transform: cannot import"):
        _results(_raw(spark, [_event(0, "a", 9.0, 1)]), spec)


def test_window_key_missing_after_select_is_reported(spark: SparkSession) -> None:
    # Validation refuses this spec (arfl.configs.schema); the query still names the step for a
    # spec built without it.
    steps = [
        {"select": ["amount"]},
        {"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}},
    ]
    source = {"topic": "in", "event_time": "ts"}
    spec = Spec.model_validate(
        {"name": "t", "source": source, "sink": {"topic": "out"}, "steps": steps}
    )
    with pytest.raises(DeployError, match=r"steps\[1\]\.window\.key: no column 'user'"):
        _results(_raw(spark, [_event(0, "a", 9.0, 1)]), spec)


def test_event_schema_adds_spec_fields() -> None:
    spec = parse_spec(
        {
            "name": "t",
            "source": {"topic": "in", "event_time": "event_ms", "key": "device"},
            "sink": {"topic": "out"},
        }
    )
    names = query.event_schema(spec).fieldNames()
    assert names[:5] == ["seq", "user", "amount", "ts", "sent_ms"]
    assert "event_ms" in names and "device" in names


def test_window_sum_of_doubles_does_not_depend_on_row_order(spark: SparkSession) -> None:
    # In floating point (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3): two replicas whose batches add
    # the same rows in another order would disagree. Sums are exact instead.
    amounts = [0.1, 0.2, 0.3, 1e-3, 7.7]
    spec = _spec(
        [
            {
                "window": {
                    "size": "1s",
                    "key": "user",
                    "agg": {"total": "sum(amount)", "mean": "avg(amount)"},
                }
            }
        ]
    )
    hashes = set()
    for order in (amounts, list(reversed(amounts)), amounts[2:] + amounts[:2]):
        events = [_event(i, "a", a, 100 + i) for i, a in enumerate(order)]
        res = _results(
            spark.createDataFrame(
                [(e.encode(), i % 2, i) for i, e in enumerate(events)],
                "value binary, partition int, offset long",
            ).repartition(3),
            spec,
        )
        hashes.add(res["0-1000:a"].hash)
        assert res["0-1000:a"].data["total"] == 8.301
        assert res["0-1000:a"].data["mean"] == pytest.approx(8.301 / 5)
    assert len(hashes) == 1
    assert (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)  # the premise


# --- result ids that hold up, sent_ts, end-of-input markers --------------------


def _explode_pair(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.withColumn("copy", F.explode(F.array(F.lit(1), F.lit(2))))


def test_a_step_emitting_several_rows_per_record_is_refused(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both rows of input record 0:0 would get rid "0:0": the merger would keep one and count
    # the other as divergent. The spec refuses generators in selects; a transform is caught here.
    mod = types.ModuleType("arfl_test_explode")
    mod.explode_pair = _explode_pair  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    spec = _spec([{"transform": "arfl_test_explode:explode_pair"}])
    with pytest.raises(DeployError, match=r"steps\[0\]\.transform: .*several rows per input"):
        _results(_raw(spark, [_event(0, "a", 1.0, 5)]), spec)


def test_a_null_window_key_and_the_string_null_get_different_rids(spark: SparkSession) -> None:
    events = [
        json.dumps({"seq": 0, "user": None, "amount": 1.0, "ts": 100, "sent_ms": 101}),
        json.dumps({"seq": 1, "user": "null", "amount": 2.0, "ts": 200, "sent_ms": 201}),
    ]
    spec = _spec([{"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}])
    res = _results(_raw(spark, events), spec)
    assert len(res) == 2
    by_user = {r.data.get("user"): rid for rid, r in res.items()}
    assert by_user[None] != by_user["null"]
    assert by_user["null"] == "0-1000:null"  # real keys keep the documented form


def test_sent_ts_is_the_actual_send_time_per_record_and_the_newest_per_window(
    spark: SparkSession,
) -> None:
    events = [_event(0, "a", 1.0, 100), _event(1, "a", 2.0, 300), _event(2, "b", 3.0, 200)]
    rec = _results(_raw(spark, events), _spec([{"select": ["user"]}]))
    assert [rec[f"0:{i}"].sent_ts for i in range(3)] == [101, 301, 201]
    assert [rec[f"0:{i}"].src_ts for i in range(3)] == [100, 300, 200]  # unchanged
    win = _results(
        _raw(spark, events),
        _spec([{"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}]),
    )
    assert (win["0-1000:a"].src_ts, win["0-1000:a"].sent_ts) == (300, 301)
    assert (win["0-1000:b"].src_ts, win["0-1000:b"].sent_ts) == (200, 201)
    # A user topic without sent_ms: sent_ts is null, src_ts still there.
    plain = json.dumps({"user": "a", "amount": 1.0, "ts": 7})
    res = _results(_raw(spark, [plain]), _spec([]))
    assert (res["0:0"].src_ts, res["0:0"].sent_ts) == (7, None)


def _marker(ts: int) -> str:
    return json.dumps({"eoi": True, "ts": ts})


WINDOW_STEPS: list[dict[str, Any]] = [
    {"filter": "amount > 1"},
    {"select": ["user", "amount"]},
    {
        "window": {
            "size": "1s",
            "key": "user",
            "watermark": "500ms",
            "agg": {"n": "count(*)", "total": "sum(amount)"},
        }
    },
    # On the grouping key only: Spark pushes it below the aggregation and the watermark.
    {"filter": "NOT user <=> 'nobody'"},
]


def _window_events() -> list[str]:
    return [_event(i, "ab"[i % 2], float(i % 7), 150 * i) for i in range(20)]  # ts 0 .. 2850


def test_end_of_input_markers_yield_no_result_and_no_window(spark: SparkSession) -> None:
    events = _window_events()
    markers = [_marker(10**9)] * 2
    for steps in (WINDOW_STEPS, [{"filter": "amount > 1"}, {"select": ["user"]}], []):
        spec = _spec(steps)
        with_markers = _results(_raw(spark, events + markers), spec)
        assert with_markers.keys() == _results(_raw(spark, events), spec).keys()


def _realtime_spec(steps: list[dict[str, Any]]) -> Spec:
    return parse_spec(
        {
            "name": "t",
            "source": {"topic": "in", "event_time": "ts"},
            "sink": {"topic": "out"},
            "steps": steps,
            "replication": {"mode": "active", "replicas": 2, "trigger": "realtime"},
        }
    )


def test_a_real_time_per_record_query_passes_each_marker_on_as_a_marker_copy(
    spark: SparkSession,
) -> None:
    events = [_event(i, "u", float(i), 1000 + i) for i in range(4)]
    spec = _realtime_spec([{"filter": "amount > 1"}, {"select": ["user", "amount"]}])
    assert spec.passes_markers
    raw = _raw(spark, [*events, _marker(10**9)], partition=3)
    rows = query.build_output(query.parse_events(raw, spec, keep_markers=True), spec, 1).collect()
    copies = {parse_result(r.value.encode()).rid: parse_result(r.value.encode()) for r in rows}
    # The filter passes the marker (offset 4), the select keeps it; its columns are null.
    assert sorted(copies) == ["3:2", "3:3", "3:4"]
    marker = copies["3:4"]
    assert marker.eoi and marker.data == {} and marker.replica == 1, marker
    assert not copies["3:2"].eoi and not copies["3:3"].eoi
    # The results themselves are the same bytes as without markers (no `eoi` on them) ...
    plain = query.build_output(query.parse_events(_raw(spark, events, 3), spec), spec, 1)
    assert {r.value for r in plain.collect()} == {
        r.value for r in rows if not parse_result(r.value.encode()).eoi
    }
    # ... and the batch recomputation, which keeps no marker, makes none.
    assert set(_results(raw, spec)) == {"3:2", "3:3"}


def test_no_marker_copy_where_a_transform_or_a_micro_batch_or_a_window_runs() -> None:
    # Real-time mode refuses a transform unless its allowlist check is off (then: mode none).
    transform = _spec([{"transform": "m:f"}]).steps
    rt = _realtime_spec([{"filter": "amount > 1"}])
    assert not rt.model_copy(update={"steps": transform}).passes_markers
    assert not _spec([{"filter": "amount > 1"}]).passes_markers  # micro-batch
    assert not _realtime_spec(WINDOW_STEPS).passes_markers


def _stream_rows(values: list[str], first_offset: int) -> str:
    return "".join(
        json.dumps({"value": v, "partition": 0, "offset": first_offset + i}) + "\n"
        for i, v in enumerate(values)
    )


def _run_stream(
    spark: SparkSession, base: Any, spec: Spec, batches: list[list[str]]
) -> tuple[dict[str, Any], str]:
    """Run ``spec`` as a streaming query over a file source, one file per batch.

    Returns:
        rid -> result emitted (append mode), and the physical plan of the last batch.
    """
    src = base / "in"
    src.mkdir()
    name = f"q_{abs(hash(str(base)))}"
    raw = spark.readStream.schema("value string, partition int, offset long").json(str(src))
    out = query.build_output(query.parse_events(raw, spec), spec, 0)
    q = (
        out.writeStream.format("memory")
        .queryName(name)
        .outputMode(query.output_mode(spec))
        .option("checkpointLocation", str(base / "ckpt"))
        .start()
    )
    try:
        offset = 0
        for n, values in enumerate(batches):
            tmp = base / f"batch-{n}.json"
            tmp.write_text(_stream_rows(values, offset))
            tmp.rename(src / tmp.name)  # whole files only: the source must not see half of one
            offset += len(values)
            q.processAllAvailable()
        plan = q._jsq.explainInternal(False)
    finally:
        q.stop()
    results = {}
    for row in spark.sql(f"SELECT key, value FROM {name}").collect():
        res = parse_result(row.value.encode())
        assert res.rid not in results, f"duplicate rid {res.rid}"
        results[res.rid] = res
    return results, plan


def test_end_of_input_markers_flush_every_window_of_a_stream(
    spark: SparkSession, tmp_path: Any
) -> None:
    spec = _spec(WINDOW_STEPS)
    events = _window_events()
    expected = _results(_raw(spark, events), spec)  # the batch recomputation: every window
    assert {rid.split(":")[0] for rid in expected} == {"0-1000", "1000-2000", "2000-3000"}

    (tmp_path / "control").mkdir()
    control, _ = _run_stream(spark, tmp_path / "control", spec, [events])
    # Without a marker the watermark stops at 2850 - 500: the last window is never final.
    assert control.keys() == {r for r in expected if not r.startswith("2000-3000")}

    (tmp_path / "eoi").mkdir()
    flushed, plan = _run_stream(
        spark, tmp_path / "eoi", spec, [events, [_marker(2850 + 86_400_000)]]
    )
    assert flushed.keys() == expected.keys()
    for rid, res in flushed.items():
        assert (res.data, res.hash, res.src_ts, res.sent_ts) == (
            expected[rid].data,
            expected[rid].hash,
            expected[rid].src_ts,
            expected[rid].sent_ts,
        )
    # The marker filter stays above the watermark operator (the optimizer pushes filters that
    # do not reference the event-time column below it, where it would hide the markers).
    lines = plan.splitlines()
    wm = next(i for i, line in enumerate(lines) if "EventTimeWatermark" in line)
    drop = [i for i, line in enumerate(lines) if "Filter" in line and "__eoi" in line]
    assert any(i < wm and "__et" in lines[i] for i in drop), plan


def test_offline_recomputation_counts_markers_and_windows_that_cannot_be_final(
    spark: SparkSession,
) -> None:
    from arfl.replica import offline

    spec = _spec(WINDOW_STEPS)
    null_key = json.dumps({"seq": 99, "user": None, "amount": 5.0, "ts": 100, "sent_ms": 1})
    events = [*_window_events(), null_key]
    without = offline.recompute_rows(_raw(spark, events), spec)
    assert without.markers == 0
    assert (without.max_event_time_ms, without.watermark_ms) == (2850, 2350)
    assert without.not_final == {"2000-3000:a", "2000-3000:b"}
    assert "0-1000" in without.final  # the null key's window, whose rid has no ":"

    eoi = 2850 + 86_400_000
    marked = offline.recompute_rows(_raw(spark, [*events, _marker(eoi), _marker(eoi)]), spec)
    assert marked.markers == 2
    assert marked.max_event_time_ms == eoi
    assert marked.not_final == frozenset()
    assert marked.final == set(marked.results) == set(without.results)
    assert marked.data == without.data


def test_the_agreed_watermark_drops_rows_whose_window_ended_before_it(
    spark: SparkSession,
) -> None:
    # The arfl-kafka source's late_before column (the agreed watermark of the row's agreed
    # batch): a row goes into a window only if that window ends after it. Per window, like
    # Spark's own watermark: with sliding windows a row may count in one window and not in
    # another.
    spec = _spec(
        [{"window": {"size": "2s", "slide": "1s", "key": "user", "agg": {"n": "count(*)"}}}]
    )
    events = [_event(0, "a", 1.0, 1500), _event(1, "a", 1.0, 1600), _event(2, "a", 1.0, 2500)]
    late: list[int | None] = [None, 2000, 2000]
    rows = [(v.encode(), 0, i, late[i]) for i, v in enumerate(events)]
    raw = spark.createDataFrame(rows, "value binary, partition int, offset long, late_before long")
    res = _results(raw, spec)
    counts = {rid: r.data["n"] for rid, r in res.items()}
    # 1500 and 1600 are in [0, 2000) and [1000, 3000); 2500 in [1000, 3000) and [2000, 4000).
    # Window [0, 2000) ends at 2000, not after the threshold: only the row without one counts.
    assert counts == {"0-2000:a": 1, "1000-3000:a": 3, "2000-4000:a": 1}
    # Without the column (Spark's Kafka source, the offline recomputation) nothing is dropped.
    plain = _results(_raw(spark, events), spec)
    assert {rid: r.data["n"] for rid, r in plain.items()} == {
        "0-2000:a": 2,
        "1000-3000:a": 3,
        "2000-4000:a": 1,
    }


def test_where_the_source_applies_the_agreed_watermark_single_quoted_json_is_bad(
    spark: SparkSession,
) -> None:
    # The source's scan (Python's JSON parser) cannot read single-quoted JSON, so the query's
    # parse refuses it there too, or Spark would count an event time the scan missed.
    spec = _spec([{"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}])
    quoted = "{'seq': 0, 'user': 'a', 'amount': 1.0, 'ts': 1500}"
    values = [quoted, _event(1, "a", 1.0, 1600)]
    with_late = spark.createDataFrame(
        [(v.encode(), 0, i, None) for i, v in enumerate(values)],
        "value binary, partition int, offset long, late_before long",
    )
    assert {r.rid: r.data["n"] for r in _results(with_late, spec).values()} == {"1000-2000:a": 1}
    plain = _results(_raw(spark, values), spec)
    assert {r.rid: r.data["n"] for r in plain.values()} == {"1000-2000:a": 2}
