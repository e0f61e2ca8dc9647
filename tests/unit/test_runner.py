"""ReplicaRunner supervision with fake driver processes (no Spark): restart, journal, stop."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import DeployError
from arfl.measure.frontier import path_in as frontier_path_in
from arfl.measure.frontier import write_frontier
from arfl.orchestrate import checkpoints, failover
from arfl.orchestrate.drivers import DriverLaunch
from arfl.orchestrate.restarts import RestartPolicy
from arfl.orchestrate.standbys import STANDBY_STOP_GRACE_S
from arfl.orchestrate.supervisor import ReplicaRunner
from arfl.priority import priority_of
from arfl.processes import create_time, is_running, stop_pid
from arfl.replica.driver import EXIT_BAD_CONFIG
from arfl.replica.modes.base import STARTING_OFFSETS
from arfl.run.rundir import new_run_dir, read_jsonl

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(autouse=True, scope="module")
def _reaped_at_once() -> Iterator[None]:
    """This process adopts the fake drivers' orphaned children while these tests run, so that
    it reaps each the moment it is killed: the supervisor waits for a killed process to leave
    the process table, and here PID 1 reaps orphans only about a second later (cProfile of
    one test: 3.7 s of its 6.9 s in that wait)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    before = {c.pid for c in psutil.Process().children()}
    adopted = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    yield
    if adopted:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        for c in psutil.Process().children():  # the adopted ones that exited meanwhile
            with contextlib.suppress(psutil.Error, ChildProcessError):
                if c.pid not in before and c.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(c.pid, os.WNOHANG)


# A fake driver: reads its DriverConfig, reports an app id, starts a child (stands in for the
# driver JVM), records the child's pid, then sleeps. SIGTERM -> exit 0 unless told to ignore it.
FAKE_DRIVER = r"""
import json, signal, subprocess, sys, time
cfg = json.load(open(sys.argv[1]))
mode = sys.argv[2]
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(cfg["app_id_file"] + ".child", "w") as f:
    f.write(str(child.pid))
with open(cfg["app_id_file"], "w") as f:
    json.dump({"app_id": "app-fake-%d" % cfg["attempt"], "pid": 0}, f)
while True:
    time.sleep(0.1)
"""


# A driver whose query fails right after start-up: Spark is up (it reports an app id), then
# it exits with status 1, as the real driver does when its query fails.
FAILING_QUERY = r"""
import json, sys
cfg = json.load(open(sys.argv[1]))
with open(cfg["app_id_file"], "w") as f:
    json.dump({"app_id": "app-fake-%d" % cfg["attempt"], "pid": 0}, f)
sys.exit(1)
"""


def _spec(restart: bool = True, replicas: int = 1) -> Spec:
    mode = "passive" if replicas == 1 else "active-leaderless"
    return parse_spec(
        {
            "name": "fake",
            "source": {"topic": "in"},
            "sink": {"topic": "out"},
            "replication": {"mode": mode, "restart": restart, "replicas": replicas},
        }
    )


def _events(run: Path, name: str | None = None) -> list[dict[str, Any]]:
    ev = read_jsonl(run / "journal.jsonl")
    return [e for e in ev if name is None or e["event"] == name]


def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def _fake(tmp_path: Path, mode: str = "normal") -> Callable[[int, Path], list[str]]:
    script = tmp_path / "fake_driver.py"
    script.write_text(FAKE_DRIVER)
    return lambda replica, config: [sys.executable, str(script), str(config), mode]


def _runner(
    spec: Spec,
    tmp_path: Path,
    command: Callable[[int, Path], list[str]],
    *,
    mode_options: dict[str, str] | None = None,
    stop_timeout_s: float = 30.0,
    **policy: Any,
) -> ReplicaRunner:
    run = new_run_dir(tmp_path / "runs", spec.name)
    return ReplicaRunner(
        spec,
        run,
        DriverLaunch(
            "127.0.0.1:1",
            spark_home=tmp_path / "sh",
            command=command,
            mode_options=mode_options or {},
        ),
        policy=RestartPolicy(**{"restart": spec.replication.restart, "delay_s": 0.1, **policy}),
        poll_interval_s=0.05,
        stop_timeout_s=stop_timeout_s,
        tree_grace_s=0.5,
    )


def test_crashing_driver_is_restarted_then_given_up_as_a_crash_loop(tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "import sys; sys.exit(3)"]
    r = _runner(_spec(), tmp_path, lambda i, c: crash, crash_loop_limit=3)
    r.start()
    try:
        _wait(lambda: r.states()[0].status == "dead")
        st = r.states()[0]
        assert st.restarts == 2
        assert st.exit_code == 3
        run = r.paths.root
        died = _events(run, "replica-died")
        assert [e["exit_code"] for e in died] == [3, 3, 3]
        restarted = _events(run, "replica-restarted")
        assert [e["attempt"] for e in restarted] == [1, 2]
        assert all(e["downtime_s"] >= 0.1 for e in restarted)
        (gave_up,) = _events(run, "replica-gave-up")
        assert gave_up["reason"] == "crash-loop"
        assert "3 times in a row before Spark was up" in gave_up["detail"]
        assert len(_events(run, "replica-started")) == 3
        with pytest.raises(DeployError, match="replica 0 is dead"):
            r.wait_ready(timeout_s=1)
    finally:
        r.stop()


def test_no_restart_when_the_spec_says_so(tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "import sys; sys.exit(7)"]
    r = _runner(_spec(restart=False), tmp_path, lambda i, c: crash)
    with r:
        _wait(lambda: r.states()[0].status == "dead")
        assert r.states()[0].restarts == 0
        assert _events(r.paths.root, "replica-restarted") == []
        assert _events(r.paths.root, "replica-gave-up")[0]["reason"].startswith("replication")


def test_killed_driver_restarts_with_next_attempt_and_its_tree_is_reaped(tmp_path: Path) -> None:
    r = _runner(_spec(), tmp_path, _fake(tmp_path))
    r.start()
    try:
        st = r.wait_ready(timeout_s=20)[0]
        assert st.app_id == "app-fake-0"
        child_file = r.paths.root / "replicas" / "replica-0.app.json.child"
        first_child = int(child_file.read_text())
        cfg = json.loads((r.paths.root / "replicas" / "replica-0.json").read_text())
        assert cfg["attempt"] == 0
        assert cfg["checkpoint_dir"].endswith("checkpoints/replica-0")
        assert cfg["output_topic"] == "out.r0"

        killed = r.kill(0)
        assert killed == st.pid
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        st2 = r.states()[0]
        assert st2.status == "running"
        assert st2.restarts == 1
        assert st2.pid != killed
        assert not psutil.pid_exists(first_child) or psutil.Process(first_child).status() == (
            psutil.STATUS_ZOMBIE
        )
        died = _events(r.paths.root, "replica-died")
        assert died[0]["exit_code"] == -9
        assert died[0]["app_id"] == "app-fake-0"
        ready = _events(r.paths.root, "replica-ready")
        assert [e["attempt"] for e in ready] == [0, 1]
        second_child = int(child_file.read_text())
    finally:
        r.stop()
    assert r.states()[0].status == "stopped"
    assert not psutil.pid_exists(st2.pid)
    assert not psutil.pid_exists(second_child)
    stopped = _events(r.paths.root, "replica-stopped")
    assert stopped[0]["graceful"] is True
    assert stopped[0]["exit_code"] == 0
    log = (r.paths.root / "logs" / "replica-0.log").read_text()
    assert "attempt 0" in log and "attempt 1" in log


def test_stop_kills_a_driver_that_ignores_sigterm(tmp_path: Path) -> None:
    r = _runner(_spec(), tmp_path, _fake(tmp_path, "ignore-term"), stop_timeout_s=1.0)
    r.start()
    st = r.wait_ready(timeout_s=20)[0]
    child = int((r.paths.root / "replicas" / "replica-0.app.json.child").read_text())
    t0 = time.monotonic()
    r.stop()
    assert time.monotonic() - t0 < 15
    assert not psutil.pid_exists(st.pid)
    assert not psutil.pid_exists(child)
    stopped = _events(r.paths.root, "replica-stopped")[0]
    assert stopped["graceful"] is False
    assert stopped["exit_code"] == -9
    assert _events(r.paths.root, "replica-died") == []


def test_kill_unknown_replica_is_an_error(tmp_path: Path) -> None:
    r = _runner(_spec(), tmp_path, _fake(tmp_path))
    with r, pytest.raises(DeployError, match=r"no replica 3 \(have 0\.\.0\)"):
        r.kill(3)


def test_pipeline_that_cannot_be_built_is_not_restarted(tmp_path: Path) -> None:
    bad = [sys.executable, "-c", f"import sys; sys.exit({EXIT_BAD_CONFIG})"]
    r = _runner(_spec(), tmp_path, lambda i, c: bad)
    with r:
        _wait(lambda: r.states()[0].status == "dead")
        assert r.states()[0].restarts == 0
        assert "cannot be built" in _events(r.paths.root, "replica-gave-up")[0]["reason"]


def test_no_restart_marker_of_a_kill_replica_fault_is_honoured(tmp_path: Path) -> None:
    from arfl.targets.local import no_restart_marker

    r = _runner(_spec(), tmp_path, _fake(tmp_path))
    with r:
        r.wait_ready(timeout_s=20)
        no_restart_marker(r.paths.root, 0).touch()
        r.kill(0)
        _wait(lambda: r.states()[0].status == "dead")
        assert r.states()[0].restarts == 0
        assert _events(r.paths.root, "replica-restarted") == []
        assert "no-restart marker" in _events(r.paths.root, "replica-gave-up")[0]["reason"]


def test_query_failing_after_start_up_is_given_up_as_a_crash_loop(tmp_path: Path) -> None:
    script = tmp_path / "failing_query.py"
    script.write_text(FAILING_QUERY)
    r = _runner(
        _spec(),
        tmp_path,
        lambda i, c: [sys.executable, str(script), str(c)],
        crash_loop_restarts=2,
        crash_loop_window_s=60.0,
    )
    with r:
        _wait(lambda: r.states()[0].status == "dead", timeout=30)
        st = r.states()[0]
        assert st.restarts == 2 and st.exit_code == 1
        run = r.paths.root
        # Spark came up every time: not the "before Spark was up" loop.
        assert [e["attempt"] for e in _events(run, "replica-ready")] == [0, 1, 2]
        assert [e["exit_code"] for e in _events(run, "replica-died")] == [1, 1, 1]
        (gave_up,) = _events(run, "replica-gave-up")
        assert gave_up["reason"] == "crash-loop"
        assert "after 2 restarts within 60s" in gave_up["detail"]
        time.sleep(0.5)  # no restart after giving up
        assert len(_events(run, "replica-started")) == 3


def test_deaths_by_a_signal_are_no_crash_loop(tmp_path: Path) -> None:
    r = _runner(_spec(), tmp_path, _fake(tmp_path), crash_loop_restarts=1)
    with r:
        r.wait_ready(timeout_s=20)
        for attempt in (1, 2, 3):
            r.kill(0)  # what a kill-replica fault does
            _wait(lambda a=attempt: r.states()[0].app_id == f"app-fake-{a}")
        assert r.states()[0].status == "running"
        assert r.states()[0].restarts == 3
        assert _events(r.paths.root, "replica-gave-up") == []


def test_ctrl_c_while_stopping_does_not_abandon_the_drivers(tmp_path: Path) -> None:
    # Drivers that ignore SIGTERM make stop() wait its grace period: the second Ctrl-C of a
    # user who finds that too slow comes in right then.
    r = _runner(_spec(replicas=2), tmp_path, _fake(tmp_path, "ignore-term"), stop_timeout_s=2.0)
    r.start()
    procs: list[psutil.Process] = []
    interrupted = False
    try:
        states = r.wait_ready(timeout_s=20)
        pids = [s.pid for s in states.values() if s.pid is not None]
        pids += [
            int((r.paths.root / "replicas" / f"replica-{i}.app.json.child").read_text())
            for i in states
        ]
        procs = [psutil.Process(pid) for pid in pids]
        handler = signal.getsignal(signal.SIGINT)
        ctrl_c = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        ctrl_c.start()
        try:
            r.stop()
        except KeyboardInterrupt:
            interrupted = True
        ctrl_c.join()
    finally:
        left = [p for p in procs if is_running(p)]
        for p in left:  # whatever an interrupted stop left behind
            stop_pid(p.pid, create_time(p), grace_s=1.0)
    assert not interrupted, "KeyboardInterrupt escaped ReplicaRunner.stop()"
    assert len(procs) == 4 and not left
    assert {st.status for st in r.states().values()} == {"stopped"}
    assert len(_events(r.paths.root, "replica-stopped")) == 2
    (ignored,) = _events(r.paths.root, "interrupt-ignored")
    assert ignored["signals"] == ["SIGINT"]
    # And the handler is back: Ctrl-C interrupts again after the stop.
    assert signal.getsignal(signal.SIGINT) is handler


# A fake driver that also plays a standby: a standby reports itself ready, waits for its
# assignment and then becomes that replica (its app file, its child), as the real driver does.
FAKE_STANDBY_DRIVER = r"""
import json, os, signal, subprocess, sys, time
cfg = json.load(open(sys.argv[1]))
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
# stands in for the executor JVM (matched by its main class, as Spark's); "forking": one that
# keeps forking short-lived children, which carry its command line until they exec (as a JVM's
# processes do: Hadoop's local file system runs readlink/chmod/rm at a state checkpoint)
code = "import time; time.sleep(600)"
if sys.argv[2:] == ["forking"]:
    code = (
        "import os, time\n"
        "while True:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        time.sleep(0.15)\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    time.sleep(0.05)\n"
    )
child = subprocess.Popen([sys.executable, "-c", code, "CoarseGrainedExecutorBackend"])
if cfg.get("standby"):
    with open(cfg["app_id_file"], "w") as f:
        json.dump({"app_id": "app-standby-%d" % cfg["replica"], "ready": time.time()}, f)
    while not os.path.exists(cfg["assignment_file"]):
        time.sleep(0.02)
    cfg = json.load(open(cfg["assignment_file"]))
with open(cfg["app_id_file"] + ".child", "w") as f:
    f.write(str(child.pid))
with open(cfg["app_id_file"], "w") as f:
    json.dump({"app_id": "app-fake-%d" % cfg["attempt"], "pid": os.getpid()}, f)
while True:
    time.sleep(0.1)
"""


def _standby_spec(standby: int = 1) -> Spec:
    return parse_spec(
        {
            "name": "fake",
            "source": {"topic": "in"},
            "sink": {"topic": "out"},
            "replication": {"mode": "active", "replicas": 2, "standby": standby},
        }
    )


def _realtime_standby_spec() -> Spec:
    return parse_spec(
        {
            "name": "fake",
            "source": {"topic": "in"},
            "sink": {"topic": "out"},
            "replication": {"mode": "active", "replicas": 2, "standby": 1, "trigger": "realtime"},
        }
    )


def _at_the_frontier(
    spec: Spec, tmp_path: Path, command: Callable[[int, Path], list[str]]
) -> ReplicaRunner:
    """A runner whose restarted replicas can resume at the output frontier: deploy-time start
    offsets and a frontier the merger would have written."""
    start = json.dumps({"in": {"0": 10, "1": 20}})
    r = _runner(spec, tmp_path, command, mode_options={STARTING_OFFSETS: start})
    write_frontier(frontier_path_in(r.paths.root), {0: 15, 1: 25}, time.time())
    return r


def _fake_standby(tmp_path: Path, *extra: str) -> Callable[[int, Path], list[str]]:
    script = tmp_path / "fake_standby_driver.py"
    script.write_text(FAKE_STANDBY_DRIVER)
    return lambda replica, config: [sys.executable, str(script), str(config), *extra]


def _with_standby(tmp_path: Path, standby: list[str]) -> Callable[[int, Path], list[str]]:
    """The fake driver for replicas, ``standby`` as every standby's command."""
    fake = _fake_standby(tmp_path)
    return lambda replica, config: standby if replica < 0 else fake(replica, config)


def _nice(pid: int) -> int:
    """The niceness of ``pid``'s main thread; where the kernel groups by session (autogroup), the
    process's session group must carry it too, else it weighs nothing against other sessions."""
    got = priority_of(pid)
    assert got["nice"] is not None and got["group_nice"] in (None, got["nice"]), got
    return got["nice"]


def test_killed_replica_is_taken_over_by_the_ready_standby(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("arfl.orchestrate.standbys.STANDBY_RESPAWN_DELAY_S", 0.3)
    r = _at_the_frontier(_standby_spec(), tmp_path, _fake_standby(tmp_path))
    r.start()
    try:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        (sb,) = r.standby_states()
        assert sb.standby == 0
        # Waiting at low priority, so that the replicas keep the CPU.
        assert _nice(sb.pid) == 19
        killed = r.kill(1)
        _wait(lambda: r.states()[1].app_id == "app-fake-1")
        st = r.states()[1]
        # The standby's process is now replica 1: no new driver was started for it.
        assert st.pid == sb.pid
        assert st.restarts == 1 and st.pid != killed
        cfg = json.loads((r.paths.root / "replicas" / "standby-0.assign.json").read_text())
        assert cfg["replica"] == 1 and cfg["attempt"] == 1
        assert cfg["output_topic"] == "out.r1"
        # At the output frontier: a fresh checkpoint, nothing to replay.
        assert cfg["checkpoint_dir"].endswith("checkpoints/replica-1.1")
        (restarted,) = _events(r.paths.root, "replica-restarted")
        assert restarted["standby"] == 0 and restarted["pid"] == sb.pid
        assert restarted["resume"] == "output"
        if os.geteuid() == 0:  # lowering a niceness needs root
            # It yields the CPU to the survivor until the merger sees it caught up.
            child = int((r.paths.root / "replicas" / "replica-1.app.json.child").read_text())
            (took,) = [e for e in _events(r.paths.root, "replica-started") if "standby" in e]
            assert took["yielding"] is True and took["reniced"] is False
            time.sleep(0.3)
            assert _nice(sb.pid) == 19 and _nice(child) == 19
            _monitor_line(r.paths.root, 1, lag_ms=5.0)
            # The supervisor renices, then journals it: wait for the line, not the niceness.
            _wait(lambda: bool(_events(r.paths.root, "replica-reniced")))
            assert _nice(sb.pid) == 0 and _nice(child) == 0
            (reniced,) = _events(r.paths.root, "replica-reniced")
            assert reniced["replica"] == 1 and reniced["why"] == "caught up"
            assert reniced["behind_ms"] == 5.0 and reniced["reniced"] is True
        # A successor standby follows (after STANDBY_RESPAWN_DELAY_S), in its own files.
        _wait(lambda: [s.standby for s in r.standby_states() if s.ready] == [1])
        started = _events(r.paths.root, "standby-started")
        assert [e["standby"] for e in started] == [0, 1]
        assert (r.paths.root / "logs" / "standby-1.log").exists()
        log = (r.paths.root / "logs" / "replica-1.log").read_text()
        assert "standby 0" in log and "takes over" in log
        pids = [r.states()[0].pid, r.states()[1].pid] + [s.pid for s in r.standby_states()]
    finally:
        r.stop()
    assert r.standby_states() == []
    assert not any(p is not None and psutil.pid_exists(p) for p in pids)


def test_a_ready_standby_takes_over_the_moment_the_driver_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Supervision looks every 2 s here: the death must wake it (a pidfd), and the standby take
    # over in the same look, not in the next one.
    monkeypatch.setattr("arfl.orchestrate.standbys.STANDBY_RESPAWN_DELAY_S", 30.0)
    r = _at_the_frontier(_standby_spec(), tmp_path, _fake_standby(tmp_path))
    r.start()
    try:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        r.poll_interval_s = 2.0
        time.sleep(2.5)  # the supervision loop now waits 2 s at a time
        (sb,) = r.standby_states()
        killed_at = time.time()
        r.kill(1)
        _wait(lambda: r.states()[1].pid == sb.pid, timeout=5)
        (died,) = _events(r.paths.root, "replica-died")
        (restarted,) = _events(r.paths.root, "replica-restarted")
        assert float(died["t"]) - killed_at < 0.5, died
        assert float(restarted["t"]) - float(died["t"]) < 0.5, (died, restarted)
    finally:
        r.stop()


def test_a_realtime_replica_that_lost_an_executor_is_taken_over_by_the_standby(
    tmp_path: Path,
) -> None:
    spec = _realtime_standby_spec()
    r = _runner(spec, tmp_path, _fake_standby(tmp_path))
    with r:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        (sb,) = r.standby_states()
        driver = r.states()[0].pid
        assert driver is not None
        executor = int((r.paths.root / "replicas" / "replica-0.app.json.child").read_text())
        time.sleep(0.3)  # the supervisor has seen it
        os.kill(executor, signal.SIGKILL)
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        (lost,) = _events(r.paths.root, "replica-executor-lost")
        assert lost["replica"] == 0 and lost["executors"] == [executor]
        assert lost["action"] == "driver killed: standby 0 takes over"
        (died,) = _events(r.paths.root, "replica-died")
        assert died["pid"] == driver and died["exit_code"] == -9
        assert r.states()[0].pid == sb.pid
        # replica 1 kept its executor and its driver
        assert [e["replica"] for e in _events(r.paths.root, "replica-restarted")] == [0]


def test_an_executors_short_lived_children_are_not_taken_for_a_lost_executor(
    tmp_path: Path,
) -> None:
    """A windowed real-time replica killed and taken over at its first batch boundary with its
    executor alive: children the executor forks, which carry its command line until they exec,
    are not executors (counted, they made two 'lost executors' of one executor JVM when they
    vanished)."""
    spec = _realtime_standby_spec()
    r = _runner(spec, tmp_path, _fake_standby(tmp_path, "forking"))
    with r:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        drivers = [s.pid for s in r.states().values()]
        time.sleep(2.0)  # ~10 forks per executor, the supervisor looking every 50 ms
        assert _events(r.paths.root, "replica-executor-lost") == []
        assert [s.pid for s in r.states().values()] == drivers
        # A real loss is still seen.
        executor = int((r.paths.root / "replicas" / "replica-0.app.json.child").read_text())
        os.kill(executor, signal.SIGKILL)
        _wait(lambda: bool(_events(r.paths.root, "replica-executor-lost")))
        (lost,) = _events(r.paths.root, "replica-executor-lost")
        assert lost["replica"] == 0 and lost["executors"] == [executor]


def test_a_replicas_tree_is_read_for_its_executors_every_few_seconds_not_every_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass over /proc per replica at every look (here every 50 ms) was most of arfl deploy's
    CPU: between reads of the tree the executors it knows are checked one by one, and a lost
    one is still seen at once."""
    reads: list[int] = []
    real = failover.executor_jvms

    def counted(pid: int) -> Any:
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(failover, "executor_jvms", counted)
    spec = _realtime_standby_spec()
    r = _runner(spec, tmp_path, _fake_standby(tmp_path))
    with r:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        driver = r.states()[0].pid
        _wait(lambda: len(r._replicas[0].executors) == 1)
        reads.clear()
        time.sleep(3 * failover.TREE_READ_S)  # 120 looks
        assert 2 <= reads.count(driver) <= 4, reads  # every 2 s, not at each look
        executor = int((r.paths.root / "replicas" / "replica-0.app.json.child").read_text())
        lost_at = time.time()
        os.kill(executor, signal.SIGKILL)
        _wait(lambda: bool(_events(r.paths.root, "replica-executor-lost")))
        (lost,) = _events(r.paths.root, "replica-executor-lost")
        assert lost["executors"] == [executor]
        assert float(lost["t"]) - lost_at < 1.0  # at the next look, not at the next read


def _monitor_line(run: Path, replica: int, lag_ms: float, trail_ms: float | None = None) -> None:
    """Append a merger monitor line in which ``replica`` delivered a result just now."""
    now = time.time()
    seen = {"received": 1, "wins": 1, "last_seen_t": now, "last_src_ts": 0, "lag_ms": lag_ms,
            "trail_ms": trail_ms}  # fmt: skip
    line = {"t": now, "output_rate": 1, "received": 1, "replicas": {str(replica): seen}}
    with (run / "monitor.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


@pytest.mark.needs_root(reason="lowering a niceness needs root")
def test_a_standby_that_does_not_yield_gets_full_priority_at_once(tmp_path: Path) -> None:
    spec = _standby_spec()
    spec = spec.model_copy(
        update={"replication": spec.replication.model_copy(update={"standby_yield": False})}
    )
    r = _runner(spec, tmp_path, _fake_standby(tmp_path))
    with r:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        (sb,) = r.standby_states()
        r.kill(0)
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        assert _nice(sb.pid) == 0
        (took,) = [e for e in _events(r.paths.root, "replica-started") if "standby" in e]
        assert took["reniced"] is True and "yielding" not in took
        assert not _events(r.paths.root, "replica-reniced")


def _windowed(spec: Spec) -> Spec:
    steps = parse_spec(
        {
            "name": "w",
            "source": {"topic": "in", "event_time": "ts"},
            "sink": {"topic": "out"},
            "steps": [{"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}],
        }
    ).steps
    return spec.model_copy(update={"steps": steps})


def _resuming_from_own_checkpoint(spec: Spec) -> Spec:
    replication = spec.replication.model_copy(update={"resume": "checkpoint"})
    return spec.model_copy(update={"replication": replication})


def _as_is(spec: Spec) -> Spec:
    return spec


@pytest.mark.needs_root(reason="lowering a niceness needs root")
@pytest.mark.parametrize(
    ("variant", "frontier"),
    [(_windowed, True), (_resuming_from_own_checkpoint, True), (_as_is, False)],
)
def test_a_standby_that_replays_does_not_yield(
    tmp_path: Path, variant: Callable[[Spec], Spec], frontier: bool
) -> None:
    """A window, a pipeline resuming from a checkpoint, or a filter/select pipeline killed
    before the merger has an output frontier replays before its replica covers anyone: full
    priority at once, though ``standby_yield`` is on (one resuming at the frontier has nothing
    to replay, and yields)."""
    spec = variant(_standby_spec())
    assert spec.replication.standby_yield
    runner = _at_the_frontier if frontier else _runner
    r = runner(spec, tmp_path, _fake_standby(tmp_path))
    with r:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        (sb,) = r.standby_states()
        assert _nice(sb.pid) == 19
        r.kill(0)
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        assert _nice(sb.pid) == 0
        (restarted,) = _events(r.paths.root, "replica-restarted")
        assert restarted["resume"] != "output"
        (took,) = [e for e in _events(r.paths.root, "replica-started") if "standby" in e]
        assert took["reniced"] is True and "yielding" not in took


@pytest.mark.needs_root(reason="lowering a niceness needs root")
def test_a_yielding_standby_gets_full_priority_after_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("arfl.orchestrate.standbys.YIELD_MAX_S", 0.5)
    r = _at_the_frontier(_standby_spec(), tmp_path, _fake_standby(tmp_path))
    with r:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        r.kill(0)
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        # A fresh result, but it still owes the output older ones (another partition's
        # backlog): not caught up, so it yields until the cap.
        _monitor_line(r.paths.root, 0, lag_ms=5.0, trail_ms=5000.0)
        _wait(lambda: bool(_events(r.paths.root, "replica-reniced")))
        (reniced,) = _events(r.paths.root, "replica-reniced")
        assert reniced["why"] == "not caught up after 0.5s" and reniced["after_s"] >= 0.5
        assert reniced["behind_ms"] == 5000.0


def test_without_a_ready_standby_a_new_driver_is_started(tmp_path: Path) -> None:
    never_ready = [sys.executable, "-c", "import time; time.sleep(600)"]
    r = _runner(_standby_spec(), tmp_path, _with_standby(tmp_path, never_ready))
    r.start()
    try:
        r.wait_ready(timeout_s=20)
        (waiting,) = r.standby_states()
        assert waiting.ready is False
        killed = r.kill(0)
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        (restarted,) = _events(r.paths.root, "replica-restarted")
        assert "standby" not in restarted
        assert r.states()[0].pid not in (killed, None, waiting.pid)
        assert not list((r.paths.root / "replicas").glob("standby-*.assign.json"))
        assert r.standby_states() == [waiting]  # still there, still waiting
    finally:
        r.stop()
    assert not psutil.pid_exists(waiting.pid) or psutil.Process(waiting.pid).status() == (
        psutil.STATUS_ZOMBIE
    )


def test_a_standby_is_not_niced_where_its_niceness_could_not_be_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("arfl.orchestrate.standbys.can_unnice", lambda: False)
    r = _runner(_standby_spec(), tmp_path, _fake_standby(tmp_path))
    r.start()
    try:
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        (sb,) = r.standby_states()
        assert _nice(sb.pid) == os.nice(0)
        (started,) = _events(r.paths.root, "standby-started")
        assert started["nice"] == 0
    finally:
        r.stop()


def test_a_standby_that_cannot_be_started_does_not_stop_supervision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("arfl.orchestrate.standbys.STANDBY_RESPAWN_DELAY_S", 0.2)
    fake = _fake_standby(tmp_path)
    broken = [False]

    def command(replica: int, config: Path) -> list[str]:
        if replica < 0 and broken[0]:
            return [str(tmp_path / "no-such-python")]
        return fake(replica, config)

    r = _runner(_standby_spec(), tmp_path, command)
    r.start()
    try:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [s.ready for s in r.standby_states()] == [True])
        broken[0] = True  # its successor cannot be started
        r.kill(0)
        _wait(lambda: bool(_events(r.paths.root, "standby-gave-up")))
        (gave_up,) = _events(r.paths.root, "standby-gave-up")
        assert "cannot start a standby" in gave_up["reason"]
        assert not r.standbys_wanted()
        # Supervision goes on: the promoted replica dies and is respawned.
        _wait(lambda: r.states()[0].status == "running")
        r.kill(0)
        _wait(lambda: r.states()[0].restarts == 2 and r.states()[0].status == "running")
        assert len(_events(r.paths.root, "standby-gave-up")) == 1
        assert r.standby_states() == []
    finally:
        r.stop()


def test_standbys_that_keep_dying_are_given_up(tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "import sys; sys.exit(3)"]
    r = _runner(_standby_spec(), tmp_path, _with_standby(tmp_path, crash))
    r.start()
    try:
        r.wait_ready(timeout_s=20)
        _wait(lambda: bool(_events(r.paths.root, "standby-gave-up")))
        assert len(_events(r.paths.root, "standby-died")) == 3
        time.sleep(0.3)
        assert len(_events(r.paths.root, "standby-started")) == 3
        # The replicas are untouched.
        assert all(s.status == "running" for s in r.states().values())
    finally:
        r.stop()


def _active_spec(**repl: Any) -> Spec:
    return parse_spec(
        {
            "name": "fake",
            "source": {"topic": "in"},
            "sink": {"topic": "out"},
            "replication": {"mode": "active", "replicas": 2, **repl},
        }
    )


def _replica_config(run: Path, i: int) -> dict[str, Any]:
    return dict(json.loads((run / "replicas" / f"replica-{i}.json").read_text()))


def _restart(r: ReplicaRunner, i: int, attempt: int) -> dict[str, Any]:
    """Kill replica ``i`` and wait for its ``attempt``: its last ``replica-restarted``."""
    r.kill(i)
    _wait(lambda: r.states()[i].app_id == f"app-fake-{attempt}")
    return [e for e in _events(r.paths.root, "replica-restarted") if e["replica"] == i][-1]


def test_a_stateless_active_replica_resumes_from_the_output_frontier(tmp_path: Path) -> None:
    """Restarted once without a frontier (its checkpoint, and why), then with one: a fresh
    checkpoint whose first query starts at the frontier; a third restart without a newer
    frontier than its partitions keeps that checkpoint's lineage."""
    start = json.dumps({"in": {"0": 10, "1": 20}})
    r = _runner(_active_spec(), tmp_path, _fake(tmp_path), mode_options={STARTING_OFFSETS: start})
    run = r.paths.root

    with r:
        r.wait_ready(timeout_s=20)
        first = _restart(r, 1, 1)
        assert first["resume"] == "checkpoint" and "no output frontier" in first["why"]
        assert _replica_config(run, 1)["checkpoint_dir"].endswith("checkpoints/replica-1")
        write_frontier(frontier_path_in(run), {0: 15, 1: 18}, time.time())
        second = _restart(r, 1, 2)
        assert second["resume"] == "output" and second["offsets"] == {"0": 15, "1": 20}
        cfg = _replica_config(run, 1)
        assert cfg["checkpoint_dir"].endswith("checkpoints/replica-1.2")
        assert json.loads(cfg["mode_options"][STARTING_OFFSETS]) == {"in": {"0": 15, "1": 20}}
        # Replica 0 never restarted: its own checkpoint and deploy's offsets.
        assert _replica_config(run, 0)["checkpoint_dir"].endswith("checkpoints/replica-0")
        assert _replica_config(run, 0)["mode_options"][STARTING_OFFSETS] == start
        frontier_path_in(run).unlink()
        third = _restart(r, 1, 3)
        assert third["resume"] == "checkpoint"
        assert _replica_config(run, 1)["checkpoint_dir"].endswith("checkpoints/replica-1.2")


def test_resume_checkpoint_never_skips_input(tmp_path: Path) -> None:
    start = json.dumps({"in": {"0": 10}})
    r = _runner(
        _active_spec(resume="checkpoint"),
        tmp_path,
        _fake(tmp_path),
        mode_options={STARTING_OFFSETS: start},
    )
    write_frontier(frontier_path_in(r.paths.root), {0: 15}, time.time())
    with r:
        r.wait_ready(timeout_s=20)
        r.kill(0)
        _wait(lambda: r.states()[0].app_id == "app-fake-1")
        (restarted,) = _events(r.paths.root, "replica-restarted")
        assert restarted["resume"] == "checkpoint" and "why" not in restarted


# A standby still starting when the run stops: the real driver acts on SIGTERM only once its
# Spark session is up, not once warmed up too (waiting for that held the standby integration
# tests' stop 28 s).
STARTING_STANDBY = r"""
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)", "CoarseGrainedExecutorBackend"]
)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(child.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1] + ".child")
time.sleep(600)
"""


def test_stop_does_not_wait_for_a_standby_that_is_still_starting(tmp_path: Path) -> None:
    """A standby holds no replica: the run's stop gives it STANDBY_STOP_GRACE_S, not the
    replicas' stop_timeout_s, then kills its tree."""
    script = tmp_path / "starting_standby.py"
    script.write_text(STARTING_STANDBY)
    command = _with_standby(tmp_path, [sys.executable, str(script), str(tmp_path / "sb")])
    r = _runner(_standby_spec(), tmp_path, command, stop_timeout_s=30.0)
    r.start()
    r.wait_ready(timeout_s=20)
    (sb,) = r.standby_states()
    _wait(lambda: (tmp_path / "sb.child").exists())
    child = int((tmp_path / "sb.child").read_text())
    rehearsal = r.paths.root / "checkpoints" / "standby-0" / "rehearsal"
    rehearsal.mkdir(parents=True)  # what a real standby's rehearsal leaves
    t0 = time.monotonic()
    r.stop()
    took = time.monotonic() - t0
    assert not rehearsal.parent.exists()
    # 36 s before the standby had its own grace (30 s of it the replicas' timeout); now 8 s here:
    # its grace, then each fake replica's tree (its child outlives it by tree_grace_s).
    assert took < STANDBY_STOP_GRACE_S + 12 < 30, took
    assert not psutil.pid_exists(sb.pid) or psutil.Process(sb.pid).status() == psutil.STATUS_ZOMBIE
    assert not psutil.pid_exists(child)
    (stopped,) = _events(r.paths.root, "standby-stopped")
    assert stopped["standby"] == 0 and stopped["pid"] == sb.pid, stopped
    assert stopped["ready"] is False and stopped["graceful"] is False, stopped
    assert stopped["exit_code"] == -9, stopped
    assert STANDBY_STOP_GRACE_S <= stopped["after_s"] < STANDBY_STOP_GRACE_S + 5, stopped
    # The replicas themselves exited on SIGTERM, as before.
    assert [e["graceful"] for e in _events(r.paths.root, "replica-stopped")] == [True, True]


ENV_DRIVER = r"""
import json, os, sys, time
cfg = json.load(open(sys.argv[1]))
names = ("SPARK_HOME", "SPARK_WORKER_DIR", "SPARK_LOCAL_DIRS")
with open(cfg["app_id_file"] + ".env", "w") as f:
    json.dump({n: os.environ.get(n) for n in names}, f)
with open(cfg["app_id_file"], "w") as f:
    json.dump({"app_id": "app-fake-%d" % cfg["attempt"], "pid": 0}, f)
while True:
    time.sleep(0.1)
"""


def test_each_driver_gets_a_spark_home_of_its_own_in_the_runs(tmp_path: Path) -> None:
    """Two local-cluster drivers started in one second get one application id; in one home
    their executors would share ``work/<app>/0/`` (one log replacing the other's)."""
    script = tmp_path / "env_driver.py"
    script.write_text(ENV_DRIVER)
    r = _runner(_spec(replicas=2), tmp_path, lambda i, c: [sys.executable, str(script), str(c)])
    with r:
        r.wait_ready(timeout_s=20)
        for i in (0, 1):
            path = r._replicas[i].app_id_path.with_name(r._replicas[i].app_id_path.name + ".env")
            _wait(path.exists)
            env = json.loads(path.read_text())
            home = tmp_path / "sh" / f"replica-{i}"
            assert env == {
                "SPARK_HOME": str(home),
                "SPARK_WORKER_DIR": str(home / "work"),
                "SPARK_LOCAL_DIRS": str(home / "tmp"),
            }, env
            assert (home / "jars").is_symlink() and (home / "work").is_dir()


def test_an_active_replica_resumes_from_the_freshest_committed_checkpoint(tmp_path: Path) -> None:
    """``resume = "peer"``: a restarted replica gets a copy of a peer's checkpoint when the
    peer's last committed batch read further than its own, and keeps its own otherwise."""
    r = _runner(_active_spec(resume="peer"), tmp_path, _fake(tmp_path))
    run = r.paths.root

    with r:
        r.wait_ready(timeout_s=20)
        _committed(run, 0, 3, {"0": 40, "1": 30})
        _committed(run, 1, 2, {"0": 35, "1": 25})
        # Replica 1's own checkpoint is behind replica 0's: a copy of replica 0's.
        first = _restart(r, 1, 1)
        assert first["resume"] == "peer" and first["peer"] == 0 and first["batch"] == 3, first
        assert first["offsets"] == {"0": 40, "1": 30} and first["ahead"] == 10, first
        copy = run / "checkpoints" / "replica-1.1"
        assert _replica_config(run, 1)["checkpoint_dir"] == str(copy)
        assert sorted(p.name for p in (copy / "offsets").iterdir()) == ["3"]
        assert first["own_batch"] == 2, first
        assert json.loads((copy / "metadata").read_text()) == {"id": "query-1"}
        # Replica 0 is killed while its own checkpoint is the freshest: it keeps it.
        second = _restart(r, 0, 1)
        assert second["resume"] == "checkpoint" and "peer" not in second, second
        assert _replica_config(run, 0)["checkpoint_dir"].endswith("checkpoints/replica-0")
        # Replica 1's checkpoint is now its copy: a newer own commit there wins again.
        (copy / "offsets" / "4").write_text(f"v1\n{{}}\n{json.dumps({'in': {'0': 50, '1': 30}})}")
        (copy / "commits" / "4").write_text("v2\n{}")
        third = _restart(r, 1, 2)
        assert third["resume"] == "checkpoint", third
        assert _replica_config(run, 1)["checkpoint_dir"] == str(copy)


def _committed(run: Path, replica: int, batch: int, ends: dict[str, int]) -> None:
    """A fake checkpoint of ``replica`` whose last committed batch ended at ``ends``."""
    loc = run / "checkpoints" / f"replica-{replica}"
    for log in ("offsets", "commits"):
        (loc / log).mkdir(parents=True, exist_ok=True)
    (loc / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps({'in': ends})}")
    (loc / "commits" / str(batch)).write_text("v2\n{}")
    (loc / "metadata").write_text(json.dumps({"id": f"query-{replica}"}))


def _kill_replica_1_behind_replica_0(r: ReplicaRunner) -> dict[str, Any]:
    """Replica 0's checkpoint read to 50, replica 1's to 10; kill replica 1 once: its
    ``replica-restarted``."""
    _committed(r.paths.root, 0, 0, {"0": 50})
    _committed(r.paths.root, 1, 0, {"0": 10})
    with r:
        r.wait_ready(timeout_s=20)
        r.kill(1)
        _wait(lambda: r.states()[1].app_id == "app-fake-1")
        (restarted,) = _events(r.paths.root, "replica-restarted")
    return dict(restarted)


def test_a_copy_that_fails_leaves_the_replica_its_own_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> int:
        raise checkpoints.IncompleteCopy("state/0/1: no state version 4 (u9)")

    monkeypatch.setattr(checkpoints, "copy_committed", broken)
    r = _runner(_active_spec(resume="peer"), tmp_path, _fake(tmp_path))
    run = r.paths.root
    restarted = _kill_replica_1_behind_replica_0(r)
    assert restarted["resume"] == "checkpoint", restarted
    assert "cannot copy" in restarted["why"] and "no state version 4" in restarted["why"]
    cfg = json.loads((run / "replicas" / "replica-1.json").read_text())
    assert cfg["checkpoint_dir"].endswith("checkpoints/replica-1")
    assert not (run / "checkpoints" / "replica-1.1").exists()


def test_resume_checkpoint_keeps_its_own_checkpoint_though_a_peer_is_fresher(
    tmp_path: Path,
) -> None:
    r = _runner(_active_spec(resume="checkpoint"), tmp_path, _fake(tmp_path))
    run = r.paths.root
    restarted = _kill_replica_1_behind_replica_0(r)
    assert restarted["resume"] == "checkpoint", restarted
    assert not (run / "checkpoints" / "replica-1.1").exists()
