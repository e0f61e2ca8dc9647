"""ResourceSampler: CPU seconds per replica, standby drivers apart (real child processes)."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from arfl.orchestrate.resources import ResourceSampler
from arfl.orchestrate.slots import ReplicaState
from arfl.processes import wait_until


def test_resources_count_a_standby_apart_until_it_becomes_a_replica() -> None:
    # Burn 0.5 s and wait for 0.4: /proc reports user and system time in 10-ms ticks, each
    # rounded down, so a process that burned 0.307 s by its own clock can show 0.29 (CI did).
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
    burn += "time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", burn])
    try:
        wait_until(
            lambda: sum(psutil.Process(proc.pid).cpu_times()[:2]) >= 0.4,
            timeout_s=60,
            interval_s=0.05,
        )
        r = ResourceSampler()
        r.sample({}, [proc.pid])
        assert r.standby_cpu_seconds() >= 0.4
        assert r.cpu_seconds() == {}
        # Promoted: the same process is now replica 1's, with its CPU since its start.
        r.sample({1: ReplicaState(replica=1, status="running", pid=proc.pid)}, [])
        assert r.standby_cpu_seconds() == 0
        assert r.cpu_seconds()[1] >= 0.4
    finally:
        proc.kill()
        proc.wait()


def test_a_step_of_the_wall_clock_does_not_count_a_process_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A create time moves with every step of the wall clock (psutil adds /proc/stat's
    ``btime``): keyed by it, one process sampled before and after a step counted twice."""
    from psutil import _pslinux

    r = ResourceSampler()
    me = psutil.Process()
    r.sample({0: ReplicaState(replica=0, status="running", pid=me.pid)}, [])
    before = r.cpu_seconds()[0]
    stepped = _pslinux.boot_time() + 1.0
    monkeypatch.setattr(_pslinux, "boot_time", lambda: stepped)
    r.sample({0: ReplicaState(replica=0, status="running", pid=me.pid)}, [])
    assert before <= r.cpu_seconds()[0] < 2 * before


def test_a_standby_containers_processes_count_as_standby_until_it_is_the_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the docker target a container's processes are not the launcher's descendants: they
    are listed through the daemon, a standby's by its container's name, and once the container
    is renamed the replica's they count towards the replica."""
    from arfl.targets import docker as dk

    me = psutil.Process()
    where = {"s-0": [me.pid]}  # container name -> host pids, as the daemon would list them
    monkeypatch.setattr(dk, "container", lambda name: name)
    monkeypatch.setattr(dk, "host_pids", lambda name: {p: "" for p in where.get(name, [])})
    r = ResourceSampler()
    r.containers = {0: "r-0"}
    r.standby_container = lambda k: f"s-{k}"
    r.sample({}, [], [0])
    assert r.standby_cpu_seconds() > 0 and r.cpu_seconds() == {}
    # Renamed the replica's; its launcher is the replica's driver pid now.
    where = {"r-0": [me.pid]}
    r.CONTAINER_LIST_S = 0.0
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        r.sample({0: ReplicaState(replica=0, status="running", pid=launcher.pid)}, [], [])
        assert r.standby_cpu_seconds() == 0
        assert r.cpu_seconds()[0] >= sum(me.cpu_times()[:2]) - 0.1
    finally:
        launcher.kill()
        launcher.wait()
