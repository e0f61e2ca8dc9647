"""``[placement] cpus_per_replica``: the spec, the drivers' share cgroups (on a fake cgroup
filesystem), the wrapper that starts a driver inside its group, the state record, the slow
fault nested inside a share, the summary, and ``arfl chaos recover`` after a ``kill -9``."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.checks import placement_warning
from arfl.configs.load import parse_spec
from arfl.errors import SpecError
from arfl.faults.runner import recover, runs_with_pending
from arfl.orchestrate.summary import cgroup_placement, placement_summary
from arfl.report.sections import Resources
from arfl.run.rundir import read_jsonl
from arfl.run.state import RunState, SharesRecord, load_state
from arfl.targets import cgroups, shares
from arfl.targets.process import ProcessReach
from arfl.targets.shares import LEAF, CpuShares, wrap_command

MINIMAL: dict[str, Any] = {
    "name": "t",
    "source": {"topic": "in"},
    "sink": {"topic": "out"},
}


def _spec(**sections: Any) -> dict[str, Any]:
    return {**MINIMAL, **sections}


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as ei:
        parse_spec(raw, "t.toml")
    return ei.value.problems


# --- the spec ----------------------------------------------------------------------


def test_placement_is_unset_by_default_and_takes_a_positive_number_of_cores() -> None:
    assert parse_spec(_spec()).placement.cpus_per_replica is None
    spec = parse_spec(_spec(placement={"cpus_per_replica": 0.5}))
    assert spec.placement.cpus_per_replica == 0.5
    for bad in (0, -1, "two"):
        problems = _problems(_spec(placement={"cpus_per_replica": bad}))
        assert any("placement.cpus_per_replica" in p for p in problems), problems
    assert any("placement.cores" in p for p in _problems(_spec(placement={"cores": 1})))


def test_placement_is_taken_on_docker_and_refused_with_a_cluster_master() -> None:
    spec = parse_spec(_spec(placement={"cpus_per_replica": 1}, spark={"target": "docker"}))
    assert spec.placement.cpus_per_replica == 1.0
    cluster = _problems(
        _spec(placement={"cpus_per_replica": 1}, spark={"master": "spark://10.0.0.1:7077"})
    )
    assert any("placement.cpus_per_replica" in p and "local master" in p for p in cluster)


def test_validate_warns_when_the_quotas_overcommit_the_host() -> None:
    repl = {"mode": "active", "replicas": 2, "standby": 1}
    spec = parse_spec(_spec(replication=repl, placement={"cpus_per_replica": 1.0}))
    warning = placement_warning(spec, cores=2)
    assert warning is not None
    assert "1 x (2 replicas + 1 standby) = 3 cores" in warning and "this host's 2" in warning
    assert placement_warning(spec, cores=4) is None
    fits = parse_spec(_spec(replication=repl, placement={"cpus_per_replica": 0.5}))
    assert placement_warning(fits, cores=2) is None
    assert placement_warning(parse_spec(_spec(replication=repl)), cores=1) is None


# --- a fake cgroup filesystem ---------------------------------------------------------


class FakeCgroups:
    """A v1 host (cpu and cpuacct mounted apart, as here) under ``root``: directories hold
    plain files; a move takes the pid out of every other group; a group with members cannot
    be removed, one without loses its files (as the kernel's pseudo-files go with it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in ("cpu", "cpuacct"):
            (root / name).mkdir(parents=True)
            (root / name / "cgroup.procs").write_text("")
        (root / "cpu" / "cpu.cfs_quota_us").write_text("-1")
        (root / "cpu" / "cpu.cfs_period_us").write_text("100000")
        (root / "cpuacct" / "cpuacct.usage").write_text("0")

    def mount_of(self, group: Path) -> Path:
        rel = group.relative_to(self.root)
        return self.root / rel.parts[0]

    def move(self, group: Path, pid: int) -> bool:
        mount = self.mount_of(group)
        for procs in mount.rglob("cgroup.procs"):
            pids = [p for p in procs.read_text().split() if p != str(pid)]
            procs.write_text("".join(f"{p}\n" for p in pids))
        target = group / "cgroup.procs"
        before = target.read_text() if target.exists() else ""
        target.write_text(before + f"{pid}\n")
        return True

    def members(self, group: Path) -> list[int]:
        procs = group / "cgroup.procs"
        return [int(p) for p in procs.read_text().split()] if procs.exists() else []

    def where(self, mount: str, pid: int) -> str:
        for procs in (self.root / mount).rglob("cgroup.procs"):
            if str(pid) in procs.read_text().split():
                rel = procs.parent.relative_to(self.root / mount)
                return "/" + str(rel) if str(rel) != "." else "/"
        return "/"  # a process starts in the root group


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCgroups]:
    fs = FakeCgroups(tmp_path / "cgroup")
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", fs.root)
    monkeypatch.setattr(cgroups, "move", fs.move)
    monkeypatch.setattr(cgroups, "members", fs.members)
    real_rmdir = Path.rmdir

    def rmdir(self: Path) -> None:
        if fs.root not in self.parents:
            real_rmdir(self)
            return
        if any(p.is_dir() for p in self.iterdir()) or fs.members(self):
            raise OSError(errno.EBUSY, "busy", str(self))
        for f in self.iterdir():
            f.unlink()
        real_rmdir(self)

    monkeypatch.setattr(Path, "rmdir", rmdir)
    monkeypatch.setattr(
        cgroups.CpuHierarchy, "cgroup_of", lambda self, pid: fs.where(self.mount.name, pid)
    )
    yield fs


def test_each_driver_gets_a_quota_group_with_a_leaf_in_both_hierarchies(
    fake: FakeCgroups,
) -> None:
    s = CpuShares.plan("run-a", 0.5)
    assert s.hierarchy == cgroups.CpuHierarchy(1, fake.root / "cpu")
    assert s.accounting == shares.Accounting(1, fake.root / "cpuacct")
    leaves = s.ensure("replica-0")
    group = fake.root / "cpu" / "arfl" / "run-a" / "replica-0"
    assert leaves == [group / LEAF, fake.root / "cpuacct" / "arfl" / "run-a" / "replica-0" / LEAF]
    # Per 10-ms period (cgroups.SHARE_PERIOD_US): a burst waits at most the period out.
    assert (group / "cpu.cfs_quota_us").read_text() == "5000"
    assert (group / "cpu.cfs_period_us").read_text() == "10000"
    assert not (group / LEAF / "cpu.cfs_quota_us").exists()  # the leaf has no quota of its own
    assert shares.limit_of(s.hierarchy, "/arfl/run-a/replica-0/run") == 0.5
    assert all(p.is_dir() for p in leaves)


def test_the_wrapper_enters_every_group_before_it_becomes_the_command(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    argv = wrap_command([a, b], [sys.executable, "-c", "import os; print(os.getpid())"])
    assert argv[:2] == ["/bin/sh", "-c"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    pid = done.stdout.strip()
    # The same process wrote itself into each group, then exec'd: every child is born inside.
    assert (a / "cgroup.procs").read_text().strip() == pid
    assert (b / "cgroup.procs").read_text().strip() == pid
    # A group it cannot enter: the command never runs.
    missing = wrap_command([tmp_path / "gone"], ["/bin/sh", "-c", "echo ran"])
    failed = subprocess.run(missing, capture_output=True, text=True)
    assert failed.returncode == 126 and "ran" not in failed.stdout


def test_the_state_records_the_groups_and_reads_back(fake: FakeCgroups, tmp_path: Path) -> None:
    s = CpuShares.plan("run-a", 1.5)
    rec = s.record()
    assert rec == SharesRecord(
        version=1,
        mount=str(fake.root / "cpu"),
        root=str(fake.root / "cpu" / "arfl" / "run-a"),
        cores=1.5,
        fallback="/",
        acct_root=str(fake.root / "cpuacct" / "arfl" / "run-a"),
        acct_fallback="/",
    )
    RunState(run="run-a", shares=rec).write(tmp_path)
    assert load_state(tmp_path).shares == rec
    assert load_state(tmp_path).model_copy(update={"shares": None}).shares is None
    raw = json.loads((tmp_path / "state.json").read_text())
    raw["shares"] = None
    assert RunState.model_validate(raw).shares is None


def test_a_standby_taking_over_moves_its_tree_into_the_replicas_group(
    fake: FakeCgroups,
) -> None:
    s = CpuShares.plan("run-a", 0.5)
    for pid in (101, 102):
        fake.move(s.ensure("standby-0")[0], pid)
        fake.move(s.ensure("standby-0")[1], pid)
    fake.move(s.ensure("replica-0")[0], 201)
    (fake.root / "cpuacct" / "arfl" / "run-a" / "standby-0" / "cpuacct.usage").write_text(
        str(3 * 10**9)
    )
    assert s.absorb("standby-0", "replica-0") == [101, 102]
    assert fake.members(s.group("replica-0") / LEAF) == [201, 101, 102]
    assert fake.where("cpuacct", 101) == "/arfl/run-a/replica-0/run"
    assert not s.group("standby-0").exists()
    assert not (fake.root / "cpuacct" / "arfl" / "run-a" / "standby-0").exists()
    usage = s.usage()
    assert usage["standby-0"][0] == 3.0  # its use up to the take-over, kept
    assert set(usage) == {"replica-0", "standby-0"}


def test_a_dead_standbys_group_goes_with_it_and_its_usage_stays(fake: FakeCgroups) -> None:
    s = CpuShares.plan("run-a", 0.5)
    leaves = s.ensure("standby-1")
    fake.move(leaves[0], 301)  # a leftover of its tree, not yet reaped
    (fake.root / "cpuacct" / "arfl" / "run-a" / "standby-1" / "cpuacct.usage").write_text(
        str(2 * 10**9)
    )
    s.ensure("replica-0")
    s.retire("standby-1")
    assert not s.group("standby-1").exists()
    assert not (fake.root / "cpuacct" / "arfl" / "run-a" / "standby-1").exists()
    assert fake.where("cpu", 301) == "/"  # moved to arfl's own group (here the root)
    assert s.group("replica-0").is_dir()
    assert s.usage()["standby-1"][0] == 2.0
    s.retire("standby-1")  # once gone, nothing to do


def test_slow_nests_inside_the_share_and_the_lower_quota_binds(
    fake: FakeCgroups, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = CpuShares.plan("run-a", 0.5)
    leaf = s.ensure("replica-0")[0]
    fake.move(leaf, os.getpid())

    class Local:
        run = "run-a"

        def replica_pids(self, replica: int) -> list[int]:
            return [os.getpid()]

    reach = ProcessReach(Local(), 0)  # type: ignore[arg-type]
    record, details = reach.cpu_plan(80.0)
    slow = s.group("replica-0") / "slow"
    assert record["group"] == str(slow)
    assert record["cpu_percent"] == 50.0 and details["cpu_percent_applied"] == 50.0
    record, details = reach.cpu_plan(20.0)
    assert record["cpu_percent"] == 20.0 and "cpu_percent_applied" not in details
    ProcessReach.limit_cpu(record)
    assert (slow / "cpu.cfs_quota_us").read_text() == "20000"
    assert fake.where("cpu", os.getpid()) == "/arfl/run-a/replica-0/slow"
    ProcessReach.unlimit_cpu(record)
    assert fake.where("cpu", os.getpid()) == "/arfl/run-a/replica-0/run"
    assert not slow.exists() and s.group("replica-0").is_dir()  # the share stays


def test_the_summary_and_the_report_say_the_share_and_its_use(fake: FakeCgroups) -> None:
    s = CpuShares.plan("run-a", 0.5)
    summary = cgroup_placement(s, {"replica-0": (12.0, 60.0), "replica-1": (None, 60.0)})
    assert summary["cpus_per_replica"] == 0.5 and summary["cgroup_version"] == 1
    assert summary["quota"] == "cgroup" and summary["root"] == str(s.root)
    assert summary["groups"]["replica-0"] == {
        "share_cores": 0.5,
        "cpu_s": 12.0,
        "wall_s": 60.0,
        "used_cores": 0.2,
        "used_fraction": 0.4,
    }
    assert summary["groups"]["replica-1"]["used_cores"] is None
    line = Resources.from_summary({"placement": summary}).placement_line()
    assert line == (
        "CPU share 0.5 core(s) per replica (cgroup quota); used: replica-0 0.20 (40%), replica-1 ?"
    )
    assert Resources.from_summary({}).placement_line() is None


def test_a_container_share_is_summarised_as_the_containers_quota() -> None:
    summary = placement_summary(0.9, {"replica-0": (27.0, 60.0)}, quota="container")
    assert summary["quota"] == "container" and summary["root"] is None
    assert summary["groups"]["replica-0"]["used_fraction"] == 0.5
    line = Resources.from_summary({"placement": summary}).placement_line()
    assert line == "CPU share 0.9 core(s) per replica (container quota); used: replica-0 0.45 (50%)"


def test_usage_is_read_from_the_accounting_hierarchy(fake: FakeCgroups) -> None:
    s = CpuShares.plan("run-a", 0.5)
    s.ensure("replica-0")
    acct = fake.root / "cpuacct" / "arfl" / "run-a" / "replica-0" / "cpuacct.usage"
    acct.write_text("2500000000\n")
    used, wall = s.usage()["replica-0"]
    assert used == 2.5 and wall >= 0
    v2 = fake.root / "v2"
    v2.mkdir()
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    assert shares.usage_s(shares.Accounting(2, v2), v2) == 1.5


# --- recover after a kill -9 ------------------------------------------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_recover_moves_what_is_left_back_and_removes_every_group(
    fake: FakeCgroups, tmp_path: Path
) -> None:
    s = CpuShares.plan("run-a", 0.5)
    for name, pid in (("replica-0", 301), ("replica-1", 302), ("standby-0", 303)):
        for leaf in s.ensure(name):
            fake.move(leaf, pid)
    cgroups.create(s.hierarchy, "run-a/replica-0/slow", 10.0)  # a slow fault's, left behind
    fake.move(s.group("replica-0") / "slow", 301)
    runs = tmp_path / "runs"
    run_dir = runs / "run-a"
    run_dir.mkdir(parents=True)
    RunState(run="run-a", pid=_dead_pid(), pid_create_time=1.0, shares=s.record()).write(run_dir)
    assert runs_with_pending(runs) == [run_dir]
    report = recover(run_dir)
    assert report.removed_cgroups == [str(s.root), str(fake.root / "cpuacct/arfl/run-a")]
    assert not (fake.root / "cpu" / "arfl").exists()
    assert not (fake.root / "cpuacct" / "arfl").exists()
    for pid in (301, 302, 303):  # back where arfl ran (its own group, recorded: the root)
        for mount in ("cpu", "cpuacct"):
            assert pid in fake.members(fake.root / mount), (mount, pid)
    (ev,) = [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "cpu-shares-removed"]
    assert ev["recovered"] is True and ev["root"] == str(s.root)
    assert runs_with_pending(runs) == []
    assert recover(run_dir).removed_cgroups == []  # nothing left: a second recover is a no-op


def test_recover_leaves_a_live_deployments_groups_alone(fake: FakeCgroups, tmp_path: Path) -> None:
    s = CpuShares.plan("run-b", 0.5)
    s.ensure("replica-0")
    run_dir = tmp_path / "run-b"
    run_dir.mkdir()
    from arfl.processes import create_time

    me = os.getpid()
    RunState(run="run-b", pid=me, pid_create_time=create_time(me), shares=s.record()).write(run_dir)
    assert recover(run_dir).removed_cgroups == []
    assert s.group("replica-0").is_dir()


# --- real cgroups: a standby's take-over (root, and a cpu controller) -------------------

FAKE_DRIVER = r"""
import json, os, signal, subprocess, sys, time
cfg = json.load(open(sys.argv[1]))
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if cfg.get("standby"):
    with open(cfg["app_id_file"], "w") as f:
        json.dump({"app_id": "app-standby", "ready": time.time()}, f)
    while not os.path.exists(cfg["assignment_file"]):
        time.sleep(0.02)
    cfg = json.load(open(cfg["assignment_file"]))
with open(cfg["app_id_file"], "w") as f:
    json.dump({"app_id": "app-fake-%d" % cfg["attempt"], "pid": os.getpid()}, f)
while True:
    time.sleep(0.1)
"""


def _wait(cond: Any, timeout: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.mark.needs_root(reason="cgroups need root")
def test_drivers_start_in_their_share_and_a_standby_moves_into_the_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_hierarchy: cgroups.CpuHierarchy
) -> None:
    from arfl.orchestrate.drivers import DriverLaunch
    from arfl.orchestrate.restarts import RestartPolicy
    from arfl.orchestrate.supervisor import ReplicaRunner
    from arfl.processes import tree_pids
    from arfl.run.rundir import new_run_dir

    monkeypatch.setattr("arfl.orchestrate.standbys.STANDBY_RESPAWN_DELAY_S", 60.0)
    spec = parse_spec(
        _spec(replication={"mode": "active", "replicas": 2, "standby": 1}),
    )
    script = tmp_path / "fake_driver.py"
    script.write_text(FAKE_DRIVER)
    run = new_run_dir(tmp_path / "runs", spec.name)
    s = CpuShares.plan(f"unit-{os.getpid()}-{run.name}", 0.5)
    r = ReplicaRunner(
        spec,
        run,
        DriverLaunch(
            "127.0.0.1:1",
            spark_home=tmp_path / "sh",
            command=lambda replica, config: [sys.executable, str(script), str(config)],
            shares=s,
        ),
        policy=RestartPolicy(restart=True, delay_s=0.1),
        poll_interval_s=0.05,
        tree_grace_s=0.5,
    )

    def groups(pid: int) -> set[str]:
        return {cpu_hierarchy.cgroup_of(p) for p in tree_pids(pid)}

    def leaf(name: str) -> str:
        return f"/arfl/{s.run}/{name}/{LEAF}"

    r.start()
    try:
        r.wait_ready(timeout_s=20)
        _wait(lambda: [sb.ready for sb in r.standby_states()] == [True])
        (sb,) = r.standby_states()
        _wait(lambda: len(tree_pids(sb.pid)) == 2)
        for i in (0, 1):
            pid = r.states()[i].pid
            assert pid is not None
            _wait(lambda pid=pid: len(tree_pids(pid)) == 2)
            assert groups(pid) == {leaf(f"replica-{i}")}
        assert groups(sb.pid) == {leaf("standby-0")}
        assert shares.limit_of(cpu_hierarchy, leaf("standby-0")) == 0.5
        r.kill(1)
        _wait(lambda: r.states()[1].pid == sb.pid and r.states()[1].status == "running")
        # The standby's whole tree (it and its child) is now replica 1's; its group is gone.
        assert groups(sb.pid) == {leaf("replica-1")}
        assert not s.group("standby-0").exists()
    finally:
        r.stop()
        used = s.usage()
        s.remove()
    assert set(used) == {"replica-0", "replica-1", "standby-0"}
    assert not s.root.exists()
