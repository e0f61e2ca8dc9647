"""Latency hop by hop from the topics' timestamps (``arfl.measure.check.hops``), and the report's
block built from ``check.json``'s ``hops``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arfl.measure.check.evaluate import InputRecord
from arfl.measure.check.hops import HopLatency, HopStats, hop_latency
from arfl.report import build_report
from arfl.report.tables import hop_rows

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _input(p: int, o: int, due: int, sent: int, appended: int) -> InputRecord:
    value = json.dumps({"seq": o, "ts": due, "sent_ms": sent}).encode()
    return InputRecord(p, o, appended, value, log_append_time=True)


def _copy(rid: str, due: int, at: int, offset: int = 0) -> InputRecord:
    value = json.dumps({"rid": rid, "src_ts": due, "hash": "h", "data": {}}).encode()
    return InputRecord(0, offset, at, value)


def test_each_hop_is_the_difference_of_two_timestamps() -> None:
    # One result: due at 1000, sent at 1002, appended at 1005; replica 0 sends at 1015,
    # replica 1 at 1011; the merger delivers at 1020.
    inputs = [_input(0, 7, 1000, 1002, 1005)]
    r0 = [_copy("0:7", 1000, 1015)]
    r1 = [_copy("0:7", 1000, 1011)]
    out = [_copy("0:7", 1000, 1020)]
    h = hop_latency(inputs, [r0, r1], out)
    got = {k: v.p50 for k, v in h.hops.items()}
    assert got == {"late": 2, "append": 3, "replica 0": 10, "replica 1": 6, "merge": 9, "e2e": 20}
    assert h.results == 1 and h.unsupported is None and h.input_timestamps == "LogAppendTime"


def test_a_stalled_replica_shows_in_its_hop_and_not_in_e2e() -> None:
    # 100 results; replica 0 stalls 900 ms on the last 5, replica 1 delivers them at once.
    inputs = [_input(0, i, 1000 + i, 1000 + i, 1001 + i) for i in range(100)]
    r0 = [_copy(f"0:{i}", 1000 + i, 1005 + i + (900 if i >= 95 else 0)) for i in range(100)]
    r1 = [_copy(f"0:{i}", 1000 + i, 1006 + i) for i in range(100)]
    out = [_copy(f"0:{i}", 1000 + i, 1008 + i) for i in range(100)]
    h = hop_latency(inputs, [r0, r1], out)
    assert h.hops["replica 0"].p99 == 904 and h.hops["replica 0"].max == 904
    assert h.hops["replica 1"].max == 5
    assert h.hops["e2e"].max == 8, "the stalled replica's delay is masked"


def test_warm_up_duplicates_and_unknown_ids_are_left_out() -> None:
    inputs = [_input(0, 0, 1000, 1000, 1001), _input(0, 1, 5000, 5000, 5003)]
    out = [
        _copy("0:0", 1000, 1010),  # delivered before from_ms
        _copy("0:1", 5000, 5020),
        _copy("0:1", 5000, 9999, 2),  # a second copy: the first counts
        _copy("3:3", 5000, 5030),  # names no input record
    ]
    h = hop_latency(inputs, [], out, from_ms=2000)
    assert h.results == 1 and h.hops["e2e"] == HopStats(1, 20, 20, 20)
    assert h.from_ms == 2000


def test_broker_timestamped_copies_move_the_replicas_linger_out_of_the_merge_hop() -> None:
    # Replica 0 sends at 1010 and its producer lingers 5 ms: with CreateTime its copy says
    # 1010, with LogAppendTime 1015; the merger delivers at 1016.
    inputs = [_input(0, 0, 1000, 1000, 1002)]
    out = [_copy("0:0", 1000, 1016)]
    sent = hop_latency(inputs, [[_copy("0:0", 1000, 1010)]], out)
    appended = _copy("0:0", 1000, 1015)
    appended = InputRecord(0, 0, 1015, appended.value, log_append_time=True)
    broker = hop_latency(inputs, [[appended]], out)
    assert (sent.replica_timestamps, sent.hops["merge"].p50) == ("CreateTime", 6)
    assert (broker.replica_timestamps, broker.hops["merge"].p50) == ("LogAppendTime", 1)
    assert broker.hops["replica 0"].p50 == 13 and broker.hops["e2e"] == sent.hops["e2e"]
    assert HopLatency.from_dict(broker.to_dict()) == broker
    assert HopLatency.from_dict(sent.to_dict()) == sent


def test_percentiles_are_nearest_rank() -> None:
    st = HopStats.of([float(v) for v in range(1, 201)])
    assert (st.count, st.p50, st.p99, st.max) == (200, 100, 198, 200)


def test_without_broker_timestamps_there_is_no_append_hop() -> None:
    inp = InputRecord(0, 0, 1003, json.dumps({"ts": 1000, "sent_ms": 1001}).encode())
    h = hop_latency([inp], [], [_copy("0:0", 1000, 1010)])
    assert "append" not in h.hops and h.input_timestamps == "CreateTime"
    assert h.hops["late"].p50 == 1 and h.hops["e2e"].p50 == 10


@pytest.mark.parametrize(
    ("out", "from_ms", "why"),
    [
        ([], None, "no delivered result"),
        ([_copy("1000-2000:u1#3", 1000, 1010)], None, "window updates are not per record"),
        ([_copy("0:0", 1000, 1010)], 5000, "delivered before the end of the warm-up"),
    ],
)
def test_nothing_joined_says_why(out: list[InputRecord], from_ms: int | None, why: str) -> None:
    h = hop_latency([_input(0, 0, 1000, 1000, 1001)], [], out, from_ms=from_ms)
    assert h.hops == {} and h.unsupported is not None and why in h.unsupported


def test_the_check_json_form_reads_back() -> None:
    h = hop_latency([_input(0, 0, 1000, 1002, 1005)], [[_copy("0:0", 1000, 1015)]],
                    [_copy("0:0", 1000, 1020)], from_ms=900)  # fmt: skip
    assert HopLatency.from_dict(json.loads(json.dumps(h.to_dict()))) == h
    assert HopLatency.from_dict({"hops": {"e2e": {"p50": 1}}}) is None
    assert HopLatency.from_dict(None) is None


def test_the_report_shows_the_hops_of_check_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "real-passive-kill-executor", run)
    doc = json.loads((run / "check.json").read_text())
    h = hop_latency([_input(0, 0, 1000, 1002, 1005)], [[_copy("0:0", 1000, 1015)]],
                    [_copy("0:0", 1000, 1020)])  # fmt: skip
    doc["hops"] = h.to_dict()
    (run / "check.json").write_text(json.dumps(doc))
    rep = build_report(run)
    assert rep.hops == h
    assert rep.to_dict()["hops"]["hops"]["e2e"] == {"count": 1, "p50": 20, "p99": 20, "max": 20}
    headers, rows = hop_rows(rep)
    assert headers[0] == "hop" and [r[0] for r in rows] == [
        "late", "append", "replica 0", "merge", "e2e"
    ]  # fmt: skip
    assert rows[-1][2:] == ["20", "20", "20"]
