"""The docker target's pure parts: the runtime image's content, mounts, the container's
environment, the state it records, and the spec checks (the daemon is exercised in
tests/integration/test_docker_target.py)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from arfl.configs.load import parse_spec
from arfl.errors import FaultError, SpecError
from arfl.orchestrate.drivers import STANDBY
from arfl.orchestrate.launcher import container_env
from arfl.orchestrate.network import RunNetwork
from arfl.run.state import DockerNetState, parse_state, to_json
from arfl.targets import docker as dk

MINIMAL: dict[str, object] = {
    "name": "t",
    "source": {"topic": "in"},
    "sink": {"topic": "out"},
    "replication": {"mode": "active", "replicas": 2},
}


def test_runtime_image_is_mount_points_and_the_hosts_merged_usr_links() -> None:
    with tarfile.open(fileobj=io.BytesIO(dk._runtime_tar())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert all(m.isdir() for n, m in members.items() if n in ("tmp", "proc", "sbin", "root"))
    assert members["tmp"].mode == 0o1777
    # /sbin is a directory of the image (docker mounts its init there), never a host link.
    for d in ("bin", "lib", "lib64"):
        if os.path.islink(f"/{d}"):
            assert members[d].issym() and members[d].linkname == os.readlink(f"/{d}")
        else:
            assert d not in members
    # Content-addressed: the same recipe gives the same tag.
    assert dk.runtime_tag() == dk.runtime_tag()
    assert dk.runtime_tag().startswith(dk.RUNTIME_REPO + ":")


def _mounts(*args: object, **kw: object) -> dict[str, bool]:
    return {m["Target"]: m["ReadOnly"] for m in dk.mounts_for(*args, **kw)}  # type: ignore[arg-type]


def test_mounts_once_each_read_only_except_the_run(tmp_path: Path) -> None:
    (tmp_path / "venv" / "lib").mkdir(parents=True)
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    got = _mounts(
        [tmp_path / "venv", tmp_path / "venv" / "lib", tmp_path / "missing"],
        [tmp_path / "runs" / "r1"],
    )
    assert got[str(tmp_path / "venv")] is True
    assert str(tmp_path / "venv" / "lib") not in got  # under a mounted directory
    assert str(tmp_path / "missing") not in got
    assert got[str(tmp_path / "runs" / "r1")] is False
    assert got.get("/usr") is True and "/etc" in got
    assert not any(os.path.islink(t) for t in got)  # merged-/usr links live in the image


def test_a_writable_directory_inside_a_read_only_one_is_mounted_over_it(tmp_path: Path) -> None:
    (tmp_path / "repo" / "runs").mkdir(parents=True)
    got = _mounts([tmp_path / "repo"], [tmp_path / "repo" / "runs"], system=False)
    assert got == {str(tmp_path / "repo"): True, str(tmp_path / "repo" / "runs"): False}


def test_container_environment_host_runtime_and_user_image() -> None:
    base = {"PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/x", "HOSTNAME": "h", "ARFL_X": "1"}
    host = container_env(base)
    assert host == {"PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/x", "ARFL_X": "1"}
    image = container_env(base, host_runtime=False)
    assert image == {"ARFL_X": "1", "PYTHONUNBUFFERED": "1", "SPARK_LOCAL_IP": "127.0.0.1"}


def test_state_round_trip_names_each_replicas_container() -> None:
    net = DockerNetState(
        network="arfl-r",
        bridge="arfl-d3",
        subnet="10.214.3.0/24",
        gateway="10.214.3.1",
        image="arfl-runtime:abc",
        containers={0: "arfl-r-r0", 1: "arfl-r-r1"},
        addresses={0: "10.214.3.2", 1: "10.214.3.3"},
    )
    state = parse_state({"run": "r", "replicas": {"0": {}, "1": {}}, "docker": to_json(net)})
    assert state.docker == net
    assert parse_state({"run": "r"}).docker is None
    assert dk.container_name("r", 1) == "arfl-r-r1" and dk.network_name("r") == "arfl-r"


def test_docker_target_needs_the_embedded_stack_and_a_local_cluster() -> None:
    raw = dict(MINIMAL)
    raw["spark"] = {"target": "docker", "master": "spark://h:7077"}
    raw["stack"] = {"kind": "external", "kafka": "h:9092", "zookeeper": "h:2181"}
    with pytest.raises(SpecError) as ei:
        parse_spec(raw, "t.toml")
    text = "\n".join(ei.value.problems)
    assert "stack.kind" in text and "spark.master" in text, text
    raw["spark"] = {"target": "kubernetes"}
    with pytest.raises(SpecError) as ei:
        parse_spec(raw, "t.toml")
    assert any("spark.target" in p for p in ei.value.problems), ei.value.problems
    ok = dict(MINIMAL)
    ok["spark"] = {"target": "docker", "master": "local-cluster[1,2,1024]"}
    ok["docker"] = {"image": "arfl-replica:1"}
    spec = parse_spec(ok, "t.toml")
    assert spec.spark.target == "docker" and spec.docker.image == "arfl-replica:1"
    assert parse_spec(dict(MINIMAL), "t.toml").spark.target == "local"


def test_driver_address_is_loopback_unless_the_master_is_remote() -> None:
    from arfl.replica.app import driver_address

    assert driver_address("local-cluster[1,2,1024]") == "127.0.0.1"
    assert driver_address("local[2]") == "127.0.0.1"
    assert driver_address("spark://127.0.0.1:7077") == "127.0.0.1"
    assert driver_address("spark://localhost:7077") == "127.0.0.1"
    assert driver_address("spark://no-such-host.invalid:7077") == "127.0.0.1"


@pytest.mark.parametrize(
    ("code", "rc"), [(137, -9), (143, -15), (130, -2), (1, 1), (0, 0), (147, 147)]
)
def test_the_launcher_ends_like_its_container(code: int, rc: int) -> None:
    """A container killed by signal n exits 128 + n: its launcher dies of the same signal, so
    the supervisor sees a SIGKILLed driver; never SIGSTOP (147), which would only stop it."""
    import subprocess
    import sys

    prog = f"from arfl.orchestrate.launcher import exit_like; exit_like({code})"
    done = subprocess.run([sys.executable, "-c", prog], timeout=30, check=False)
    assert done.returncode == rc


def test_pause_retries_a_freezer_that_gave_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """runc's v1 freezer sometimes fails ("unable to freeze") on busy containers: tried again;
    any other refusal is not."""
    import docker.errors

    calls: list[int] = []

    class Ctr:
        def __init__(self, fail: int, why: str) -> None:
            self.fail, self.why = fail, why

        def pause(self) -> None:
            calls.append(1)
            if len(calls) <= self.fail:
                raise docker.errors.APIError("500", explanation=self.why)

    monkeypatch.setattr(dk.time, "sleep", lambda _s: None)
    monkeypatch.setattr(
        dk, "container", lambda _n: Ctr(2, "OCI runtime pause failed: unable to freeze")
    )
    dk.pause("c")
    assert len(calls) == 3
    calls.clear()
    monkeypatch.setattr(dk, "container", lambda _n: Ctr(1, "Container c is not running"))
    with pytest.raises(FaultError, match="not running"):
        dk.pause("c")
    assert len(calls) == 1


class _FakeNet:
    """The daemon's view of which containers are on which network (disconnect/reconnect)."""

    def __init__(self) -> None:
        self.on: set[tuple[str, str]] = set()
        self.calls: list[str] = []

    def disconnect(self, network: str, name: str) -> None:
        if (network, name) not in self.on:
            raise FaultError(f"{name} is not connected to {network}")
        self.on.discard((network, name))
        self.calls.append(f"disconnect {name}")

    def reconnect(self, network: str, name: str, address: str) -> bool:
        if (network, name) in self.on:
            return False
        self.on.add((network, name))
        self.calls.append(f"reconnect {name}")
        return True

    def connected(self, network: str, name: str) -> bool | None:
        return (network, name) in self.on


@pytest.fixture()
def fake_net(monkeypatch: pytest.MonkeyPatch) -> _FakeNet:
    net = _FakeNet()
    for fn in ("disconnect", "reconnect", "connected"):
        monkeypatch.setattr(dk, fn, getattr(net, fn))
    return net


def _partition(tmp_path: Path) -> tuple[object, object, str]:
    from arfl.faults.base import FaultParams, make_fault
    from arfl.run.pending import PendingFaults

    fault = make_fault(FaultParams("partition", replica=0, duration_s=1.0))
    record = {
        "via": "container",
        "disconnect": {"network": "n", "container": "c0", "address": "10.214.0.2"},
    }
    fault.record = record  # type: ignore[attr-defined]
    entry = PendingFaults(tmp_path).add("partition", 0, record)
    return fault, PendingFaults(tmp_path), entry


def test_a_replica_restarted_during_a_partition_starts_cut(
    tmp_path: Path, fake_net: _FakeNet
) -> None:
    from arfl.targets.container import keep_cut

    fault, pending, entry = _partition(tmp_path)
    fake_net.on = {("n", "c0"), ("n", "c1")}
    fault.inject(None)  # type: ignore[attr-defined]
    # the restarted container (same name) comes up connected; the launcher cuts it again
    fake_net.on.add(("n", "c0"))
    assert keep_cut(tmp_path, "n", "c0") and ("n", "c0") not in fake_net.on
    assert not keep_cut(tmp_path, "n", "c1")  # only the partitioned replica
    # the revert heals it, and once the entry is gone a restart is not cut any more
    fault.revert(None)  # type: ignore[attr-defined]
    pending.remove(entry)  # type: ignore[attr-defined]
    fake_net.on.discard(("n", "c0"))
    fake_net.reconnect("n", "c0", "")
    assert not keep_cut(tmp_path, "n", "c0") and ("n", "c0") in fake_net.on


def test_a_restart_racing_the_revert_is_reconnected_by_settle(
    tmp_path: Path, fake_net: _FakeNet
) -> None:
    from arfl.targets.container import keep_cut

    fault, pending, entry = _partition(tmp_path)
    fake_net.on = {("n", "c0")}
    fault.inject(None)  # type: ignore[attr-defined]
    fault.revert(None)  # type: ignore[attr-defined]  # reconnected ...
    fake_net.on.discard(("n", "c0"))  # ... the container restarts, connected, and the
    fake_net.on.add(("n", "c0"))  # launcher, still seeing the entry, cuts it
    assert keep_cut(tmp_path, "n", "c0") and ("n", "c0") not in fake_net.on
    pending.remove(entry)  # type: ignore[attr-defined]
    type(fault).settle(tmp_path, fault.record)  # type: ignore[attr-defined]
    assert ("n", "c0") in fake_net.on, fake_net.calls


def test_a_restart_that_failed_the_inject_is_reconnected_by_settle(
    tmp_path: Path, fake_net: _FakeNet, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arfl.targets.container import keep_cut

    fault, pending, entry = _partition(tmp_path)

    def gone(network: str, name: str) -> None:
        raise dk.ContainerGone(f"{name}: no such container")

    monkeypatch.setattr(dk, "disconnect", gone)  # the old container is being replaced
    monkeypatch.setattr(dk, "connected", lambda network, name: None)
    with pytest.raises(FaultError):
        fault.inject(None)  # type: ignore[attr-defined]
    monkeypatch.setattr(dk, "disconnect", fake_net.disconnect)
    monkeypatch.setattr(dk, "connected", fake_net.connected)
    fake_net.on = {("n", "c0")}  # the new one starts, and is cut on the pending entry
    assert keep_cut(tmp_path, "n", "c0")
    fault.revert(None)  # type: ignore[attr-defined]  # its inject cut nothing: no-op
    pending.remove(entry)  # type: ignore[attr-defined]
    type(fault).settle(tmp_path, fault.record)  # type: ignore[attr-defined]
    assert ("n", "c0") in fake_net.on, fake_net.calls


def test_settle_leaves_a_container_another_pending_partition_cuts(
    tmp_path: Path, fake_net: _FakeNet
) -> None:
    fault, pending, entry = _partition(tmp_path)
    pending.add("partition", 0, fault.record)  # type: ignore[attr-defined]  # a second one
    fake_net.on = set()
    pending.remove(entry)  # type: ignore[attr-defined]
    type(fault).settle(tmp_path, fault.record)  # type: ignore[attr-defined]
    assert ("n", "c0") not in fake_net.on


def test_a_partition_whose_container_restarted_cut_before_the_inject_owns_the_cut(
    tmp_path: Path, fake_net: _FakeNet
) -> None:
    fault, _, _ = _partition(tmp_path)
    fake_net.on = set()  # the launcher cut the restarted container on the pending entry
    fault.inject(None)  # type: ignore[attr-defined]
    fault.revert(None)  # type: ignore[attr-defined]
    assert ("n", "c0") in fake_net.on


def test_a_docker_run_that_died_before_its_network_is_nothing_to_recover_without_a_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # deploy writes state.json (target docker) before it asks the daemon for anything; with no
    # daemon the deploy fails there, and recover must not keep failing on that run.
    import json
    import subprocess
    import sys

    from arfl.faults.runner import recover, runs_with_pending

    monkeypatch.setattr(dk, "_CLIENT", [])
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    run_dir = tmp_path / "runs" / "dock-20261127-010000"
    run_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state = {"run": run_dir.name, "pid": dead.pid, "target": "docker", "stack": None,
             "replicas": {}, "docker": None}  # fmt: skip
    (run_dir / "state.json").write_text(json.dumps(state))
    assert runs_with_pending(tmp_path / "runs") == []
    assert recover(run_dir).removed_network == []
    # A recorded network is different: recover says it cannot reach the daemon.
    state["docker"] = {"network": f"arfl-{run_dir.name}", "bridge": "arfl-d0",
                       "subnet": "10.214.0.0/24", "gateway": "10.214.0.1", "image": "i",
                       "containers": {"0": "c0"}, "addresses": {"0": "10.214.0.2"}}  # fmt: skip
    (run_dir / "state.json").write_text(json.dumps(state))
    assert runs_with_pending(tmp_path / "runs") == [run_dir]
    with pytest.raises(FaultError, match="no docker daemon answers"):
        recover(run_dir)


def _net_on(tmp_path: Path) -> tuple[RunNetwork, DockerNetState]:
    net = RunNetwork()
    state = DockerNetState(
        network="arfl-r",
        subnet="10.214.7.0/24",
        gateway="10.214.7.1",
        image="img",
        containers={0: dk.container_name("r", 0), 1: dk.container_name("r", 1)},
        addresses={0: "10.214.7.2", 1: "10.214.7.3"},
    )
    net.docker, net._run, net._run_dir, net.container_cpus = state, "r", tmp_path, 0.6
    return net, state


def test_a_standby_gets_a_container_and_address_of_its_own(tmp_path: Path) -> None:
    net, _ = _net_on(tmp_path)
    (tmp_path / "replicas").mkdir()
    config = tmp_path / "replicas" / "standby-3.json"
    config.write_text('{"jars": []}')
    argv = net.driver_command(STANDBY, config)
    launch = json.loads((tmp_path / "replicas" / "standby-3.launch.json").read_text())
    assert argv[argv.index("--spec") + 1] == str(tmp_path / "replicas" / "standby-3.launch.json")
    assert launch["name"] == "arfl-r-s3" and launch["address"] == "10.214.7.132"
    assert launch["labels"] == {dk.LABEL_RUN: "r", dk.LABEL_KIND: "standby", dk.LABEL_STANDBY: "3"}
    assert launch["cpus"] == 0.6
    # It waits at a standby's CPU weight, as a local standby waits niced.
    assert launch["cpu_shares"] == dk.STANDBY_CPU_SHARES < dk.DEFAULT_CPU_SHARES
    # Standby K's address is host K % 100 + 129: never a replica's, free again after 100 more.
    assert dk.standby_address("10.214.7.0/24", 103) == "10.214.7.132"
    replica = tmp_path / "replicas" / "replica-1.json"
    replica.write_text('{"jars": []}')
    net.driver_command(1, replica)
    launch = json.loads((tmp_path / "replicas" / "replica-1.launch.json").read_text())
    assert (launch["name"], launch["address"]) == ("arfl-r-r1", "10.214.7.3")
    assert launch["labels"][dk.LABEL_REPLICA] == "1" and launch["cpus"] == 0.6
    assert launch["cpu_shares"] is None


def test_a_promoted_standby_is_renamed_the_replicas_and_takes_its_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    net, state = _net_on(tmp_path)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(dk, "remove_container", lambda name: calls.append(("remove", name)))
    monkeypatch.setattr(dk, "rename", lambda name, new: calls.append(("rename", name, new)))
    monkeypatch.setattr(
        dk, "set_cpu_shares", lambda name, shares: calls.append(("shares", name, str(shares)))
    )
    net.promote_standby(3, 0)
    # The dead replica's container first (its launcher may have left it), then the renaming,
    # then a replica's CPU weight.
    assert calls == [
        ("remove", "arfl-r-r0"),
        ("rename", "arfl-r-s3", "arfl-r-r0"),
        ("shares", "arfl-r-r0", str(dk.DEFAULT_CPU_SHARES)),
    ]
    assert state.addresses == {0: "10.214.7.132", 1: "10.214.7.3"}
    assert state.containers[0] == "arfl-r-r0"
    # A replica container started later (the promoted one died) takes the replica's address.
    (tmp_path / "replicas").mkdir()
    config = tmp_path / "replicas" / "replica-0.json"
    config.write_text('{"jars": []}')
    net.driver_command(0, config)
    launch = json.loads((tmp_path / "replicas" / "replica-0.launch.json").read_text())
    assert launch["address"] == "10.214.7.132"
