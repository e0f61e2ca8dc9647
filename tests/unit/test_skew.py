"""Key skew: the independent check's count of the input per partition and per Kafka key, and
the report's "Workload" block (model, JSON, terminal/HTML rows)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from arfl.configs.load import parse_spec
from arfl.measure.check import InputRecord, check
from arfl.measure.check.skew import input_skew
from arfl.report import build_report
from arfl.report.html import report_body
from arfl.report.tables import hot_key_rows, workload_rows

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _rec(p: int, o: int, key: str | None) -> InputRecord:
    value = json.dumps({"seq": o, "user": key, "amount": 1.0, "ts": 1000 + o}).encode()
    return InputRecord(p, o, 1000 + o, value, (), None if key is None else key.encode())


def _records() -> list[InputRecord]:
    keys = ["hot"] * 12 + ["a"] * 3 + ["b"] * 3 + ["c"] * 2
    out = [_rec(i % 2, i, k) for i, k in enumerate(keys)]
    out.append(_rec(0, 100, None))  # keyless
    out.append(InputRecord(1, 101, 2000, b'{"eoi":true,"ts":99999}'))  # end-of-input marker
    out.append(InputRecord(0, 102, 2000, b"", (("arfl-marker", b"hb"),)))  # heartbeat
    return out


def test_records_are_counted_per_partition_and_key_without_markers() -> None:
    skew = input_skew(_records(), partitions=3)
    assert skew.records == 21
    assert skew.partitions == {0: 11, 1: 10, 2: 0}
    assert sum(skew.partitions.values()) == skew.records
    assert (skew.keys, skew.keyless) == (4, 1)
    assert [(k.key, k.records, k.share) for k in skew.top_keys] == [
        ("hot", 12, 0.6), ("a", 3, 0.15), ("b", 3, 0.15), ("c", 2, 0.1),
    ]  # fmt: skip
    assert skew.key_max_mean == 2.4  # 12 / (20 / 4)
    assert skew.partition_max_mean == round(11 / 7, 3)


def test_only_ten_hot_keys_are_kept_and_an_empty_input_has_no_ratios() -> None:
    many = [_rec(0, i, f"k{i % 25:02d}") for i in range(100)]
    skew = input_skew(many, partitions=1)
    assert len(skew.top_keys) == 10 and skew.keys == 25
    assert skew.key_max_mean == 1.0 and skew.partition_max_mean == 1.0
    empty = input_skew([], partitions=2)
    assert (empty.records, empty.partitions, empty.keys) == (0, {0: 0, 1: 0}, 0)
    assert empty.key_max_mean is None and empty.partition_max_mean is None


def test_the_check_carries_the_skew_into_check_json() -> None:
    spec = parse_spec(
        {"name": "s", "source": {"topic": "in", "partitions": 2}, "sink": {"topic": "out"}}
    )
    doc = check(spec, _records(), []).to_dict()
    w = doc["workload"]
    assert w["records"] == 21 and w["partitions"] == {"0": 11, "1": 10}
    assert w["top_keys"][0] == {"key": "hot", "records": 12, "share": 0.6}
    assert json.loads(json.dumps(doc)) == doc


def test_the_report_shows_the_workload_block(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "real-passive-kill-executor", run)
    doc = json.loads((run / "check.json").read_text())
    assert build_report(run).workload is None  # a check.json from before the count
    spec = parse_spec(
        {"name": "s", "source": {"topic": "in", "partitions": 3}, "sink": {"topic": "out"}}
    )
    doc["workload"] = check(spec, _records(), []).to_dict()["workload"]
    (run / "check.json").write_text(json.dumps(doc))

    rep = build_report(run)
    assert rep.workload is not None and rep.workload.records == 21
    assert rep.to_dict()["workload"] == doc["workload"]
    headers, rows = workload_rows(rep)
    row = dict(zip(headers, rows[0], strict=True))
    assert row["per partition"] == "p0 11, p1 10, p2 0"
    assert row["distinct keys"] == "4" and row["keyless"] == "1"
    assert row["hot keys (share)"] == "hot 60.0%, a 15.0%, b 15.0%"
    assert (row["key max/mean"], row["partition max/mean"]) == ("2.40x", "1.57x")
    assert hot_key_rows(rep)[1][0] == ["hot", "12", "60.0%"]
    body = report_body(rep)
    assert "<h2>Workload" in body and "<td>hot</td>" in body
