"""``[placement] cpus_per_replica`` end to end: an active R=2 filter run in which every process
of each replica's tree (the driver, its JVM, the executor JVMs) sits in that replica's own
cgroup with the share's quota while it runs, the merger and the injector outside; the summary
reports the share and a use within it, and no group of the run is left afterwards."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from deploy_checks import check_run_dir, journal_events, windowed_spec

from arfl.errors import FaultError
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.state import load_state
from arfl.stack import StackInfo
from arfl.targets import shares
from arfl.targets.cgroups import CpuHierarchy
from arfl.targets.local import LocalTarget

pytestmark = pytest.mark.needs_root(reason="cgroups need root")

SHARE = 0.9
"""Cores per replica."""
USE_TOLERANCE = 0.05
"""How far above its share a replica's measured use may be (the wall time starts when its
group is made, the usage counter a few ms later: the ratio is exact up to that)."""


@dataclass(frozen=True)
class Seen:
    """One process of a replica's tree, as one look saw it."""

    replica: int
    pid: int
    cmdline: str
    cpu_group: str
    limit: float | None
    t: float
    """When the look began (epoch s): looks after the stop began are not judged."""


def _groups_of(pid: int) -> dict[str, str]:
    """``/proc/<pid>/cgroup``: controller list -> group."""
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8").splitlines():
        _, controllers, path = line.split(":", 2)
        out[controllers] = path
    return out


PF_EXITING = 0x4  # include/linux/sched.h


def _exiting(pid: int) -> bool:
    """Whether the kernel has begun the task's exit (the flags are field 9 of /proc/<pid>/stat,
    counted after the parenthesised command name, which may hold spaces)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    flags = int(stat[stat.rindex(")") + 2 :].split()[6])
    return bool(flags & PF_EXITING)


class Sampler(threading.Thread):
    """Every 0.5 s while the run goes: every process of each replica's tree (through
    ``state.json``, as ``arfl chaos`` finds them) and the cpu group it is in."""

    def __init__(self, h: CpuHierarchy) -> None:
        super().__init__(name="placement-sampler", daemon=True)
        self.h = h
        self.run_dir: Path | None = None
        self.done = threading.Event()
        self.seen: list[Seen] = []
        self.outside: dict[str, set[str]] = {"merger": set(), "injector": set()}
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.done.wait(0.5):
            if self.run_dir is None or not (self.run_dir / "state.json").exists():
                continue
            try:
                self._look(LocalTarget(self.run_dir))
            except FaultError as e:  # state.json between writes: the next look
                self.errors.append(str(e))

    def _look(self, target: LocalTarget) -> None:
        t = time.time()
        st = target.state()
        for name, pid in (("merger", st.merger_pid), ("injector", st.injector_pid)):
            if pid is not None:
                with contextlib.suppress(OSError):
                    self.outside[name].add(self.h.cgroup_of(pid))
        for replica, rec in st.replicas.items():
            if rec.state != "running":
                continue
            try:
                pids = target.replica_pids(replica)
            except FaultError:
                continue  # not running any more
            for pid in pids:
                seen = self._process(replica, pid, t)
                if seen is not None:
                    self.seen.append(seen)

    def _process(self, replica: int, pid: int, t: float) -> Seen | None:
        """The process's group, or None when it is ending: gone, a zombie, or exiting. On a v1
        hierarchy ``/proc/<pid>/cgroup`` reads ``/`` once the kernel has marked the task
        exiting (PF_EXITING in /proc/<pid>/stat's flags), so that mark is read after the group.
        """
        try:
            p = psutil.Process(pid)
            if p.status() == psutil.STATUS_ZOMBIE:
                return None
            cmdline = " ".join(p.cmdline())
            group = self.h.cgroup_of(pid)
            if _exiting(pid) or not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                return None
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            return None
        return Seen(replica, pid, cmdline, group, shares.limit_of(self.h, group), t)


def test_each_replica_runs_in_its_own_cpu_share_and_nothing_is_left(
    stack: StackInfo, tmp_path: Path, cpu_hierarchy: CpuHierarchy
) -> None:
    spec = windowed_spec(
        "place",
        mode="active",
        replicas=2,
        duration="10s",
        # Filter only: no window's state to start, so a replica on its share gets its first batch
        # sooner.
        steps=[{"filter": "amount > 10"}],
        placement={"cpus_per_replica": SHARE},
    )
    sampler = Sampler(cpu_hierarchy)
    sampler.start()

    def found(run_dir: Path) -> None:
        sampler.run_dir = run_dir

    try:
        result = deploy(spec, None, DeployOptions(runs_root=tmp_path), on_run_dir=found)
    finally:
        sampler.done.set()
        sampler.join(5)
    run = result.run_dir.name
    check_run_dir(result)
    assert result.summary["produced"] == 200 * 10

    # While it ran: each replica's every process in its own leaf, under the share's quota.
    # (Not judged once the stop began: it drains and removes the groups while state.json may
    # still say running.)
    journal = journal_events(result.run_dir, "replica-stopped") + journal_events(
        result.run_dir, "run-stopped"
    )
    stop_t = min((e["t"] for e in journal), default=float("inf"))
    for replica in (0, 1):
        mine = [s for s in sampler.seen if s.replica == replica and s.t < stop_t]
        assert mine, f"replica {replica} never seen running ({sampler.errors[-3:]})"
        assert any("CoarseGrainedExecutorBackend" in s.cmdline for s in mine), (
            f"replica {replica}: no executor JVM seen in its tree"
        )
        want = f"/arfl/{run}/replica-{replica}/{shares.LEAF}"
        wrong = [s for s in mine if s.cpu_group != want]
        assert not wrong, f"replica {replica}: outside {want}: {wrong[:3]}"
        assert {s.limit for s in mine} == {SHARE}
    # The shared parts stay outside every share.
    for name, groups in sampler.outside.items():
        assert groups and not any(g.startswith("/arfl/") for g in groups), (name, groups)

    # The summary: the share and a use within it.
    placement = result.summary["placement"]
    assert placement["cpus_per_replica"] == SHARE
    assert placement["cgroup_version"] == cpu_hierarchy.version
    for replica in (0, 1):
        g = placement["groups"][f"replica-{replica}"]
        assert g["share_cores"] == SHARE
        assert g["cpu_s"] is not None and g["cpu_s"] > 0, g
        assert 0 < g["used_cores"] <= SHARE + USE_TOLERANCE, g

    # Afterwards: no group of the run, in either hierarchy.
    rec = load_state(result.run_dir).shares
    assert rec is not None
    assert not Path(rec.root).exists(), sorted(Path(rec.root).rglob("cgroup.procs"))
    assert rec.acct_root is None or not Path(rec.acct_root).exists()
    leftover = [p.name for p in (cpu_hierarchy.mount / "arfl").glob(f"{run}*")]
    assert not leftover, leftover
    (removed,) = journal_events(result.run_dir, "cpu-shares-removed")
    assert removed["root"] == rec.root
