"""``state.json``: what a running deployment is made of, kept current by deploy, read by ``arfl
chaos`` (targets, :func:`load_state`), ``arfl chaos recover`` (leftovers after a ``kill -9``)
and the independent check (addresses and topics). :class:`RunState` is its one definition,
writer and readers alike.

Written atomically (:meth:`RunState.write`): the first version before anything is created, again
whenever a process, a namespace or the docker network appears. A reader of a file from another
arfl version reads the keys it knows (others are ignored; missing ones take their defaults).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from arfl.errors import FaultError
from arfl.params import first_problem
from arfl.run.rundir import write_json_atomic

STATE_FILE = "state.json"


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


@dataclass
class DockerNetState:
    """A run's docker network and its replicas' containers (``bridge``, ``image``: empty where
    a state.json does not say)."""

    network: str
    subnet: str
    gateway: str
    bridge: str = ""
    image: str = ""
    containers: dict[int, str] = field(default_factory=dict)
    addresses: dict[int, str] = field(default_factory=dict)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ReplicaRecord(_Record):
    """One replica as deploy last saw it."""

    driver_pid: int | None = None
    driver_create_time: float | None = None
    app_id: str | None = None
    state: str = "unknown"
    restarts: int = 0
    netns: str | None = None
    address: str | None = None
    container: str | None = None


class StandbyRecord(_Record):
    """A standby driver (``replication.standby``)."""

    pid: int
    create_time: float | None = None
    ready: bool = False


class SharesRecord(_Record):
    """The run's CPU-share cgroups (``[placement]``, :mod:`arfl.targets.shares`): the group
    ``root`` (``arfl/<run>``) and every group below it are the run's, removed at its stop or by
    ``arfl chaos recover``; what is still inside moves back to ``fallback`` first."""

    version: int
    mount: str
    root: str
    cores: float
    fallback: str = "/"
    acct_root: str | None = None
    """The same groups in the v1 ``cpuacct`` hierarchy, when it is mounted apart."""
    acct_fallback: str = "/"


class StackRecord(_Record):
    """Where the run's Kafka and ZooKeeper listen (empty where a state.json does not say)."""

    kafka: str = ""
    zookeeper: str = ""


class TopicsRecord(_Record):
    """The run's topics (None where a state.json does not say)."""

    source: str | None = None
    sink: str | None = None
    replicas: list[str] = []


class RunState(_Record):
    """Everything ``state.json`` says about a deployment.

    Attributes:
        run: the run's name.
        pid, pid_create_time: the arfl process that runs the deployment (``recover`` leaves a
            live one alone).
        target: ``spark.target``: ``docker`` when the run's containers and network are to be
            found by label, even before ``docker`` is recorded.
        stack: None until the stack is known.
        docker: the docker target's network and containers (None: local processes, or not
            created yet).
        spark_home: the run's own SPARK_HOME (not on the docker target), removed at the stop.
        master: the spec's (or ``--master``'s) Spark master: ``kill-executor`` goes through
            the cluster manager on a ``spark://`` cluster.
        shares: the drivers' CPU-share cgroups (``[placement]``; None: none).
    """

    run: str
    pid: int | None = None
    pid_create_time: float | None = None
    mode: str = "unknown"
    spec_name: str = ""
    target: str = "local"
    stack: StackRecord | None = None
    topics: TopicsRecord | None = None
    replicas: dict[int, ReplicaRecord] = {}
    standbys: dict[int, StandbyRecord] = {}
    leader_path: str | None = None
    isolation: IsolationState | None = None
    docker: DockerNetState | None = None
    spark_home: str | None = None
    master: str = ""
    shares: SharesRecord | None = None
    merger_pid: int | None = None
    merger_create_time: float | None = None
    merger_standby_pid: int | None = None
    merger_standby_create_time: float | None = None
    injector_pid: int | None = None
    injector_create_time: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _readable(cls, data: Any) -> Any:
        """What a reader can use of a file from elsewhere (``recover`` after any crash): a null
        is read as the key's default (None where the key may be null), and replica or standby
        entries that are not an object under a numeric key, or a standby without a pid, are
        left out."""
        if not isinstance(data, dict):
            return data
        out = {k: v for k, v in data.items() if v is not None}
        for section, record in (("replicas", ReplicaRecord), ("standbys", StandbyRecord)):
            entries = data.get(section)
            kept: dict[Any, Any] = {}
            for k, v in entries.items() if isinstance(entries, dict) else ():
                if isinstance(v, record):  # built by deploy's writer
                    kept[k] = v
                elif (
                    str(k).isdigit()
                    and isinstance(v, dict)
                    and (record is ReplicaRecord or isinstance(v.get("pid"), int))
                ):
                    kept[k] = {f: x for f, x in v.items() if x is not None}
            out[section] = kept
        for section in ("stack", "topics", "isolation", "docker", "shares"):
            out[section] = data.get(section) or None
        return out

    @model_validator(mode="after")
    def _name(self) -> RunState:
        if not self.spec_name:
            self.spec_name = self.run
        return self

    @property
    def on_docker(self) -> bool:
        """The run's replicas are (or were about to be) containers."""
        return self.docker is not None or self.target == "docker"

    def to_json(self) -> dict[str, Any]:
        """As written into ``state.json``."""
        return self.model_dump(mode="json")

    def write(self, run_dir: Path) -> None:
        """Write ``<run_dir>/state.json`` atomically."""
        write_json_atomic(run_dir / STATE_FILE, self.to_json())


def to_json(value: IsolationState | DockerNetState) -> dict[str, Any]:
    """The isolation or docker section as ``state.json`` (and the journal) hold it."""
    from pydantic import TypeAdapter

    out: dict[str, Any] = TypeAdapter(type(value)).dump_python(value, mode="json")
    return out


def parse_state(raw: dict[str, Any], *, source: str = STATE_FILE) -> RunState:
    """Validate the decoded JSON.

    Raises:
        FaultError: a required key is missing or has the wrong type.
    """
    try:
        return RunState.model_validate(raw)
    except ValidationError as e:
        where, what = first_problem(e)
        raise FaultError(
            f"{source}: malformed run state ({where or '(top level)'}: {what}); "
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
