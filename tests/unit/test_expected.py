"""The independent check (arfl.measure.check) over synthetic topics: no Kafka, no Spark."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.expr import Column, Schema, Unsupported, compile_select_item
from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ReportError
from arfl.measure.check import Delivered, InputRecord, check, check_run
from arfl.measure.check.evaluate import expected_results, record_rid, window_rid
from arfl.measure.check.kafka import run_names

T0 = 1_764_000_000_000  # a whole second, so 1 s windows start at T0


def _spec(steps: list[dict[str, Any]], event_time: str | None = "ts") -> Spec:
    source: dict[str, Any] = {"topic": "in", "partitions": 2}
    if event_time:
        source["event_time"] = event_time
    return parse_spec({"name": "t", "source": source, "steps": steps, "sink": {"topic": "out"}})


def _window(**kw: Any) -> dict[str, Any]:
    w: dict[str, Any] = {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}
    w.update(kw)
    return {"window": w}


def _ev(p: int, o: int, seq: int, user: str, amount: float, et: int, appended: int) -> InputRecord:
    """An injector-shaped event; ``appended`` is the broker's LogAppendTime."""
    value = {"seq": seq, "user": user, "amount": amount, "ts": et, "sent_ms": et + 1}
    return InputRecord(p, o, appended, json.dumps(value).encode())


def _out(rid: str, data: dict[str, Any]) -> Delivered:
    return Delivered(rid, data)


# --- per-record pipelines ----------------------------------------------------------------


def test_filter_and_select_give_one_result_per_kept_record_under_spark_names() -> None:
    spec = _spec(
        [{"filter": "amount > 10"}, {"select": ["user", "amount * 2", "seq % 3 AS bucket"]}],
        event_time=None,
    )
    inputs = [
        _ev(0, 0, 0, "u1", 5.0, T0, T0),
        _ev(0, 1, 1, "u2", 12.5, T0 + 1, T0 + 1),
        _ev(1, 0, 2, "u1", 40.0, T0 + 2, T0 + 2),
    ]
    exp = expected_results(spec, inputs)
    assert exp.judged == {
        "0:1": {"user": "u2", "(amount * 2)": 25.0, "bucket": 1},
        "1:0": {"user": "u1", "(amount * 2)": 80.0, "bucket": 2},
    }
    res = check(spec, inputs, [_out(r, d) for r, d in exp.judged.items()])
    assert (res.expected, res.results, res.missing, res.extra, res.wrong) == (2, 2, 0, 0, 0)
    assert res.ok is True


def test_without_select_a_result_carries_every_parsed_field_and_nulls_are_left_out() -> None:
    spec = _spec([{"filter": "seq >= 0"}], event_time=None)
    rec = InputRecord(0, 7, T0, b'{"seq": 3, "user": "u9", "ts": 11, "extra": "not parsed"}')
    assert expected_results(spec, [rec]).judged == {"0:7": {"seq": 3, "user": "u9", "ts": 11}}


def test_records_spark_cannot_parse_are_bad_not_results() -> None:
    spec = _spec([{"filter": "amount > 0"}], event_time=None)
    recs = [
        InputRecord(0, 0, T0, b"not json"),
        InputRecord(0, 1, T0, b"[1, 2]"),
        InputRecord(0, 2, T0, b'{"amount": 3}'),  # no ts
        InputRecord(0, 3, T0, b'{"amount": 3, "ts": 1.5}'),  # ts not an integer: NULL
        InputRecord(0, 4, T0, None),
        InputRecord(0, 5, T0, b'{"amount": 3, "ts": 9}'),
    ]
    exp = expected_results(spec, recs)
    assert list(exp.judged) == ["0:5"]
    assert (exp.bad, exp.input_records) == (5, 6)


# --- windows ------------------------------------------------------------------------------


AGGS = {"n": "count(*)", "total": "sum(amount)", "mean": "avg(amount)", "lo": "min(amount)",
        "hi": "max(amount)", "first": "min(seq)"}  # fmt: skip


def test_tumbling_window_count_sum_avg_min_max_per_key() -> None:
    spec = _spec([_window(agg=AGGS)])
    inputs = [
        _ev(0, 0, 0, "u1", 0.1, T0 + 100, T0 + 100),
        _ev(0, 1, 1, "u1", 0.2, T0 + 900, T0 + 900),
        _ev(1, 0, 2, "u2", 7.0, T0 + 950, T0 + 950),
        _ev(0, 2, 3, "u1", 1.0, T0 + 1500, T0 + 1500),
        _ev(1, 1, 4, "u2", 1.0, T0 + 5000, T0 + 5000),  # pushes the watermark past 2 s
    ]
    exp = expected_results(spec, inputs)
    assert exp.judged[window_rid(T0, T0 + 1000, "u1")] == {
        "window_start": T0, "window_end": T0 + 1000, "user": "u1", "n": 2,
        "total": 0.3, "mean": 0.15, "lo": 0.1, "hi": 0.2, "first": 0,
    }  # fmt: skip
    # Exact decimal sums: 0.1 + 0.2 is 0.3, not 0.30000000000000004.
    assert exp.judged[window_rid(T0, T0 + 1000, "u1")]["total"] == 0.3
    assert exp.judged[window_rid(T0, T0 + 1000, "u2")]["n"] == 1
    assert exp.judged[window_rid(T0 + 1000, T0 + 2000, "u1")]["total"] == 1.0
    # The newest window is not final (the watermark never passed its end): not required.
    assert list(exp.open) == [window_rid(T0 + 5000, T0 + 6000, "u2")]
    assert len(exp.judged) == 3 and not exp.late
    assert exp.final_watermark_ms == T0 + 5000


def test_sliding_windows_count_each_row_in_every_window_that_holds_it() -> None:
    spec = _spec([_window(slide="500ms", agg={"n": "count(*)", "s": "sum(seq)"})])
    inputs = [
        _ev(0, 0, 1, "u1", 1.0, T0 + 200, T0 + 200),
        _ev(0, 1, 2, "u1", 1.0, T0 + 700, T0 + 700),
        _ev(0, 2, 3, "u1", 1.0, T0 + 9000, T0 + 9000),
    ]
    exp = expected_results(spec, inputs)
    got = {rid: (d["n"], d["s"]) for rid, d in exp.judged.items()}
    assert got == {
        window_rid(T0 - 500, T0 + 500, "u1"): (1, 1),
        window_rid(T0, T0 + 1000, "u1"): (2, 3),
        window_rid(T0 + 500, T0 + 1500, "u1"): (1, 2),
    }
    assert len(exp.open) == 2  # the two windows holding T0 + 9000


def test_a_late_row_makes_its_window_late_affected_not_missing_or_extra() -> None:
    spec = _spec([_window(watermark="500ms")])
    inputs = [
        _ev(0, 0, 0, "u1", 1.0, T0 + 100, T0 + 10),
        _ev(0, 1, 1, "u1", 1.0, T0 + 5000, T0 + 20),
        # Appended after an event at T0 + 5 s: watermark up to T0 + 4.5 s, past [T0, T0 + 1 s).
        _ev(1, 0, 2, "u1", 1.0, T0 + 300, T0 + 30),
        # Also appended later, but its window [T0 + 4 s, T0 + 5 s) is not past the watermark.
        _ev(1, 1, 3, "u2", 1.0, T0 + 4200, T0 + 40),
        _ev(1, 2, 4, "u2", 1.0, T0 + 9000, T0 + 50),
    ]
    exp = expected_results(spec, inputs)
    late_rid = window_rid(T0, T0 + 1000, "u1")
    assert list(exp.late) == [late_rid]
    assert late_rid not in exp.judged
    assert window_rid(T0 + 4000, T0 + 5000, "u2") in exp.judged
    # Spark may have dropped the late row (n = 1) or not (n = 2): neither is judged.
    for n in (None, 1, 2):
        out = [_out(r, d) for r, d in exp.judged.items()]
        if n is not None:
            out.append(_out(late_rid, {**exp.late[late_rid], "n": n}))
        res = check(spec, inputs, out)
        assert (res.missing, res.extra, res.wrong, res.late_windows) == (0, 0, 0, 1), n


def test_a_record_sharing_a_timestamp_with_a_newer_one_may_be_late_too() -> None:
    spec = _spec([_window()])
    inputs = [
        # One broker timestamp for both: the newer event may have been in an earlier batch.
        _ev(0, 0, 0, "u1", 1.0, T0 + 5000, T0 + 10),
        _ev(1, 0, 1, "u1", 1.0, T0 + 100, T0 + 10),
    ]
    assert list(expected_results(spec, inputs).late) == [window_rid(T0, T0 + 1000, "u1")]
    # Later offsets of the same partition cannot have been in an earlier batch.
    inputs = [
        _ev(0, 0, 1, "u1", 1.0, T0 + 100, T0 + 10),
        _ev(0, 1, 0, "u1", 1.0, T0 + 5000, T0 + 10),
    ]
    assert not expected_results(spec, inputs).late


def test_markers_are_skipped_and_an_end_of_input_marker_makes_the_last_windows_final() -> None:
    spec = _spec([_window(watermark="500ms")])
    heartbeat = InputRecord(
        1, 0, T0 + 5, b'{"__arfl_epoch": 3, "replica": 0}', (("arfl-marker", b"heartbeat"),)
    )
    eoi = InputRecord(0, 1, T0 + 20, json.dumps({"eoi": True, "ts": T0 + 60_000}).encode())
    inputs = [_ev(0, 0, 0, "u1", 1.0, T0 + 100, T0 + 10), heartbeat, eoi]
    exp = expected_results(spec, inputs)
    assert list(exp.judged) == [window_rid(T0, T0 + 1000, "u1")]
    assert (exp.markers, exp.bad, exp.open) == (2, 0, {})
    # Without the marker the only window stays open.
    assert list(expected_results(spec, inputs[:2]).open) == [window_rid(T0, T0 + 1000, "u1")]


def test_an_end_of_input_marker_carries_its_event_time_in_ts_whatever_the_field() -> None:
    spec = _spec([_window()], event_time="sent_ms")
    eoi = InputRecord(0, 1, T0 + 20, json.dumps({"eoi": True, "ts": T0 + 60_000}).encode())
    inputs = [_ev(0, 0, 0, "u1", 1.0, T0 + 100, T0 + 10), eoi]
    exp = expected_results(spec, inputs)  # the event's time is its sent_ms: T0 + 101
    assert list(exp.judged) == [window_rid(T0, T0 + 1000, "u1")]
    assert exp.final_watermark_ms == T0 + 60_000


def test_rows_filtered_before_the_window_do_not_make_a_window_required() -> None:
    # Spark pushes a filter that does not read the event time below the watermark, so a
    # filtered-out row never advances it: its event time cannot make a window final.
    spec = _spec([{"filter": "amount > 10"}, _window()])
    inputs = [
        _ev(0, 0, 0, "u1", 20.0, T0 + 100, T0 + 10),
        _ev(0, 1, 1, "u2", 5.0, T0 + 5000, T0 + 20),
    ]
    exp = expected_results(spec, inputs)
    assert (exp.judged, list(exp.open)) == ({}, [window_rid(T0, T0 + 1000, "u1")])
    assert exp.final_watermark_ms == T0 + 100
    # An end-of-input marker passes as far as the watermark whatever the filter.
    eoi = InputRecord(0, 2, T0 + 30, json.dumps({"eoi": True, "ts": T0 + 60_000}).encode())
    assert list(expected_results(spec, [*inputs, eoi]).judged) == [window_rid(T0, T0 + 1000, "u1")]


def test_steps_before_and_after_a_window() -> None:
    spec = _spec(
        [
            {"filter": "amount > 10"},
            _window(agg={"n": "count(*)", "total": "sum(amount)"}),
            {"filter": "n >= 2"},
            {"select": ["user", "total / n AS mean"]},
        ]
    )
    inputs = [
        _ev(0, 0, 0, "u1", 20.0, T0 + 1, T0 + 1),
        _ev(0, 1, 1, "u1", 30.0, T0 + 2, T0 + 2),
        _ev(0, 2, 2, "u1", 5.0, T0 + 3, T0 + 3),  # filtered out before the window
        _ev(0, 3, 3, "u2", 50.0, T0 + 4, T0 + 4),  # its window has n = 1: filtered after
        _ev(0, 4, 4, "u3", 50.0, T0 + 9000, T0 + 9000),
    ]
    exp = expected_results(spec, inputs)
    assert exp.judged == {window_rid(T0, T0 + 1000, "u1"): {"user": "u1", "mean": 25.0}}


# --- comparison ---------------------------------------------------------------------------


def test_missing_extra_duplicate_and_wrong_are_each_counted_with_examples() -> None:
    spec = _spec([{"select": ["seq", "amount"]}], event_time=None)
    inputs = [_ev(0, i, i, "u", float(i), T0 + i, T0 + i) for i in range(5)]
    out = [
        _out("0:0", {"seq": 0, "amount": 0.0}),
        _out("0:1", {"seq": 1, "amount": 1.0}),
        _out("0:1", {"seq": 1, "amount": 1.0}),  # duplicate
        _out("0:2", {"seq": 2, "amount": 2.5}),  # wrong value
        _out("0:3", {"seq": 3}),  # wrong: a column missing
        _out("9:9", {"seq": 9, "amount": 9.0}),  # extra
        Delivered(None, None),  # unreadable
    ]  # 0:4 missing
    res = check(spec, inputs, out)
    assert (res.expected, res.results, res.missing, res.extra) == (5, 5, 1, 1)
    assert (res.duplicates, res.wrong, res.unreadable, res.ok) == (1, 2, 1, False)
    assert res.examples["missing"] == [{"rid": "0:4", "expected": {"seq": 4, "amount": 4.0}}]
    assert res.examples["extra"] == [{"rid": "9:9", "data": {"seq": 9, "amount": 9.0}}]
    assert res.examples["duplicates"] == [{"rid": "0:1", "copies": 2}]
    assert [w["rid"] for w in res.examples["wrong"]] == ["0:2", "0:3"]
    d = res.to_dict()
    assert d["ok"] is False and d["missing"] == 1 and d["unsupported"] is None
    json.dumps(d)


def test_numbers_match_within_a_relative_tolerance_strings_exactly() -> None:
    spec = _spec([{"select": ["user", "amount"]}], event_time=None)
    inputs = [_ev(0, 0, 0, "u1", 0.3, T0, T0), _ev(0, 1, 1, "u2", 1e6, T0, T0)]
    close = [_out("0:0", {"user": "u1", "amount": 0.30000000000000004}),
             _out("0:1", {"user": "u2", "amount": 1e6 * (1 + 1e-12)})]  # fmt: skip
    assert check(spec, inputs, close).wrong == 0
    far = [_out("0:0", {"user": "u1", "amount": 0.3 * (1 + 1e-8)}),
           _out("0:1", {"user": "U2", "amount": 1e6})]  # fmt: skip
    assert check(spec, inputs, far).wrong == 2


# --- unsupported ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "fragment"),
    [
        ([{"filter": "abs(amount) > 1"}], "function abs() is outside the subset"),
        ([{"filter": "amount IN (1, 2)"}], "IN"),
        ([{"select": ["user", "CASE WHEN amount > 1 THEN 1 END AS c"]}], "WHEN"),
        ([{"filter": "user > 3"}], "comparing a string with a long"),
        ([{"select": ["seq / 1.5 AS x"]}], "decimal division"),
        ([{"transform": "mod:fn"}], "steps[0].transform = 'mod:fn'"),
        ([{"filter": "nosuch > 1"}], "no column 'nosuch'"),
    ],
)
def test_an_expression_outside_the_subset_is_unsupported_never_a_guess(
    steps: list[dict[str, Any]], fragment: str
) -> None:
    # Unvalidated: spec validation refuses the wrong column and type cases (test_spec_schema),
    # but the check must still say "unsupported" for a run whose spec predates that.
    source = {"topic": "in", "partitions": 2}
    raw = {"name": "t", "source": source, "steps": steps, "sink": {"topic": "out"}}
    spec = Spec.model_validate(raw)
    res = check(spec, [_ev(0, 0, 0, "u", 2.0, T0, T0)], [_out("0:0", {"user": "u"})])
    assert res.unsupported is not None and res.unsupported.startswith("unsupported: ")
    assert fragment in res.unsupported
    assert (res.expected, res.missing, res.wrong, res.ok) == (None, None, None, None)
    assert res.to_dict()["unsupported"] == res.unsupported


def test_division_by_zero_in_the_data_is_unsupported() -> None:
    spec = _spec([{"select": ["amount / seq AS r"]}], event_time=None)
    res = check(spec, [_ev(0, 0, 0, "u", 2.0, T0, T0)], [])
    assert res.unsupported is not None and "division by zero" in res.unsupported


# --- expression semantics -------------------------------------------------------------------

SCHEMA = Schema(
    [Column("seq", "long"), Column("user", "string"), Column("amount", "double")]
)  # fmt: skip


def _eval(text: str, **row: Any) -> tuple[str, Any]:
    name, e = compile_select_item(text, SCHEMA, "t")
    return name, e.eval({"seq": 17, "user": "u1", "amount": 37.5, **row})


@pytest.mark.parametrize(
    ("text", "name", "value"),
    [
        # Names as Spark 4.3 generates them (checked against a local session).
        ("amount * 2", "(amount * 2)", 75.0),
        ("-5", "-5", -5),
        ("user = 'u1'", "(user = u1)", True),
        ("user == 'u1'", "(user = u1)", True),
        ("amount > 10 AND seq < 5", "((amount > 10) AND (seq < 5))", False),
        ("NOT (amount > 1)", "(NOT (amount > 1))", False),
        ("amount != 3", "(NOT (amount = 3))", True),
        ("amount <> 37.5", "(NOT (amount = 37.5))", False),
        ("1.50", "1.50", Decimal("1.50")),
        ("seq * 1.5", "(seq * 1.5)", Decimal("25.5")),
        ("-amount", "(- amount)", -37.5),
        ("+amount", "(+ amount)", 37.5),
        ("amount IS NULL", "(amount IS NULL)", False),
        ("user IS NOT NULL", "(user IS NOT NULL)", True),
        ("seq % 3", "(seq % 3)", 2),
        ("seq / 2", "(seq / 2)", 8.5),
        ("true", "true", True),
        ("NULL", "NULL", None),
        ("amount * 2 + 1", "((amount * 2) + 1)", 76.0),
        ("AMOUNT", "AMOUNT", 37.5),
        ("`user`", "user", "u1"),
        ("1e3", "1000.0", 1000.0),
        ("seq - -2", "(seq - -2)", 19),
        ("'x'", "x", "x"),
        ("seq * 1.5 + 0.25", "((seq * 1.5) + 0.25)", Decimal("25.75")),
        ("amount AS a", "a", 37.5),
    ],
)
def test_expression_names_and_values_follow_spark(text: str, name: str, value: Any) -> None:
    assert _eval(text) == (name, value)


def test_three_valued_logic_and_java_remainder() -> None:
    assert _eval("amount > 1 OR seq > 1", amount=None)[1] is True
    assert _eval("amount > 1 AND seq > 1", amount=None)[1] is None
    assert _eval("amount > 1 AND seq > 100", amount=None)[1] is False
    assert _eval("NOT (amount > 1)", amount=None)[1] is None
    assert _eval("seq % 3", seq=-7)[1] == -1  # Java's sign, not Python's (2)
    assert _eval("amount % 3", amount=-7.5)[1] == -1.5
    with pytest.raises(Unsupported):
        _eval("seq * 9223372036854775807")


def test_result_id_formats() -> None:
    assert record_rid(2, 1234) == "2:1234"
    assert window_rid(1000, 2000, "u1") == "1000-2000:u1"
    # A null key has no ":" (arfl.run.records), so it never shares an id with the string.
    assert window_rid(1000, 2000, None) == "1000-2000"
    assert window_rid(1000, 2000, "null") == "1000-2000:null"


# --- run directories ------------------------------------------------------------------------


def _run_dir(tmp_path: Path, spec: Spec, state: dict[str, Any] | None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "spec.json").write_text(json.dumps(spec.model_dump(mode="json", by_alias=True)))
    if state is not None:
        (tmp_path / "state.json").write_text(json.dumps({"run": tmp_path.name, **state}))
    return tmp_path


def test_run_names_come_from_state_json(tmp_path: Path) -> None:
    spec = _spec([_window(watermark="500ms")])
    state = {"stack": {"kafka": "127.0.0.1:1"}, "topics": {"source": "in.r1", "sink": "out.r1"}}
    got, kafka, source, sink = run_names(_run_dir(tmp_path, spec, state))
    assert (got, kafka, source, sink) == (spec, "127.0.0.1:1", "in.r1", "out.r1")


def test_an_unsupported_run_is_answered_without_kafka_and_a_run_without_state_is_an_error(
    tmp_path: Path,
) -> None:
    spec = _spec([{"transform": "mod:fn"}], event_time=None)
    # Port 1: nothing listens there; the answer must not need Kafka at all.
    state = {"stack": {"kafka": "127.0.0.1:1"}, "topics": {"source": "in.r1", "sink": "out.r1"}}
    res = check_run(_run_dir(tmp_path / "a", spec, state))
    assert (
        res.unsupported
        == "unsupported: steps[0].transform = 'mod:fn': transform steps are opaque code"
    )
    with pytest.raises(ReportError, match=r"state\.json"):
        check_run(_run_dir(tmp_path / "b", spec, None))
