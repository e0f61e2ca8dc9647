"""Registry, params, pending-revert file, state loader, runner ordering and always-revert logic
(with an in-memory fault kind; no processes touched)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest

from arfl.configs.chaos import Chaos
from arfl.errors import FaultError
from arfl.faults.base import FaultBase, FaultParams, make_fault
from arfl.faults.kinds.delay import DelayParams
from arfl.faults.kinds.kill_replica import KillReplicaParams
from arfl.faults.kinds.slow import SLOW_CPU_PERCENT, SlowParams
from arfl.faults.runner import ChaosRunner, recover, runs_with_pending, schedule_order
from arfl.processes import create_time
from arfl.registry import FAULTS, Entry, FaultInfo
from arfl.run.pending import PendingFaults, injector_alive
from arfl.run.rundir import read_jsonl
from arfl.run.state import (
    IsolationState,
    NamespaceState,
    RunState,
    StackRecord,
    load_state,
    parse_state,
    to_json,
)
from arfl.targets.base import Target
from arfl.targets.container import ContainerReach

CALLS: list[str] = []


@dataclass
class FakeTarget:
    """Just enough of a target for the runner."""

    run_dir: Path
    run: str = "fake"
    leader_index: int | None = 1

    def replicas(self) -> list[int]:
        return [0, 1]

    def driver_pid(self, replica: int) -> int:
        return 1

    def replica_pids(self, replica: int) -> list[int]:
        return [1]

    def executor_pids(self, replica: int) -> dict[str, int]:
        return {}

    def netns(self, replica: int) -> str | None:
        return None

    def container(self, replica: int) -> str | None:
        return None

    def docker(self) -> None:
        return None

    def isolation(self) -> IsolationState | None:
        return None

    def leader(self) -> int | None:
        return self.leader_index


@dataclass
class Recording(FaultBase):
    """Records its calls; ``fail_inject`` makes inject raise after half its work."""

    kind: ClassVar[str] = "test-fault"
    fail_inject: ClassVar[bool] = False
    seen_pending: list[int] = field(default_factory=list)

    def prepare(self, target: Target) -> dict[str, Any]:
        replica = self.replica_index(target)
        self.details = {"replica": replica}
        self.record = {"replica": replica, "marker": str(target.run_dir / f"undone-{replica}")}
        return self.record

    def inject(self, target: Target) -> None:
        self.seen_pending.append(len(PendingFaults(target.run_dir).entries()))
        CALLS.append(f"inject {self.params.replica} {self.params.at_s}")
        if self.fail_inject:
            raise FaultError("half-way")

    @classmethod
    def undo(cls, record: dict[str, Any]) -> None:
        CALLS.append(f"undo {record['replica']}")
        Path(record["marker"]).write_text("x")

    @classmethod
    def claims(cls, record: dict[str, Any]) -> frozenset[str]:
        return frozenset({f"thing:{record['replica']}"})


@pytest.fixture
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    FAULTS.names()  # discover the real kinds first
    monkeypatch.setitem(
        FAULTS._entries,
        "test-fault",
        Entry("test-fault", FaultInfo("t", takes_duration=True), Recording),
    )
    monkeypatch.setattr(Recording, "fail_inject", False)
    CALLS.clear()
    yield


def test_every_declared_kind_has_an_implementation() -> None:
    for kind in FAULTS.names():
        needed = {"delay": "50ms"} if kind == "delay" else {}
        replica = 0 if FAULTS.info(kind).on == "replica" else None
        fault = make_fault(FaultParams.of(kind, replica=replica, duration_s=1.0, **needed))
        assert type(fault).kind == kind
        assert fault.describe().startswith(kind)


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(FaultError, match=r"unknown fault 'kil-executor' \(known: delay, kill-"):
        make_fault(FaultParams("kil-executor"))


def test_a_kind_registered_twice_by_another_class_is_an_error() -> None:
    with pytest.raises(ValueError, match="fault 'pause' registered twice"):
        FAULTS.register("pause", FaultInfo("t", takes_duration=True))(Recording)


def test_params_from_a_spec_entry() -> None:
    entry = Chaos.model_validate(
        {"at": "1m", "fault": "partition", "replica": 1, "duration": "5s", "from": [0, 2]}
    )
    p = FaultParams.from_chaos(entry)
    assert (p.kind, p.replica, p.at_s, p.duration_s, p.peers()) == ("partition", 1, 60, 5, (0, 2))
    assert p.describe() == "partition replica 1 from 0,2 for 5s"
    d = FaultParams.from_chaos(
        Chaos.model_validate(
            {"at": "2s", "fault": "delay", "replica": 0, "duration": "1s", "delay": "50ms"}
        )
    )
    assert isinstance(d.options, DelayParams) and d.options.delay == pytest.approx(0.05)
    k = FaultParams.from_chaos(
        Chaos.model_validate({"at": "0s", "fault": "kill-replica", "replica": 0, "restart": False})
    )
    assert k.options == KillReplicaParams(restart=False) and "no restart" in k.describe()
    s = FaultParams.from_chaos(
        Chaos.model_validate(
            {"at": "2s", "fault": "slow", "replica": 0, "duration": "6s", "cpu": 2}
        )
    )
    assert s.options == SlowParams(cpu=2.0)
    assert s.describe() == "slow replica 0 to 2% of a CPU for 6s"


def test_slow_sets_the_quota_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container's quota is ``cpu`` % of the 100-ms period (10 % without ``cpu``), and a
    share outside 1-100 % is a clear FaultError before anything is touched (the kind's model
    refuses it: the same check as the spec's and the CLI's)."""
    from arfl.targets import docker as dk

    quotas: list[tuple[str, int, int]] = []
    monkeypatch.setattr(dk, "set_cpu_quota", lambda n, p, q: quotas.append((n, p, q)) or True)
    own_quota: list[tuple[int, int] | None] = [None]
    monkeypatch.setattr(dk, "cpu_quota", lambda n: own_quota[0])

    class OnDocker:
        run = "r"

        def replicas(self) -> list[int]:
            return [0, 1]

        def reach(self, replica: int) -> ContainerReach:
            return ContainerReach(self, replica, f"arfl-r-{replica}")  # type: ignore[arg-type]

    for cpu, quota in [(None, 10_000), (2.0, 2_000), (1.0, 1_000), (100.0, 100_000)]:
        own = {} if cpu is None else {"cpu": cpu}
        fault = make_fault(FaultParams.of("slow", replica=1, duration_s=1.0, **own))
        record = fault.prepare(OnDocker())  # type: ignore[arg-type]
        assert record["cpu_percent"] == (cpu or SLOW_CPU_PERCENT)
        fault.inject(OnDocker())  # type: ignore[arg-type]
        assert quotas[-1] == ("arfl-r-1", 100_000, quota)
        fault.revert(OnDocker())  # type: ignore[arg-type]
        assert quotas[-1] == ("arfl-r-1", 100_000, -1)  # no quota of its own: none again
    # A container on a [placement] share (0.5 cores per 10-ms period): the slow nests inside
    # it, per 100 ms; the revert restores the share's period and quota.
    own_quota[0] = (10_000, 5_000)
    for cpu, quota in [(20.0, 20_000), (80.0, 50_000)]:
        fault = make_fault(FaultParams.of("slow", replica=0, duration_s=1.0, cpu=cpu))
        fault.prepare(OnDocker())  # type: ignore[arg-type]
        fault.inject(OnDocker())  # type: ignore[arg-type]
        assert quotas[-1] == ("arfl-r-0", 100_000, quota)
        fault.revert(OnDocker())  # type: ignore[arg-type]
        assert quotas[-1] == ("arfl-r-0", 10_000, 5_000)
    for cpu in (0.5, 101.0):
        with pytest.raises(FaultError, match=r"slow: cpu: Input should be (greater|less) than"):
            FaultParams.of("slow", replica=1, duration_s=1.0, cpu=cpu)


def test_slow_plans_without_a_process_that_ended_since_the_listing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A replica's tree can hold a short-lived child: gone before its group is read, it is left
    out of the plan (CI saw the slow fault fail on its missing /proc/PID/cgroup)."""
    from arfl.targets import cgroups
    from arfl.targets.process import ProcessReach

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    me = os.getpid()
    monkeypatch.setattr(cgroups, "detect", lambda: cgroups.CpuHierarchy(1, tmp_path))

    class Local:
        run = "r"

        def replica_pids(self, replica: int) -> list[int]:
            return [me, gone.pid]

    record, details = ProcessReach(Local(), 0).cpu_plan(5.0)  # type: ignore[arg-type]
    assert record["pids"] == [me] and list(record["originals"]) == [str(me)]
    assert details["pids"] == [me]


def test_schedule_order_is_by_time_then_spec_order() -> None:
    ps = [FaultParams("pause", replica=i, at_s=t) for i, t in enumerate([5.0, 1.0, 5.0, 0.0])]
    assert [p.replica for p in schedule_order(ps)] == [3, 1, 0, 2]


def test_pending_file_add_remove_and_owner(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (tmp_path / "runs" / "r2").mkdir()
    pending = PendingFaults(run_dir)
    a = pending.add("pause", 0, {"pids": [[1, 2.0]]})
    b = pending.add("slow", 1, {"group": "/x"})
    data = json.loads(pending.path.read_text())
    assert [e["kind"] for e in data["faults"]] == ["pause", "slow"]
    assert all(injector_alive(e) for e in pending.entries())  # we are the owner
    pending.remove(a)
    assert [e["id"] for e in pending.entries()] == [b]
    assert runs_with_pending(tmp_path / "runs") == [run_dir]
    pending.remove(b)
    assert not pending.path.exists()  # no file once nothing is owed
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not injector_alive({"owner_pid": dead.pid, "owner_create_time": 0.0})


def test_revert_persisted_before_inject_and_done_even_when_inject_fails(
    fake_kind: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = ChaosRunner(FakeTarget(tmp_path))
    monkeypatch.setattr(Recording, "fail_inject", True)
    with pytest.raises(FaultError, match="half-way"):
        runner.run_fault(FaultParams("test-fault", replica=0, duration_s=10.0))
    assert CALLS == ["inject 0 0.0", "undo 0"]
    assert (tmp_path / "undone-0").exists()
    assert not PendingFaults(tmp_path).path.exists()
    events = [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")]
    assert events == ["fault-injected", "fault-reverted"]


def test_journal_has_wall_clock_windows(fake_kind: None, tmp_path: Path) -> None:
    runner = ChaosRunner(FakeTarget(tmp_path), start_time=time.time() - 3.0)
    out = runner.run_fault(FaultParams("test-fault", replica="leader", duration_s=0.2))
    assert out.replica == 1  # "leader" resolved through the target
    inj, rev = read_jsonl(tmp_path / "journal.jsonl")
    assert inj["kind"] == rev["kind"] == "test-fault" and inj["replica"] == 1
    assert 3.0 <= inj["at_s"] < 4.0 and inj["duration_s"] == 0.2
    assert 0.2 <= rev["duration_s"] < 1.0
    assert inj["started"] <= inj["ended"] <= rev["started"] <= rev["ended"]


def test_schedule_runs_at_times_and_stop_reverts_early(fake_kind: None, tmp_path: Path) -> None:
    runner = ChaosRunner(FakeTarget(tmp_path))
    entries = [
        FaultParams("test-fault", replica=0, at_s=0.3, duration_s=30.0),
        FaultParams("test-fault", replica=1, at_s=0.1, duration_s=30.0),
    ]
    t0 = time.monotonic()
    runner.start_schedule(entries)
    while len([c for c in CALLS if c.startswith("inject")]) < 2:
        assert time.monotonic() - t0 < 5
        time.sleep(0.01)
    assert CALLS == ["inject 1 0.1", "inject 0 0.3"]
    assert len(PendingFaults(tmp_path).entries()) == 2
    runner.stop()
    assert sorted(CALLS[2:]) == ["undo 0", "undo 1"]
    assert time.monotonic() - t0 < 5  # durations of 30 s were cut short
    assert not PendingFaults(tmp_path).path.exists()
    assert threading.active_count() >= 1


def test_a_fault_on_what_a_pending_fault_holds_is_refused(fake_kind: None, tmp_path: Path) -> None:
    runner = ChaosRunner(FakeTarget(tmp_path))
    runner.start_schedule([FaultParams("test-fault", replica=0, duration_s=30.0)])
    t0 = time.monotonic()
    while not CALLS:
        assert time.monotonic() - t0 < 5
        time.sleep(0.01)
    first = PendingFaults(tmp_path).entries()[0]["id"]
    with pytest.raises(FaultError) as ei:
        runner.run_fault(FaultParams("test-fault", replica=0, duration_s=0.1))
    why = str(ei.value)
    assert "refused, replica 0 is already under a test-fault that holds the same thing 0" in why
    assert f"pending fault {first}" in why and f"(pid {os.getpid()}) reverts it" in why
    assert CALLS == ["inject 0 0.0"]  # the refused fault injected and reverted nothing
    assert [e["id"] for e in PendingFaults(tmp_path).entries()] == [first]
    assert runner.outcomes[-1].error and "refused" in runner.outcomes[-1].error
    runner.run_fault(FaultParams("test-fault", replica=1, duration_s=0.05))  # another thing
    runner.stop()
    assert CALLS == ["inject 0 0.0", "inject 1 0.0", "undo 1", "undo 0"]
    # an injector killed mid-fault left it in place: the message says how to lift it
    pending = PendingFaults(tmp_path)
    pending.add("test-fault", 0, {"replica": 0, "marker": str(tmp_path / "m")})
    data = json.loads(pending.path.read_text())
    data["faults"][0]["owner_pid"] = 2**22 + 12345  # nobody
    pending.path.write_text(json.dumps(data))
    with pytest.raises(FaultError, match=f"is gone .* run 'arfl chaos recover {tmp_path}'"):
        ChaosRunner(FakeTarget(tmp_path)).run_fault(FaultParams("test-fault", replica=0))


def test_a_scheduled_fault_starting_as_another_ends_waits_for_its_revert(
    fake_kind: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_undo = Recording.undo.__func__  # type: ignore[attr-defined]

    def undo(cls: type[Recording], record: dict[str, Any]) -> None:
        time.sleep(0.3)  # a revert takes time (docker unpause, reconnect)
        slow_undo(cls, record)

    monkeypatch.setattr(Recording, "undo", classmethod(undo))
    runner = ChaosRunner(FakeTarget(tmp_path))
    runner.start_schedule(
        [
            FaultParams("test-fault", replica=0, at_s=0.0, duration_s=0.2),
            FaultParams("test-fault", replica=0, at_s=0.25, duration_s=0.1),  # back to back
        ]
    )
    time.sleep(0.1)
    runner.wait(timeout_s=10)
    assert CALLS == ["inject 0 0.0", "undo 0", "inject 0 0.25", "undo 0"]
    assert [o.error for o in runner.outcomes] == [None, None]
    events = [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")]
    assert "fault-failed" not in events


def test_claims_meet_where_one_revert_would_lift_another_fault() -> None:
    from arfl.faults.base import implementation

    def p(**record: Any) -> dict[str, Any]:  # a record of a replica's processes
        return {"via": "processes", **record}

    def c(**record: Any) -> dict[str, Any]:  # a record of a replica's container
        return {"via": "container", **record}

    part, pause = implementation("partition"), implementation("pause")
    slow, delay = implementation("slow"), implementation("delay")
    # "0 from 1" and "1 from 0" add the same two routes
    r01 = p(routes=[["ns0", "10.0.0.3"], ["ns1", "10.0.0.2"]])
    r10 = p(routes=[["ns1", "10.0.0.2"], ["ns0", "10.0.0.3"]])
    assert part.claims(r01) & part.claims(r10)
    assert not part.claims(p(links=["v0"])) & part.claims(r01)  # link down vs routes
    cut = c(disconnect={"network": "n", "container": "c0", "address": "a"})
    other = c(disconnect={"network": "n", "container": "c1", "address": "b"})
    assert part.claims(cut) & part.claims(dict(cut)) and not part.claims(cut) & part.claims(other)
    assert pause.claims(p(pids=[[5, 1.0]])) & pause.claims(p(pids=[[6, 2.0], [5, 1.0]]))
    assert pause.claims(c(container="c0")) & pause.claims(c(container="c0"))
    assert not pause.claims(c(container="c0")) & pause.claims(c(container="c1"))
    assert slow.claims(c(container="c0")) & slow.claims(c(container="c0"))
    assert slow.claims(p(group="/g/r0", pids=[7])) & slow.claims(p(group="/g/r0"))
    assert delay.claims(p(link="v0")) & delay.claims(p(link="v0"))
    # docker: a disconnect replaces the container's veth, and a delay's qdisc with it
    assert delay.claims(c(link="v0", container="c0")) & part.claims(cut)
    assert not delay.claims(p(link="v0")) & part.claims(p(links=["v0"]))  # netns: kept
    # By pid: a stopped process keeps it while the pause holds it, and a create time recorded
    # before a step of the wall clock differs from one recorded after (the same process).
    assert pause.claims(p(pids=[[5, 1.0]])) & pause.claims(p(pids=[[5, 2.0]]))
    # instantaneous kinds hold nothing; every lasting kind holds something
    docker = c(link="v", container="c", disconnect={"network": "n", "container": "c"})
    for kind in FAULTS.names():
        pids: list[Any] = [1] if kind == "slow" else [[1, 0]]  # cgroup members, or pid + start
        on_replica = FAULTS.info(kind).on == "replica"  # the merger runs on the host
        for record in (p(link="v", links=["v"], pids=pids), docker)[: 2 if on_replica else 1]:
            has = bool(implementation(kind).claims(record))
            assert has == FAULTS.info(kind).takes_duration, (kind, record)


def test_recover_undoes_only_orphans(fake_kind: None, tmp_path: Path) -> None:
    pending = PendingFaults(tmp_path)
    mine = pending.add("test-fault", 0, {"replica": 0, "marker": str(tmp_path / "m0")})
    orphan = pending.add("test-fault", 1, {"replica": 1, "marker": str(tmp_path / "m1")})
    data = json.loads(pending.path.read_text())
    data["faults"][1]["owner_pid"] = 2**22 + 12345  # nobody
    pending.path.write_text(json.dumps(data))
    report = recover(tmp_path)
    assert (tmp_path / "m1").exists() and not (tmp_path / "m0").exists()
    assert len(report.reverted) == 1 and len(report.skipped) == 1
    assert [e["id"] for e in pending.entries()] == [mine]
    recover(tmp_path, force=True)
    assert not pending.path.exists()
    assert orphan != mine


def test_state_tolerates_missing_optional_keys(tmp_path: Path) -> None:
    st = parse_state({"run": "r", "replicas": {"0": {"driver_pid": 5}}})
    assert st.replicas[0].driver_pid == 5 and st.replicas[0].app_id is None
    assert st.isolation is None and st.leader_path is None and st.spec_name == "r"
    iso = IsolationState("arfl-br0", "10.213.0.1/24", {0: NamespaceState("n0", "10.213.0.2")})
    st = parse_state({"run": "r", "isolation": to_json(iso)})
    assert st.isolation == iso


def test_state_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match="no run state"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text("{")
    with pytest.raises(FaultError, match="not valid JSON"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text('{"replicas": {}}')
    with pytest.raises(FaultError, match=r"state.json: malformed run state \(run: required\)"):
        load_state(tmp_path)


def test_needs_isolation() -> None:
    from arfl.targets.netns import needs_isolation

    assert needs_isolation(["pause", "delay"]) and needs_isolation(["partition"])
    assert not needs_isolation(["pause", "kill-executor", "slow", "kill-leader"])


# --- what a dead deployment left running (arfl.faults.leftovers via recover) ----------------

# A stand-in driver: leads its own session (as ReplicaRunner starts it), starts a child (its
# "JVM"), writes the child's pid, then sleeps. SIGTERM ends the driver but not the child,
# like a driver whose JVM outlives it for a moment.
LEFTOVER_DRIVER = r"""
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(0.1)
"""


@dataclass
class _Deployment:
    """Processes as a killed arfl leaves them: driver (+ child), merger, injector."""

    run_dir: Path
    driver: subprocess.Popen[bytes]
    driver_child: psutil.Process
    merger: subprocess.Popen[bytes]
    injector: subprocess.Popen[bytes]
    procs: list[psutil.Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        popens = (self.driver, self.merger, self.injector)
        self.procs = [self.driver_child, *(psutil.Process(p.pid) for p in popens)]

    def all(self) -> list[psutil.Process]:
        return list(self.procs)

    def write_state(self, owner: int, **extra: Any) -> None:
        def ct(p: subprocess.Popen[bytes]) -> float:
            return create_time(p.pid)

        state = {
            "run": self.run_dir.name,
            "pid": owner,
            "mode": "none",
            "replicas": {
                "0": {"driver_pid": self.driver.pid, "driver_create_time": ct(self.driver)}
            },
            "merger_pid": self.merger.pid,
            "merger_create_time": ct(self.merger),
            "injector_pid": self.injector.pid,
            "injector_create_time": ct(self.injector),
            **extra,
        }
        (self.run_dir / "state.json").write_text(json.dumps(state))

    def stop(self) -> None:
        for p in self.all():
            with contextlib.suppress(psutil.Error):
                p.kill()  # psutil refuses a pid that was reused meanwhile
        for popen in (self.driver, self.merger, self.injector):
            with contextlib.suppress(ChildProcessError):
                popen.wait()


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Deployment]:
    from arfl.faults import leftovers

    monkeypatch.setattr(leftovers, "TREE_GRACE_S", 0.5)  # the fake JVM never exits by itself
    run_dir = tmp_path / "runs" / "dead-run"
    run_dir.mkdir(parents=True)
    script = tmp_path / "driver.py"
    script.write_text(LEFTOVER_DRIVER)
    child_file = tmp_path / "child.pid"
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    driver = subprocess.Popen(
        [sys.executable, str(script), str(child_file)], start_new_session=True
    )
    merger = subprocess.Popen(sleep, start_new_session=True)
    injector = subprocess.Popen(sleep, start_new_session=True)
    deadline = time.monotonic() + 20
    while not child_file.exists() or not child_file.read_text():
        assert time.monotonic() < deadline, "the fake driver did not start its child"
        time.sleep(0.02)
    d = _Deployment(run_dir, driver, psutil.Process(int(child_file.read_text())), merger, injector)
    try:
        yield d
    finally:
        d.stop()


def _dead_owner() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _running(procs: list[psutil.Process]) -> list[int]:
    from arfl.processes import is_running

    return [p.pid for p in procs if is_running(p)]


def test_recover_stops_what_a_dead_deployment_left_running(deployment: _Deployment) -> None:
    d = deployment
    d.write_state(_dead_owner())
    assert runs_with_pending(d.run_dir.parent) == [d.run_dir]
    report = recover(d.run_dir)
    assert _running(d.all()) == []
    assert len(report.stopped) == 3 and not report.skipped
    events = [
        e for e in read_jsonl(d.run_dir / "journal.jsonl") if e["event"] == "leftover-stopped"
    ]
    assert [e["process"] for e in events] == ["injector", "replica-0", "merger"]
    (driver,) = [e for e in events if e["process"] == "replica-0"]
    assert driver["pids"] == [d.driver.pid, d.driver_child.pid]
    assert runs_with_pending(d.run_dir.parent) == []


def test_recover_finds_what_a_dead_driver_orphaned_through_its_session(
    deployment: _Deployment,
) -> None:
    d = deployment
    d.write_state(_dead_owner())
    d.driver.kill()  # the driver is gone; its "JVM" is an orphan in the driver's session
    d.driver.wait()
    assert _running([d.driver_child]) == [d.driver_child.pid]
    report = recover(d.run_dir)
    assert _running(d.all()) == []
    assert any(line.startswith("replica-0") for line in report.stopped)


def test_recover_leaves_a_live_deployment_alone_unless_forced(deployment: _Deployment) -> None:
    d = deployment
    # The owner is this very process, with its create time: a live arfl.
    d.write_state(os.getpid(), pid_create_time=create_time(os.getpid()))
    assert runs_with_pending(d.run_dir.parent) == []
    report = recover(d.run_dir)
    assert len(_running(d.all())) == 4
    assert report.stopped == [] and report.skipped == []
    report = recover(d.run_dir, force=True)
    assert _running(d.all()) == [] and len(report.stopped) == 3


def test_an_owner_pid_reused_after_state_was_written_is_no_owner(deployment: _Deployment) -> None:
    d = deployment
    d.write_state(os.getpid())  # no pid_create_time: judged by when state.json was written
    st = d.run_dir / "state.json"
    old = create_time(os.getpid()) - 60
    os.utime(st, (old, old))
    assert runs_with_pending(d.run_dir.parent) == [d.run_dir]
    recover(d.run_dir)
    assert _running(d.all()) == []


def test_recover_never_signals_a_reused_or_unidentified_pid(deployment: _Deployment) -> None:
    d = deployment
    d.write_state(_dead_owner())
    raw = json.loads((d.run_dir / "state.json").read_text())
    raw["merger_create_time"] -= 100  # the merger's pid now "belongs to another process"
    raw["injector_create_time"] = None  # a pid without create time is no identity
    raw["replicas"]["0"]["driver_pid"] = os.getpid()  # and never this process
    raw["replicas"]["0"]["driver_create_time"] = create_time(os.getpid())
    (d.run_dir / "state.json").write_text(json.dumps(raw))
    report = recover(d.run_dir)
    assert report.stopped == []
    assert len(_running(d.all())) == 4


def _run_spark_home(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from arfl.replica.sparkenv import run_spark_home

    monkeypatch.setenv("ARFL_STATE_DIR", str(run_dir.parent.parent / "state"))
    home = run_spark_home(run_dir)
    ex = home / "replica-0" / "work" / "app-1" / "0"
    ex.mkdir(parents=True)
    (ex / "stderr").write_text("executor log\n")
    return home


def test_recover_deletes_a_dead_deployments_spark_home_keeping_its_executor_logs(
    deployment: _Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    home = _run_spark_home(d.run_dir, monkeypatch)
    d.write_state(os.getpid(), pid_create_time=create_time(os.getpid()), spark_home=str(home))
    report = recover(d.run_dir)  # a live deployment: its SPARK_HOME is in use
    assert home.is_dir() and report.removed_spark_home is None
    d.write_state(_dead_owner(), spark_home=str(home))
    report = recover(d.run_dir)
    assert not home.exists() and report.removed_spark_home == str(home)
    kept = d.run_dir / "logs" / "executors" / "replica-0.app-1.0.stderr"
    assert kept.read_text() == "executor log\n"
    journal = read_jsonl(d.run_dir / "journal.jsonl")
    (ev,) = [e for e in journal if e["event"] == "spark-home-removed"]
    assert ev["recovered"] is True and ev["home"] == str(home)


def test_recover_never_deletes_what_state_json_names_unless_it_is_the_runs_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "runs" / "dead-run"
    run_dir.mkdir(parents=True)
    precious = tmp_path / "precious"
    (precious / "work").mkdir(parents=True)
    other = _run_spark_home(tmp_path / "elsewhere" / run_dir.name, monkeypatch)  # same name
    for named in (precious, other):
        state = {"run": "dead-run", "pid": _dead_owner(), "mode": "none", "spark_home": str(named)}
        (run_dir / "state.json").write_text(json.dumps(state))
        assert runs_with_pending(run_dir.parent) == []  # nothing of its own is left
        report = recover(run_dir)
        assert report.removed_spark_home is None and not report.failed
    assert (precious / "work").is_dir()
    assert (other / "replica-0" / "work" / "app-1" / "0" / "stderr").is_file()


def test_recover_leaves_a_spark_home_a_process_still_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "runs" / "dead-run"
    run_dir.mkdir(parents=True)
    home = _run_spark_home(run_dir, monkeypatch)
    state = {"run": "dead-run", "pid": _dead_owner(), "mode": "none", "spark_home": str(home)}
    (run_dir / "state.json").write_text(json.dumps(state))
    assert runs_with_pending(run_dir.parent) == [run_dir]
    # A JVM that no state.json names (a driver restarted after the last write): in use.
    jars = f"{home}/replica-0/jars/*"  # a driver's SPARK_HOME in the run's
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", jars])
    try:
        report = recover(run_dir)
        assert home.is_dir() and report.removed_spark_home is None
        assert any(str(jvm.pid) in line for line in report.kept), report.kept
    finally:
        jvm.kill()
        jvm.wait()
    assert recover(run_dir).removed_spark_home == str(home)
    assert runs_with_pending(run_dir.parent) == []


def test_leftovers_include_standbys_once() -> None:
    from arfl.faults.leftovers import recorded_processes

    raw = {
        "run": "r",
        "replicas": {"0": {"driver_pid": 10, "driver_create_time": 1.5}},
        # Standby 1 took replica 0 over since the last write: recorded twice, stopped once.
        "standbys": {
            "1": {"pid": 10, "create_time": 1.5},
            "2": {"pid": 11, "create_time": 2.5},
            "3": {"pid": 12, "create_time": None},  # a pid without a create time is no identity
        },
        "merger_pid": 20,
        "merger_create_time": 3.0,
    }
    got = [(r.name, r.pid) for r in recorded_processes(RunState.model_validate(raw))]
    assert got == [("replica-0", 10), ("standby-2", 11), ("merger", 20)]


def test_an_executors_child_is_not_taken_for_the_executor() -> None:
    """A process the executor JVM starts carries its command line until it execs; found after
    the executor (a higher pid), it replaced it as the executor to kill."""
    from arfl.targets.local import EXECUTOR_MAIN, executors_of_app

    app = "app-20261129140000-0007"
    code = (
        "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\ntime.sleep(60)"
    )
    executor = subprocess.Popen(
        [sys.executable, "-c", code, EXECUTOR_MAIN, "--executor-id", "0", "--app-id", app]
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not psutil.Process(executor.pid).children():
            time.sleep(0.02)
        [child] = psutil.Process(executor.pid).children()
        assert EXECUTOR_MAIN in " ".join(child.cmdline())  # the fork's command line
        assert executors_of_app(app) == {"0": executor.pid}
    finally:
        for c in psutil.Process(executor.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                c.kill()
        executor.kill()
        executor.wait()


def test_recover_reads_what_it_can_of_a_state_file_from_elsewhere() -> None:
    """Nulls where a default exists, an entry that is not an object or not under a replica
    number, a standby without a pid, a docker section without bridge or image: the file is
    still read, and every process with an identity is found."""
    from arfl.faults.leftovers import recorded_processes

    raw = {
        "run": "r",
        "mode": None,
        "target": None,
        "replicas": {
            "0": {"driver_pid": 10, "driver_create_time": 1.5, "state": None},
            "x": {"driver_pid": 11, "driver_create_time": 1.5},
            "1": "gone",
        },
        "standbys": {"0": {"pid": None}, "1": {"pid": 12, "create_time": 2.5}},
        "docker": {"network": "n", "subnet": "10.214.3.0/24", "gateway": "10.214.3.1"},
        "topics": {"source": "in"},
        "stack": {},
    }
    assert RunState.model_validate({"run": "r", "stack": {"zookeeper": "z:1"}}).stack == (
        StackRecord(kafka="", zookeeper="z:1")
    )
    state = RunState.model_validate(raw)
    assert (state.mode, state.target, state.stack) == ("unknown", "local", None)
    assert state.replicas[0].state == "unknown" and sorted(state.replicas) == [0]
    assert state.docker is not None and (state.docker.bridge, state.docker.image) == ("", "")
    assert state.topics is not None and state.topics.sink is None
    got = [(r.name, r.pid) for r in recorded_processes(state)]
    assert got == [("replica-0", 10), ("standby-1", 12)]


def test_deploys_state_written_from_records_is_read_back_whole(tmp_path: Path) -> None:
    """What deploy's writer builds from records (not from JSON) is written whole: every
    replica and standby, read back as written."""
    from arfl.run.state import ReplicaRecord, StandbyRecord

    state = RunState(
        run="r",
        pid=1,
        replicas={0: ReplicaRecord(driver_pid=10, driver_create_time=1.5, state="running")},
        standbys={1: StandbyRecord(pid=12, create_time=2.5, ready=True)},
        stack=StackRecord(kafka="k:1", zookeeper="z:1"),
    )
    state.write(tmp_path)
    raw = json.loads((tmp_path / "state.json").read_text())
    assert raw["replicas"]["0"]["driver_pid"] == 10 and raw["standbys"]["1"]["pid"] == 12
    assert load_state(tmp_path) == state
