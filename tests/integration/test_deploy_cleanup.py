"""What a ``kill -9`` of ``arfl deploy`` leaves running, and ``arfl chaos recover`` stopping it.

A real deployment (1 replica of mode ``none`` on ``local-cluster`` with one executor JVM, the
merger and the injector) runs in an ``arfl deploy`` subprocess. Its replica driver runs in a
session of its own, so SIGKILL of arfl leaves the driver, its driver and executor JVMs, the
merger and the injector running. ``arfl chaos recover RUN`` must find them through
``state.json`` (pid + create time) and stop all of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from deploy_checks import (
    arfl_ok,
    kill_deploy_while_its_stack_starts,
    left_behind,
    read_state,
    start_deploy,
    wait_for,
    wait_run_dir,
)

from arfl.faults.runner import recover, runs_with_pending
from arfl.processes import create_time, is_running, process_tree, same_process, stop_pid
from arfl.run.rundir import read_jsonl
from arfl.run.sparkhome import driver_scratch
from arfl.run.state import load_state as load_run_state
from arfl.stack import StackInfo
from arfl.stack.lifecycle import layout_of, load_state
from arfl.stack.processes import is_alive
from arfl.targets import netns
from arfl.targets.local import executors_of_app
from arfl.testing import EmbeddedStack

pytestmark = pytest.mark.integration

ARFL = Path(sys.executable).with_name("arfl")

SPEC = """\
name = "leftover"

[source]
topic = "leftover"
partitions = 2

[[steps]]
select = ["user", "amount", "ts"]

[sink]
topic = "leftover-out"

[replication]
mode = "none"
replicas = 1
standby = 1

[spark]
master = "local-cluster[1,1,1024]"
conf = { "spark.sql.shuffle.partitions" = "2" }

[workload]
rate = 50
duration = "10m"
keys = 10
warmup = "1s"
"""


def _session(sid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(p.pid) == sid:
                found.append(p)
    return found


def _naming(text: str) -> list[psutil.Process]:
    """Running processes whose command line contains ``text``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(text in a for a in p.info.get("cmdline") or []) and is_running(p):
            found.append(p)
    return found


def test_recover_stops_what_a_killed_deploy_left_running(stack: StackInfo, tmp_path: Path) -> None:
    arfl, runs, log = start_deploy(SPEC, tmp_path)
    seen: dict[int, psutil.Process] = {}
    run_dir: Path | None = None
    try:
        run_dir = wait_run_dir(arfl, runs, log)

        def replica_processing() -> dict[str, Any] | None:
            st = read_state(run_dir)
            rep = (st or {}).get("replicas", {}).get("0") or {}
            ready = rep.get("state") == "running" and st and st.get("injector_pid")
            progress = read_jsonl(run_dir / "progress" / "replica-0.jsonl")
            return st if ready and progress and executors_of_app(rep["app_id"]) else None

        st = wait_for("replica 0 processing", replica_processing, 300, arfl, log)
        rep = st["replicas"]["0"]
        assert st["pid"] == arfl.pid
        driver = same_process(int(rep["driver_pid"]), rep["driver_create_time"])
        merger = same_process(int(st["merger_pid"]), st["merger_create_time"])
        injector = same_process(int(st["injector_pid"]), st["injector_create_time"])
        assert driver is not None and merger is not None and injector is not None
        executors = executors_of_app(rep["app_id"])
        # The driver JVM's temp dirs are in a directory that goes with its SPARK_HOME: a
        # SIGKILLed JVM never removes them, and in /tmp nobody would.
        own_tmp = driver_scratch(Path(st["spark_home"]) / "replica-0")
        made = sorted(p.name for p in own_tmp.iterdir())
        assert any(n.startswith("artifacts-") for n in made), made
        # ... and so are the executors' (a killed executor leaves what Kafka's client extracted)
        for pid in executors.values():
            cmd = psutil.Process(pid).cmdline()
            assert f"-Djava.io.tmpdir={own_tmp}" in cmd, cmd
        # The standby driver (ready before the load started) is recorded too.
        sb = st["standbys"]["0"]
        standby = same_process(int(sb["pid"]), sb["create_time"])
        assert standby is not None and sb["ready"] is True
        for p in [
            *process_tree(driver.pid),
            *_session(driver.pid),
            *process_tree(standby.pid),
            *_session(standby.pid),
            merger,
            injector,
        ]:
            seen[p.pid] = p

        os.kill(arfl.pid, signal.SIGKILL)
        arfl.wait(timeout=10)
        time.sleep(2)
        # The defect this test guards against: all of it outlives arfl.
        assert is_running(driver), "the driver died with arfl (nothing left to recover)"
        assert all(psutil.pid_exists(pid) for pid in executors.values())

        t0 = time.monotonic()
        r = subprocess.run(
            [str(ARFL), "chaos", "recover", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stdout + r.stderr
        assert took < 60, f"recover took {took:.1f}s"

        still = [p for p in seen.values() if is_running(p)]
        assert not still, f"left running after recover: {[(p.pid, p.name()) for p in still]}"
        assert not [p for p in _session(driver.pid) if is_running(p)]
        named = _naming(run_dir.name)
        assert not named, f"processes naming the run: {[(p.pid, p.cmdline()) for p in named]}"
        assert not executors_of_app(rep["app_id"])
        stopped = [
            e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "leftover-stopped"
        ]
        journal = read_jsonl(run_dir / "journal.jsonl")
        orphaned = [e for e in journal if e["event"] == "merger-orphaned"]
        # The merger ends by itself once its owner is gone (``--owner-pid``); recover stops it
        # only if it had not noticed yet. Either way exactly one of the two happened.
        processes = {e["process"] for e in stopped}
        assert processes - {"merger"} == {"replica-0", "standby-0", "injector"}
        assert ("merger" in processes) != bool(orphaned), (processes, orphaned)
        # The run's own SPARK_HOME (its executors' jar copies and scratch) went with them, the
        # executors' logs kept in the run.
        home = Path(st["spark_home"])
        assert home.parent.name == "spark-runs" and home.name.startswith(f"{run_dir.name}-"), home
        assert not home.exists(), sorted(p.name for p in home.rglob("*"))[:20]
        assert not own_tmp.exists(), sorted(p.name for p in own_tmp.iterdir())
        (removed,) = [e for e in journal if e["event"] == "spark-home-removed"]
        assert removed["recovered"] is True and removed["home"] == str(home), removed
        # <driver>.<app id>.<executor id>.<stream>: each driver ran in a SPARK_HOME of its own.
        kept = {tuple(Path(p).name.split(".")[:2]) for p in removed["executor_logs"]}
        assert ("replica-0", rep["app_id"]) in kept, (rep["app_id"], removed)
        assert f"removed {home}" in r.stdout, r.stdout
        # Nothing is left to recover, and a second recover says so.
        again = subprocess.run(
            [str(ARFL), "chaos", "recover", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0 and "nothing pending" in again.stdout, again.stdout
    finally:
        if arfl.poll() is None:
            arfl.kill()
            arfl.wait()
        if run_dir is not None:  # a failure before the recover above leaves the whole run
            subprocess.run([str(ARFL), "chaos", "recover", str(run_dir)], timeout=180, check=False)
        for p in seen.values():
            with contextlib.suppress(psutil.Error):
                stop_pid(p.pid, create_time(p), grace_s=2.0)


def test_recover_stops_the_run_stack_of_a_dead_isolated_deployment(tmp_path: Path) -> None:
    # A network-isolated run has its own ZooKeeper + Kafka in <run dir>/stack (here on the
    # loopback: what matters is that a dead deployment's stack is found and stopped).
    run_dir = tmp_path / "runs" / "isolated-run"
    run_dir.mkdir(parents=True)
    harness = EmbeddedStack(run_dir / "stack")
    harness.start()
    try:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        (run_dir / "state.json").write_text(
            json.dumps({"run": run_dir.name, "pid": dead.pid, "replicas": {}})
        )
        st = load_state(layout_of(run_dir / "stack"))
        assert st is not None and all(is_alive(r) for r in st.services.values())
        records = list(st.services.values())
        assert runs_with_pending(tmp_path / "runs") == [run_dir]
        report = recover(run_dir)
        assert report.stopped == ["the run's own kafka and zookeeper"]
        assert not any(is_alive(r) for r in records)
        (ev,) = [
            e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "leftover-stopped"
        ]
        assert ev["process"] == "run-stack" and ev["services"] == ["kafka", "zookeeper"]
        assert runs_with_pending(tmp_path / "runs") == []
    finally:
        harness.stop()


@pytest.mark.needs_root(reason="network namespaces need root")
def test_recover_after_kill_9_while_the_isolated_stack_starts(tmp_path: Path) -> None:
    # A partition fault isolates the replicas: namespaces + bridge first, then the run's own
    # ZooKeeper + Kafka (seconds). arfl is killed before that stack answers; 'recover' over the
    # runs root must find the run and remove all of it. (Before the fix state.json was first
    # written after the stack started, and none of this was found.)
    # No standby: a standby lives in no replica's namespace, so network faults refuse it.
    spec = SPEC.replace('name = "leftover"', 'name = "early-kill"').replace("standby = 1\n", "")
    spec += '\n[[chaos]]\nat = "5m"\nfault = "partition"\nreplica = 0\nduration = "1s"\n'
    runs, run_dir, records = kill_deploy_while_its_stack_starts(spec, tmp_path)
    state = load_run_state(run_dir)
    iso = state.isolation
    try:
        assert iso is not None, "state.json does not record the isolation"
        assert left_behind(iso), "nothing of the isolation existed when arfl died"
        assert netns.namespaces_of_run(state.run)
        assert any(is_alive(rec) for rec in records), "no process of the run's stack left"
        assert runs_with_pending(runs) == [run_dir]
        r = arfl_ok("chaos", "recover", "--runs", str(runs))
        assert "stopped the run's own" in r.stdout, r.stdout
        assert left_behind(iso) == [] and not netns.namespaces_of_run(state.run)
        assert not any(is_alive(rec) for rec in records), r.stdout
        assert runs_with_pending(runs) == []
    finally:
        if iso is not None:
            netns.teardown_isolation(iso)
        for rec in records:
            with contextlib.suppress(psutil.Error):
                stop_pid(rec.pid, rec.create_time, grace_s=2.0)
