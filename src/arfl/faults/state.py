"""A typed reader for a run directory's ``state.json`` (written and kept current by deploy).

Only the keys chaos needs are read; optional keys may be missing. The file looks like::

    {"run": "clicks-20261125-213000", "pid": 4242, "mode": "passive", "spec_name": "clicks",
     "stack": {"kafka": "127.0.0.1:9092", "zookeeper": "127.0.0.1:2181"},
     "replicas": {"0": {"driver_pid": 1234, "driver_create_time": 1764.0, "app_id": "app-...",
                        "state": "running", "netns": null, "address": null}},
     "leader_path": "/arfl/clicks/leader",
     "isolation": {"bridge": "arfl-br0", "host_address": "10.213.0.1/24",
                   "namespaces": {"0": {"name": "arfl-<run>-r0", "address": "10.213.0.2"}}}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arfl.coerce import opt_float, opt_int, opt_str
from arfl.errors import FaultError
from arfl.faults.docker import DockerNetState

STATE_FILE = "state.json"


@dataclass(frozen=True)
class ReplicaState:
    """One replica as deploy last saw it."""

    index: int
    driver_pid: int | None = None
    driver_create_time: float | None = None
    app_id: str | None = None
    state: str = "unknown"
    netns: str | None = None
    address: str | None = None


@dataclass(frozen=True)
class NamespaceState:
    """A replica's network namespace and the veth pair that joins it to the bridge."""

    name: str
    address: str
    veth_host: str | None = None
    veth_ns: str | None = None


@dataclass(frozen=True)
class IsolationState:
    """The bridge and per-replica namespaces created for network faults."""

    bridge: str
    host_address: str
    namespaces: dict[int, NamespaceState] = field(default_factory=dict)

    @property
    def host_ip(self) -> str:
        """The bridge's address without prefix: where isolated replicas reach Kafka/ZooKeeper."""
        return self.host_address.split("/", 1)[0]

    def to_json(self) -> dict[str, Any]:
        """The ``isolation`` object as written into ``state.json``."""
        return {
            "bridge": self.bridge,
            "host_address": self.host_address,
            "namespaces": {
                str(i): {
                    "name": ns.name,
                    "address": ns.address,
                    "veth_host": ns.veth_host,
                    "veth_ns": ns.veth_ns,
                }
                for i, ns in sorted(self.namespaces.items())
            },
        }


@dataclass(frozen=True)
class RunState:
    """Everything ``state.json`` says about a running deployment."""

    run: str
    pid: int | None
    mode: str
    spec_name: str
    stack: dict[str, str]
    replicas: dict[int, ReplicaState]
    leader_path: str | None
    isolation: IsolationState | None
    docker: DockerNetState | None = None
    """The docker target's network and containers (None: replicas are local processes, or
    the network is not created yet)."""
    target: str = "local"
    """``spark.target``: ``docker`` when the run's containers and network are to be found by
    label, even before ``docker`` is recorded."""
    standbys: dict[int, tuple[int, float | None]] = field(default_factory=dict)
    """Standby drivers: standby -> (pid, create time)."""

    @property
    def on_docker(self) -> bool:
        """The run's replicas are (or were about to be) containers."""
        return self.docker is not None or self.target == "docker"


def parse_isolation(raw: Any) -> IsolationState | None:
    """Parse the ``isolation`` object (``None`` when absent)."""
    if not raw:
        return None
    namespaces = {
        int(k): NamespaceState(
            name=str(v["name"]),
            address=str(v["address"]),
            veth_host=opt_str(v.get("veth_host")),
            veth_ns=opt_str(v.get("veth_ns")),
        )
        for k, v in dict(raw.get("namespaces") or {}).items()
    }
    return IsolationState(
        bridge=str(raw["bridge"]), host_address=str(raw["host_address"]), namespaces=namespaces
    )


def parse_state(raw: dict[str, Any], *, source: str = STATE_FILE) -> RunState:
    """Build a :class:`RunState` from the decoded JSON.

    Raises:
        FaultError: a required key is missing or has the wrong type.
    """
    try:
        replicas = {
            int(k): ReplicaState(
                index=int(k),
                driver_pid=opt_int(v.get("driver_pid")),
                driver_create_time=opt_float(v.get("driver_create_time")),
                app_id=opt_str(v.get("app_id")),
                state=str(v.get("state") or "unknown"),
                netns=opt_str(v.get("netns")),
                address=opt_str(v.get("address")),
            )
            for k, v in dict(raw.get("replicas") or {}).items()
        }
        return RunState(
            run=str(raw["run"]),
            pid=opt_int(raw.get("pid")),
            mode=str(raw.get("mode") or "unknown"),
            spec_name=str(raw.get("spec_name") or raw["run"]),
            stack={str(k): str(v) for k, v in dict(raw.get("stack") or {}).items()},
            replicas=replicas,
            leader_path=opt_str(raw.get("leader_path")),
            isolation=parse_isolation(raw.get("isolation")),
            docker=DockerNetState.from_json(raw.get("docker")),
            target=str(raw.get("target") or "local"),
            standbys={
                int(k): (int(v["pid"]), opt_float(v.get("create_time")))
                for k, v in dict(raw.get("standbys") or {}).items()
                if isinstance(v, dict) and opt_int(v.get("pid")) is not None
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise FaultError(
            f"{source}: malformed run state ({type(e).__name__}: {e}); "
            "is this a run directory written by 'arfl deploy'?"
        ) from e


def load_state(run_dir: Path) -> RunState:
    """Read ``<run_dir>/state.json``.

    Raises:
        FaultError: the file is missing, not JSON, or lacks required keys.
    """
    path = run_dir / STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise FaultError(
            f"{path}: no run state; pass a run directory of a running 'arfl deploy' "
            "(runs/<name>-<timestamp>)"
        ) from e
    except json.JSONDecodeError as e:
        raise FaultError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(raw, dict):
        raise FaultError(f"{path}: expected a JSON object")
    return parse_state(raw, source=str(path))
