"""What the replicas cost: CPU seconds and peak memory of every process of every replica (and
of the standby drivers waiting to replace one)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

import psutil

from arfl.errors import FaultError
from arfl.orchestrate.slots import ReplicaState
from arfl.processes import process_trees, start_key
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
        self.standby_container: Callable[[int], str] | None = None
        """Standby number -> its container's name, set by deploy on the docker target."""
        self._in_containers: dict[str, list[psutil.Process]] = {}
        self._listed_at = float("-inf")

    def _container_processes(self, names: Sequence[str]) -> dict[str, list[psutil.Process]]:
        """The processes of each container in ``names``, listed through the daemon at most
        every :data:`CONTAINER_LIST_S` seconds (a name not yet listed: none)."""
        now = time.monotonic()
        if names and now - self._listed_at > self.CONTAINER_LIST_S:
            self._listed_at = now
            listed: dict[str, list[psutil.Process]] = {}
            for name in names:
                procs: list[psutil.Process] = []
                with contextlib.suppress(FaultError):
                    for pid in dk.host_pids(dk.container(name)):
                        with contextlib.suppress(psutil.Error):
                            procs.append(psutil.Process(pid))
                listed[name] = procs
            self._in_containers = listed
        return self._in_containers

    def sample(
        self,
        states: Mapping[int, ReplicaState],
        standbys: Sequence[int] = (),
        standby_ids: Sequence[int] = (),
    ) -> None:
        """Remember the CPU time of every process of every replica and of every standby driver
        (``standbys``: their pids; ``standby_ids``: their numbers, for their containers), and
        the replicas' summed RSS."""
        spare = [self.standby_container(k) for k in standby_ids] if self.standby_container else []
        inside = self._container_processes([*self.containers.values(), *spare])
        roots = [*standbys, *(st.pid for st in states.values() if st.pid is not None)]
        trees = process_trees(roots)  # one pass over /proc for all
        for procs in [
            *(trees[pid] for pid in standbys),
            *(inside.get(n, []) for n in spare),
        ]:
            for p in procs:
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
            mine = inside.get(self.containers[i], []) if i in self.containers else []
            for p in [*trees[st.pid], *mine]:
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
