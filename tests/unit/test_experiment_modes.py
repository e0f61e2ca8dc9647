"""``arfl experiment``: modes, per-mode specs with mapped chaos targets, runs and comparison.

The deploys are faked by copying recorded run directories (real runs are in
``tests/integration/test_experiment.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import DeployError, SpecError
from arfl.orchestrate import experiment
from arfl.orchestrate.deploy import DeployOptions, DeployResult

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _spec(**replication: Any) -> Spec:
    raw: dict[str, Any] = {
        "name": "exp",
        "source": {"topic": "ev", "partitions": 2, "event_time": "ts"},
        "sink": {"topic": "out"},
        "replication": {"mode": "active-leader", "replicas": 3, **replication},
        "steps": [
            {"filter": "amount > 10"},
            {"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}},
        ],
        "workload": {"rate": 100, "duration": "60s", "seed": 7},
        "chaos": [
            {"at": "10s", "fault": "kill-executor", "replica": 2},
            {"at": "30s", "fault": "kill-leader"},
            {"at": "40s", "fault": "pause", "replica": 1, "duration": "2s"},
        ],
    }
    return parse_spec(raw, "exp.toml")


def test_parse_modes_names_every_problem() -> None:
    assert experiment.parse_modes("none, active-leader") == ["none", "active-leader"]
    with pytest.raises(SpecError) as e:
        experiment.parse_modes("none,bogus,none")
    assert "unknown mode 'bogus'" in str(e.value)
    assert "given twice: none" in str(e.value)
    with pytest.raises(SpecError, match="no mode"):
        experiment.parse_modes(" , ")


def test_mode_specs_keep_workload_and_map_chaos_targets() -> None:
    spec = _spec()
    leader, notes = experiment.mode_spec(spec, "active-leader")
    assert notes == []
    assert leader.replication.replicas == 3
    assert [c.fault for c in leader.chaos] == ["kill-executor", "kill-leader", "pause"]

    none, notes = experiment.mode_spec(spec, "none")
    assert none.name == "exp-none"
    assert none.steps == spec.steps
    assert none.replication.mode == "none" and none.replication.replicas == 1
    assert none.workload == spec.workload
    assert [(c.fault, c.replica) for c in none.chaos] == [
        ("kill-executor", 0),
        ("kill-replica", 0),
        ("pause", 0),
    ]
    assert [c.at for c in none.chaos] == [c.at for c in spec.chaos]
    assert len(notes) == 3 and "kill-leader at 30s" in notes[1]

    leaderless, notes = experiment.mode_spec(spec, "active-leaderless")
    assert leaderless.replication.replicas == 3
    assert [(c.fault, c.replica) for c in leaderless.chaos][1] == ("kill-replica", 0)


def test_active_modes_get_two_replicas_when_the_spec_is_not_active() -> None:
    spec = parse_spec(
        {"name": "p", "source": {"topic": "a"}, "sink": {"topic": "b"},
         "replication": {"mode": "passive"}},
        "p.toml",
    )  # fmt: skip
    s, _ = experiment.mode_spec(spec, "active-leaderless")
    assert s.replication.replicas == 2


def _fake_deploy(
    sources: dict[str, str], fail: set[str], exporters: list[Any] | None = None
) -> Any:
    def fake(
        spec: Spec,
        spec_path: Path | None,
        options: DeployOptions,
        on_tick: Any = None,
        on_run_dir: Any = None,
        *,
        exporter: Any = None,
    ) -> DeployResult:
        if exporters is not None:
            exporters.append(exporter)
        mode = spec.replication.mode
        run_dir = options.runs_root / f"{spec.name}-1"
        if on_run_dir is not None:
            on_run_dir(run_dir)
        if mode in fail:
            run_dir.mkdir()
            raise DeployError(f"{mode} broke")
        shutil.copytree(RUNS / sources[mode], run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        return DeployResult(run_dir=run_dir, summary=summary)

    return fake


def test_runs_each_mode_then_writes_the_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = {"passive": "sim-passive-kill", "active-leaderless": "sim-active-kill"}
    monkeypatch.setattr(experiment, "deploy", _fake_deploy(sources, fail={"none"}))
    seen: list[tuple[str, str | None]] = []
    res = experiment.run_experiment(
        _spec(),
        ["passive", "none", "active-leaderless"],
        runs_root=tmp_path,
        on_run_done=lambda mode, result, error: seen.append((mode, error)),
    )
    assert [m for m, _ in seen] == ["passive", "none", "active-leaderless"]
    assert res.failed == {"none": "DeployError: none broke"}
    assert [r.run for r in res.reports] == ["exp-passive-1", "exp-active-leaderless-1"]
    assert res.comparison is not None and res.html is not None and res.html.exists()
    doc = json.loads((res.root / "comparison.json").read_text())
    assert doc["experiment"]["failed"] == {"none": "DeployError: none broke"}
    assert set(doc["experiment"]["runs"]) == {"passive", "none", "active-leaderless"}
    assert doc["comparison"]["labels"] == ["passive", "active-leaderless"]
    assert "passive = exp-passive-1" in res.html.read_text()
    metrics = {(r["metric"], r["phase"]) for r in doc["comparison"]["rows"]}
    assert {("p99", "overall"), ("masked", "fault-1"), ("replicas", "run")} <= metrics
    replicas = next(r for r in doc["comparison"]["rows"] if r["metric"] == "replicas")
    assert replicas["values"] == [1.0, 2.0] and replicas["ratios"] == [1.0, 2.0]
    assert res.root.parent == tmp_path and res.root.name.startswith("exp-experiment-")


def test_one_metrics_endpoint_serves_every_run_of_an_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = {"passive": "sim-passive-kill", "active-leaderless": "sim-active-kill"}
    exporters: list[Any] = []
    monkeypatch.setattr(experiment, "deploy", _fake_deploy(sources, set(), exporters))
    experiment.run_experiment(
        _spec(),
        ["passive", "active-leaderless"],
        runs_root=tmp_path,
        options=DeployOptions(metrics_port=0),
    )
    first, second = exporters
    assert first is not None and second is first


def test_a_derived_spec_that_does_not_validate_stops_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise AssertionError("no deploy may start")

    monkeypatch.setattr(experiment, "deploy", boom)
    spec = _spec()
    bad = spec.model_copy(update={"name": "Bad Name"})
    with pytest.raises(SpecError):
        experiment.run_experiment(bad, ["none", "passive"], runs_root=tmp_path)
    assert not list(tmp_path.iterdir())
