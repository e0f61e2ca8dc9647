"""What the replicas cost: CPU seconds and peak memory of every process of every replica (and
of the standby drivers waiting to replace one)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence

import psutil

from arfl.errors import FaultError
from arfl.orchestrate.slots import ReplicaState
from arfl.processes import process_tree, start_key
from arfl.targets import docker as dk


class ResourceSampler:
    """Samples each replica's process tree (a killed process keeps its last sample); on the
    docker target also every process of the replica's container (not the launcher's
    descendants), listed through the daemon every :data:`CONTAINER_LIST_S` seconds."""

    CONTAINER_LIST_S = 5.0
    STANDBY = -1
    """The owner key of a standby's processes (until it becomes a replica: a promoted standby's
    processes, CPU since their start included, count towards that replica from then on)."""

    def __init__(self) -> None:
        self._cpu: dict[tuple[int, float], tuple[int, float]] = {}
        self.peak_rss = 0
        self.containers: dict[int, str] = {}
        """Replica -> container name, set by deploy on the docker target."""
        self._in_containers: dict[int, list[psutil.Process]] = {}
        self._listed_at = float("-inf")

    def _container_processes(self, replica: int) -> list[psutil.Process]:
        if not self.containers:
            return []
        now = time.monotonic()
        if now - self._listed_at > self.CONTAINER_LIST_S:
            self._listed_at = now
            for i, name in self.containers.items():
                procs: list[psutil.Process] = []
                with contextlib.suppress(FaultError):
                    for pid in dk.host_pids(dk.container(name)):
                        with contextlib.suppress(psutil.Error):
                            procs.append(psutil.Process(pid))
                self._in_containers[i] = procs
        return self._in_containers.get(replica, [])

    def sample(self, states: Mapping[int, ReplicaState], standbys: Sequence[int] = ()) -> None:
        """Remember the CPU time of every process of every replica and of every standby driver
        (``standbys``: their pids), and the replicas' summed RSS."""
        for pid in standbys:
            for p in process_tree(pid):
                try:
                    key = start_key(p)
                    t = p.cpu_times()
                except psutil.Error:
                    continue
                self._cpu[key] = (self.STANDBY, t.user + t.system)
        rss_now = 0
        for i, st in states.items():
            if st.pid is None:
                continue
            for p in [*process_tree(st.pid), *self._container_processes(i)]:
                try:
                    t = p.cpu_times()
                    key = start_key(p)
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
            if replica != self.STANDBY:
                out[replica] = out.get(replica, 0.0) + secs
        return out

    def standby_cpu_seconds(self) -> float:
        """CPU seconds of the standby drivers that never became a replica."""
        return sum(secs for owner, secs in self._cpu.values() if owner == self.STANDBY)
