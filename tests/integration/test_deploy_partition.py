"""A ``partition`` fault in a real deployment: the replica's driver and executors run in a
network namespace on a bridge, ZooKeeper and Kafka of the run listen on the bridge address,
and cutting the replica off stops its output until the partition heals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_checks import check_silent_then_resumed, windowed_spec

from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.rundir import read_jsonl
from arfl.stack import StackInfo
from arfl.targets import netns

pytestmark = pytest.mark.needs_root(reason="network namespaces need root")


def _event(journal: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [e for e in journal if e["event"] == name]
    assert found, f"no {name} in the journal"
    return found[0]


def test_partitioned_replica_stops_then_resumes_and_nothing_is_left(
    stack: StackInfo, tmp_path: Path
) -> None:
    del stack  # the run starts its own stack on the bridge; the session's is not used
    spec = windowed_spec(
        "dep-part",
        mode="passive",
        duration="28s",
        chaos=[{"at": "10s", "fault": "partition", "replica": 0, "duration": "7s"}],
    )
    result = deploy(spec, None, DeployOptions(runs_root=tmp_path))
    run = result.run_dir
    journal = read_jsonl(run / "journal.jsonl")
    iso = _event(journal, "isolation-created")
    bridge_ip = iso["host_address"].split("/")[0]
    assert _event(journal, "run-stack-started")["kafka"].startswith(bridge_ip)
    injected = _event(journal, "fault-injected")
    reverted = _event(journal, "fault-reverted")
    assert injected["kind"] == "partition"
    cut_at, healed_at = float(injected["ended"]), float(reverted["ended"])
    assert 6.5 <= healed_at - cut_at <= 11

    # The replica's output: silent while cut off (after what was in flight), back after.
    check_silent_then_resumed(run, 0, cut_at, float(reverted["started"]))
    assert result.summary["results"] > 0
    assert result.summary["replica_restarts"] == 0

    # Everything the run created on the network is gone.
    names = {ns["name"] for ns in iso["namespaces"].values()}
    assert not names & set(netns.list_namespaces())
    assert iso["bridge"] not in netns._link_names()
    assert _event(journal, "isolation-removed")
