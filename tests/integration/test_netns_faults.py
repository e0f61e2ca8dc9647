"""Network isolation and network faults (partition, delay) against a real Kafka broker that
listens on the bridge address; recovery after the injector is SIGKILLed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_checks import forward_rules, left_behind

from arfl.errors import ExitCode, FaultError
from arfl.faults.base import FaultParams
from arfl.faults.runner import ChaosRunner, recover, runs_with_pending
from arfl.run.pending import PendingFaults
from arfl.run.rundir import read_jsonl
from arfl.run.state import IsolationState
from arfl.targets import netns
from arfl.targets.local import LocalTarget
from arfl.testing import EmbeddedStack
from arfl.testing.faults import write_state

pytestmark = pytest.mark.needs_root(reason="network namespaces need root")

RUN = f"nettest{os.getpid()}"

KAFKA_PROBE = """\
import sys
from confluent_kafka.admin import AdminClient
c = AdminClient({"bootstrap.servers": sys.argv[1], "socket.timeout.ms": 2000,
                 "socket.connection.setup.timeout.ms": 2000})
try:
    c.list_topics(timeout=3)
except Exception as e:
    print(e)
    sys.exit(1)
"""

CONNECT = """\
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
except OSError as e:
    print(e); sys.exit(1)
print(time.monotonic() - t)
"""

SERVER = """\
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
print("ready", flush=True)
while True:
    s.accept()[0].close()
"""


@dataclass
class Net:
    iso: IsolationState
    kafka: str
    run_dir: Path
    host_ip: str


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    iso = netns.create_isolation(RUN, [0, 1])
    host_ip = iso.host_address.split("/")[0]
    harness = EmbeddedStack(tmp_path_factory.mktemp("netstack"), host=host_ip)
    try:
        info = harness.start()
        run_dir = tmp_path_factory.mktemp("runs") / RUN
        write_state(
            run_dir,
            RUN,
            {
                i: {"driver_pid": os.getpid(), "netns": ns.name, "address": ns.address}
                for i, ns in iso.namespaces.items()
            },
            stack={"kafka": info.kafka, "zookeeper": info.zookeeper},
            isolation=iso,
        )
        yield Net(iso, info.kafka, run_dir, host_ip)
    finally:
        harness.stop()
        netns.teardown_isolation(iso)
    assert left_behind(iso) == []


def _kafka_ok(ns: str, bootstrap: str) -> bool:
    r = netns.run_in_netns(ns, [sys.executable, "-c", KAFKA_PROBE, bootstrap], capture_output=True)
    return r.returncode == 0


def _connect(ns: str, host: str, port: int) -> float | None:
    r = netns.run_in_netns(
        ns, [sys.executable, "-c", CONNECT, host, str(port)], capture_output=True, text=True
    )
    return float(r.stdout.strip()) if r.returncode == 0 else None


def _eventually(check: object, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.3)
    return False


def test_isolation_layout(net: Net) -> None:
    ns0 = net.iso.namespaces[0]
    r = netns.run_in_netns(ns0.name, ["ip", "-o", "route"], capture_output=True, text=True)
    assert "default" not in r.stdout  # no way out except the bridge's /24
    r = netns.run_in_netns(ns0.name, ["ip", "-o", "addr"], capture_output=True, text=True)
    assert "127.0.0.1" in r.stdout and ns0.address in r.stdout
    assert _kafka_ok(ns0.name, net.kafka)
    if shutil.which("iptables"):  # the bridge's own ACCEPT rule, ahead of a docker DROP policy
        assert len(forward_rules(net.iso.bridge)) == 1
    # the host-side default route is not reachable from inside
    host = socket.gethostbyname(socket.gethostname())
    if not host.startswith("127."):
        assert _connect(ns0.name, host, 22) is None


def test_partition_cuts_kafka_then_heals(net: Net) -> None:
    ns0 = net.iso.namespaces[0].name
    assert _kafka_ok(ns0, net.kafka)
    runner = ChaosRunner(LocalTarget.from_run_dir(net.run_dir))
    during: list[bool] = []
    pending: list[int] = []

    def look(_: object) -> None:
        pending.append(len(PendingFaults(net.run_dir).entries()))
        during.append(_kafka_ok(ns0, net.kafka))

    runner.run_fault(FaultParams("partition", replica=0, duration_s=0.1), on_injected=look)
    assert during == [False] and pending == [1]
    assert netns.link_is_up(net.iso.namespaces[0].veth_host or "") is True
    assert _eventually(lambda: _kafka_ok(ns0, net.kafka))
    assert not PendingFaults(net.run_dir).path.exists()
    # replica 1 was never cut
    assert _kafka_ok(net.iso.namespaces[1].name, net.kafka)


def test_partition_from_peers_only(net: Net) -> None:
    ns0, ns1 = net.iso.namespaces[0], net.iso.namespaces[1]
    port = 40100
    server = netns.popen_in_netns(
        ns1.name, [sys.executable, "-c", SERVER, ns1.address, str(port)], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None and server.stdout.readline().startswith(b"ready")
        assert _connect(ns0.name, ns1.address, port) is not None
        runner = ChaosRunner(LocalTarget.from_run_dir(net.run_dir))
        seen: dict[str, object] = {}

        def look(_: object) -> None:
            seen["peer"] = _connect(ns0.name, ns1.address, port)
            seen["kafka"] = _kafka_ok(ns0.name, net.kafka)
            seen["routes"] = netns.blackholes(ns0.name) + netns.blackholes(ns1.name)

        runner.run_fault(
            FaultParams.of("partition", replica=0, duration_s=0.1, from_=(1,)), on_injected=look
        )
        assert seen["peer"] is None  # peer cut
        assert seen["kafka"] is True  # everything else still flows
        assert seen["routes"] == [ns1.address, ns0.address]
        assert netns.blackholes(ns0.name) == [] and netns.blackholes(ns1.name) == []
        assert _connect(ns0.name, ns1.address, port) is not None
    finally:
        server.kill()
        server.wait(5)


def _has_netem(link: str) -> bool:
    try:
        netns.add_netem(link, 0.001)
    except FaultError:
        return False
    netns.del_root_qdisc(link)
    return True


def test_delay_adds_latency_or_says_netem_is_missing(net: Net) -> None:
    ns0 = net.iso.namespaces[0]
    link = ns0.veth_host or ""
    qdisc_before = netns.root_qdisc(link)
    host, port = net.kafka.rsplit(":", 1)
    runner = ChaosRunner(LocalTarget.from_run_dir(net.run_dir))
    params = FaultParams.of("delay", replica=0, duration_s=0.1, delay="100ms")
    if not _has_netem(link):
        with pytest.raises(FaultError, match=r"no netem qdisc.*CONFIG_NET_SCH_NETEM"):
            runner.run_fault(params)
        assert netns.root_qdisc(link) == qdisc_before
        assert not PendingFaults(net.run_dir).path.exists()
        pytest.skip("kernel has no sch_netem: checked the clear FaultError instead of the RTT")
    base = sorted(t for t in (_connect(ns0.name, host, int(port)) for _ in range(3)) if t)
    during: list[float] = []

    def look(_: object) -> None:
        during.extend(t for t in (_connect(ns0.name, host, int(port)) for _ in range(3)) if t)

    runner.run_fault(params, on_injected=look)
    print(f"connect RTT: before {base}, with +100ms {during}")
    assert min(during) >= base[0] + 0.08
    assert netns.root_qdisc(link) == qdisc_before


def _start_partition(run_dir: Path) -> subprocess.Popen[bytes]:
    """``arfl chaos inject RUN partition -r0 --duration 5m`` in the background, returned once
    it said the fault is injected (killed if it did not)."""
    arfl = Path(sys.executable).with_name("arfl")
    proc = subprocess.Popen(
        [str(arfl), "chaos", "inject", str(run_dir), "partition", "-r0", "--duration", "5m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "injected" not in line:
        proc.kill()
        proc.wait(10)
    assert "injected" in line, line
    return proc


def _second_partition(run_dir: Path) -> subprocess.CompletedProcess[str]:
    """``arfl chaos inject RUN partition -r0 --duration 1s`` while one is in place."""
    arfl = Path(sys.executable).with_name("arfl")
    cmd = [str(arfl), "chaos", "inject", str(run_dir), "partition", "-r0", "--duration", "1s"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == ExitCode.FAULT, r.stdout + r.stderr
    assert "refused, replica 0 is already under a partition that holds the same link" in r.stderr
    return r


def test_sigkilled_injector_then_recover_heals(net: Net) -> None:
    ns0 = net.iso.namespaces[0]
    proc = _start_partition(net.run_dir)
    try:
        assert netns.link_is_up(ns0.veth_host or "") is False
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # the injector is gone and the fault is still in place, owed in the pending file
    assert netns.link_is_up(ns0.veth_host or "") is False
    assert [e["kind"] for e in PendingFaults(net.run_dir).entries()] == ["partition"]
    # a second partition of the replica would be lifted by the first's revert: refused, and
    # the user is told how to lift the one left behind
    assert f"arfl chaos recover {net.run_dir}" in _second_partition(net.run_dir).stderr
    assert netns.link_is_up(ns0.veth_host or "") is False
    assert [e["kind"] for e in PendingFaults(net.run_dir).entries()] == ["partition"]
    report = recover(net.run_dir)
    assert len(report.reverted) == 1 and report.removed_network == []  # deploy (we) still up
    assert netns.link_is_up(ns0.veth_host or "") is True
    assert not PendingFaults(net.run_dir).path.exists()
    assert _eventually(lambda: _kafka_ok(ns0.name, net.kafka))
    events = read_jsonl(net.run_dir / "journal.jsonl")
    assert events[-1]["event"] == "fault-reverted" and events[-1]["recovered"] is True


def test_sigterm_reverts(net: Net) -> None:
    ns0 = net.iso.namespaces[0]
    proc = _start_partition(net.run_dir)
    try:
        assert netns.link_is_up(ns0.veth_host or "") is False
        assert f"(pid {proc.pid}) reverts it" in _second_partition(net.run_dir).stderr
        assert netns.link_is_up(ns0.veth_host or "") is False  # the refusal lifted nothing
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 130
    assert netns.link_is_up(ns0.veth_host or "") is True
    assert not PendingFaults(net.run_dir).path.exists()


def _dead_pid() -> int:
    """The pid of a process that has exited (a deployment or injector that is gone)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_recover_removes_isolation_of_a_dead_deployment(tmp_path: Path) -> None:
    run = f"orphan{os.getpid()}"
    iso = netns.create_isolation(run, [0])
    try:
        dead = _dead_pid()
        run_dir = write_state(tmp_path / run, run, {0: {}}, pid=dead, isolation=iso)
        target = LocalTarget.from_run_dir(run_dir)
        runner = ChaosRunner(target)
        # leave a partition behind as if the process had died mid-fault
        fault, record = runner.plan(FaultParams("partition", replica=0, duration_s=1))
        runner.pending.add("partition", 0, record)
        fault.inject(target)
        assert runs_with_pending(tmp_path) == [run_dir]
        report = recover(run_dir, force=True)
        assert len(report.reverted) == 1
        assert set(report.removed_network) >= {iso.bridge, iso.namespaces[0].name}
        assert left_behind(iso) == []
        assert runs_with_pending(tmp_path) == []
    finally:
        netns.teardown_isolation(iso)


def test_bare_recover_finds_isolation_of_a_dead_deployment(tmp_path: Path) -> None:
    run = f"orphanb{os.getpid()}"
    iso = netns.create_isolation(run, [0, 1])
    try:
        dead = _dead_pid()
        write_state(tmp_path / run, run, {0: {}, 1: {}}, pid=dead, isolation=iso)
        assert runs_with_pending(tmp_path) == [tmp_path / run]  # no pending file, but orphans
        arfl = Path(sys.executable).with_name("arfl")
        r = subprocess.run(
            [str(arfl), "chaos", "recover", "--runs", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert iso.bridge in r.stdout
        assert left_behind(iso) == []
    finally:
        netns.teardown_isolation(iso)


def test_stack_down_undoes_a_dead_deployments_partition_and_network(tmp_path: Path) -> None:
    run = f"orphand{os.getpid()}"
    iso = netns.create_isolation(run, [0])
    try:
        dead = _dead_pid()
        run_dir = write_state(tmp_path / run, run, {0: {}}, pid=dead, isolation=iso)
        runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
        fault, record = runner.plan(FaultParams("partition", replica=0, duration_s=1))
        entry = runner.pending.add("partition", 0, record)
        fault.inject(LocalTarget.from_run_dir(run_dir))
        # The injector is gone too (as after kill -9 of the whole arfl).
        data = json.loads(runner.pending.path.read_text())
        (owed,) = [e for e in data["faults"] if e["id"] == entry]
        owed["owner_pid"] = dead
        runner.pending.path.write_text(json.dumps(data))
        arfl = Path(sys.executable).with_name("arfl")
        r = subprocess.run(
            [str(arfl), "stack", "down", "--state", str(tmp_path / "nostack"),
             "--runs", str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "reverted partition" in r.stdout and iso.bridge in r.stdout
        assert left_behind(iso) == []
        assert runs_with_pending(tmp_path) == []
    finally:
        netns.teardown_isolation(iso)


def test_network_fault_without_isolation_is_a_clear_error(tmp_path: Path) -> None:
    run_dir = write_state(tmp_path / "plain", "plain", {0: {"driver_pid": os.getpid()}})
    runner = ChaosRunner(LocalTarget.from_run_dir(run_dir))
    with pytest.raises(FaultError, match="not network-isolated"):
        runner.run_fault(FaultParams("partition", replica=0, duration_s=1))
    assert threading.active_count() >= 1
