"""A declared workload end to end: ``[workload.fields]`` with disorder and late events, mode
``active-leaderless`` with two real Spark replicas (agreed batches: which rows the watermark
drops is the same in both).

The injector generates the declared fields (keyed by ``source.key`` = ``sku``, partitioned with
murmur2 as Java clients do), the replicas parse them with the schema derived from the
declaration, filter on ``qty``, and sum ``price`` per ``sku`` in 1 s windows. The final output
is complete per the independent check and equals the offline recomputation; both expect the
generated late events dropped, and Spark did drop rows behind its watermark in each replica;
the replicas agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploy_checks import check_against_offline, replica_outputs

from arfl.configs.lateness import is_late, late_lag_ms
from arfl.configs.load import parse_spec
from arfl.measure.check import check_run
from arfl.measure.check.evaluate import expected_results
from arfl.measure.check.kafka import read_records
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.progress import late_drops
from arfl.run.rundir import read_jsonl
from arfl.stack import StackInfo

pytestmark = pytest.mark.integration

RATE, SECONDS, PARTITIONS = 200, 16, 2


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java clients' key hash), as a signed 32-bit int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[4 * n4 :]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def java_partition(key: bytes, partitions: int) -> int:
    """The partition a Java producer picks for ``key`` (``toPositive(murmur2) % n``)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_murmur2_matches_kafkas_reference_values() -> None:
    # From Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def _spec(name: str) -> Any:
    return parse_spec(
        {
            "name": name,
            "source": {
                "topic": "orders",
                "partitions": PARTITIONS,
                "key": "sku",
                "event_time": "event_ts",
            },
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
            "sink": {"topic": "orders-out"},
            "replication": {"mode": "active-leaderless", "replicas": 2},
            "spark": {
                "master": "local-cluster[1,1,1024]",
                "conf": {"spark.sql.shuffle.partitions": "2"},
            },
            "workload": {
                "rate": RATE,
                "duration": f"{SECONDS}s",
                # Late events start after the warm-up: by then each replica has run a batch
                # with data (its watermark is past their windows), even on a loaded machine.
                "warmup": "5s",
                "seed": 11,
                "disorder": "200ms",
                "late": 0.05,
                "fields": {
                    "sku": {"kind": "key", "cardinality": 13, "skew": 1.1},
                    "qty": {"kind": "int", "min": 1, "max": 20},
                    "price": {"kind": "float", "min": 0.5, "max": 99.5},
                    "country": {
                        "kind": "choice",
                        "values": ["se", "be", "fr"],
                        "weights": [5, 3, 2],
                    },
                    "event_ts": {"kind": "event-time"},
                },
            },
        },
        f"{name}.toml",
    )


def test_declared_window_with_late_events_in_active_mode(stack: StackInfo, tmp_path: Path) -> None:
    spec = _spec("declared")
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    s = result.summary
    assert s["produced"] == RATE * SECONDS
    assert s["divergent"] == 0 and s["replica_restarts"] == 0, (
        s["divergent"],
        s["replica_restarts"],
    )

    # The input: declared fields only, keyed and partitioned by sku as a Java client would.
    inputs = read_records(stack.kafka, s["topics"]["source"], 60)
    events = [
        # Events only: no end-of-input or heartbeat markers (they carry no seq).
        (r.partition, json.loads(r.value))
        for r in inputs
        if r.value and b'"seq":' in r.value
    ]
    assert len(events) == RATE * SECONDS
    assert {tuple(e) for _, e in events} == {
        ("seq", "sku", "qty", "price", "country", "event_ts", "ts", "sent_ms")
    }
    assert all(p == java_partition(e["sku"].encode(), PARTITIONS) for p, e in events)
    lag = late_lag_ms(spec)
    late = [e for _, e in events if is_late(e["ts"], e["event_ts"], lag)]
    late_kept_by_filter = [e for e in late if e["qty"] > 2]
    assert len(late) > 50, len(late)

    # The independent check: complete and right, the late events expected dropped.
    res = check_run(result.run_dir)
    assert res.unsupported is None, res.unsupported
    assert (res.missing, res.extra, res.duplicates, res.wrong) == (0, 0, 0, 0), res.examples
    assert res.late_windows == 0 and res.ok is True
    assert res.expected is not None and res.expected > 100
    assert json.loads((result.run_dir / "check.json").read_text())["ok"] is True
    exp = expected_results(spec, inputs)
    assert exp.dropped_late == len(late_kept_by_filter)

    # Spark dropped rows behind its watermark in each replica (counted per window and key
    # after the partial aggregation, so at most one per late row).
    for i in range(2):
        lines = read_jsonl(result.run_dir / "progress" / f"replica-{i}.jsonl")
        dropped = sum(d.rows for d in late_drops(lines, i))
        assert 0 < dropped <= len(late_kept_by_filter), (i, dropped)

    # The offline recomputation (late events left out) equals the merged output.
    check_against_offline(stack, spec, result)

    # Both replicas emitted the same windows with the same content.
    a, b = ({rid: c[0].hash for rid, c in out.items()} for out in replica_outputs(stack, result))
    assert a == b
