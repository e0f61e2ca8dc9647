"""Process identity by (pid, create time), stopping with escalation, port-taken detection."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arfl.errors import StackError
from arfl.stack import processes
from arfl.stack.processes import ProcessRecord


def test_record_round_trips_through_json() -> None:
    rec = ProcessRecord(pid=12, create_time=1700000000.25, cmdline=["java", "-cp", "x"])
    assert ProcessRecord.from_json(rec.to_json()) == rec
    with pytest.raises(StackError, match="bad process record"):
        ProcessRecord.from_json({"pid": "x"})


def test_own_process_is_alive_only_with_its_create_time() -> None:
    me = processes.record_of(os.getpid())
    assert processes.is_alive(me)
    assert me.cmdline == psutil.Process().cmdline()
    recycled = ProcessRecord(pid=os.getpid(), create_time=me.create_time - 3600)
    assert not processes.is_alive(recycled)
    # A pid that now belongs to someone else is never signalled: this test process survives.
    assert processes.stop(recycled, timeout=0.1) is False
    assert psutil.Process().is_running()


def test_gone_pid_is_not_alive() -> None:
    proc = psutil.Popen([sys.executable, "-c", "pass"])
    rec = processes.record_of(proc.pid)
    proc.wait()
    assert not processes.is_alive(rec)
    assert processes.stop(rec) is False


@pytest.fixture
def stubborn(tmp_path: Path) -> Iterator[ProcessRecord]:
    """A child that ignores SIGTERM (as a hung JVM might)."""
    ready = tmp_path / "ready"
    code = (
        "import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    )
    rec = processes.spawn([sys.executable, "-c", code], tmp_path / "out.log", cwd=tmp_path)
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield rec
    finally:
        processes.stop(rec, timeout=0.1)


def test_stop_escalates_to_sigkill(stubborn: ProcessRecord) -> None:
    assert processes.is_alive(stubborn)
    assert os.getsid(stubborn.pid) == stubborn.pid, "started in its own session"
    t0 = time.monotonic()
    assert processes.stop(stubborn, timeout=0.5) is True
    assert 0.4 < time.monotonic() - t0 < 10
    assert not processes.is_alive(stubborn)


def test_spawn_of_missing_executable_is_a_stack_error(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="cannot start /nonexistent/java"):
        processes.spawn(["/nonexistent/java"], tmp_path / "log", cwd=tmp_path)


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_taken_port_names_port_owner_and_flag(listener: int) -> None:
    assert not processes.port_is_free("127.0.0.1", listener)
    owner = processes.port_owner("127.0.0.1", listener)
    assert owner is not None and owner.pid == os.getpid()
    with pytest.raises(StackError) as e:
        processes.check_port("127.0.0.1", listener, "--kafka-port")
    msg = str(e.value)
    assert msg.startswith(
        f"port {listener} on 127.0.0.1 is taken by another process (pid {os.getpid()}: "
    )
    assert msg.endswith("); stop it or pass --kafka-port")


def test_free_port_passes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    processes.check_port("127.0.0.1", port, "--zk-port")


def test_describe_shortens_long_command_lines() -> None:
    text = processes.describe(psutil.Process())
    assert text.startswith(f"pid {os.getpid()}: ")
    assert len(text) < 140
    assert processes.describe(None) == "owner not visible"


def test_a_zombie_counts_as_stopped_and_is_reaped(tmp_path: Path) -> None:
    rec = processes.spawn([sys.executable, "-c", "pass"], tmp_path / "out.log", cwd=tmp_path)
    deadline = time.monotonic() + 10
    while psutil.Process(rec.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not processes.is_alive(rec)
    assert processes.stop(rec, timeout=0.1) is False
    assert not psutil.pid_exists(rec.pid), "the zombie child was reaped"
