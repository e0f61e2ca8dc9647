"""The metrics endpoint: what a scrape says of the ticks it was fed and of ``latency.hlog``,
the HTTP server, an address in use, and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from arfl.configs.load import parse_spec
from arfl.errors import DeployError, ExitCode, SpecError
from arfl.faults.base import FaultParams
from arfl.faults.runner import FaultOutcome
from arfl.measure.histogram import IntervalRecorder, LatencyLogWriter
from arfl.orchestrate import exporter as X
from arfl.orchestrate.context import DeployOptions, create_run
from arfl.orchestrate.deploy import Deployment, deploy
from arfl.orchestrate.watch import FaultState, Tick
from arfl.run.streams import InjectorSecond, MonitorSnapshot, ReplicaSnapshot

T0 = 1_764_106_200.0
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "arfl.json"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _snapshot(results: int = 5000, t: float = T0) -> MonitorSnapshot:
    pct: dict[str, float | None] = {
        "p50": 6.2, "p90": 9.0, "p99": 16.5, "p99.9": 17.1, "max": 17.3, "count": 1000.0
    }  # fmt: skip
    return MonitorSnapshot(
        t=t, interval_s=1.0, output_rate=1000, received=2000, duplicates=1000,
        interval=pct, cumulative={**pct, "p99": 48.0}, longest_gap_ms=212.0,
        current_gap_ms=0.5, input_flowing=True, results=results, duplicates_total=4900,
        divergent=1, bad=2, evicted=0,
        replicas={0: ReplicaSnapshot(2500, 2600, t, 5, 6.0, trail_ms=4.0),
                  1: ReplicaSnapshot(2400, 2400, t, 5, 7.0, trail_ms=None)},
    )  # fmt: skip


def _tick(phase: str = "running", **kw: Any) -> Tick:
    fields: dict[str, Any] = {
        "snapshot": _snapshot(),
        "injector": InjectorSecond(T0, T0 - 60, 998, 1000, 0.2, 60_000),
        "replicas": {0: "running", 1: "restarting, 3s behind"},
        "statuses": {0: "running", 1: "restarting"},
        "restarts": {0: 0, 1: 2},
        "injected": [
            FaultState(1, "pause", 0, T0 - 30, T0 - 25),
            FaultState(2, "kill-replica", 1, T0 - 3, None),
        ],
        "merger_restarts": 1,
    }
    fields.update(kw)
    return Tick(elapsed_s=60.0, phase=phase, **fields)


def _scrape(exporter: X.MetricsExporter) -> Samples:
    registry = CollectorRegistry()
    registry.register(exporter)
    return _parse(generate_latest(registry).decode())


def _parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    want = frozenset({"run": "r1", **labels}.items())
    return samples[(name, want)]


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[X.MetricsExporter]:
    e = X.MetricsExporter()
    e.begin("r1", tmp_path / "latency.hlog", spec="clicks", mode="active", replicas=2)
    yield e
    e.close()


def test_a_scrape_says_what_the_live_view_shows(exporter: X.MetricsExporter) -> None:
    exporter.observe(_tick())
    s = _scrape(exporter)
    assert _value(s, "arfl_run_info", spec="clicks", mode="active", replicas="2") == 1
    assert _value(s, "arfl_deploy_phase", phase="running") == 1
    assert sum(_value(s, "arfl_deploy_phase", phase=p) for p in X.PHASES) == 1
    assert _value(s, "arfl_output_rate") == 1000
    assert _value(s, "arfl_input_rate") == 998
    assert _value(s, "arfl_input_target_rate") == 1000
    assert _value(s, "arfl_input_events_total") == 60_000
    assert _value(s, "arfl_results_total") == 5000
    assert _value(s, "arfl_duplicates_total") == 4900
    assert _value(s, "arfl_divergent_total") == 1
    assert _value(s, "arfl_bad_records_total") == 2
    assert _value(s, "arfl_output_longest_gap_seconds") == pytest.approx(0.212)
    assert _value(s, "arfl_output_gap_seconds") == pytest.approx(0.0005)
    # The last second's percentiles as they are (ms -> s), the max as quantile 1.
    assert _value(s, "arfl_latency_interval_seconds", quantile="0.5") == pytest.approx(0.0062)
    assert _value(s, "arfl_latency_interval_seconds", quantile="0.999") == pytest.approx(0.0171)
    assert _value(s, "arfl_latency_interval_seconds", quantile="1") == pytest.approx(0.0173)
    assert _value(s, "arfl_latency_cumulative_seconds", quantile="0.99") == pytest.approx(0.048)
    assert not any(k[0].startswith("arfl_latency_interval") and ("quantile", "count") in k[1]
                   for k in s)  # fmt: skip
    # Per replica: lag and trail (a replica without a trail has no trail series).
    assert _value(s, "arfl_replica_lag_seconds", replica="1") == pytest.approx(0.007)
    assert _value(s, "arfl_replica_trail_seconds", replica="0") == pytest.approx(0.004)
    assert ("arfl_replica_trail_seconds", frozenset({"run": "r1", "replica": "1"}.items())) not in s
    assert _value(s, "arfl_replica_first_copies_total", replica="0") == 2600
    assert _value(s, "arfl_replica_received_total", replica="1") == 2400
    assert _value(s, "arfl_replica_state", replica="1", state="restarting") == 1
    assert _value(s, "arfl_replica_state", replica="1", state="running") == 0
    assert _value(s, "arfl_replica_restarts_total", replica="1") == 2
    assert _value(s, "arfl_merger_takeovers_total") == 1
    # Every fault injected so far: the reverted one 0, the active one 1.
    pause = {"fault": "1", "kind": "pause", "replica": "0"}
    kill = {"fault": "2", "kind": "kill-replica", "replica": "1"}
    assert _value(s, "arfl_fault_active", **pause) == 0
    assert _value(s, "arfl_fault_active", **kill) == 1
    assert _value(s, "arfl_fault_injected_timestamp_seconds", **kill) == T0 - 3


def test_counters_stay_when_a_tick_has_no_snapshot_and_the_end_says_finished_or_failed(
    exporter: X.MetricsExporter,
) -> None:
    exporter.observe(_tick())
    exporter.observe(
        Tick(90.0, "stopping", None, None, {}, injected=[FaultState(1, "pause", 0, T0, T0 + 5)])
    )
    s = _scrape(exporter)
    assert _value(s, "arfl_deploy_phase", phase="stopping") == 1
    assert _value(s, "arfl_results_total") == 5000
    assert _value(s, "arfl_replica_restarts_total", replica="1") == 2
    assert _value(s, "arfl_merger_takeovers_total") == 1
    assert _value(s, "arfl_output_rate") == 0 and _value(s, "arfl_input_rate") == 0
    assert not any(name == "arfl_replica_lag_seconds" for name, _ in s)  # none shown now
    assert _value(s, "arfl_fault_active", fault="1", kind="pause", replica="0") == 0
    exporter.end(ok=True)
    exporter.observe(_tick("running"))  # a late tick changes nothing after the end
    assert _value(_scrape(exporter), "arfl_deploy_phase", phase="finished") == 1
    exporter.begin("r2", Path("/nonexistent/latency.hlog"))
    exporter.end(ok=False)
    s = _scrape(exporter)
    assert s[("arfl_deploy_phase", frozenset({"run": "r2", "phase": "failed"}.items()))] == 1
    assert not any(dict(labels).get("run") == "r1" for _, labels in s)  # the run before: gone


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("starting the stack", "starting"),
        ("waiting for the first batch of replica 1", "starting"),
        ("warming up", "warming_up"),
        ("running", "running"),
        ("draining", "draining"),
        ("checking the output", "checking"),
    ],
)
def test_phase_labels(text: str, label: str) -> None:
    assert X.phase_label(text) == label


def _log(path: Path, intervals: list[list[float]], start: float = T0) -> LatencyLogWriter:
    """A latency log with one interval per list of latencies (ms), 1 s each."""
    writer = LatencyLogWriter(path, start)
    _append(writer, intervals, start)
    return writer


def _append(writer: LatencyLogWriter, intervals: list[list[float]], start: float) -> None:
    rec = IntervalRecorder(start)
    for i, values in enumerate(intervals):
        for v in values:
            rec.record_ms(v)
        writer.write(rec.roll(start + i + 1))


def _buckets(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["le"]: v
        for (name, labels), v in samples.items()
        if name == "arfl_latency_seconds_bucket"
    }


def test_the_latency_histogram_adds_every_interval_of_the_log_as_it_grows(
    exporter: X.MetricsExporter, tmp_path: Path
) -> None:
    s = _scrape(exporter)  # no log yet: an empty histogram
    assert _value(s, "arfl_latency_seconds_count") == 0
    writer = _log(tmp_path / "latency.hlog", [[5.0] * 100 + [12.0] * 10, [2000.0] * 5])
    s = _scrape(exporter)
    b = _buckets(s)
    assert b["0.003"] == 0
    assert b["0.005"] == 100  # 5 ms on a bound counts as at most that bound
    assert b["0.015"] == 110
    assert b["1.5"] == 110 and b["2.5"] == 115
    assert b["+Inf"] == 115 == _value(s, "arfl_latency_seconds_count")
    assert _value(s, "arfl_latency_seconds_sum") == pytest.approx(0.5 + 0.12 + 10.0, rel=1e-3)
    assert list(b) == [*(X.floatToGoString(x) for x in X.LATENCY_BUCKETS_S), "+Inf"]
    _append(writer, [[70_000.0] * 3], T0 + 2)  # over every bound: +Inf only
    writer.close()
    s = _scrape(exporter)
    assert _buckets(s)["60.0"] == 115 and _buckets(s)["+Inf"] == 118
    assert _scrape(exporter) == s  # nothing new: nothing added twice


def test_a_rewritten_log_is_read_again_from_its_start_the_counts_kept(
    exporter: X.MetricsExporter, tmp_path: Path
) -> None:
    _log(tmp_path / "latency.hlog", [[5.0] * 10]).close()
    assert _value(_scrape(exporter), "arfl_latency_seconds_count") == 10
    # A merger that starts the log anew (a new start time), longer than the old one by now.
    _log(tmp_path / "latency.hlog", [[1.0] * 3] * 4, start=T0 + 100).close()
    s = _scrape(exporter)
    assert _value(s, "arfl_latency_seconds_count") == 22
    assert _buckets(s)["0.001"] == 12
    # One that appends (a restarted merger resuming the log) is read on where it was.
    with LatencyLogWriter(tmp_path / "latency.hlog", T0, resume=True) as writer:
        _append(writer, [[1.0] * 5], T0 + 104)
    assert _value(_scrape(exporter), "arfl_latency_seconds_count") == 27


def test_a_scrape_over_http_and_an_address_in_use(exporter: X.MetricsExporter) -> None:
    exporter.observe(_tick())
    with X.serve_metrics("127.0.0.1", 0, exporter) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            s = _parse(resp.read().decode())
        assert _value(s, "arfl_results_total") == 5000
        with pytest.raises(SpecError) as e:
            X.MetricsServer("127.0.0.1", server.port)
        assert e.value.exit_code == ExitCode.SPEC
        msg = str(e.value)
        assert f"127.0.0.1:{server.port} is already in use" in msg
        assert f"--metrics-port {server.port}" in msg and "pick a free port" in msg
    with pytest.raises(ConnectionRefusedError):  # the port is free again
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


SPEC = {"name": "t", "source": {"topic": "in"}, "sink": {"topic": "out"}}


def test_a_deployments_fault_states_number_the_injected_faults_in_their_order(
    tmp_path: Path,
) -> None:
    d = Deployment(create_run(parse_spec(SPEC), None, DeployOptions(runs_root=tmp_path)))
    assert d.fault_states() == []

    def outcome(kind: str, at: float | None, until: float | None) -> FaultOutcome:
        return FaultOutcome(FaultParams(kind, 0), kind, 0, at, until)

    class _Chaos:
        def __init__(self) -> None:
            self.outcomes = [
                outcome("slow", T0 + 10, None),
                outcome("pause", T0, T0 + 5),
                outcome("delay", None, None),  # waiting for its batch boundary: not injected
            ]

    d.chaos = _Chaos()  # type: ignore[assignment]
    assert d.fault_states() == [
        FaultState(1, "pause", 0, T0, T0 + 5),
        FaultState(2, "slow", 0, T0 + 10, None),
    ]
    assert d.tick().injected == d.fault_states()


def _steps(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
    """A deployment whose steps do nothing and whose watch hands out one tick."""
    for name in ("resolve_stack", "create_topics", "start_measuring", "start_replicas"):
        monkeypatch.setattr(Deployment, name, lambda self: None)
    monkeypatch.setattr(Deployment, "start_load", lambda self: None)
    monkeypatch.setattr(Deployment, "start_chaos", lambda self: None)
    monkeypatch.setattr(Deployment, "stop", lambda self: None)
    monkeypatch.setattr(Deployment, "summarise", lambda self: {})

    def watch(self: Deployment, on_tick: Any) -> None:
        on_tick(_tick())
        if fail:
            raise DeployError("the merger died")

    monkeypatch.setattr(Deployment, "watch", watch)


@pytest.mark.parametrize("fail", [False, True])
def test_deploy_feeds_an_exporter_and_says_how_it_ended(
    fail: bool, exporter: X.MetricsExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _steps(monkeypatch, fail)
    ticks: list[Tick] = []
    runs = tmp_path / "runs"
    try:
        deploy(
            parse_spec(SPEC), None, DeployOptions(runs_root=runs), ticks.append, exporter=exporter
        )
    except DeployError:
        assert fail
    (run,) = runs.iterdir()
    s = _scrape(exporter)
    labels = {"run": run.name, "phase": "failed" if fail else "finished"}
    assert s[("arfl_deploy_phase", frozenset(labels.items()))] == 1
    assert s[("arfl_results_total", frozenset({"run": run.name}.items()))] == 5000
    assert ticks, "the live view's callback still gets every tick"


def test_deploy_refuses_a_metrics_port_in_use_before_it_creates_the_run(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        options = DeployOptions(runs_root=tmp_path / "runs", metrics_port=port)
        with pytest.raises(SpecError, match=f"127.0.0.1:{port} is already in use"):
            deploy(parse_spec(SPEC), None, options)
    assert not (tmp_path / "runs").exists()


def _queries(node: Any) -> Iterator[str]:
    """Every PromQL text of a dashboard: targets' and annotations' ``expr``, variables'
    ``query``/``definition``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition", "query") and isinstance(value, str):
                yield value
            else:
                yield from _queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _queries(item)


def test_the_grafana_dashboard_queries_only_metrics_the_exporter_serves(
    exporter: X.MetricsExporter, tmp_path: Path
) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = list(_queries(dashboard))
    used = {name for q in queries for name in re.findall(r"\barfl_[a-z0-9_]+", q)}
    _log(tmp_path / "latency.hlog", [[5.0]]).close()
    exporter.observe(_tick())
    served = {name for name, _ in _scrape(exporter)}
    assert used, "no query found"
    assert used <= served, f"not served: {sorted(used - served)}"
    assert any("histogram_quantile" in q and "arfl_latency_seconds_bucket" in q for q in queries)
    # Importable: the data source is the one the import asks for, everywhere.
    (ds,) = dashboard["__inputs"]
    sources = {json.dumps(p["datasource"]) for p in dashboard["panels"]}
    assert sources == {json.dumps({"type": "prometheus", "uid": "${" + ds["name"] + "}"})}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
