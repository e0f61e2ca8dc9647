"""``arfl deploy`` end to end on the embedded stack with real Spark applications.

Each test runs a real deployment (injector -> Kafka -> Spark replica(s) with executor JVMs ->
Kafka -> merger -> final topic) and checks the final output against the results recomputed
offline from the input topic: nothing lost, nothing twice, identical content.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_checks import (
    MetricsScraper,
    check_against_offline,
    check_run_dir,
    check_silent_then_resumed,
    journal_events,
    windowed_spec,
)

from arfl.orchestrate.deploy import DeployOptions, Tick, deploy
from arfl.report import build_report
from arfl.stack import StackInfo
from arfl.stack.embedded import free_ports

pytestmark = pytest.mark.integration


def test_deploy_none_windowed_matches_offline_and_a_pause_stalls_it(
    stack: StackInfo, tmp_path: Path
) -> None:
    # A 10-s pause: this pipeline's steady p99 and longest gap are seconds (one replica on
    # one task slot, micro-batches; 8.3 s and 6.2 s in one run), which a 5-s pause hid in. At
    # 20 s: a cold host's first batches took 9.5 s each (the first window closed at ~16 s), and
    # a pause at 14 s left the steady state no result to judge the verdict against.
    spec = windowed_spec(
        "dep-none",
        duration="34s",
        chaos=[{"at": "20s", "fault": "pause", "replica": 0, "duration": "10s"}],
    )
    ticks: list[Tick] = []
    (port,) = free_ports(1)
    options = DeployOptions(runs_root=tmp_path, metrics_port=port)
    with MetricsScraper(f"http://127.0.0.1:{port}/metrics") as metrics:
        result = deploy(spec, None, options, on_tick=ticks.append)
    assert result.summary["produced"] == 200 * 34
    assert result.summary["duplicates_dropped"] == 0
    assert result.summary["divergent"] == 0
    check_against_offline(stack, spec, result)
    check_run_dir(result)
    assert any(t.snapshot is not None and t.snapshot.results > 0 for t in ticks)
    assert {s for t in ticks for s in t.replicas.values()} >= {"running"}
    # The pause froze the replica (no output) and SIGCONT let it go on where it was.
    (inj,) = journal_events(result.run_dir, "fault-injected")
    (rev,) = journal_events(result.run_dir, "fault-reverted")
    check_silent_then_resumed(result.run_dir, 0, float(inj["ended"]), float(rev["started"]))
    assert result.summary["replica_restarts"] == 0
    # A lone replica's pause is never masked: its output stopped. (Its lag, a windowed
    # micro-batch replica's, swings by seconds in the steady state too: the report names it as
    # the effect's evidence, not judged here.)
    (fault,) = build_report(result.run_dir).faults
    assert fault.masked is False and fault.outcome == "not masked", fault.verdict
    assert fault.effect.startswith("replica 0"), fault.effect
    check_metrics(metrics, result.run_dir.name, int(result.summary["results"]))


def check_metrics(metrics: MetricsScraper, run: str, results: int) -> None:
    """What the metrics endpoint said during the deployment: the latency histogram grew as
    results came, output flowed, the pause was active, then reverted."""
    assert metrics.scrapes, "the metrics endpoint never answered"
    counts = metrics.values("arfl_latency_seconds_count", run=run)
    first = next((c for c in counts if c > 0), None)
    assert first is not None and counts[-1] > first, counts
    assert counts[-1] <= results
    assert max(metrics.values("arfl_output_rate", run=run)) > 0
    pause = {"run": run, "fault": "1", "kind": "pause", "replica": "0"}
    active = metrics.values("arfl_fault_active", **pause)
    assert 1.0 in active and active[-1] == 0.0, active
    assert active.index(0.0) > active.index(1.0), active
    assert 1.0 in metrics.values("arfl_deploy_phase", run=run, phase="running")
