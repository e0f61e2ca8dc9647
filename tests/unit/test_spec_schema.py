"""Spec validation against the input schema (arfl.configs.schema), through ``parse_spec``."""

from __future__ import annotations

from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.schema import schema_problems
from arfl.errors import SpecError

DEFAULT_COLUMNS = "known here: seq, user, amount, ts, sent_ms"
FIELDS = {
    "sku": {"kind": "key", "cardinality": 37, "skew": 1.1},
    "qty": {"kind": "int", "min": 1, "max": 20},
    "price": {"kind": "float", "min": 0.5, "max": 99.5},
    "country": {"kind": "choice", "values": ["se", "be", "fr"], "weights": [5, 3, 2]},
    "event_ts": {"kind": "event-time"},
}


def _raw(steps: list[dict[str, Any]], declared: bool = False, **source: Any) -> dict[str, Any]:
    src: dict[str, Any] = {"topic": "in", "event_time": "ts", **source}
    raw: dict[str, Any] = {"name": "t", "source": src, "steps": steps, "sink": {"topic": "out"}}
    if declared:
        raw["workload"] = {"fields": FIELDS}
        src.setdefault("key", "sku")
        src["event_time"] = source.get("event_time", "event_ts")
    return raw


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as ei:
        parse_spec(raw, "t.toml")
    return ei.value.problems


def _window(key: str = "user", **agg: str) -> dict[str, Any]:
    return {"window": {"size": "1s", "key": key, "agg": agg or {"n": "count(*)"}}}


def test_the_issue_example_is_refused_with_both_unknown_fields() -> None:
    # filter = "qty > 1" and a window keyed by sku, with the default workload.
    problems = _problems(_raw([{"filter": "qty > 1"}, _window("sku")]))
    assert problems == [
        f"t.toml: steps[0].filter: unknown column 'qty' ({DEFAULT_COLUMNS}); the default "
        "workload has only these; declare the fields you need in [workload.fields]",
        f"t.toml: steps[1].window.key: unknown column 'sku' ({DEFAULT_COLUMNS}); the default "
        "workload has only these; declare the fields you need in [workload.fields]",
    ]


def test_declared_fields_are_accepted() -> None:
    steps = [
        {"filter": "qty > 1 AND country != 'fr' AND price * qty < 500.0"},
        _window("sku", n="count(*)", revenue="sum(price)", mean="avg(qty)", top="max(country)"),
        {"filter": "n > 2 AND revenue > 10.5"},
    ]
    spec = parse_spec(_raw(steps, declared=True))
    assert spec.steps[1].window is not None


def test_every_unknown_name_of_one_expression_in_one_problem() -> None:
    problems = _problems(_raw([{"filter": "qty > 1 AND amount > 2 AND price < 3"}]))
    assert problems == [
        f"t.toml: steps[0].filter: unknown columns 'qty', 'price' ({DEFAULT_COLUMNS}); the "
        "default workload has only these; declare the fields you need in [workload.fields]"
    ]


def test_a_declared_workload_lists_its_own_fields() -> None:
    [p] = _problems(_raw([{"filter": "amount > 1"}], declared=True))
    assert p == (
        "t.toml: steps[0].filter: unknown column 'amount' (known here: seq, sku, qty, price, "
        "country, event_ts, ts, sent_ms); add it to [workload.fields]"
    )


def test_sum_of_a_string_is_the_wrong_type() -> None:
    [p] = _problems(_raw([_window("sku", total="sum(country)")], declared=True))
    assert p == (
        "t.toml: steps[0].window.agg.total: 'sum(country)': 'country' is a string; sum needs "
        "a number (long or double)"
    )
    # min/max/count of a string are fine
    parse_spec(_raw([_window("sku", a="min(country)", b="count(country)")], declared=True))


def test_a_string_compared_with_a_number_is_the_wrong_type() -> None:
    [p] = _problems(_raw([{"filter": "country > 1"}], declared=True))
    assert p == (
        "t.toml: steps[0].filter: wrong type in 'country > 1': country (string) compared "
        "with 1 (long); needs two numbers, or two values of one type"
    )


def test_a_filter_that_is_not_a_boolean_is_the_wrong_type() -> None:
    [p] = _problems(_raw([{"filter": "amount + 1"}]))
    assert "t.toml: steps[0].filter: wrong type in 'amount + 1'" in p
    assert "(amount + 1) (double); needs a boolean" in p


def test_arithmetic_on_a_string_is_the_wrong_type() -> None:
    [p] = _problems(_raw([{"select": ["user * 2 AS twice"]}]))
    assert p.startswith("t.toml: steps[0].select[0]: wrong type in 'user * 2 AS twice': ")
    assert "user (string); needs numbers" in p


def test_a_rename_through_select_is_what_later_steps_see() -> None:
    renamed = {"select": ["user AS customer", "amount * 2 AS double_amount"]}
    parse_spec(_raw([renamed, {"filter": "customer = 'u1' AND double_amount > 4"}]))
    parse_spec(_raw([renamed, _window("customer", t="sum(double_amount)")]))
    [p] = _problems(_raw([renamed, {"filter": "user = 'u1'"}]))
    assert p == (
        "t.toml: steps[1].filter: unknown column 'user' (known here: customer, double_amount)"
    )
    # the type travels with the alias: the double stays a double
    [p] = _problems(_raw([{"select": ["user AS amount"]}, {"filter": "amount > 1"}]))
    assert "amount (string) compared with 1 (long)" in p


def test_select_star_keeps_every_column_and_adds_the_new_ones() -> None:
    parse_spec(_raw([{"select": ["*", "amount / 2 AS half"]}, {"filter": "half > seq"}]))


def test_the_window_output_is_what_later_steps_see() -> None:
    window = _window("user", n="count(*)", total="sum(amount)")
    after = {"select": ["window_start", "window_end", "user", "total / n AS mean"]}
    parse_spec(_raw([window, {"filter": "n > 1 AND window_end > window_start"}, after]))
    [p] = _problems(_raw([window, {"filter": "amount > 1"}]))
    assert p == (
        "t.toml: steps[1].filter: unknown column 'amount' (known here: window_start, "
        "window_end, user, n, total)"
    )


def test_expressions_beyond_the_parser_are_not_errors_but_their_names_are_checked() -> None:
    steps = [
        {"filter": "upper(user) = 'U1' AND amount IN (1.0, 2.0)"},
        {"select": ["*", "CASE WHEN amount > 1 THEN 'big' ELSE 'small' END AS size"]},
        {"filter": "size LIKE 'b%'"},
        {"select": ["size", "upper(user)"]},
        # the generated name of upper(user) is Spark's: names are no longer sure
        {"filter": "whatever > 1"},
    ]
    parse_spec(_raw(steps))
    [p] = _problems(_raw([{"filter": "qty IN (1, 2) OR lower(sku) = 'a'"}]))
    assert "t.toml: steps[0].filter: unknown columns 'qty', 'sku'" in p


@pytest.mark.parametrize(
    "cond",
    [
        "amount > 0 AND user IN ('u1', 'u2')",
        "amount > 0 AND user LIKE 'u%'",
        "amount > 0 AND user NOT IN ('u1')",
        "amount > 0 AND amount BETWEEN 1 AND 5",
        "amount > 0 AND user RLIKE '^u'",
    ],
)
def test_in_like_and_between_after_and_are_beyond_the_parser_not_type_errors(cond: str) -> None:
    # The string column before IN must not be taken for AND's operand.
    parse_spec(_raw([{"filter": cond}]))


def test_a_transform_stops_the_checking() -> None:
    steps = [{"transform": "mod:fn"}, {"filter": "nosuch > 1"}, _window("other")]
    parse_spec(_raw(steps))
    # steps before it are still checked
    [p] = _problems(_raw([{"filter": "nosuch > 1"}, {"transform": "mod:fn"}]))
    assert p.startswith("t.toml: steps[0].filter: unknown column 'nosuch'")


def test_every_problem_at_once_with_the_other_spec_problems() -> None:
    raw = _raw(
        [
            {"filter": "qty > 1"},
            {"select": ["user", "amount * 2 AS a2", "seq"]},
            _window("sku", total="sum(user)", top="max(amount)", bad="sum(*)"),
        ]
    )
    raw["source"]["partitions"] = 0
    problems = _problems(raw)
    at = sorted(p.split(": ")[1] for p in problems)
    assert at == [
        "source.partitions",
        "steps[0].filter",
        "steps[2].window.agg.bad",
        "steps[2].window.agg.top",
        "steps[2].window.agg.total",
        "steps[2].window.key",
    ]
    assert any("'sum(user)': 'user' is a string; sum needs a number" in p for p in problems)
    assert any("only count takes *" in p for p in problems)
    assert any("unknown column 'amount' (known here: user, a2, seq)" in p for p in problems)


def test_the_event_time_must_be_a_long() -> None:
    [p] = _problems(_raw([_window()], event_time="amount"))
    assert p == (
        "t.toml: source.event_time: 'amount' is a double; the event time needs a long "
        "(epoch milliseconds), e.g. 'ts'"
    )


def test_key_and_event_time_fields_outside_the_default_shape_are_parsed() -> None:
    # Records not made by the generator may carry them: the query parses them (see query.py).
    parse_spec(_raw([_window("device"), {"filter": "n > 1"}], event_time="event_ms", key="device"))


def test_hidden_columns_are_never_reported() -> None:
    parse_spec(_raw([{"filter": "__partition = 0"}]))


def test_bad_fields_leave_nothing_to_check_against() -> None:
    raw = _raw([{"filter": "qty > 1"}])
    raw["workload"] = {"fields": {"qty": {"kind": "nope"}}}
    assert schema_problems(raw) == []
