"""End-of-input markers on real Kafka + real Spark: a finite run emits its last windows.

Two ``none`` replicas run the same windowed pipeline at the same time, each on its own input
topic, fed by the real injector. One injector ends with its end-of-input markers (one per
partition), the control's does not. With the markers every window the batch recomputation
expects is emitted, with the same content; without them the last windows stay open.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from deploy_checks import offline_recompute

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.orchestrate.drivers import DriverLaunch
from arfl.orchestrate.supervisor import ReplicaRunner
from arfl.run.records import replica_topic
from arfl.run.rundir import new_run_dir
from arfl.stack import StackInfo, ensure_installed
from arfl.stack.topics import ensure_topic
from arfl.testing.spark import ResultReader, wait_caught_up
from arfl.workload.injector import Injector, InjectorConfig, InjectorSummary

PARTITIONS = 3
RATE = 200
DURATION_S = 8.0

STEPS: list[dict[str, Any]] = [
    {"filter": "amount > 10"},
    {"select": ["user", "amount"]},
    {
        "window": {
            "size": "1s",
            "key": "user",
            "watermark": "500ms",
            "agg": {"n": "count(*)", "total": "sum(amount)"},
        }
    },
    # A filter on the grouping key only: Spark pushes it below the aggregation and the
    # watermark, where the markers must still get through.
    {"filter": "user != 'u3'"},
]


def _spec(name: str, topic: str) -> Spec:
    return parse_spec(
        {
            "name": name,
            "source": {"topic": f"{topic}-in", "partitions": PARTITIONS, "event_time": "ts"},
            "steps": STEPS,
            "sink": {"topic": f"{topic}-out"},
            "replication": {"mode": "none"},
            "spark": {
                "master": "local-cluster[1,1,1024]",
                "conf": {"spark.sql.shuffle.partitions": "2"},
            },
        }
    )


def _inject(stack: StackInfo, spec: Spec, end_of_input: bool, out: dict[str, Any]) -> None:
    cfg = InjectorConfig(
        bootstrap=stack.kafka,
        topic=spec.source.topic,
        rate=RATE,
        duration_s=DURATION_S,
        keys=10,
        seed=12,
        end_of_input=end_of_input,
    )
    inj = Injector(cfg)
    out[spec.name] = inj.run()
    out[f"{spec.name}_markers"] = inj.markers


def _ends(rids: Any) -> set[int]:
    """Window end (ms) of each window rid ``"<start>-<end>[:<key>]"``."""
    return {int(r.split(":")[0].split("-")[1]) for r in rids}


@pytest.mark.timeout(1200)
def test_end_of_input_markers_flush_the_last_windows(
    stack: StackInfo, topic_name: str, tmp_path: Path
) -> None:
    jars = ensure_installed().spark_kafka_jars
    eoi = _spec("eoiwin", f"{topic_name}-e")
    ctl = _spec("ctlwin", f"{topic_name}-c")
    specs = (eoi, ctl)
    for s in specs:
        ensure_topic(stack.kafka, s.source.topic, PARTITIONS)
        ensure_topic(stack.kafka, replica_topic(s.sink.topic, 0), 1)
    runs = {s.name: new_run_dir(tmp_path / "runs", s.name) for s in specs}
    runners = {
        s.name: ReplicaRunner(s, runs[s.name], DriverLaunch(stack.kafka, jars=jars)) for s in specs
    }
    readers = {s.name: ResultReader(stack.kafka, replica_topic(s.sink.topic, 0)) for s in specs}
    injected: dict[str, Any] = {}
    measures: dict[str, Any] = {}
    try:
        for r in runners.values():
            r.start()
        for r in runners.values():
            r.wait_ready(timeout_s=300)
        threads = [
            threading.Thread(target=_inject, args=(stack, s, s is eoi, injected)) for s in specs
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=DURATION_S * 10)
        assert not any(t.is_alive() for t in threads)
        input_end = time.time()
        for s in specs:
            summary: InjectorSummary = injected[s.name]
            assert summary.failed == 0 and summary.produced == RATE * DURATION_S
        assert (injected["eoiwin_markers"], injected["ctlwin_markers"]) == (PARTITIONS, 0)
        for s in specs:
            records = int(RATE * DURATION_S) + injected[f"{s.name}_markers"]
            progress = runs[s.name] / "progress" / "replica-0.jsonl"
            assert wait_caught_up(progress, records, timeout_s=300), s.name
        for reader in readers.values():
            assert reader.drain(timeout_s=120)
    finally:
        for r in runners.values():
            r.stop()
        for reader in readers.values():
            reader.close()

    expected = {s.name: offline_recompute(stack, s) for s in specs}
    emitted = {n: {x.result.rid: x for x in r.results} for n, r in readers.items()}
    for name, reader in readers.items():
        assert reader.bad == 0
        assert len(reader.results) == len(emitted[name]), f"{name}: a rid emitted twice"
        for rid, x in emitted[name].items():
            exp = expected[name].results.get(rid)
            assert exp is not None, f"{name}: {rid} is not an expected result"
            assert (x.result.data, x.result.hash, x.result.src_ts, x.result.sent_ts) == (
                exp.data,
                exp.hash,
                exp.src_ts,
                exp.sent_ts,
            ), rid
            assert x.result.sent_ts is not None and x.result.sent_ts >= x.result.src_ts - 1

    # With the markers: every expected window, none left that can never be final.
    with_eoi = expected["eoiwin"]
    assert with_eoi.markers == PARTITIONS
    assert with_eoi.not_final == frozenset()
    assert set(emitted["eoiwin"]) == set(with_eoi.results)
    assert len(with_eoi.results) > 9 * (DURATION_S - 1)  # ~9 users (u3 filtered) per second

    # The control: the last windows are missing (those the watermark never passed).
    control = expected["ctlwin"]
    assert control.markers == 0 and control.not_final
    missing = set(control.results) - set(emitted["ctlwin"])
    assert missing, "without markers the last windows should stay open"
    assert min(_ends(missing)) > max(_ends(emitted["ctlwin"]))  # the latest ones, only
    assert max(_ends(control.results)) in _ends(missing)

    last = max(emitted["eoiwin"].values(), key=lambda x: x.kafka_ts_ms)
    measures["windows_expected"] = {n: len(e.results) for n, e in expected.items()}
    measures["windows_emitted"] = {n: len(e) for n, e in emitted.items()}
    measures["control_never_final"] = len(control.not_final)
    measures["control_missing"] = len(missing)
    measures["last_window_emitted_after_input_end_s"] = round(
        last.kafka_ts_ms / 1000 - input_end, 2
    )
    measures["eoi_sent_minus_src_ms_max"] = max(
        x.result.sent_ts - x.result.src_ts  # type: ignore[operator]
        for x in emitted["eoiwin"].values()
    )
    print("\nMEASURES", json.dumps(measures, indent=1))


@pytest.fixture(autouse=True)
def _no_driver_left(tmp_path: Path) -> Any:
    yield
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(tmp_path) in a for a in (p.info.get("cmdline") or []))
    ]
    assert not left, f"processes left behind: {[p.pid for p in left]}"
