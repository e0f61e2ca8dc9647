"""arfl.processes: start with a log, stop with a grace period and the whole tree, pid identity,
waiting for a condition. Real short-lived child processes (python -c)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from arfl import processes
from arfl.priority import priority_of, set_nice
from arfl.processes import (
    ManagedProcess,
    ProcessId,
    Stopped,
    await_exit,
    create_time,
    kill_all,
    process_tree,
    process_trees,
    same_process,
    started_since_boot,
    stop_pid,
    wait_until,
)

# A child that says hello, then sleeps; on SIGTERM it logs it and exits with code 3 a moment
# later, unless it is told to ignore SIGTERM. With "spawn", it first starts a grandchild that
# ignores SIGTERM and writes that one's pid; with "exit" it then exits by itself.
CHILD = r"""
import signal, subprocess, sys, time
mode, pidfile = sys.argv[1], sys.argv[2]
terms = []
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), terms.append(1)))
if "spawn" in sys.argv[3:]:
    g = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    open(pidfile, "w").write(str(g.pid))
print("hello from the child", flush=True)
if "exit" in sys.argv[3:]:
    sys.exit(0)
deadline = time.monotonic() + 60
while not terms and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.2)
sys.exit(3)
"""


def _start(tmp_path: Path, mode: str, *extra: str) -> tuple[ManagedProcess, Path]:
    pidfile = tmp_path / "grandchild.pid"
    proc = ManagedProcess.start(
        "child",
        [sys.executable, "-c", CHILD, mode, str(pidfile), *extra],
        tmp_path / "logs" / "child.log",
    )
    wait_until(lambda: "hello" in proc.tail(), timeout_s=20, interval_s=0.02, what="child")
    return proc, pidfile


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _grandchild(pidfile: Path) -> int:
    return wait_until(
        lambda: pidfile.exists() and pidfile.read_text().strip() and int(pidfile.read_text()),
        timeout_s=20,
        interval_s=0.02,
    )


def test_start_logs_and_stop_ends_it_with_sigterm_within_the_grace(tmp_path: Path) -> None:
    proc, _ = _start(tmp_path, "term")
    assert proc.alive() and proc.returncode is None
    assert os.getsid(proc.pid) == proc.pid, "started in its own session"
    assert proc.create_time == create_time(proc.pid)
    assert proc.tail(1) == "hello from the child"
    t0 = time.monotonic()
    assert proc.stop(grace_s=20) == 3  # its SIGTERM handler's exit code: not killed
    assert time.monotonic() - t0 < 10
    assert proc.graceful is True
    assert not proc.alive() and proc.returncode == 3
    assert _gone(proc.pid)
    assert proc.tail().count("got SIGTERM") == 1


def test_terminate_then_stop_sends_sigterm_once(tmp_path: Path) -> None:
    # As ReplicaRunner.stop does for several drivers: SIGTERM all, then await each in turn.
    proc, _ = _start(tmp_path, "term")
    proc.terminate()
    proc.terminate()
    assert proc.stop(grace_s=20) == 3
    assert proc.tail().count("got SIGTERM") == 1


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_with_its_own_child(
    tmp_path: Path,
) -> None:
    proc, pidfile = _start(tmp_path, "ignore", "spawn")
    grandchild = _grandchild(pidfile)
    assert [p.pid for p in process_tree(proc.pid)] == [proc.pid, grandchild]
    t0 = time.monotonic()
    assert proc.stop(grace_s=0.5) == -9
    assert 0.4 < time.monotonic() - t0 < 10
    assert proc.graceful is False and proc.survivors == []
    assert _gone(grandchild), "the grandchild ignores SIGTERM too: only the tree kill ends it"


def test_descendants_left_behind_by_a_child_that_exited_are_killed(tmp_path: Path) -> None:
    # The child exits by itself and leaves its child to init: only its session still ties it.
    proc, pidfile = _start(tmp_path, "term", "spawn", "exit")
    grandchild = _grandchild(pidfile)
    wait_until(lambda: not proc.alive(), timeout_s=20, interval_s=0.02)
    assert not _gone(grandchild)
    assert [p.pid for p in proc.descendants()] == [grandchild]
    assert proc.stop(grace_s=5) == 0
    assert _gone(grandchild)


def test_stop_is_idempotent(tmp_path: Path) -> None:
    proc, _ = _start(tmp_path, "ignore")
    assert proc.stop(grace_s=0.2) == -9
    assert proc.graceful is False
    t0 = time.monotonic()
    assert proc.stop(grace_s=10) == -9
    assert proc.graceful is False, "the second stop reports the first one"
    assert time.monotonic() - t0 < 1
    assert proc.returncode == -9
    done = ManagedProcess.start("quick", [sys.executable, "-c", "exit(5)"], tmp_path / "q.log")
    done.popen.wait(timeout=20)
    assert done.stop() == 5 and done.stop() == 5
    assert done.graceful is True


def test_start_of_a_missing_executable_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        ManagedProcess.start("nope", ["/nonexistent/java"], tmp_path / "nope.log")


def test_same_process_refuses_a_reused_pid() -> None:
    me = psutil.Process()
    assert same_process(me.pid, create_time(me)) == me
    assert same_process(me.pid, None) == me
    # The same pid, but a process created an hour earlier: the pid was reused since.
    assert same_process(me.pid, create_time(me) - 3600) is None
    assert same_process(me.pid, create_time(me) + 0.01) == me  # JSON rounding is tolerated


def test_a_large_step_of_the_wall_clock_leaves_every_recorded_process_the_same(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A VM's clock stepped 14 s during a run: with psutil's create times every recorded
    process (the deploy that owns the merger, the stack's JVMs) looked gone, the merger left
    as orphaned four times and the run failed. arfl's create time is the start since boot plus
    a boot time fixed once per boot (``boot-anchor.json``), which no step moves."""
    from psutil import _pslinux

    from arfl import processes

    monkeypatch.setenv("ARFL_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(processes, "_anchor", None)
    recorded = ProcessId.of(os.getpid())
    assert recorded is not None
    assert recorded.create_time == pytest.approx(psutil.Process().create_time(), abs=1.5)
    stepped = _pslinux.boot_time() + 60.0
    monkeypatch.setattr(_pslinux, "boot_time", lambda: stepped)
    assert abs(psutil.Process().create_time() - recorded.create_time) > 50  # psutil's moved
    assert same_process(recorded.pid, recorded.create_time) is not None
    assert recorded.alive()
    # ... also in another process of this boot, which reads the anchor from the file
    monkeypatch.setattr(processes, "_anchor", None)
    assert create_time(os.getpid()) == recorded.create_time
    anchor = json.loads((tmp_path / "boot-anchor.json").read_text())
    assert anchor["btime"] == pytest.approx(stepped - 60.0)
    # A file from another boot is replaced.
    (tmp_path / "boot-anchor.json").write_text(json.dumps({"boot_id": "x", "btime": 1.0}))
    monkeypatch.setattr(processes, "_anchor", None)
    assert create_time(os.getpid()) == pytest.approx(started_since_boot(os.getpid()) + stepped)


def test_same_process_refuses_a_zombie_and_a_gone_pid() -> None:
    child = psutil.Popen([sys.executable, "-c", "pass"])
    created = create_time(child)
    try:
        wait_until(lambda: child.status() == psutil.STATUS_ZOMBIE, timeout_s=20, interval_s=0.02)
        assert psutil.pid_exists(child.pid)
        assert same_process(child.pid, created) is None
    finally:
        child.wait()
    assert same_process(child.pid, created) is None


def test_stop_pid_signals_only_the_recorded_process_and_stops_its_tree(tmp_path: Path) -> None:
    proc, pidfile = _start(tmp_path, "ignore", "spawn")
    grandchild = _grandchild(pidfile)
    created = proc.create_time
    assert created is not None
    # A record of an older process that had this pid: nothing is signalled.
    assert stop_pid(proc.pid, created - 100, grace_s=0.1) is False
    assert proc.alive()
    t0 = time.monotonic()
    assert stop_pid(proc.pid, created, grace_s=0.5) is True
    assert 0.4 < time.monotonic() - t0 < 10
    assert _gone(proc.pid) and _gone(grandchild)
    assert stop_pid(proc.pid, created) is False


def test_wait_until_returns_the_first_truthy_value() -> None:
    answers = iter([None, False, "", "ready", "later"])
    calls = []

    def check() -> str | bool | None:
        calls.append(1)
        return next(answers)

    assert wait_until(check, timeout_s=10, interval_s=0.01) == "ready"
    assert len(calls) == 4


def test_wait_until_raises_on_timeout_naming_what() -> None:
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^kafka not ready after 1s$"):
        wait_until(lambda: False, timeout_s=1.0, interval_s=0.1, what="kafka")
    assert 0.9 < time.monotonic() - t0 < 5


def test_wait_until_lets_an_error_of_the_check_through_at_once() -> None:
    def check() -> bool:
        raise RuntimeError("server died")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="server died"):
        wait_until(check, timeout_s=30)
    assert time.monotonic() - t0 < 1


def test_stop_on_termination_calls_stop_on_sigterm_and_sigint() -> None:
    import signal as sig

    from arfl.processes import stop_on_termination

    calls: list[str] = []
    old = {s: sig.getsignal(s) for s in (sig.SIGTERM, sig.SIGINT)}
    try:
        stop_on_termination(lambda: calls.append("stop"))
        os.kill(os.getpid(), sig.SIGTERM)
        os.kill(os.getpid(), sig.SIGINT)
        assert calls == ["stop", "stop"]
    finally:
        for s, handler in old.items():
            sig.signal(s, handler)


# Two busy loops pinned to one CPU; each process in a session of its own, as arfl starts its
# children. With the kernel's autogroup on, a thread's niceness only weighs against threads of
# its own session: a niced replica or standby took a full share from the others all the same.
BURN = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _burners(cpu: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", BURN, str(cpu)], start_new_session=True)
        for _ in range(2)
    ]


def _share(procs: list[subprocess.Popen[bytes]], seconds: float) -> list[float]:
    ps = [psutil.Process(p.pid) for p in procs]
    before = [_cpu_s(p) for p in ps]
    time.sleep(seconds)
    return [_cpu_s(p) - b for p, b in zip(ps, before, strict=True)]


def test_a_niced_process_in_its_own_session_yields_the_cpu_to_other_sessions() -> None:
    cpu = max(os.sched_getaffinity(0))
    procs = _burners(cpu)
    try:
        time.sleep(0.3)
        assert set_nice([psutil.Process(procs[1].pid)], 19)
        busy, niced = _share(procs, 1.5)
        assert busy > 0.5, (busy, niced)  # it ran at all (the host is shared)
        assert niced < 0.25 * busy, (busy, niced)  # without autogroup's nice: about equal
        if os.geteuid() == 0:  # lowering a niceness back needs root
            assert set_nice([psutil.Process(procs[1].pid)], 0)
            busy, restored = _share(procs, 1.5)
            assert restored > 0.5 * busy, (busy, restored)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_niceing_a_child_of_this_session_leaves_this_process_alone() -> None:
    mine = Path("/proc/self/autogroup")
    if not mine.exists():
        pytest.skip("the kernel has no autogroup")
    before = mine.read_text()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert set_nice([psutil.Process(child.pid)], 19)
        assert psutil.Process(child.pid).nice() == 19
        assert mine.read_text() == before  # arfl itself keeps its share
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    "nice", [5, pytest.param(-5, marks=pytest.mark.needs_root(reason="a negative niceness"))]
)
def test_started_at_a_niceness_its_threads_and_its_session_group_have_it(
    tmp_path: Path, nice: int
) -> None:
    # A child that starts a thread after a moment: the thread inherits the niceness too.
    code = (
        "import threading, time; time.sleep(0.3); "
        "threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    )
    argv = [sys.executable, "-c", code]
    proc = ManagedProcess.start("niced", argv, tmp_path / "n.log", nice=nice)
    try:
        wait_until(
            lambda: len(psutil.Process(proc.pid).threads()) == 2, timeout_s=10, what="the thread"
        )
        p = psutil.Process(proc.pid)
        assert {os.getpriority(os.PRIO_PROCESS, t.id) for t in p.threads()} == {nice}
        got = priority_of(proc.pid)
        assert got["nice"] == nice and got["group_nice"] in (None, nice), got
    finally:
        proc.stop(grace_s=1)
    assert priority_of(proc.pid) == {"nice": None, "group_nice": None}


def test_start_returns_once_the_niceness_is_in_place(tmp_path: Path) -> None:
    # nice(1) sets the niceness after the fork, in the child: a caller that reads it right
    # after start (deploy journals harness-priority so) read 0 on a busy host (CI). A slow
    # nice(1) on the PATH makes that window wide.
    real = shutil.which("nice")
    assert real is not None
    fake = tmp_path / "bin" / "nice"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nsleep 0.5\nexec {real} "$@"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ.get('PATH', '')}"}
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    proc = ManagedProcess.start("niced", argv, tmp_path / "n.log", env=env, nice=5)
    try:
        got = priority_of(proc.pid)
        assert got["nice"] == 5 and got["group_nice"] in (None, 5), got
        # nice(1) may not have exec'ed the command yet (the niceness is what start waits for).
        wait_until(
            lambda: psutil.Process(proc.pid).cmdline() == argv, timeout_s=10, what="the command"
        )
    finally:
        proc.stop(grace_s=1)


def test_wait_until_returns_the_value_times_out_and_stops_when_told() -> None:
    calls: list[int] = []
    assert (
        wait_until(
            lambda: calls.append(1) or (len(calls) >= 3 and "ok"), timeout_s=5, interval_s=0.01
        )
        == "ok"
    )
    with pytest.raises(TimeoutError, match="thing not ready after 0s"):
        wait_until(lambda: False, timeout_s=0.05, interval_s=0.01, what="thing")
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(Stopped):
        wait_until(lambda: False, timeout_s=30, interval_s=5, stop=stop)
    assert time.monotonic() - t0 < 5  # the stop ends a long pause, not only the next call


def test_a_process_id_finds_its_process_and_not_a_reused_pid() -> None:
    me = ProcessId.of(os.getpid())
    assert me is not None and me.alive() and me.find() is not None
    assert ProcessId.from_pair(me.to_pair()) == me
    assert not ProcessId(me.pid, me.create_time - 10).alive()  # another process's start
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    gone = ProcessId.of(dead.pid)
    dead.wait()
    assert gone is not None and not gone.alive()


def test_wait_until_raises_the_callers_error_at_the_timeout() -> None:
    with pytest.raises(KeyError, match="gone"):
        wait_until(lambda: False, timeout_s=0.05, interval_s=0.01, error=lambda: KeyError("gone"))


def test_await_exit_sees_a_process_end_at_once_or_returns_when_stopped() -> None:
    stop = threading.Event()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ident = ProcessId.of(child.pid)
        assert ident is not None
        seen: list[float] = []
        t = threading.Thread(
            target=lambda: seen.append(
                await_exit(child.pid, ident.create_time, stop) and time.time()
            )
        )
        t.start()
        time.sleep(0.3)
        assert not seen  # still running
        killed = time.time()
        child.kill()  # not reaped: a zombie has exited all the same
        t.join(timeout=5)
        assert seen and seen[0] >= killed  # seen once it exited, unreaped
        assert await_exit(child.pid, ident.create_time, stop)  # gone already
    finally:
        child.kill()
        child.wait()
    # A stop ends the wait on a process that still runs (this one).
    stop.set()
    assert await_exit(os.getpid(), None, stop) is False


def test_process_trees_reads_proc_once_for_every_root(monkeypatch: pytest.MonkeyPatch) -> None:
    a = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    b = subprocess.Popen(["sleep", "30"])
    try:
        wait_until(lambda: len(process_tree(a.pid)) == 3, timeout_s=5, interval_s=0.02)
        reads = []
        real = processes._parents

        def counted() -> dict[int, int]:
            reads.append(1)
            return real()

        monkeypatch.setattr(processes, "_parents", counted)
        gone = b.pid
        trees = process_trees([a.pid, b.pid])
        assert len(reads) == 1
        for root, tree in trees.items():
            assert tree[0].pid == root
            psutils = psutil.Process(root).children(recursive=True)
            assert {p.pid for p in tree[1:]} == {p.pid for p in psutils}
        b.kill()
        b.wait()
        assert process_trees([gone])[gone] == []
    finally:
        kill_all(process_tree(a.pid))
        b.kill()
        for p in (a, b):
            p.wait()
