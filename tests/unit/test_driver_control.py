"""Requests to a driver through its control directory, and ``kill-executor`` through the
cluster manager (a fake Spark context; the real one: tests/integration/test_docker_target.py)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arfl.errors import FaultError
from arfl.faults.base import FaultParams, make_fault
from arfl.faults.kinds.kill_executor import resolve_via
from arfl.faults.runner import ChaosRunner
from arfl.replica.control import SparkControl
from arfl.run.control import REQUEST_SUFFIX, RESPONSE_SUFFIX, ask, serve
from arfl.run.rundir import RunPaths, write_json_atomic
from arfl.targets.local import LocalTarget
from arfl.testing.faults import write_state


class FakeSeq:
    def __init__(self, items: list[str]) -> None:
        self.items = items

    def mkString(self, sep: str) -> str:  # Scala's names, called through py4j
        return sep.join(self.items)


class FakeContext:
    """``sc._jsc.sc()``'s two methods; a killed executor is replaced by the next id."""

    def __init__(self, executors: list[str], accept: bool = True) -> None:
        self.live = list(executors)
        self.accept = accept
        self.killed: list[str] = []

    def getExecutorIds(self) -> FakeSeq:
        return FakeSeq(self.live)

    def killAndReplaceExecutor(self, exe: str) -> bool:
        self.killed.append(exe)
        if self.accept:
            nxt = max(int(e) for e in self.live) + 1
            self.live = [e for e in self.live if e != exe] + [str(nxt)]
        return self.accept


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()


def test_a_request_is_answered_and_both_files_are_gone(tmp_path: Path, stop: threading.Event):
    seen: list[dict[str, Any]] = []

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        seen.append(req)
        return {"ok": True, "echo": req["x"]}

    serve(tmp_path, handle, stop, poll_s=0.01)
    assert ask(tmp_path, {"op": "echo", "x": 7}, timeout_s=5)["echo"] == 7
    assert [{k: v for k, v in r.items() if k != "expires"} for r in seen] == [
        {"op": "echo", "x": 7}
    ]
    assert os.listdir(tmp_path) == []


def test_an_unanswered_request_times_out_and_is_taken_back(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match=r"did not answer within 0\.2 s"):
        ask(tmp_path, {"op": "executors"}, timeout_s=0.2)
    assert not list(tmp_path.glob("*" + REQUEST_SUFFIX))


def test_no_control_directory_says_the_driver_has_not_started(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match="no control directory"):
        ask(tmp_path / "missing", {"op": "executors"}, timeout_s=0.2)


def test_the_drivers_error_reaches_the_caller(tmp_path: Path, stop: threading.Event) -> None:
    serve(tmp_path, SparkControl(FakeContext([])).handle, stop, poll_s=0.01)
    with pytest.raises(FaultError, match="the application has no executor"):
        ask(tmp_path, {"op": "kill-executor"}, timeout_s=5)
    with pytest.raises(FaultError, match="unknown request 'reboot'"):
        ask(tmp_path, {"op": "reboot"}, timeout_s=5)


def test_spark_control_kills_the_lowest_executor_in_numeric_order() -> None:
    sc = FakeContext(["10", "2", "9"])
    ctl = SparkControl(sc)
    assert ctl.executors() == ["2", "9", "10"]
    answer = ctl.handle({"op": "kill-executor"})
    assert answer == {"ok": True, "executor": "2", "executors": ["2", "9", "10"], "accepted": True}
    assert sc.killed == ["2"]
    bad = ctl.handle({"op": "kill-executor", "executor": "5"})
    assert not bad["ok"] and "no executor '5'" in bad["error"]


@pytest.mark.parametrize(
    ("via", "master", "chosen"),
    [
        ("auto", "spark://10.0.0.1:7077", "spark"),
        ("auto", "local-cluster[1,2,1024]", "signal"),
        ("auto", "", "signal"),
        ("signal", "spark://h:7077", "signal"),
        ("spark", "local-cluster[1,1,1024]", "spark"),
    ],
)
def test_auto_goes_through_the_cluster_manager_only_on_a_spark_cluster(
    via: Any, master: str, chosen: str
) -> None:
    assert resolve_via(via, master) == chosen


def _run(tmp_path: Path, master: str) -> Path:
    return write_state(
        tmp_path / "run", "run", {0: {"driver_pid": os.getpid(), "app_id": "app-1"}}, master=master
    )


def test_kill_executor_on_a_spark_cluster_asks_the_driver_and_sees_the_replacement(
    tmp_path: Path, stop: threading.Event
) -> None:
    run = _run(tmp_path, "spark://127.0.0.1:7077")
    sc = FakeContext(["0", "1"])
    serve(RunPaths(run).control(0), SparkControl(sc).handle, stop, poll_s=0.01)
    runner = ChaosRunner(LocalTarget.from_run_dir(run))
    out = runner.run_fault(FaultParams("kill-executor", replica=0))
    assert sc.killed == ["0"]
    assert out.details["via"] == "spark" and "pid" not in out.details
    assert out.details["executors_before"] == ["0", "1"]
    assert out.details["replacement_executor"] == "2"
    assert out.details["replacement_s"] is not None


def test_a_refused_kill_is_an_error_and_no_replacement_is_awaited(
    tmp_path: Path, stop: threading.Event
) -> None:
    run = _run(tmp_path, "spark://127.0.0.1:7077")
    sc = FakeContext(["0"], accept=False)
    serve(RunPaths(run).control(0), SparkControl(sc).handle, stop, poll_s=0.01)
    fault = make_fault(FaultParams.of("kill-executor", replica=0))
    target = LocalTarget.from_run_dir(run)
    fault.prepare(target)
    with pytest.raises(FaultError, match="did not accept"):
        fault.inject(target)
    # Nothing was killed, so nothing is awaited: the revert returns at once.
    t = time.monotonic()
    fault.revert(target)
    assert time.monotonic() - t < 1.0
    assert "replacement_s" not in fault.details and "killed_at" not in fault.details


def test_an_unknown_executor_is_refused_before_anything_is_killed(
    tmp_path: Path, stop: threading.Event
) -> None:
    run = _run(tmp_path, "spark://127.0.0.1:7077")
    sc = FakeContext(["0"])
    serve(RunPaths(run).control(0), SparkControl(sc).handle, stop, poll_s=0.01)
    fault = make_fault(FaultParams.of("kill-executor", replica=0, executor="3"))
    with pytest.raises(FaultError, match=r"no executor '3' \(running: 0\)"):
        fault.prepare(LocalTarget.from_run_dir(run))
    assert sc.killed == []


def test_a_request_its_asker_gave_up_on_is_never_acted_on(
    tmp_path: Path, stop: threading.Event
) -> None:
    """A request left by an arfl that died (its wait over) is dropped, not run by the next
    driver that serves the directory."""
    sc = FakeContext(["0"])
    write_json_atomic(
        tmp_path / ("1-stale" + REQUEST_SUFFIX),
        {"op": "kill-executor", "expires": time.time() - 1},
    )
    lines: list[str] = []
    serve(tmp_path, SparkControl(sc).handle, stop, poll_s=0.01, log=lines.append)
    assert ask(tmp_path, {"op": "executors"}, timeout_s=5)["executors"] == ["0"]
    assert sc.killed == [] and any("expired" in line for line in lines), lines
    assert not list(tmp_path.glob("*" + RESPONSE_SUFFIX))


def test_an_asker_stopped_while_waiting_leaves_no_request(tmp_path: Path) -> None:
    """Ctrl-C (here: an exception from its sleep) takes the request back."""
    import unittest.mock

    with (
        unittest.mock.patch("arfl.run.control.time.sleep", side_effect=KeyboardInterrupt),
        pytest.raises(KeyboardInterrupt),
    ):
        ask(tmp_path, {"op": "kill-executor"}, timeout_s=5)
    assert os.listdir(tmp_path) == []
