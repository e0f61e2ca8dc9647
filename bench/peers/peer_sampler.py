"""CPU seconds and resident memory of a run's processes by group, sampled in a thread.

A group is a label and the root pids of its process trees (a system's JVMs, arfl's replica
drivers with their JVMs, the injector, the probe, the broker); the groups are asked for again
at every sample, so a process started later (a new TaskManager, a restarted replica) is
counted from then on, and one that died keeps its last sample's CPU.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil
from _common import HOST, Periodic, host_busy_s

from arfl.processes import process_tree, start_key

SHARED = frozenset({"injector", "probe", "kafka", "zookeeper", HOST})
"""Groups that are not the system's own: the same load and the same broker for every system."""
MIB = 1024 * 1024


@dataclass(frozen=True)
class Point:
    """One sample: when, cumulative CPU seconds and the resident bytes of each group."""

    t: float
    cpu: dict[str, float]
    rss: dict[str, int]


class Sampler(Periodic):
    """Samples ``groups()`` every ``interval_s`` from :meth:`start` to :meth:`stop`."""

    def __init__(self, groups: Callable[[], dict[str, list[int]]], interval_s: float = 1.0) -> None:
        super().__init__(interval_s, "peers-sampler")
        self.groups = groups
        self.points: list[Point] = []
        self._last: dict[tuple[int, float], tuple[str, float]] = {}

    def start(self) -> None:
        """Take a first sample, then sample in a thread."""
        self._sample()
        super().start()

    def _sample(self) -> None:
        rss: dict[str, int] = {}
        try:
            groups = self.groups()
        except Exception:  # a state file half-written: the next sample reads it again
            groups = {}
        for label, roots in groups.items():
            for root in roots:
                for p in process_tree(root):
                    with contextlib.suppress(psutil.Error):
                        times = p.cpu_times()
                        self._last[start_key(p)] = (label, times.user + times.system)
                        rss[label] = rss.get(label, 0) + p.memory_info().rss
        cpu: dict[str, float] = {}
        for label, secs in self._last.values():
            cpu[label] = cpu.get(label, 0.0) + secs
        cpu[HOST] = host_busy_s()
        self.points.append(Point(time.time(), cpu, rss))


def cpu_s(
    points: list[Point], start: float | None = None, end: float | None = None
) -> dict[str, float]:
    """CPU seconds of each group between the samples nearest inside ``[start, end]`` (epoch
    s; None: the first / last sample); a group absent from the first counts from zero."""
    inside = [p for p in points if (start is None or p.t >= start) and (end is None or p.t <= end)]
    if not inside:
        return {}
    a, b = inside[0].cpu, inside[-1].cpu
    return {k: max(0.0, v - a.get(k, 0.0)) for k, v in b.items()}


def cores(points: list[Point], start: float, end: float) -> dict[str, float]:
    """Average cores each group used over ``[start, end]``, from the samples nearest inside
    it; empty when fewer than two fall in it."""
    inside = [p for p in points if start <= p.t <= end]
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        return {}
    span = inside[-1].t - inside[0].t
    return {k: v / span for k, v in cpu_s(points, inside[0].t, inside[-1].t).items()}


def own(values: dict[str, float], shared: Iterable[str] = SHARED) -> float:
    """The system's own total: every group but the shared ones."""
    skip = set(shared)
    return sum(v for k, v in values.items() if k not in skip)


def rss_mib(
    points: list[Point], start: float | None = None, end: float | None = None
) -> tuple[float | None, float | None]:
    """Peak and mean resident MiB of the system's own groups over ``[start, end]``."""
    totals = [
        sum(v for k, v in p.rss.items() if k not in SHARED) / MIB
        for p in points
        if (start is None or p.t >= start) and (end is None or p.t <= end)
    ]
    if not totals:
        return None, None
    return max(totals), sum(totals) / len(totals)
