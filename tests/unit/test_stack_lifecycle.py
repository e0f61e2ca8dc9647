"""stack.json handling, port checks before anything starts, resolve() for external stacks."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arfl.configs.spec import Stack
from arfl.errors import StackError
from arfl.stack import config, lifecycle, processes
from arfl.stack.config import Layout
from arfl.stack.lifecycle import StackState
from arfl.stack.processes import ProcessRecord
from arfl.testing import free_ports


def _state() -> StackState:
    return StackState(
        host="127.0.0.1",
        zk_port=2181,
        kafka_port=9092,
        controller_port=9093,
        cluster_id="abc",
        services={"kafka": ProcessRecord(41, 1.5, ["java"])},
    )


def test_state_round_trip_and_pid_files(tmp_path: Path) -> None:
    layout = lifecycle.layout_of(tmp_path)
    assert lifecycle.load_state(layout) is None
    lifecycle.save_state(layout, _state())
    assert lifecycle.load_state(layout) == _state()
    assert (tmp_path / "kafka.pid").read_text() == "41\n"
    assert not (tmp_path / "zookeeper.pid").exists()
    assert _state().info == lifecycle.StackInfo(kafka="127.0.0.1:9092", zookeeper="127.0.0.1:2181")


def test_malformed_state_file_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(json.dumps({"host": "h"}))
    with pytest.raises(StackError, match=r"stack.json is unreadable .* delete the file"):
        lifecycle.load_state(lifecycle.layout_of(tmp_path))


def test_default_state_dir_is_under_arfl_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARFL_STATE_DIR", str(tmp_path))
    assert lifecycle.layout_of(None).root == tmp_path / "stack"


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = lifecycle.log_tail(log)
    assert tail.splitlines() == [f"line {i}" for i in range(80, 100)]
    assert lifecycle.log_tail(tmp_path / "missing") == ""


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_up_refuses_a_taken_port_before_starting_anything(tmp_path: Path, taken_port: int) -> None:
    kafka, ctl = free_ports(2)
    with pytest.raises(StackError) as e:
        lifecycle.up("127.0.0.1", taken_port, kafka, ctl, state=tmp_path)
    assert f"port {taken_port} on 127.0.0.1 is taken by another process (pid {os.getpid()}" in str(
        e.value
    )
    assert "--zk-port" in str(e.value)
    st = lifecycle.load_state(lifecycle.layout_of(tmp_path))
    assert st is None or st.services == {}
    assert not (tmp_path / "zookeeper.pid").exists()


def test_up_validates_ports(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="ports must differ"):
        lifecycle.up("127.0.0.1", 2181, 2181, 9093, state=tmp_path)
    with pytest.raises(StackError, match="--kafka-port 70000 is not a TCP port"):
        lifecycle.up("127.0.0.1", 2181, 70000, 9093, state=tmp_path)


def test_status_without_a_stack(tmp_path: Path) -> None:
    out = lifecycle.status(tmp_path)
    assert [s.name for s in out] == ["zookeeper", "kafka"]
    assert not any(s.running or s.healthy or s.pid for s in out)


def test_status_ignores_a_recycled_pid(tmp_path: Path) -> None:
    # stack.json names this very test process, but with another create time: not ours.
    st = _state()
    st.services = {"kafka": ProcessRecord(os.getpid(), 1.0, ["java"])}
    lifecycle.save_state(lifecycle.layout_of(tmp_path), st)
    kafka = next(s for s in lifecycle.status(tmp_path) if s.name == "kafka")
    assert not kafka.running and kafka.pid is None
    assert lifecycle.down(tmp_path) == []
    assert not (tmp_path / "stack.json").exists()


def test_resolve_external_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "EXTERNAL_TIMEOUT_S", 1.0)
    (port,) = free_ports(1)
    spec = Stack(kind="external", kafka=f"127.0.0.1:{port}")
    with pytest.raises(StackError) as e:
        lifecycle.resolve(spec)
    assert str(e.value) == (
        f"kafka at 127.0.0.1:{port} not reachable after 1s; run 'arfl stack up' or set stack.kafka"
    )


def test_resolve_embedded_not_running_without_start(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"not running; run 'arfl stack up'"):
        lifecycle.resolve(Stack(), start=False, state=tmp_path)


def test_cluster_id_comes_from_formatted_storage(tmp_path: Path) -> None:
    layout = lifecycle.layout_of(tmp_path)
    assert lifecycle._cluster_id(layout, _state()) == "abc"
    assert len(lifecycle._cluster_id(layout, None)) == 22
    meta = layout.data("kafka") / "meta.properties"
    meta.parent.mkdir(parents=True)
    meta.write_text("#\nnode.id=1\ncluster.id=WB9LorVSTvGruwTcH9BnZw\nversion=1\n")
    # The storage wins over stack.json: a new id would make the broker refuse its own data.
    assert lifecycle._cluster_id(layout, _state()) == "WB9LorVSTvGruwTcH9BnZw"


def test_up_that_times_out_shows_the_log_and_stops_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stand-ins for the JVMs: processes that log a line and never listen.
    sleeper = [
        sys.executable,
        "-c",
        "print('still booting', flush=True); import time; time.sleep(60)",
    ]
    monkeypatch.setattr(config, "zookeeper_command", lambda *a: sleeper)

    def fake_kafka(layout: Layout, *_: object) -> ProcessRecord:
        return processes.spawn(sleeper, layout.log("kafka"), cwd=layout.root)

    monkeypatch.setattr(lifecycle, "_start_kafka", fake_kafka)
    zk, kafka, ctl = free_ports(3)
    with pytest.raises(StackError) as e:
        lifecycle.up("127.0.0.1", zk, kafka, ctl, state=tmp_path, timeout=1.0)
    msg = str(e.value)
    assert msg.startswith(f"zookeeper at 127.0.0.1:{zk} not reachable after 1s; last 20 lines of")
    assert msg.endswith("still booting")
    st = lifecycle.load_state(lifecycle.layout_of(tmp_path))
    assert st is not None and st.services == {}
    assert not [p for p in psutil.Process().children() if "still booting" in " ".join(p.cmdline())]


def test_a_service_that_exits_at_once_is_named_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A JVM that refuses its options exits before its pid can be recorded (a zombie by then):
    # up() must still say which service and show its log, not "process N vanished".
    def command(*_a: object) -> list[str]:
        return [sys.executable, "-c", "print('Invalid maximum heap size: -Xmx64q'); exit(1)"]

    def vanished(pid: int) -> ProcessRecord:
        psutil.Process(pid).wait(10)
        raise StackError(f"process {pid} vanished right after it was started: zombie")

    monkeypatch.setattr(config, "zookeeper_command", command)
    monkeypatch.setattr(processes, "record_of", vanished)
    zk, kafka, ctl = free_ports(3)
    with pytest.raises(StackError) as e:
        lifecycle.up("127.0.0.1", zk, kafka, ctl, state=tmp_path, timeout=30)
    msg = str(e.value)
    assert "zookeeper exited during start-up; last 20 lines of" in msg, msg
    assert "Invalid maximum heap size" in msg and "vanished" not in msg, msg
    st = lifecycle.load_state(lifecycle.layout_of(tmp_path))
    assert st is not None and st.services == {}
