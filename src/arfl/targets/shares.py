"""CPU shares of a run's drivers (``[placement] cpus_per_replica``): one cgroup per replica
and per standby driver, each with a CPU quota of that many cores, under ``arfl/<run>/``.

Layout, in the cpu hierarchy (:func:`arfl.targets.cgroups.detect`)::

    arfl/<run>/replica-0        the quota (cpu.max / cpu.cfs_quota_us)
    arfl/<run>/replica-0/run    the driver's process tree (no quota of its own)
    arfl/<run>/replica-0/slow   a ``slow`` fault's lower quota, while it lasts
    arfl/<run>/standby-3        ...

The processes sit in a leaf below the quota so that a ``slow`` fault can nest its own group
beside them (cgroup v2 lets no group with processes give its children a controller); the
kernel enforces both quotas, the lower wins. A driver enters its leaf before it starts
anything (:meth:`CpuShares.wrap`): every descendant (its JVM, executor JVMs, Python workers)
is born inside. Where the cpu hierarchy has no usage counter (a cgroup v1 ``cpu`` mounted
without ``cpuacct``), the same groups are made in the ``cpuacct`` hierarchy, and the driver
enters both.

The whole ``arfl/<run>`` tree is recorded in ``state.json`` (:class:`arfl.run.state.SharesRecord`)
before the first driver starts, and removed at the run's stop, or by ``arfl chaos recover``
(:func:`remove_tree`) after a ``kill -9`` of arfl.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from arfl.errors import FaultError
from arfl.run.state import SharesRecord
from arfl.targets import cgroups

LEAF = "run"
"""The leaf group a driver's processes live in, below its quota group."""

WRAPPER = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; n=$((n-1)); done; '
    'exec "$@"'
)
"""``/bin/sh -c`` script: ``$1`` ``cgroup.procs`` files follow, the shell writes its pid into
each, then execs the driver (same pid). A driver that cannot enter its groups does not start
(exit 126)."""


@dataclass(frozen=True)
class Accounting:
    """Where the CPU usage of a group is read: ``cpu.stat`` ``usage_usec`` (v2) or
    ``cpuacct.usage`` (v1, nanoseconds), in the hierarchy mounted at ``mount``."""

    version: int
    mount: Path


def accounting_for(h: cgroups.CpuHierarchy) -> Accounting | None:
    """The usage counter for groups of ``h``: the same hierarchy where it has one, else the v1
    ``cpuacct`` hierarchy; None when there is none."""
    if h.version == 2:
        return Accounting(2, h.mount)
    if (h.mount / "cpuacct.usage").exists():
        return Accounting(1, h.mount)
    acct = cgroups.CGROUP_ROOT / "cpuacct"
    if (acct / "cpuacct.usage").exists():
        return Accounting(1, acct)
    return None


def usage_s(acct: Accounting, group: Path) -> float | None:
    """CPU seconds used by ``group`` and its descendants so far (None when unreadable)."""
    try:
        if acct.version == 1:
            return int((group / "cpuacct.usage").read_text(encoding="utf-8").split()[0]) / 1e9
        for line in (group / "cpu.stat").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError, IndexError):
        return None
    return None


def quota_cores(h: cgroups.CpuHierarchy, group: Path) -> float | None:
    """``group``'s own CPU quota in cores (None: unlimited or unreadable)."""
    try:
        if h.version == 2:
            quota, _, period = (group / "cpu.max").read_text(encoding="utf-8").partition(" ")
            if quota == "max":
                return None
            return int(quota) / int(period)
        q = int((group / "cpu.cfs_quota_us").read_text(encoding="utf-8"))
        p = int((group / "cpu.cfs_period_us").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return None if q < 0 else q / p


def limit_of(h: cgroups.CpuHierarchy, relative: str) -> float | None:
    """The lowest quota (cores) on the way from the hierarchy's root to the group at
    ``relative`` (``/arfl/<run>/replica-0/run``, as ``/proc/<pid>/cgroup`` says)."""
    lowest: float | None = None
    path = h.mount
    for part in Path(relative.lstrip("/")).parts:
        path = path / part
        q = quota_cores(h, path)
        if q is not None and (lowest is None or q < lowest):
            lowest = q
    return lowest


@dataclass
class CpuShares:
    """The run's share groups: where they are, the quota, and when each was made.

    Attributes:
        hierarchy: the cpu hierarchy.
        run: the run's name (``arfl/<run>``).
        cores: each group's quota in cores.
        accounting: where usage is read (None: nowhere).
        fallback: the group (relative to the cpu hierarchy's mount) processes go back to when
            a group is removed with something still inside: this arfl's own.
    """

    hierarchy: cgroups.CpuHierarchy
    run: str
    cores: float
    accounting: Accounting | None
    fallback: str = "/"
    acct_fallback: str = "/"
    created: dict[str, float] = field(default_factory=dict)
    """Group name -> when it was made (wall clock): the usage's denominator."""
    retired: dict[str, tuple[float | None, float]] = field(default_factory=dict)
    """Groups removed during the run (a standby's, at its take-over) -> their usage then."""

    @classmethod
    def plan(cls, run: str, cores: float) -> CpuShares:
        """Find the cpu controller (and the usage counter) for ``run``'s groups.

        Raises:
            FaultError: no usable cpu controller.
        """
        h = cgroups.detect()
        acct = accounting_for(h)
        me = os.getpid()
        fallback = _own_group(h.version, h.mount, me)
        acct_fallback = "/" if acct is None else _own_group(acct.version, acct.mount, me)
        return cls(h, run, cores, acct, fallback, acct_fallback)

    @property
    def root(self) -> Path:
        """``arfl/<run>`` in the cpu hierarchy."""
        return self.hierarchy.group(self.run)

    @property
    def acct_root(self) -> Path | None:
        """``arfl/<run>`` in the accounting hierarchy when it is another one."""
        if self.accounting is None or self.accounting.mount == self.hierarchy.mount:
            return None
        return self.accounting.mount / "arfl" / self.run

    def record(self) -> SharesRecord:
        """As ``state.json`` holds it."""
        acct = self.acct_root
        return SharesRecord(
            version=self.hierarchy.version,
            mount=str(self.hierarchy.mount),
            root=str(self.root),
            cores=self.cores,
            fallback=self.fallback,
            acct_root=None if acct is None else str(acct),
            acct_fallback=self.acct_fallback,
        )

    def group(self, name: str) -> Path:
        """The quota group of driver ``name`` (``replica-0``, ``standby-3``)."""
        return self.root / name

    def leaves(self, name: str) -> list[Path]:
        """Where driver ``name``'s processes live: the leaf in the cpu hierarchy, then the
        accounting hierarchy's (when it is another one)."""
        out = [self.group(name) / LEAF]
        if self.acct_root is not None:
            out.append(self.acct_root / name / LEAF)
        return out

    def ensure(self, name: str) -> list[Path]:
        """Make driver ``name``'s groups (again, if a fault's cleanup removed them) with the
        quota; returns :meth:`leaves`.

        Raises:
            FaultError: a group cannot be made or limited (not root, no controller).
        """
        cgroups.create(
            self.hierarchy, f"{self.run}/{name}", self.cores * 100, cgroups.SHARE_PERIOD_US
        )
        cgroups.create(self.hierarchy, f"{self.run}/{name}/{LEAF}", None)
        if self.acct_root is not None:
            try:
                (self.acct_root / name / LEAF).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise FaultError(
                    f"placement: cannot create cgroup {self.acct_root / name} ({e}); run arfl "
                    "as root"
                ) from e
        self.created.setdefault(name, time.time())
        return self.leaves(name)

    def wrap(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` started inside driver ``name``'s groups (made first: :meth:`ensure`).

        Raises:
            FaultError: the groups cannot be made.
        """
        return wrap_command(self.ensure(name), argv)

    def absorb(self, source: str, into: str) -> list[int]:
        """Move every process of driver ``source``'s groups into driver ``into``'s and remove
        ``source``'s (a standby taking a replica over); returns the pids moved.

        A member forked while its parent moves stays behind once: the members are moved until
        none is left (:func:`arfl.targets.cgroups.remove`), so the whole tree moves.

        Raises:
            FaultError: a group stayed busy.
        """
        moved = cgroups.members(self.group(source) / LEAF)
        if source in self.created:
            self.retired[source] = self._usage_of(source, time.time())
            del self.created[source]
        for src, dst in zip(self.leaves(source), self.ensure(into), strict=True):
            cgroups.remove(src, dst, {})
            with contextlib.suppress(OSError):
                src.parent.rmdir()
        return moved

    def retire(self, name: str) -> None:
        """Driver ``name`` is gone for good (a standby that died): its usage is kept and its
        groups removed, anything still inside moved to arfl's own group first.

        Raises:
            FaultError: a group stayed busy.
        """
        if name not in self.created:
            return
        self.retired[name] = self._usage_of(name, time.time())
        del self.created[name]
        rec = self.record()
        remove_tree(self.group(name), Path(rec.mount) / rec.fallback.lstrip("/"))
        if self.acct_root is not None:
            acct_mount = _mount_of(self.acct_root)
            remove_tree(self.acct_root / name, acct_mount / rec.acct_fallback.lstrip("/"))

    def usage(self) -> dict[str, tuple[float | None, float]]:
        """Each group's (CPU seconds, wall seconds since it was made), read now; a group
        removed during the run, as it was then."""
        now = time.time()
        out = dict(self.retired)
        out.update((name, self._usage_of(name, now)) for name in self.created)
        return dict(sorted(out.items()))

    def _usage_of(self, name: str, now: float) -> tuple[float | None, float]:
        used = None
        if self.accounting is not None:
            base = self.acct_root if self.acct_root is not None else self.root
            used = usage_s(self.accounting, base / name)
        return used, now - self.created[name]

    def remove(self) -> None:
        """Remove every group of the run, moving what is still inside back to arfl's own
        group.

        Raises:
            FaultError: a group stayed busy.
        """
        remove_recorded(self.record())


def remove_recorded(rec: SharesRecord) -> list[str]:
    """Remove what ``state.json`` says of a run's share groups (``arfl chaos recover``);
    returns the trees removed.

    Raises:
        FaultError: a group stayed busy.
    """
    removed: list[str] = []
    pairs = [(Path(rec.root), Path(rec.mount) / rec.fallback.lstrip("/"))]
    if rec.acct_root:
        acct = Path(rec.acct_root)
        pairs.append((acct, _mount_of(acct) / rec.acct_fallback.lstrip("/")))
    for root, fallback in pairs:
        if root.exists():
            remove_tree(root, fallback)
            removed.append(str(root))
    return removed


def wrap_command(leaves: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """``/bin/sh -c`` entering the ``leaves`` (their ``cgroup.procs``) before it execs into
    ``argv``: the pid stays the same, and every later child is born inside."""
    procs = [str(p / "cgroup.procs") for p in leaves]
    return ["/bin/sh", "-c", WRAPPER, "arfl-cgroup", str(len(procs)), *procs, *argv]


def _own_group(version: int, mount: Path, pid: int) -> str:
    """``pid``'s group in the hierarchy mounted at ``mount`` ("/" when unreadable)."""
    try:
        return cgroups.CpuHierarchy(version, mount).cgroup_of(pid)
    except OSError:
        return "/"


def remove_tree(root: Path, fallback: Path) -> None:
    """Remove the group ``root`` and every group below it, deepest first; whatever process is
    still inside moves to ``fallback`` (the hierarchy's root when that is gone).

    Raises:
        FaultError: a group stayed busy.
    """
    if not root.exists():
        return
    if not fallback.is_dir():
        fallback = _mount_of(root)
    groups = [root, *(p for p in root.rglob("*") if p.is_dir())]
    groups.sort(key=lambda p: len(p.parts), reverse=True)
    for g in groups:
        cgroups.remove(g, fallback, {})


def _mount_of(group: Path) -> Path:
    """The hierarchy's root above ``group`` (the parent of its ``arfl`` directory)."""
    for p in group.parents:
        if p.name == "arfl":
            return p.parent
    return group.parent
