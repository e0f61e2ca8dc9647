"""A Ctrl-C (or SIGTERM) while arfl stops its processes is held off, not raised.

The stop of a real :class:`ReplicaRunner` is tested in ``test_runner.py``; here the helper
itself and the deployment's whole stop path (injector, replicas, merger) with a fake runner.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from arfl.configs.load import parse_spec
from arfl.orchestrate.context import DeployOptions, create_run
from arfl.orchestrate.deploy import Deployment
from arfl.orchestrate.interrupts import DeferredInterrupts
from arfl.processes import ManagedProcess
from arfl.run.rundir import read_jsonl


def test_signals_are_noted_then_the_handlers_come_back() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with DeferredInterrupts() as held:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # let the handlers run
    assert held.received == [signal.SIGINT, signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before


def test_nested_use_passes_what_it_noted_to_the_outer_one() -> None:
    with DeferredInterrupts() as outer:
        with DeferredInterrupts() as inner:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert inner.received == [signal.SIGINT] and inner.nested and not outer.nested
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert outer.received == [signal.SIGINT, signal.SIGINT]


def test_outside_the_main_thread_it_does_nothing() -> None:
    seen: list[object] = []

    def worker() -> None:
        with DeferredInterrupts() as held:
            seen.append(signal.getsignal(signal.SIGINT))
        seen.append(held.received)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [signal.getsignal(signal.SIGINT), []]


class _SlowRunner:
    """Replicas whose stop takes a while, during which the user presses Ctrl-C again."""

    stopped = False
    spark_home = None  # the shared one: nothing of the run's own to remove

    def stop(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        self.stopped = True

    def states(self) -> dict[int, object]:
        return {}

    def standby_states(self) -> list[object]:
        return []


def test_a_second_ctrl_c_does_not_abandon_the_deployments_processes(tmp_path: Path) -> None:
    spec = parse_spec({"name": "s", "source": {"topic": "in"}, "sink": {"topic": "out"}})
    d = Deployment(create_run(spec, None, DeployOptions(runs_root=tmp_path)))
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    d.injector = ManagedProcess.start("injector", sleep, tmp_path / "injector.log")
    d.merger = ManagedProcess.start("merger", sleep, tmp_path / "merger.log")
    runner = _SlowRunner()
    d.runner = runner  # type: ignore[assignment]
    interrupted = False
    try:
        d.stop()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        alive = [p.name for p in (d.injector, d.merger) if p.alive()]
        d.merger.stop(grace_s=1.0)
        d.injector.stop(grace_s=1.0)
    assert not interrupted, "KeyboardInterrupt escaped Deployment.stop()"
    assert runner.stopped and alive == []
    events = [e["event"] for e in read_jsonl(d.ctx.paths.journal)]
    assert "run-stopped" in events


def test_the_chaos_schedule_and_the_injector_share_one_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault 'at = 6s' comes 6 s after the input's first event: deploy gives the injector a
    # schedule start a moment ahead (its process start-up took over a second on a loaded host,
    # and faults landed early by that much) and times the chaos schedule from the same t0.
    from arfl.orchestrate.deploy import INJECTOR_LEAD_S
    from arfl.stack import StackInfo
    from arfl.workload.injector import InjectorConfig

    spec = parse_spec(
        {"name": "lead", "source": {"topic": "in"}, "sink": {"topic": "out"},
         "workload": {"rate": 10, "duration": "10s", "warmup": "1s"}}
    )  # fmt: skip
    dep = Deployment(create_run(spec, None, DeployOptions(runs_root=tmp_path)))
    dep.net.info = StackInfo(kafka="127.0.0.1:9", zookeeper="127.0.0.1:8")
    spawned: list[list[str]] = []
    monkeypatch.setattr(dep, "_spawn", lambda name, argv: spawned.append(argv) or _FakeProc())
    before = time.time()
    dep.start_load()
    (argv,) = spawned
    start_at = InjectorConfig.read(Path(argv[argv.index("--config") + 1])).start_at
    assert start_at is not None
    assert dep.t0 == start_at
    assert before + INJECTOR_LEAD_S <= start_at <= time.time() + INJECTOR_LEAD_S


class _FakeProc:
    pid = 0
    create_time = 0.0
