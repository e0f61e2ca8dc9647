"""What the replicas cost: CPU seconds and peak memory of every process of every replica."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import psutil

from arfl.orchestrate.supervisor import ReplicaState
from arfl.processes import process_tree


class ResourceSampler:
    """Samples each replica's process tree (a killed process keeps its last sample)."""

    def __init__(self) -> None:
        self._cpu: dict[tuple[int, float], tuple[int, float]] = {}
        self.peak_rss = 0

    def sample(self, states: Mapping[int, ReplicaState]) -> None:
        """Remember the CPU time of every process of every replica and the summed RSS."""
        rss_now = 0
        for i, st in states.items():
            if st.pid is None:
                continue
            for p in process_tree(st.pid):
                try:
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())
                except psutil.Error:
                    continue
                self._cpu[key] = (i, t.user + t.system)
                with contextlib.suppress(psutil.Error):
                    rss_now += p.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss_now)

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds each replica's processes used."""
        out: dict[int, float] = {}
        for replica, secs in self._cpu.values():
            out[replica] = out.get(replica, 0.0) + secs
        return out
