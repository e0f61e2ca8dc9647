"""The independent check on window *updates* (real-time mode, update output mode) and
``arfl.run.records.final_values``: synthetic topics, no Kafka, no Spark."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.measure.check import Delivered, InputRecord, check
from arfl.measure.check.evaluate import expected_results, window_rid
from arfl.run.records import Result, final_values, update_rid

T0 = 1_764_000_000_000  # a whole second, so 1 s windows start at T0

AGGS = {"n": "count(*)", "total": "sum(amount)", "mean": "avg(amount)", "lo": "min(amount)",
        "hi": "max(amount)"}  # fmt: skip


def _spec(steps: list[dict[str, Any]], realtime: bool = True) -> Spec:
    spec = parse_spec(
        {
            "name": "t",
            "source": {"topic": "in", "partitions": 2, "event_time": "ts", "key": "user"},
            "steps": steps,
            "sink": {"topic": "out"},
        }
    )
    if not realtime:
        return spec
    # Set after validation: whether the validator accepts realtime windows yet is not this
    # test's business; the check only reads Spec.emits_updates.
    repl = spec.replication.model_copy(update={"trigger": "realtime"})
    spec = spec.model_copy(update={"replication": repl})
    assert spec.emits_updates
    return spec


def _window(**kw: Any) -> dict[str, Any]:
    w: dict[str, Any] = {"size": "1s", "key": "user", "watermark": "500ms", "agg": AGGS}
    w.update(kw)
    return {"window": w}


def _ev(p: int, o: int, user: str, amount: float, et: int, appended: int) -> InputRecord:
    """An injector-shaped event; ``appended`` is the broker's LogAppendTime."""
    value = {"seq": o, "user": user, "amount": amount, "ts": et, "sent_ms": et + 1}
    return InputRecord(p, o, appended, json.dumps(value).encode())


W0 = (T0, T0 + 1000)
W1 = (T0 + 1000, T0 + 2000)
W5 = (T0 + 5000, T0 + 6000)


def _u(window: tuple[int, int], key: str, n: int) -> str:
    return update_rid(window_rid(*window, key), n)


# u1 and u3 live in partition 0, u2 in partition 1 (the key is the partitioning key).
INPUTS = [
    _ev(0, 0, "u1", 1.0, T0 + 100, T0 + 100),
    _ev(0, 1, "u3", 3.0, T0 + 150, T0 + 110),  # another key between u1's rows
    _ev(1, 0, "u2", 10.0, T0 + 200, T0 + 200),
    _ev(1, 1, "u2", 0.2, T0 + 250, T0 + 250),
    _ev(0, 2, "u1", 4.0, T0 + 300, T0 + 300),
    _ev(0, 3, "u1", 2.5, T0 + 1200, T0 + 400),  # another window of u1 between its rows
    # Watermark at most T0 + 1200 - 500 = T0 + 700 < W0's end: on time.
    _ev(0, 4, "u1", 2.5, T0 + 400, T0 + 500),
    _ev(1, 2, "u2", 0.1, T0 + 700, T0 + 600),
    _ev(1, 3, "u2", 1.0, T0 + 5000, T0 + 700),
    # Appended after an event at T0 + 5 s: the watermark may be T0 + 4.5 s, past W0: late.
    _ev(0, 5, "u3", 9.0, T0 + 800, T0 + 800),
]

# After the window, "n != 2" drops every second update: some n are missing on purpose.
UPDATES_SPEC = [_window(), {"filter": "n != 2"}]


def _row(window: tuple[int, int], key: str, n: int, total: float, mean: float, lo: float,
         hi: float) -> dict[str, Any]:  # fmt: skip
    return {"window_start": window[0], "window_end": window[1], "user": key, "n": n,
            "total": total, "mean": mean, "lo": lo, "hi": hi}  # fmt: skip


EXPECTED = {
    _u(W0, "u1", 1): _row(W0, "u1", 1, 1.0, 1.0, 1.0, 1.0),
    _u(W0, "u1", 3): _row(W0, "u1", 3, 7.5, 2.5, 1.0, 4.0),
    _u(W0, "u2", 1): _row(W0, "u2", 1, 10.0, 10.0, 10.0, 10.0),
    # Exact decimal sums as the replicas compute them: 10.3, not 10.299999999999999.
    _u(W0, "u2", 3): _row(W0, "u2", 3, 10.3, 3.43333333333333, 0.1, 10.0),
    _u(W1, "u1", 1): _row(W1, "u1", 1, 2.5, 2.5, 2.5, 2.5),
    # The watermark never passes W5 (no end-of-input marker): an append-mode replica would
    # not emit it yet, but an update is emitted at once, so it is judged.
    _u(W5, "u2", 1): _row(W5, "u2", 1, 1.0, 1.0, 1.0, 1.0),
}


def _out(rids: dict[str, dict[str, Any]]) -> list[Delivered]:
    return [Delivered(r, d) for r, d in rids.items()]


def test_every_row_reaching_a_window_gives_an_update_numbered_per_window_and_key() -> None:
    exp = expected_results(_spec(UPDATES_SPEC), INPUTS)
    assert exp.updates
    assert exp.judged == EXPECTED
    # n counts rows of the (window, key), not offsets or rows of the partition: u1's W0
    # rows are offsets 0, 2, 4 of partition 0 and are updates 1, 2 (dropped), 3.
    assert list(exp.judged) == list(EXPECTED)  # window, key, then n order
    # The late-affected window: every update computed from all rows, none judged.
    assert exp.late == {_u(W0, "u3", 1): _row(W0, "u3", 1, 3.0, 3.0, 3.0, 3.0),
                        _u(W0, "u3", 2): None}  # fmt: skip
    assert exp.late_windows == 1
    assert exp.open == {}
    assert exp.final_watermark_ms == T0 + 4500
    # Final value: the last update the filter after the window keeps.
    assert exp.final == {
        window_rid(*W0, "u1"): (_u(W0, "u1", 3), EXPECTED[_u(W0, "u1", 3)]),
        window_rid(*W0, "u2"): (_u(W0, "u2", 3), EXPECTED[_u(W0, "u2", 3)]),
        window_rid(*W1, "u1"): (_u(W1, "u1", 1), EXPECTED[_u(W1, "u1", 1)]),
        window_rid(*W5, "u2"): (_u(W5, "u2", 1), EXPECTED[_u(W5, "u2", 1)]),
    }


def test_a_filter_dropping_the_last_update_makes_an_earlier_one_final() -> None:
    exp = expected_results(_spec([_window(), {"filter": "n < 3"}]), INPUTS)
    assert exp.final[window_rid(*W0, "u1")][0] == _u(W0, "u1", 2)
    assert exp.judged[_u(W0, "u1", 2)]["total"] == 5.0
    assert _u(W0, "u1", 3) not in exp.judged


def test_sliding_windows_number_a_row_separately_in_each_window() -> None:
    spec = _spec([_window(slide="500ms", agg={"n": "count(*)"})])
    inputs = [
        _ev(0, 0, "u1", 1.0, T0 + 200, T0 + 200),
        _ev(0, 1, "u1", 1.0, T0 + 700, T0 + 700),  # update 2 of [T0, +1s), 1 of [T0+.5, +1.5)
    ]
    exp = expected_results(spec, inputs)
    assert set(exp.judged) == {
        _u((T0 - 500, T0 + 500), "u1", 1),
        _u((T0, T0 + 1000), "u1", 1),
        _u((T0, T0 + 1000), "u1", 2),
        _u((T0 + 500, T0 + 1500), "u1", 1),
    }


def test_the_same_spec_off_real_time_mode_keeps_one_result_per_window() -> None:
    exp = expected_results(_spec(UPDATES_SPEC, realtime=False), INPUTS)
    assert not exp.updates and exp.final == {}
    assert set(exp.judged) == {window_rid(*W0, "u1"), window_rid(*W0, "u2"),
                               window_rid(*W1, "u1")}  # fmt: skip
    assert list(exp.open) == [window_rid(*W5, "u2")] and exp.late_windows == 1
    res = check(_spec(UPDATES_SPEC, realtime=False), INPUTS, [])
    assert (res.windows, res.final_values_checked, res.final_values_wrong) == (None, None, None)


def test_a_window_key_in_two_partitions_is_unsupported() -> None:
    # Spark would interleave the two partitions' rows in any order: n is not determined.
    inputs = [_ev(0, 0, "u1", 1.0, T0 + 100, T0 + 100), _ev(1, 0, "u1", 1.0, T0 + 200, T0 + 200)]
    res = check(_spec([_window()]), inputs, [])
    assert res.unsupported is not None
    assert "partitions 0 and 1" in res.unsupported and window_rid(*W0, "u1") in res.unsupported
    # Off real-time mode the order does not matter: one result per window.
    assert check(_spec([_window()], realtime=False), inputs, []).unsupported is None


# --- comparison --------------------------------------------------------------------------------


def test_delivering_every_expected_update_is_ok_and_counts_windows_and_final_values() -> None:
    spec = _spec(UPDATES_SPEC)
    # Spark may or may not have dropped u3's late row: its updates are neither extra nor judged.
    late = {_u(W0, "u3", 1): _row(W0, "u3", 1, 3.0, 3.0, 3.0, 3.0)}
    res = check(spec, INPUTS, _out({**EXPECTED, **late}))
    assert (res.expected, res.results, res.missing, res.extra, res.wrong) == (6, 7, 0, 0, 0)
    assert (res.late_windows, res.open_windows) == (1, 0)
    assert (res.windows, res.final_values_checked, res.final_values_wrong) == (5, 4, 0)
    assert res.ok is True
    d = res.to_dict()
    assert (d["windows"], d["final_values_checked"], d["final_values_wrong"]) == (5, 4, 0)
    json.dumps(d)


@pytest.mark.parametrize(
    ("change", "counts", "final_got"),
    [
        # The final update lost: missing, and the window's last update is #1.
        ("drop-final", (1, 0, 0, 1), _u(W0, "u1", 1)),
        # An update beyond the last row (n counted from 0, or twice): extra, wrong final.
        ("extra-n", (0, 1, 0, 1), _u(W0, "u1", 4)),
        # The final update with another value: wrong, and a wrong final value.
        ("final-value", (0, 0, 1, 1), _u(W0, "u1", 3)),
        # An earlier update with another value: wrong, but the final value is right.
        ("early-value", (0, 0, 1, 0), None),
        # A whole window lost: its final value is wrong too (none delivered).
        ("drop-window", (2, 0, 0, 1), None),
    ],
)
def test_final_values_are_the_last_delivered_update_of_each_window(
    change: str, counts: tuple[int, int, int, int], final_got: str | None
) -> None:
    out = dict(EXPECTED)
    last = _u(W0, "u1", 3)
    if change == "drop-final":
        del out[last]
    elif change == "extra-n":
        out[_u(W0, "u1", 4)] = {**out[last], "n": 4}
    elif change == "final-value":
        out[last] = {**out[last], "total": 7.6}
    elif change == "early-value":
        out[_u(W0, "u1", 1)] = {**out[_u(W0, "u1", 1)], "hi": 2.0}
    else:
        del out[_u(W0, "u1", 1)], out[last]
    res = check(_spec(UPDATES_SPEC), INPUTS, _out(out))
    assert (res.missing, res.extra, res.wrong, res.final_values_wrong) == counts
    assert res.final_values_checked == 4 and res.ok is False
    if counts[3]:
        (ex,) = res.examples["final_values_wrong"]
        assert ex["window"] == window_rid(*W0, "u1")
        assert ex["expected"] == {"rid": last, "data": EXPECTED[last]}
        assert (ex["got"] and ex["got"]["rid"]) == final_got
    else:
        assert "final_values_wrong" not in res.examples


def test_updates_numbered_by_offset_instead_of_per_window_are_caught() -> None:
    # A replica that numbered u1's W0 updates by the row's offset + 1 (1, 3, 5).
    out = dict(EXPECTED)
    out[_u(W0, "u1", 5)] = {**out.pop(_u(W0, "u1", 3)), "n": 5}
    res = check(_spec(UPDATES_SPEC), INPUTS, _out(out))
    assert (res.missing, res.extra, res.final_values_wrong) == (1, 1, 1)


# --- final_values -------------------------------------------------------------------------------


def _res(rid: str, h: str = "h") -> Result:
    return Result(rid=rid, src_ts=0, replica=0, hash=h, data={})


def test_final_values_keep_the_largest_n_of_each_window_and_only_update_ids() -> None:
    results = [
        _res("1000-2000:u1#9"),
        _res("1000-2000:u1#10"),  # numerically after 9, though "10" < "9" as text
        _res("1000-2000:u1#2"),
        _res("1000-2000:u2#1", "first"),
        _res("1000-2000:u2#1", "second"),  # a copy: the first one is kept
        _res("1000-2000:a#b#3"),  # a key holding "#": only the trailing #<digits> is n
        _res("1000-2000#1"),  # a null key's window
        _res("0:17"),  # per-record
        _res("1000-2000:u3"),  # an append-mode window result
    ]
    got = final_values(results)
    assert {w: r.rid for w, r in got.items()} == {
        "1000-2000:u1": "1000-2000:u1#10",
        "1000-2000:u2": "1000-2000:u2#1",
        "1000-2000:a#b": "1000-2000:a#b#3",
        "1000-2000": "1000-2000#1",
    }
    assert got["1000-2000:u2"].hash == "first"


def test_final_values_take_the_checks_delivered_records_and_skip_unreadable_ones() -> None:
    got = final_values([Delivered(None, None), Delivered("5-6:k#2", {}), Delivered("5-6:k#1", {})])
    assert {w: d.rid for w, d in got.items()} == {"5-6:k": "5-6:k#2"}
