"""The docker target end to end: two active replicas, each in a container of its own (driver,
local-cluster worker and executor JVMs inside), on a docker network the run creates, its
ZooKeeper and Kafka on that network's gateway. Every fault acts on a container through the
docker SDK; a sampler polls the docker daemon independently of arfl to see each fault's effect
and its revert. A ``kill -9`` of arfl during a container pause and partition, then
``arfl chaos recover``, leaves nothing of the run behind.

Needs a docker daemon (``scripts/docker-up`` starts one; ``.ci/run`` calls it). Without one the
tests skip, unless ``ARFL_REQUIRE_DOCKER=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deploy_checks import (
    arfl_ok,
    behind_over_time,
    check_silent_then_resumed,
    journal_events,
    kill_deploy_while_its_stack_starts,
    read_state,
    realtime_spec,
    received_over_time,
    start_deploy,
    wait_for,
    wait_run_dir,
)

from arfl.configs.spec import Spec
from arfl.errors import FaultError
from arfl.faults.base import FaultParams
from arfl.faults.runner import ChaosRunner
from arfl.orchestrate.deploy import DeployOptions, DeployResult, deploy
from arfl.report.build import build_report
from arfl.run.rundir import read_jsonl
from arfl.targets import docker as dk
from arfl.targets import netns
from arfl.targets.cgroups import SHARE_PERIOD_US
from arfl.targets.local import LocalTarget

pytestmark = pytest.mark.integration

ARFL = Path(sys.executable).with_name("arfl")


@pytest.fixture(scope="module")
def docker_daemon() -> None:
    try:
        dk.client()
    except FaultError as e:
        if os.environ.get("ARFL_REQUIRE_DOCKER") == "1":
            pytest.fail(f"ARFL_REQUIRE_DOCKER=1 but {e}")
        pytest.skip(str(e))


def _spec(name: str, duration: str, chaos: list[dict[str, Any]], warmup: str, **extra: Any) -> Spec:
    # Real-time mode: both replicas stream every record, so the output goes on when one is
    # lost. (Whether the loss is *masked* by DESIGN §4 is not asserted: on 2 cores it was not
    # in 5 of 6 runs, in every active mode; see docs/benchmarks.md.)
    return realtime_spec(
        name,
        duration,
        spark={"target": "docker"},
        workload={"rate": 200, "warmup": warmup},
        chaos=chaos,
        **extra,
    )


SHARE = 0.9
"""Each replica container's CPU quota in the faults test (cores): 9 ms per 10-ms period."""


@dataclass
class Sample:
    t: float
    replica: int
    """The replica label's, or ``-1 - K`` for standby K's container (labels never change)."""
    id: str
    status: str
    cpu_quota: int
    networks: list[str]
    name: str = ""
    cpu_shares: int = 0
    """The container's CFS weight (0: docker's default)."""


@dataclass
class Sampler:
    """Polls the daemon for the run's containers (by label), apart from arfl's own code."""

    run: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self) -> None:
        import docker

        c = docker.from_env()
        while not self.stop.is_set():
            if self.run:
                try:  # a container may go between listing and inspecting (a restart)
                    self._sample(c)
                except Exception as e:
                    self.errors.append(f"{time.time():.1f} {type(e).__name__}: {e}")
            self.stop.wait(0.25)

    def _sample(self, c: Any) -> None:
        flt = {"label": f"{dk.LABEL_RUN}={self.run[0]}"}
        for ctr in c.containers.list(all=True, filters=flt):
            attrs = ctr.attrs
            labels = ctr.labels
            if dk.LABEL_REPLICA in labels:
                replica = int(labels[dk.LABEL_REPLICA])
            else:
                replica = -1 - int(labels[dk.LABEL_STANDBY])
            self.samples.append(
                Sample(
                    time.time(),
                    replica,
                    ctr.id,
                    ctr.status,
                    int(attrs["HostConfig"].get("CpuQuota") or 0),
                    sorted(attrs["NetworkSettings"]["Networks"]),
                    ctr.name,
                    int(attrs["HostConfig"].get("CpuShares") or 0),
                )
            )

    def of(self, replica: int, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if s.replica == replica and start <= s.t <= end]


@pytest.fixture
def sampler() -> Iterator[Sampler]:
    s = Sampler()
    th = threading.Thread(target=s.loop, daemon=True)
    th.start()
    yield s
    s.stop.set()
    th.join(timeout=5)


def _window(run: Path, kind: str) -> tuple[float, float]:
    [inj] = [e for e in journal_events(run, "fault-injected") if e["kind"] == kind]
    [rev] = [e for e in journal_events(run, "fault-reverted") if e["kind"] == kind]
    # From the injection's end to the revert's start: the fault in full effect.
    return float(inj["ended"]), float(rev["started"])


def _deploy_sampled(spec: Spec, sampler: Sampler, tmp_path: Path) -> DeployResult:
    """Deploy ``spec``, the sampler following the run's containers from its creation."""
    return deploy(
        spec,
        None,
        DeployOptions(runs_root=tmp_path),
        on_run_dir=lambda d: sampler.run.append(d.name),
    )


def _output_exact(result: DeployResult) -> None:
    """Complete, exact and nothing twice by the deploy's own independent check (no Spark, no
    replica code; it read the final topic before the run's stack went with the run)."""
    s = result.summary
    assert s["divergent"] == 0 and s["bad_records"] == 0
    check: dict[str, Any] = json.loads((result.run_dir / "check.json").read_text())
    assert check["ok"] is True, check
    assert check["missing"] == check["duplicates"] == check["wrong"] == 0, check
    assert check["results"] == s["results"] > 0


def test_container_faults_show_their_effect_and_revert(
    docker_daemon: None, sampler: Sampler, tmp_path: Path
) -> None:
    # No session stack: the docker target starts its own on the run's network.
    spec = _spec(
        "dock",
        "92s",
        [
            # After a steady phase long enough to compare with (Spark's first real-time batches
            # leave a backlog: the warm-up), replica 1's container is killed for good; the
            # output goes on.
            {"at": "52s", "fault": "kill-replica", "replica": 1, "restart": False},
            {"at": "60s", "fault": "pause", "replica": 0, "duration": "4s"},
            {"at": "68s", "fault": "partition", "replica": 0, "duration": "4s"},
            {"at": "76s", "fault": "slow", "replica": 0, "duration": "4s", "cpu": 20},
            # and the survivor's container is killed: the supervisor starts a new one.
            {"at": "84s", "fault": "kill-replica", "replica": 0},
        ],
        warmup="40s",
        placement={"cpus_per_replica": SHARE},
    )
    result = _deploy_sampled(spec, sampler, tmp_path)
    run = result.run_dir
    journal = read_jsonl(run / "journal.jsonl")
    net = next(e for e in journal if e["event"] == "docker-network-created")
    image = next(e for e in journal if e["event"] == "docker-image")
    assert image["image"].startswith(dk.RUNTIME_REPO + ":")
    assert next(e for e in journal if e["event"] == "run-stack-started")["kafka"].startswith(
        net["gateway"] + ":"
    )
    # Each replica ran in its own container, at its own address on the run's network.
    ids = {r: {s.id for s in sampler.samples if s.replica == r} for r in (0, 1)}
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    assert all(s.networks in ([net["network"]], []) for s in sampler.samples)
    timing = {
        r: json.loads((run / "replicas" / f"replica-{r}.container.json").read_text())
        for r in (0, 1)
    }
    assert {t["name"] for t in timing.values()} == set(net["containers"].values())

    injected = journal_events(run, "fault-injected")
    kinds = ["kill-replica", "pause", "partition", "slow", "kill-replica"]
    assert [e["kind"] for e in injected] == kinds
    assert all(e["details"].get("container") for e in injected), injected
    # pause: frozen while paused (the daemon says so), its output silent; running after.
    p0, p1 = _window(run, "pause")
    during = sampler.of(0, p0 + 0.3, p1 - 0.3)
    assert {s.status for s in during} == {"paused"}, (during, sampler.errors[-5:])
    assert {s.status for s in sampler.of(0, p1 + 1, p1 + 3)} == {"running"}
    check_silent_then_resumed(run, 0, p0, p1)
    # placement: every container of either replica (replica 0's second one too) was created
    # under its share's quota, and kept it outside the slow fault's window.
    share_quota = round(SHARE * SHARE_PERIOD_US)
    s0, s1 = _window(run, "slow")
    outside = [s for s in sampler.samples if not s0 - 0.5 <= s.t <= s1 + 0.5]
    assert {s.cpu_quota for s in outside} == {share_quota}, sampler.errors[-3:]
    assert {s.id for s in outside} == ids[0] | ids[1]
    # slow: the container's CPU quota is 20 ms per 100 ms while slowed (cpu = 20), nested in
    # the share; the share's quota again after.
    assert {s.cpu_quota for s in sampler.of(0, s0 + 0.3, s1 - 0.3)} == {20_000}
    assert {s.cpu_quota for s in sampler.of(0, s1 + 1, s1 + 3)} == {share_quota}
    # partition: replica 0's container is off the run's network, silent; reconnected after.
    c0, c1 = _window(run, "partition")
    assert {tuple(s.networks) for s in sampler.of(0, c0 + 0.3, c1 - 0.3)} == {()}
    assert {tuple(s.networks) for s in sampler.of(0, c1 + 1, c1 + 3)} == {(net["network"],)}
    check_silent_then_resumed(run, 0, c0, c1)
    # kill-replica: replica 1's container was killed and stayed down (restart = false);
    # replica 0's was killed and the supervisor started a new container for it.
    assert len(ids[1]) == 1 and len(ids[0]) == 2, ids
    died = journal_events(run, "replica-died")
    assert [(e["replica"], e["exit_code"]) for e in died] == [(1, -9), (0, -9)], died
    assert [e["replica"] for e in journal_events(run, "replica-restarted")] == [0]

    # The output: complete and nothing twice, although a container was killed; the output
    # went on through the kill (the other replica's), and the report judged the kill against
    # a usable steady state (the verdict 'arfl report' prints; masked or not, see the spec).
    _output_exact(result)
    s = result.summary
    # The summary: each replica's share and a use within it (what its processes were seen to
    # use, over the time from the replicas' start to the stop).
    placement = s["placement"]
    assert placement["cpus_per_replica"] == SHARE and placement["quota"] == "container"
    for r in (0, 1):
        g = placement["groups"][f"replica-{r}"]
        assert g["share_cores"] == SHARE and g["cpu_s"] > 0, g
        assert 0 < g["used_cores"] <= SHARE + 0.05, g
    report = build_report(run)
    kill = report.faults[0]
    assert kill.kind == "kill-replica" and kill.masked is not None, kill.verdict
    [steady] = [p for p in report.phases if p.name == "steady"]
    [phase] = [p for p in report.phases if p.name == "fault-1"]
    assert phase.count > 0 and phase.max_gap_ms is not None
    assert steady.results_per_s and phase.results_per_s
    # The output went on at the input's pace over the 8 s after the kill (replica 1 never came
    # back: without the survivor the output would have stopped for the rest of the run). Its
    # longest gap there is the survivor's own batch-boundary stall, unmasked now: 0.4-3.7 s
    # measured for a container on 2 cores (docs/benchmarks.md, "Masking a container kill"; CI
    # saw 2.6 s), against ~30 s for a single replica's restart.
    assert phase.results_per_s > 0.8 * steady.results_per_s, (phase, steady)
    assert phase.max_gap_ms < 5_000, (phase.max_gap_ms, kill.verdict)
    # The paused replica caught up (docs/design.md): from the merger second it was healthy on,
    # the first at which it trailed the output by no more than its steady allowance -- as the
    # monitor's trail shows, after the unpause and before the partition 4 s later.
    pause = report.faults[1]
    assert pause.kind == "pause" and pause.caught_up_lag_ms is not None, pause
    assert pause.healthy_s is not None and pause.caught_up_s is not None, pause
    assert 4.0 <= pause.healthy_s <= pause.caught_up_s <= 8.0, pause
    paused_at = float(injected[1]["started"])
    lags = behind_over_time(run, 0)
    (lag_then,) = [lag for t, lag in lags if abs(t - (paused_at + pause.caught_up_s)) < 1e-3]
    assert lag_then <= pause.caught_up_lag_ms, (lag_then, pause)
    since_healthy = [
        lag
        for t, lag in lags
        if paused_at + pause.healthy_s - 1e-3 <= t < paused_at + pause.caught_up_s - 1e-3
    ]
    assert all(lag > pause.caught_up_lag_ms for lag in since_healthy), (since_healthy, pause)

    # Nothing of the run is left: no container, no network.
    assert dk.run_leftovers(run.name) == []
    assert journal_events(run, "docker-removed")


def test_a_standby_container_takes_a_killed_replica_over(
    docker_daemon: None, sampler: Sampler, tmp_path: Path
) -> None:
    # The keys a user writes and nothing else: arfl chooses a standby and the interval; each
    # replica (and the standby) on a CPU share of its own.
    spec = realtime_spec(
        "dock-sb",
        "40s",
        interval_s=None,
        spark={"target": "docker"},
        workload={"rate": 200, "warmup": "14s"},
        chaos=[
            {"at": "20s", "fault": "kill-replica", "replica": 0},
            # The other one paused: the promoted standby serves alone meanwhile.
            {"at": "26s", "fault": "pause", "replica": 1, "duration": "5s"},
        ],
        placement={"cpus_per_replica": 0.6},
    )
    assert spec.replication.standby == 1
    result = _deploy_sampled(spec, sampler, tmp_path)
    run = result.run_dir
    net = journal_events(run, "docker-network-created")[0]
    # The first standby; its successor may be ready before the end too.
    ready = journal_events(run, "standby-ready")[0]
    [died] = journal_events(run, "replica-died")
    assert (died["replica"], died["exit_code"]) == (0, -9), died
    # The standby took the replica over at once (no new container, no new application) ...
    [took] = [e for e in journal_events(run, "replica-started") if e.get("standby") is not None]
    assert (took["replica"], took["standby"]) == (0, ready["standby"]), took
    assert took["t"] - died["t"] < 2.0, (died, took)
    # ... and its container became the replica's: renamed, at its own address, still on its
    # share; the next replica-0 container is the standby's, never a new one.
    [promoted] = journal_events(run, "standby-promoted")
    assert promoted["replica"] == 0 and promoted["standby"] == ready["standby"], promoted
    standby_ids = {s.id for s in sampler.samples if s.replica == -1 - ready["standby"]}
    assert len(standby_ids) == 1, standby_ids
    replica0 = net["containers"]["0"]
    named = [s for s in sampler.samples if s.name == replica0 and s.t > promoted["t"] + 0.5]
    assert named and {s.id for s in named} == standby_ids, named[:3]
    # It waited at a standby's CPU weight and serves at a replica's.
    waiting = [s for s in sampler.samples if s.id in standby_ids and s.t < died["t"]]
    assert waiting and {s.cpu_shares for s in waiting} == {dk.STANDBY_CPU_SHARES}, waiting[:3]
    started = journal_events(run, "standby-started")[0]
    assert started["cpu_shares"] == dk.STANDBY_CPU_SHARES and started["nice"] == 0, started
    assert {s.cpu_shares for s in named} == {dk.DEFAULT_CPU_SHARES}, named[:3]
    assert {s.cpu_quota for s in sampler.samples} == {round(0.6 * SHARE_PERIOD_US)}
    state = read_state(run)
    assert state is not None
    assert state["docker"]["addresses"]["0"] == dk.standby_address(net["subnet"], ready["standby"])

    # The output went on through the kill and is complete and exact.
    _output_exact(result)
    report = build_report(run)
    assert [f.kind for f in report.faults] == ["kill-replica", "pause"]
    for i, fault in enumerate(report.faults, 1):
        assert fault.masked is not None, fault.verdict
        [phase] = [p for p in report.phases if p.name == f"fault-{i}"]
        assert phase.max_gap_ms is not None and phase.max_gap_ms < 2_000, (phase, fault.verdict)
    # While replica 1 was paused, the promoted standby's results went out.
    p0, p1 = _window(run, "pause")
    check_silent_then_resumed(run, 1, p0, p1)
    by_promoted = [n for t, n in received_over_time(run, 0) if p0 + 1 <= t <= p1]
    assert by_promoted and by_promoted[-1] > by_promoted[0], by_promoted
    assert dk.run_leftovers(run.name) == []


SPEC_TOML = """\
name = "dock-left"

[source]
topic = "clicks"
partitions = 2

[[steps]]
filter = "amount > 10"

[sink]
topic = "clicks-out"

[replication]
mode = "active"
replicas = 2

[spark]
master = "local-cluster[1,1,1024]"
target = "docker"

[workload]
rate = 50
duration = "10m"
keys = 10
warmup = "2s"

[[chaos]]
at = "4s"
fault = "pause"
replica = 1
duration = "10m"

[[chaos]]
at = "4s"
fault = "partition"
replica = 0
duration = "10m"
"""


def test_recover_after_kill_9_unpauses_reconnects_and_removes_the_run(
    docker_daemon: None, tmp_path: Path
) -> None:
    import docker

    arfl, runs, log = start_deploy(SPEC_TOML, tmp_path)
    run_dir: Path | None = None
    try:
        run_dir = wait_run_dir(arfl, runs, log)
        wait_for(
            "both faults injected",
            lambda: len(journal_events(run_dir, "fault-injected")) == 2,
            300,
            arfl,
            log,
        )
        st = read_state(run_dir)
        assert st is not None and st["docker"]
        names = {int(k): v for k, v in st["docker"]["containers"].items()}
        c = docker.from_env()
        assert c.containers.get(names[1]).status == "paused"
        assert not c.containers.get(names[0]).attrs["NetworkSettings"]["Networks"]
        # 'arfl chaos list' names each container and its state.
        listing = subprocess.run(
            [str(ARFL), "chaos", "list", str(run_dir), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        shown = {r["index"]: r["container"] for r in json.loads(listing.stdout)["replicas"]}
        assert shown[1] == f"{names[1]} paused" and shown[0] == f"{names[0]} running", shown
        # delay acts on the host end of the container's veth: a clear error where the kernel
        # has no netem (as here), else a netem qdisc there for the duration.
        delay = subprocess.run(
            [
                str(ARFL),
                "chaos",
                str(run_dir),
                "delay",
                "--replica",
                "1",
                "--delay",
                "50ms",
                "--duration",
                "1s",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if delay.returncode != 0:
            assert "netem" in delay.stdout + delay.stderr, delay.stdout + delay.stderr

        # kill-executor: an executor JVM among replica 0's container processes is SIGKILLed
        # and its local-cluster worker (in the container) starts a replacement.
        target = LocalTarget.from_run_dir(run_dir)
        before = target.executor_pids(0)
        assert before, "no executor JVM in replica 0's container"
        arfl_ok("chaos", str(run_dir), "kill-executor", "--replica", "0")
        [killed] = [
            e for e in journal_events(run_dir, "fault-injected") if e["kind"] == "kill-executor"
        ]
        assert killed["details"]["pid"] in before.values()
        assert killed["details"]["container"] == names[0]
        after = target.executor_pids(0)
        assert after and killed["details"]["pid"] not in after.values(), (before, after)

        # kill-replica of the partitioned replica 0: its restarted container (a new one, same
        # name) starts cut off, as a restarted replica in a namespace does, and holds the cut.
        old_id = c.containers.get(names[0]).id
        arfl_ok("chaos", str(run_dir), "kill-replica", "--replica", "0")

        def restarted() -> Any:
            with contextlib.suppress(docker.errors.NotFound):
                ctr = c.containers.get(names[0])
                return ctr if ctr.id != old_id and ctr.status == "running" else None
            return None

        new = wait_for("replica 0's container restarted", restarted, 120, arfl, log)
        assert [e["replica"] for e in journal_events(run_dir, "replica-restarted")] == [0]
        time.sleep(2)
        new.reload()
        assert not new.attrs["NetworkSettings"]["Networks"], new.attrs["NetworkSettings"]
        assert "starts partitioned" in (run_dir / "logs" / "replica-0.log").read_text()

        # partition with from: blackhole routes inside both containers' namespaces (found by
        # container id), gone after the revert; the disconnect of replica 0 stays.
        seen: dict[str, list[str]] = {}

        def look(_: object) -> None:
            for r in (0, 1):
                seen[f"r{r}"] = netns.blackholes(dk.netns_path(dk.container(names[r])))

        runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
        runner.run_fault(
            FaultParams.of("partition", replica=1, duration_s=0.2, from_=(0,)), on_injected=look
        )
        addrs = {int(k): v for k, v in st["docker"]["addresses"].items()}
        assert seen == {"r0": [addrs[1]], "r1": [addrs[0]]}, seen
        for r in (0, 1):
            assert netns.blackholes(dk.netns_path(dk.container(names[r]))) == []
        assert not c.containers.get(names[0]).attrs["NetworkSettings"]["Networks"]

        os.kill(arfl.pid, signal.SIGKILL)
        arfl.wait(timeout=10)
        time.sleep(1)
        # The defect this guards against: the faults and the containers outlive arfl.
        assert dk.run_leftovers(run_dir.name)
        assert c.containers.get(names[1]).status == "paused"

        rec = subprocess.run(
            [str(ARFL), "chaos", "recover", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert rec.returncode == 0, rec.stdout + rec.stderr
        assert dk.run_leftovers(run_dir.name) == [], rec.stdout
        flt = {"label": f"{dk.LABEL_RUN}={run_dir.name}"}
        assert c.containers.list(all=True, filters=flt) == []
        assert c.networks.list(filters=flt) == []
        assert not (run_dir / "pending-faults.json").exists()
        by_recover = {
            e["kind"] for e in journal_events(run_dir, "fault-reverted") if e.get("recovered")
        }
        assert by_recover == {"pause", "partition"}, by_recover
    finally:
        if arfl.poll() is None:
            arfl.kill()
            arfl.wait()
        if run_dir is not None:
            subprocess.run([str(ARFL), "chaos", "recover", "--force", str(run_dir)],
                           capture_output=True, timeout=180, check=False)  # fmt: skip
            dk.remove_run(run_dir.name)


def test_recover_after_kill_9_while_the_run_stack_starts(
    docker_daemon: None, tmp_path: Path
) -> None:
    # The docker network exists, the run's own stack is starting on its gateway, no container
    # yet: recover over the runs root finds the run, removes the network (by label) and stops
    # the stack. (Before, state.json was first written after the stack started.)
    from arfl.processes import stop_pid
    from arfl.run.state import load_state as load_run_state
    from arfl.stack.processes import is_alive

    spec = SPEC_TOML.replace('name = "dock-left"', 'name = "dock-early"')
    runs, run_dir, records = kill_deploy_while_its_stack_starts(spec, tmp_path)
    try:
        state = load_run_state(run_dir)
        assert state.docker is not None and state.on_docker
        assert dk.run_leftovers(state.run), "no docker network existed when arfl died"
        assert any(is_alive(rec) for rec in records), "no process of the run's stack left"
        r = arfl_ok("chaos", "recover", "--runs", str(runs), timeout=180)
        assert "stopped the run's own" in r.stdout, r.stdout
        assert dk.run_leftovers(state.run) == [], r.stdout
        assert not any(is_alive(rec) for rec in records)
    finally:
        dk.remove_run(run_dir.name)
        for rec in records:
            stop_pid(rec.pid, rec.create_time, grace_s=2.0)


def test_remote_standalone_cluster_in_a_container(docker_daemon: None, tmp_path: Path) -> None:
    """A ``spark://`` master of a cluster arfl did not start (given on the command line): the
    driver (host, client mode) listens on the host's address towards the master, executors in
    the cluster's container reach it over the network. Passive's driver kill restarts from the
    checkpoint (complete, exact output) and a kill-executor there goes through the master and
    is replaced by the worker."""
    from deploy_checks import check_against_offline, windowed_spec

    from arfl.targets.local import executors_of_app
    from arfl.testing.docker_cluster import DockerSparkCluster

    with DockerSparkCluster(tmp_path / "cluster") as cluster:
        assert cluster.stack is not None and cluster.net is not None
        spec = windowed_spec(
            "remote",
            mode="passive",
            duration="26s",
            source={"partitions": 4},
            stack={
                "kind": "external",
                "kafka": cluster.stack.kafka,
                "zookeeper": cluster.stack.zookeeper,
            },
            chaos=[
                {"at": "5s", "fault": "kill-executor", "replica": 0},
                {"at": "14s", "fault": "kill-replica", "replica": 0},
            ],
        )
        opts = DeployOptions(runs_root=tmp_path / "runs", master=cluster.master_url)
        result = deploy(spec, None, opts)
        run = result.run_dir
        journal = read_jsonl(run / "journal.jsonl")
        apps = [e["app_id"] for e in journal if e["event"] == "replica-ready"]
        assert len(apps) == 2 and apps[0] != apps[1], apps
        # The master removes an application's executors (JVMs in the cluster's container, host
        # processes to psutil) once its driver is gone: the killed one's, and the restarted
        # one's after the deployment stopped. Nothing of either is left on the worker.
        deadline = time.monotonic() + 60
        while any(map(executors_of_app, apps)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(map(executors_of_app, apps)), {a: executors_of_app(a) for a in apps}
        logs = cluster.container.logs().decode(errors="replace")
        # The executors were launched in the container, told to reach the driver at the host's
        # address on the cluster's network (its gateway), not at loopback.
        assert f"spark://CoarseGrainedScheduler@{cluster.net.gateway}:" in logs, logs[-3000:]
        [inj] = [e for e in journal_events(run, "fault-injected") if e["kind"] == "kill-executor"]
        [rev] = [e for e in journal_events(run, "fault-reverted") if e["kind"] == "kill-executor"]
        # On a spark:// cluster the driver asked the master to kill it (no pid was signalled),
        # and the worker killed it on the master's order and launched a replacement for the
        # same application.
        details = inj["details"]
        assert details["via"] == "spark" and "pid" not in details, details
        assert details["executor"] in details["executors_before"], details
        new = rev["details"]["replacement_executor"]
        assert rev["details"]["replacement_s"] is not None, rev
        assert new not in (None, details["executor"]), rev
        assert rev["details"]["via"] == "spark" and "pid" not in rev["details"], rev
        assert f"Asked to kill executor {apps[0]}/{details['executor']}" in logs, logs[-3000:]
        assert f"Asked to launch executor {apps[0]}/{new}" in logs, logs[-3000:]
        assert "finished with state KILLED" in logs, logs[-3000:]
        assert result.summary["master"] == cluster.master_url
        kinds = [e["event"] for e in journal]
        assert kinds.count("replica-died") == 1 and kinds.count("replica-restarted") == 1
        # The executor's loss was retried inside the application: the one driver that died
        # is the one kill-replica killed.
        [killed] = [e for e in journal_events(run, "fault-injected") if e["kind"] == "kill-replica"]
        died = next(e for e in journal if e["event"] == "replica-died")
        assert died["t"] >= killed["started"] and died["exit_code"] == -9, (died, killed)
        assert result.summary["replica_restarts"] == 1
        # Complete and exact although the restarted driver re-emitted some results.
        assert result.summary["divergent"] == 0
        check_against_offline(cluster.stack, spec, result)
        # A lone replica's kill is never called masked. Here it can hardly be judged: the
        # first fault comes 3 s after a 2-s warm-up, before the micro-batches delivered a
        # steady state's 100 results, and the report then says unknown rather than judge on
        # nothing; the kill's effect is seen either way.
        kill = next(f for f in build_report(run).faults if f.kind == "kill-replica")
        assert kill.masked is not True, kill.verdict
        assert kill.outcome in ("not masked", "unknown") and kill.effect_seen, kill
    # The restarted query continued the same checkpoint: one query id, two runs, and its first
    # batch after the restart did not start from offset 0 again.
    ckpt = run / "checkpoints" / "replica-0"
    assert (ckpt / "offsets").is_dir() and (ckpt / "commits").is_dir()
    progress = read_jsonl(run / "progress" / "replica-0.jsonl")
    assert len({p["id"] for p in progress}) == 1
    assert len({p["runId"] for p in progress}) == 2
    starts = [p["sources"][0].get("startOffset") for p in progress if p.get("sources")]
    assert starts.count(None) <= 1
    assert dk.run_leftovers(cluster.name) == []


BASE_IMAGE = "python:3.11-slim-bookworm"


def test_users_dockerfile_builds_where_its_base_image_exists(docker_daemon: None) -> None:
    """images/Dockerfile (for ``[docker] image``) builds and has arfl and pyspark; nothing can
    be pulled here, so only where its base image is already on the docker host."""
    import docker

    c = docker.from_env()
    if not c.images.list(name=BASE_IMAGE):
        pytest.skip(f"base image {BASE_IMAGE} is not on this docker host (nothing is pulled)")
    root = Path(__file__).resolve().parents[2]
    tag = "arfl-replica:test"
    c.images.build(path=str(root), dockerfile="images/Dockerfile", tag=tag, rm=True)
    try:
        out = c.containers.run(
            tag, ["python3", "-c", "import arfl, pyspark; print(pyspark.__version__)"], remove=True
        )
        assert out.decode().strip().startswith("4.")
    finally:
        c.images.remove(tag, force=True)
