"""Replaying an existing topic (``[source.replay]``) through a real deployment.

An "external" topic on the test broker holds ~2,000 JSON records with a recorded time field
spaced 1..4 ms apart, a hot key, and planted bad records. A ``none`` per-record pipeline
replays it at its recorded pace: the output must be complete (the independent check), equal an
offline recomputation of the planted records, the bad records must be counted and skipped, the
replay must take about the recorded span, and the check's per-partition/per-key counts must
add up to the replayed input.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.measure.check.kafka import delivered, read_records
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.rundir import read_jsonl
from arfl.stack import StackInfo
from arfl.stack.topics import ensure_topic

pytestmark = pytest.mark.integration

GOOD = 2_000
NOT_JSON = 5
NO_TIME = 7
T_REC = 1_700_000_000_000


def _records() -> list[tuple[bytes | None, bytes]]:
    """Keyed JSON records, u0 hot (about 30 %), created 1..4 ms apart, and the bad ones."""
    rng = random.Random(7)
    out: list[tuple[bytes | None, bytes]] = []
    created = T_REC
    for i in range(GOOD):
        created += rng.randint(1, 4)
        user = "u0" if rng.random() < 0.3 else f"u{rng.randint(1, 19)}"
        amount = round(rng.uniform(0, 100), 2)
        value = {"user": user, "amount": amount, "created": created, "note": f"n{i}"}
        out.append((user.encode(), json.dumps(value).encode()))
        if i % 400 == 100:
            out.append((b"u1", b"not json"))
        if i % 300 == 50:
            out.append((b"u2", json.dumps({"user": "u2", "amount": 1.0}).encode()))
    return out


def test_a_replayed_topic_is_processed_completely_at_its_recorded_pace(
    stack: StackInfo, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    records = _records()
    bad = sum(1 for _, v in records if not v.startswith(b"{") or b"created" not in v)
    assert bad == NOT_JSON + NO_TIME
    ext = f"ext-orders-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka, ext, 2)
    producer = Producer({"bootstrap.servers": stack.kafka, "partitioner": "murmur2_random"})
    for key, value in records:
        producer.produce(ext, value, key=key)
    assert producer.flush(30) == 0

    spec = parse_spec(
        {
            "name": "replay-none",
            "source": {
                "topic": "orders",
                "partitions": 2,
                "replay": {"topic": ext, "pace": "recorded", "time_field": "created"},
            },
            "steps": [{"filter": "amount >= 10"}, {"select": ["user", "amount * 2 AS doubled"]}],
            "sink": {"topic": "orders-out"},
            "replication": {"mode": "none"},
            "spark": {
                "master": "local-cluster[1,1,1024]",
                "conf": {"spark.sql.shuffle.partitions": "2"},
            },
            "workload": {
                "duration": "30s",
                "warmup": "1s",
                "fields": {
                    "user": {"kind": "key", "cardinality": 20},
                    "amount": {"kind": "float", "min": 0, "max": 100},
                    "created": {"kind": "event-time"},
                },
            },
        },
        "replay-none.toml",
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir

    # Every good record replayed once, the bad ones counted and skipped.
    journal = read_jsonl(run / "journal.jsonl")
    finished = next(e for e in journal if e.get("event") == "injector_finished")
    assert (finished["produced"], finished["bad"], finished["capped"]) == (GOOD, bad, False)
    assert result.summary["replay_skipped"] == result.summary["injector"]["bad"] == bad
    assert finished["end_of_input_markers"] == 2
    warnings = [e["message"] for e in journal if e.get("event") == "warning"]
    assert any(f"{bad} records of {ext} skipped" in w for w in warnings), warnings

    # The input topic holds the user's records with seq/ts/sent_ms, at the recorded pace.
    inputs = read_records(stack.kafka, result.summary["topics"]["source"])
    events = [json.loads(r.value or b"") for r in inputs]
    events = [e for e in events if "eoi" not in e]
    assert len(events) == GOOD
    assert sorted(e["seq"] for e in events) == list(range(GOOD))
    assert all(e["note"].startswith("n") for e in events)
    good = [json.loads(v) for _, v in records if v.startswith(b"{") and b"created" in v]
    recorded_span = max(g["created"] for g in good) - min(g["created"] for g in good)
    assert max(e["ts"] for e in events) - min(e["ts"] for e in events) == recorded_span
    # Each event's intended time keeps its recorded offset (the input is in time order).
    first = min(e["created"] for e in events)
    t0 = min(e["ts"] for e in events)
    assert all(e["ts"] - t0 == e["created"] - first for e in events)
    sent_span = max(e["sent_ms"] for e in events) - min(e["sent_ms"] for e in events)
    assert 0.9 * recorded_span - 50 <= sent_span <= 1.1 * recorded_span + 500, (
        sent_span,
        recorded_span,
    )

    # Complete per the independent check, and equal to an offline recomputation.
    check: dict[str, Any] = json.loads((run / "check.json").read_text())
    assert check["unsupported"] is None, check["unsupported"]
    assert (check["missing"], check["extra"], check["duplicates"], check["wrong"]) == (0, 0, 0, 0)
    assert check["ok"] is True
    want = sorted((g["user"], g["amount"] * 2) for g in good if g["amount"] >= 10)
    out = delivered(read_records(stack.kafka, result.summary["topics"]["sink"]))
    got = sorted((d.data["user"], d.data["doubled"]) for d in out if d.data is not None)
    assert got == want

    # Key skew: the counts add up to the replayed input; u0 is the hot key.
    skew = check["workload"]
    assert skew["records"] == GOOD
    assert sum(skew["partitions"].values()) == GOOD
    assert set(skew["partitions"]) == {"0", "1"}
    users = [g["user"] for g in good]
    assert skew["keys"] == len(set(users))
    top = skew["top_keys"][0]
    assert (top["key"], top["records"]) == ("u0", users.count("u0"))
    assert top["share"] == pytest.approx(users.count("u0") / GOOD, abs=1e-4)
    assert skew["key_max_mean"] > 3
