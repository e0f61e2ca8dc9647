"""CPU throttling with cgroups: v2 (``cpu.max``) or, on hybrid hosts, the v1 cpu hierarchy
(``cpu.cfs_quota_us``). Used by the ``slow`` fault and by placement (:mod:`.shares`); every
path is recorded so ``recover`` can move processes back and remove the group without the
process that made it."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from arfl.errors import FaultError

CGROUP_ROOT = Path(os.environ.get("ARFL_CGROUP_ROOT", "/sys/fs/cgroup"))
PERIOD_US = 100_000
SHARE_PERIOD_US = 10_000
"""The CFS period of a ``[placement]`` share's quota (a group's or a container's). With the
kernel's 100 ms, a replica's threads spend a 0.6-core quota in bursts and then wait the
period out: tens of ms added to a result's latency (docs/benchmarks.md, "CPU shares: the CFS
period")."""


@dataclass(frozen=True)
class CpuHierarchy:
    """Where the cpu controller lives and how to talk to it."""

    version: int  # 2 or 1
    mount: Path  # the hierarchy's root directory

    def group(self, name: str) -> Path:
        """The directory of arfl's group ``name`` (under ``arfl/``)."""
        return self.mount / "arfl" / name

    def cgroup_of(self, pid: int) -> str:
        """The pid's current group in this hierarchy, relative to its mount (``/a/b``)."""
        text = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
        for line in text.splitlines():
            _, controllers, path = line.split(":", 2)
            if self.version == 2 and controllers == "":
                return path
            if self.version == 1 and "cpu" in controllers.split(","):
                return path
        return "/"


def detect() -> CpuHierarchy:
    """Find a usable cpu controller.

    Raises:
        FaultError: neither cgroup v2 with the cpu controller nor a v1 cpu hierarchy exists.
    """
    v2 = CGROUP_ROOT / "cgroup.controllers"
    if v2.exists() and "cpu" in v2.read_text(encoding="utf-8").split():
        return CpuHierarchy(2, CGROUP_ROOT)
    unified = CGROUP_ROOT / "unified" / "cgroup.controllers"
    if unified.exists() and "cpu" in unified.read_text(encoding="utf-8").split():
        return CpuHierarchy(2, CGROUP_ROOT / "unified")
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        v1 = CGROUP_ROOT / name
        if (v1 / "cpu.cfs_quota_us").exists():
            return CpuHierarchy(1, v1)
    raise FaultError(
        f"no cgroup cpu controller under {CGROUP_ROOT} (neither cgroup v2 with 'cpu' in "
        "cgroup.controllers nor a v1 'cpu' hierarchy with cpu.cfs_quota_us); CPU throttling "
        "needs the kernel's CFS bandwidth control and a writable cgroup filesystem"
    )


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value, encoding="utf-8")
    except PermissionError as e:
        raise FaultError(f"cgroup: cannot write {path} ({e}); run arfl as root") from e


def quota_us(percent: float, period_us: int = PERIOD_US) -> int:
    """``percent`` % of one CPU as a CFS quota per ``period_us`` (at least the kernel's 1 ms)."""
    return max(1000, round(period_us * percent / 100))


def create(h: CpuHierarchy, name: str, percent: float | None, period_us: int = PERIOD_US) -> Path:
    """Create ``arfl/<name>`` limited to ``percent`` % of one CPU (None: no quota of its own)
    per CFS period of ``period_us``; returns its path. ``name`` may hold ``/``: the groups on
    the way are made too.

    Raises:
        FaultError: the group cannot be created or limited.
    """
    parent = h.mount / "arfl"
    path = h.group(name)
    chain = [
        parent,
        *(parent.joinpath(*Path(name).parts[:i]) for i in range(1, len(Path(name).parts))),
    ]
    try:
        if h.version == 2:
            _enable_cpu_v2(h.mount)
        for d in chain:
            d.mkdir(exist_ok=True)
            if h.version == 2:
                _enable_cpu_v2(d)
        path.mkdir(exist_ok=True)
    except OSError as e:
        raise FaultError(f"cgroup: cannot create {path} ({e}); run arfl as root") from e
    if percent is None:
        return path
    quota = quota_us(percent, period_us)
    if h.version == 2:
        _write(path / "cpu.max", f"{quota} {period_us}")
    else:
        _write(path / "cpu.cfs_period_us", str(period_us))
        _write(path / "cpu.cfs_quota_us", str(quota))
    return path


def _enable_cpu_v2(group: Path) -> None:
    control = group / "cgroup.subtree_control"
    if "cpu" not in control.read_text(encoding="utf-8").split():
        _write(control, "+cpu")


def move(group: Path, pid: int) -> bool:
    """Move ``pid`` (its whole thread group) into ``group``; False when it no longer exists."""
    try:
        (group / "cgroup.procs").write_text(str(pid), encoding="utf-8")
        return True
    except OSError as e:
        if e.errno in (errno.ESRCH, errno.ENOENT):
            return False
        raise FaultError(f"cgroup: cannot move pid {pid} into {group} ({e})") from e


def members(group: Path) -> list[int]:
    """Pids currently in ``group`` (empty when it is gone)."""
    try:
        text = (group / "cgroup.procs").read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [int(x) for x in text.split()]


def remove(group: Path, fallback: Path, originals: dict[int, Path]) -> None:
    """Move every member back (to its original group, else ``fallback``) and remove ``group``.

    Raises:
        FaultError: the group could not be removed (processes still inside).
    """
    if not group.exists():
        return
    for _ in range(50):
        for pid in members(group):
            move(originals.get(pid, fallback), pid)
        try:
            group.rmdir()
            break
        except OSError as e:
            if e.errno == errno.ENOENT:
                break
            if e.errno != errno.EBUSY:
                raise FaultError(f"cgroup: cannot remove {group} ({e})") from e
            time.sleep(0.02)  # a child forked while we moved its parent; go again
    else:
        raise FaultError(
            f"cgroup {group} still busy (pids {members(group)}); run 'arfl chaos recover' again"
        )
    if group.parent.name == "arfl":
        with contextlib.suppress(OSError):
            group.parent.rmdir()  # arfl/ itself, once the last run's group is gone
