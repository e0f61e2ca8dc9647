"""Process faults against a real Spark application (local-cluster: real executor JVMs).

One app is shared by the module; kill-replica runs last because it ends the app.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arfl.faults.base import FaultParams
from arfl.faults.runner import ChaosRunner
from arfl.processes import tree_pids
from arfl.run.pending import PendingFaults
from arfl.run.rundir import read_jsonl
from arfl.targets.cgroups import CpuHierarchy
from arfl.targets.local import LocalTarget, restart_suppressed
from arfl.testing.faults import SparkApp, start_busy_loop, start_spark_app, stop_tree, write_state

RUN = "chaos-spark"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkApp]:
    spark = start_spark_app(tmp_path_factory.mktemp("spark"))
    try:
        yield spark
    finally:
        spark.stop()


@pytest.fixture
def run_dir(tmp_path: Path, app: SparkApp) -> Path:
    return write_state(
        tmp_path / RUN, RUN, {0: {"driver_pid": app.driver_pid, "app_id": app.app_id}}
    )


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _events(run_dir: Path, name: str) -> list[dict[str, object]]:
    return [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == name]


def test_kill_executor_is_replaced_by_a_new_jvm(app: SparkApp, run_dir: Path) -> None:
    before = app.executors()
    assert before, "the app has an executor JVM"
    old_id, old_pid = min(before.items())
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    out = runner.run_fault(FaultParams("kill-executor", replica=0))
    assert out.details["pid"] == old_pid and out.details["executor"] == old_id
    assert not _alive(old_pid)
    assert out.details["replacement_s"] is not None, out.details
    new_pid = out.details["replacement_pid"]
    assert new_pid != old_pid and _alive(int(new_pid))
    assert app.executors() == {out.details["replacement_executor"]: new_pid}
    print(f"executor replacement after SIGKILL: {out.details['replacement_s']} s")
    inj, rev = _events(run_dir, "fault-injected"), _events(run_dir, "fault-reverted")
    assert [e["kind"] for e in inj] == ["kill-executor"] and len(rev) == 1
    assert rev[0]["ended"] >= rev[0]["started"] >= inj[0]["ended"]  # type: ignore[operator]
    assert not PendingFaults(run_dir).path.exists()


def test_pause_stops_every_process_then_resumes(app: SparkApp, run_dir: Path) -> None:
    pids = tree_pids(app.driver_pid)
    assert len(pids) >= 3  # python driver, driver JVM, executor JVM
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    during: dict[int, str] = {}
    pending_during: list[dict[str, object]] = []

    def look(_: object) -> None:
        pending_during.extend(PendingFaults(run_dir).entries())
        for p in pids:
            during[p] = psutil.Process(p).status()

    out = runner.run_fault(FaultParams("pause", replica=0, duration_s=2.0), on_injected=look)
    assert set(during.values()) == {psutil.STATUS_STOPPED}, during
    assert [e["kind"] for e in pending_during] == ["pause"]
    for p in pids:
        assert psutil.Process(p).status() != psutil.STATUS_STOPPED
    assert not PendingFaults(run_dir).path.exists()
    print(
        f"pause of {len(pids)} processes: stop {out.details['stop_ms']} ms, "
        f"cont {out.details['cont_ms']} ms"
    )
    assert out.details["stop_ms"] is not None and out.details["cont_ms"] is not None
    # the app keeps running afterwards: its executor is still the same live JVM
    assert all(_alive(p) for p in app.executors().values())


def test_pause_reverted_early_by_stop(app: SparkApp, run_dir: Path) -> None:
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    t = threading.Thread(
        target=runner.run_fault, args=(FaultParams("pause", replica=0, duration_s=60.0),)
    )
    t0 = time.monotonic()
    t.start()
    while not _events(run_dir, "fault-injected"):
        time.sleep(0.05)
    runner.stop()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 20
    assert all(
        psutil.Process(p).status() != psutil.STATUS_STOPPED for p in tree_pids(app.driver_pid)
    )


def _cpu_share(pid: int, seconds: float) -> float:
    proc = psutil.Process(pid)
    c0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
    time.sleep(seconds)
    return (sum(proc.cpu_times()[:2]) - c0) / (time.monotonic() - t0)


@pytest.mark.parametrize(("cpu", "cap"), [(None, 0.13), (25.0, 0.28)])
def test_slow_throttles_cpu_of_a_busy_process(
    tmp_path: Path, cpu: float | None, cap: float, cpu_hierarchy: CpuHierarchy
) -> None:
    proc, _ = start_busy_loop(tmp_path / "busy")
    control, _ = start_busy_loop(tmp_path / "control")  # same load, never throttled
    try:
        run_dir = write_state(tmp_path / "busy-run", "busy-run", {0: {"driver_pid": proc.pid}})
        free = _cpu_share(proc.pid, 1.5)
        original = cpu_hierarchy.cgroup_of(proc.pid)
        runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
        shares: list[float] = []
        cgroup_procs: list[str] = []
        stats: list[dict[str, int]] = []
        quotas: list[int] = []

        def measure(o: object) -> None:
            group = Path(runner.outcomes[0].details["cgroup"])
            cgroup_procs.append((group / "cgroup.procs").read_text())
            v2 = group / "cpu.max"
            quota = v2.read_text().split()[0] if v2.exists() else ""
            quotas.append(int(quota or (group / "cpu.cfs_quota_us").read_text()))
            c0 = sum(psutil.Process(control.pid).cpu_times()[:2])
            shares.append(_cpu_share(proc.pid, 2.0))
            shares.append((sum(psutil.Process(control.pid).cpu_times()[:2]) - c0) / 2.0)
            lines = (group / "cpu.stat").read_text().split("\n")
            stats.append({k: int(v) for k, v in (ln.split() for ln in lines if ln)})

        own = {} if cpu is None else {"cpu": cpu}  # None: the kind's default quota
        params = FaultParams.of("slow", replica=0, duration_s=0.5, **own)
        out = runner.run_fault(params, on_injected=measure)
        after = _cpu_share(proc.pid, 1.5)
        print(
            f"busy loop CPU share (1 = one core): free {free:.2f}, throttled {shares[0]:.2f} "
            f"(unthrottled control at the same time {shares[1]:.2f}), after {after:.2f}; "
            f"cgroup cpu.stat {stats[0]}"
        )
        assert str(proc.pid) in cgroup_procs[0].split()
        # the quota is a hard cap whatever the machine's load: 10 % (the default) or the cpu
        # asked for, plus scheduling slack
        assert shares[0] <= cap, shares
        assert quotas == [int(100_000 * (cpu or 10) / 100)], quotas
        assert stats[0]["nr_throttled"] > 0, stats  # the kernel actually enforced the quota
        # and lifted it: the process is back where it was, the group is gone
        assert cpu_hierarchy.cgroup_of(proc.pid) == original
        assert not Path(out.details["cgroup"]).exists()
        assert not PendingFaults(run_dir).path.exists()
    finally:
        for p in (proc, control):
            stop_tree(p.pid)
            p.wait(10)


def _groups(h: CpuHierarchy, pids: list[int]) -> dict[int, str]:
    """The cgroup of each pid that still exists: a process of the replica's tree (a Python
    worker, a launcher shell) may end while the fault runs, and its /proc entry with it."""
    out: dict[int, str] = {}
    for p in pids:
        try:
            out[p] = h.cgroup_of(p)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def test_slow_moves_a_spark_replica_and_back(
    app: SparkApp, run_dir: Path, cpu_hierarchy: CpuHierarchy
) -> None:
    h = cpu_hierarchy
    pids = tree_pids(app.driver_pid)
    before = _groups(h, pids)
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    seen: list[dict[int, str]] = []

    def look(_: object) -> None:
        seen.append(_groups(h, pids))

    out = runner.run_fault(FaultParams("slow", replica=0, duration_s=1.0), on_injected=look)
    # every process of the replica still there was in the fault's group, the driver included
    assert app.driver_pid in seen[0] and set(seen[0].values()) == {f"/arfl/{RUN}-r0"}, seen
    after = _groups(h, pids)
    assert after == {p: g for p, g in before.items() if p in after}
    assert not Path(out.details["cgroup"]).exists()
    assert not (h.mount / "arfl").exists()


def test_cli_list_shows_the_executor(
    app: SparkApp, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arfl.cli.main import main

    assert main(["chaos", "list", str(run_dir)]) == 0
    out = capsys.readouterr().out
    exe_id, pid = min(app.executors().items())
    assert f"{exe_id}:{pid}" in out and str(app.driver_pid) in out


def test_schedule_runs_a_spec_chaos_list_against_the_app(app: SparkApp, run_dir: Path) -> None:
    from arfl.configs.chaos import Chaos

    entries = [
        Chaos.model_validate(e)
        for e in (
            {"at": "1500ms", "fault": "kill-executor", "replica": 0},
            {"at": "200ms", "fault": "pause", "replica": 0, "duration": "1s"},
        )
    ]
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    runner.start_schedule([FaultParams.from_chaos(e) for e in entries])
    runner.wait(timeout_s=60)
    events = [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"].startswith("fault-")]
    assert [(e["event"], e["kind"]) for e in events] == [
        ("fault-injected", "pause"),
        ("fault-reverted", "pause"),
        ("fault-injected", "kill-executor"),
        ("fault-reverted", "kill-executor"),
    ]
    pause_in, pause_out, kill_in, _ = events
    assert 0.2 <= pause_in["at_s"] < 1.0 and 1.5 <= kill_in["at_s"] < 2.5
    assert 1.0 <= pause_out["ended"] - pause_in["ended"] < 2.0
    assert all(o.error is None for o in runner.outcomes)
    assert not PendingFaults(run_dir).path.exists()
    assert app.executors()  # replaced again


def test_kill_replica_without_restart_writes_marker_and_kills_driver(
    app: SparkApp, run_dir: Path
) -> None:
    executors = app.executors()
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    out = runner.run_fault(FaultParams.of("kill-replica", replica=0, restart=False))
    assert out.details["pid"] == app.driver_pid
    assert restart_suppressed(run_dir, 0)
    app.proc.wait(10)
    assert app.proc.returncode == -9
    # the application dies with its driver: the driver JVM sees stdin close, executors follow
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in executors.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in executors.values())
