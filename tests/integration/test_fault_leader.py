"""kill-leader against a real ZooKeeper election (kazoo ``Election``, identifier = replica)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from arfl.faults.base import FaultParams
from arfl.faults.runner import ChaosRunner
from arfl.run.names import leader_path
from arfl.stack import StackInfo
from arfl.targets.local import LocalTarget, read_leader
from arfl.testing.faults import stop_tree, write_state

CONTENDER = """\
import sys, threading
from kazoo.client import KazooClient
from kazoo.recipe.election import Election
zk = KazooClient(hosts=sys.argv[1], timeout=4.0)
zk.start(timeout=30)
Election(zk, sys.argv[2], identifier=sys.argv[3]).run(threading.Event().wait)
"""


def _wait_leader(hosts: str, path: str, want: int, timeout_s: float = 30.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    leader = None
    while time.monotonic() < deadline:
        leader = read_leader(hosts, path)
        if leader == want:
            return leader
        time.sleep(0.3)
    return leader


def test_kill_leader_kills_the_elected_replica(stack: StackInfo, tmp_path: Path) -> None:
    path = leader_path(f"leadertest-{time.time_ns()}", "t")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in (0, 1):
            procs.append(
                subprocess.Popen([sys.executable, "-c", CONTENDER, stack.zookeeper, path, str(i)])
            )
            if i == 0:
                assert _wait_leader(stack.zookeeper, path, 0) == 0
        run_dir = write_state(
            tmp_path / "lead",
            "lead",
            {i: {"driver_pid": p.pid} for i, p in enumerate(procs)},
            stack={"zookeeper": stack.zookeeper, "kafka": stack.kafka},
            leader_path=path,
            mode="active-leader",
        )
        target = LocalTarget.from_run_dir(run_dir)
        assert target.leader() == 0
        out = ChaosRunner(target).run_fault(FaultParams("kill-leader"))
        assert out.replica == 0 and out.details["pid"] == procs[0].pid
        assert procs[0].wait(10) == -9
        assert procs[1].poll() is None
        # the survivor takes over once ZooKeeper expires the dead session (timeout 4 s)
        assert _wait_leader(stack.zookeeper, path, 1) == 1
    finally:
        for p in procs:
            stop_tree(p.pid)
            p.wait(10)


def test_no_leader_is_a_clear_error(stack: StackInfo, tmp_path: Path) -> None:
    from arfl.errors import FaultError

    run_dir = write_state(
        tmp_path / "nolead",
        "nolead",
        {0: {}},
        stack={"zookeeper": stack.zookeeper},
        leader_path=leader_path(f"none-{time.time_ns()}", "t"),
    )
    with pytest.raises(FaultError, match="no leader found"):
        ChaosRunner(LocalTarget.from_run_dir(run_dir)).run_fault(FaultParams("kill-leader"))
