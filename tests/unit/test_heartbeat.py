"""Ticks outside the watch: the heartbeat, and a deployment's start-up and stop through it."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import pytest

from arfl.configs.load import parse_spec
from arfl.orchestrate import deploy as deploy_module
from arfl.orchestrate.context import DeployOptions, create_run
from arfl.orchestrate.deploy import Deployment, deploy
from arfl.orchestrate.heartbeat import heartbeat
from arfl.orchestrate.slots import ReplicaState
from arfl.orchestrate.watch import Tick

SPEC = {"name": "t", "source": {"topic": "in"}, "sink": {"topic": "out"}}


def _tick(phase: str = "starting the stack") -> Tick:
    return Tick(0.0, phase, None, None, {})


def test_the_heartbeat_ticks_at_once_then_every_interval_until_the_with_ends() -> None:
    ticks: list[Tick] = []
    with heartbeat(ticks.append, _tick, interval_s=0.02):
        assert ticks, "no tick at once"
        time.sleep(0.2)
    n = len(ticks)
    assert n >= 4
    time.sleep(0.1)
    assert len(ticks) == n  # stopped
    with heartbeat(None, _tick):  # nobody listens: no thread
        assert "arfl-heartbeat" not in [t.name for t in threading.enumerate()]


class _Runner:
    def __init__(self) -> None:
        self.asked = 0

    def states(self) -> dict[int, ReplicaState]:
        self.asked += 1
        return {0: ReplicaState(0, "running"), 1: ReplicaState(1, "starting")}


def test_a_deployments_tick_says_its_phase_and_replicas_but_reads_none_while_stopping(
    tmp_path: Path,
) -> None:
    d = Deployment(create_run(parse_spec(SPEC), None, DeployOptions(runs_root=tmp_path)))
    tick = d.tick()
    assert (tick.phase, tick.snapshot, tick.replicas, tick.faults) == (
        "creating the run", None, {}, []
    )  # fmt: skip
    runner = _Runner()
    d.runner = runner  # type: ignore[assignment]
    d.phase = "starting replicas"
    assert d.tick().replicas == {0: "running", 1: "starting"}
    d._stopping = True  # the runner holds its lock while it stops
    assert d.tick().replicas == {} and runner.asked == 1


def test_deploy_ticks_through_its_start_up_and_its_stop_not_only_in_the_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deploy_module, "heartbeat", functools.partial(heartbeat, interval_s=0.01))

    def step(phase: str) -> object:
        def run(self: Deployment, *args: object) -> None:
            self.phase = phase
            time.sleep(0.05)

        return run

    for name, phase in [
        ("resolve_stack", "starting the stack"),
        ("create_topics", "creating topics"),
        ("start_measuring", "starting the merger"),
        ("start_replicas", "starting replicas"),
        ("start_load", "starting the input"),
        ("start_chaos", "starting the input"),
        ("stop", "stopping"),
    ]:
        monkeypatch.setattr(Deployment, name, step(phase))

    def watch(self: Deployment, on_tick: object) -> None:
        assert callable(on_tick)
        on_tick(Tick(1.0, "running", None, None, {}))

    monkeypatch.setattr(Deployment, "watch", watch)
    monkeypatch.setattr(Deployment, "summarise", lambda self: {})
    ticks: list[Tick] = []
    deploy(parse_spec(SPEC), None, DeployOptions(runs_root=tmp_path), on_tick=ticks.append)
    phases = [t.phase for t in ticks]
    running = phases.index("running")
    assert phases.count("running") == 1  # no heartbeat during the watch
    for phase in ("starting the stack", "starting replicas", "starting the input"):
        assert phase in phases[:running], phases
    assert "stopping" in phases[running:]
    # The stop's first tick already says so (not the last start-up step's phase).
    assert phases[running + 1] == "stopping", phases
    assert all(t.snapshot is None for t in ticks)
