"""Registry, params, pending-revert file, state loader, runner ordering and always-revert logic
(with an in-memory fault kind; no processes touched)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from arfl.configs.spec import Chaos
from arfl.errors import FaultError
from arfl.faults.base import FaultBase, FaultParams, Target, make_fault
from arfl.faults.pending import PendingFaults, owner_alive
from arfl.faults.runner import ChaosRunner, recover, runs_with_pending, schedule_order
from arfl.faults.state import IsolationState, NamespaceState, load_state, parse_state
from arfl.registry import FAULTS, Entry, FaultInfo
from arfl.run.rundir import read_jsonl

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
        fault = make_fault(FaultParams(kind, replica=0, duration_s=1.0, delay_s=0.05))
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
    assert (p.kind, p.replica, p.at_s, p.duration_s, p.from_) == ("partition", 1, 60.0, 5.0, (0, 2))
    assert p.describe() == "partition replica 1 from 0,2 for 5s"
    d = FaultParams.from_chaos(
        Chaos.model_validate(
            {"at": "2s", "fault": "delay", "replica": 0, "duration": "1s", "delay": "50ms"}
        )
    )
    assert d.delay_s == pytest.approx(0.05)
    k = FaultParams.from_chaos(
        Chaos.model_validate({"at": "0s", "fault": "kill-replica", "replica": 0, "restart": False})
    )
    assert k.restart is False and "no restart" in k.describe()


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
    assert all(owner_alive(e) for e in pending.entries())  # we are the owner
    pending.remove(a)
    assert [e["id"] for e in pending.entries()] == [b]
    assert runs_with_pending(tmp_path / "runs") == [run_dir]
    pending.remove(b)
    assert not pending.path.exists()  # no file once nothing is owed
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not owner_alive({"owner_pid": dead.pid, "owner_create_time": 0.0})


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
    st = parse_state({"run": "r", "isolation": iso.to_json()})
    assert st.isolation == iso


def test_state_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match="no run state"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text("{")
    with pytest.raises(FaultError, match="not valid JSON"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text('{"replicas": {}}')
    with pytest.raises(FaultError, match=r"state.json: malformed run state \(KeyError: 'run'\)"):
        load_state(tmp_path)


def test_needs_isolation() -> None:
    from arfl.faults.netns import needs_isolation

    assert needs_isolation(["pause", "delay"]) and needs_isolation(["partition"])
    assert not needs_isolation(["pause", "kill-executor", "slow", "kill-leader"])
