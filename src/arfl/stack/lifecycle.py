"""``up``, ``down``, ``status`` and ``resolve`` of the embedded ZooKeeper + Kafka stack.

The state directory (``state_dir()/stack`` unless given) holds everything::

    stack.json            host, ports, cluster id, and per service pid + create time + cmdline
    zookeeper.pid kafka.pid
    conf/                 zoo.cfg, server.properties, log4j2.xml
    data/zookeeper data/kafka
    logs/zookeeper.log logs/kafka.log
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arfl.configs.spec import Stack
from arfl.errors import StackError
from arfl.paths import state_dir
from arfl.stack import config, health, install, processes
from arfl.stack.config import Layout
from arfl.stack.processes import ProcessRecord

SERVICES = ("zookeeper", "kafka")
LOG_TAIL_LINES = 20
START_TIMEOUT_S = 90.0
EXTERNAL_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = {"kafka": 30.0, "zookeeper": 10.0}


@dataclass(frozen=True)
class StackInfo:
    """Addresses of a running stack.

    Attributes:
        kafka: bootstrap servers, e.g. ``"127.0.0.1:9092"``.
        zookeeper: connect string, e.g. ``"127.0.0.1:2181"``; ``""`` for an external stack
            configured without ZooKeeper.
    """

    kafka: str
    zookeeper: str


@dataclass(frozen=True)
class ServiceStatus:
    """One service of the embedded stack, as ``arfl stack status`` shows it."""

    name: str
    pid: int | None
    address: str
    running: bool
    healthy: bool
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form (``arfl stack status --json``)."""
        return {
            "name": self.name,
            "pid": self.pid,
            "address": self.address,
            "running": self.running,
            "healthy": self.healthy,
            "log": self.log,
        }


@dataclass
class StackState:
    """Contents of ``stack.json``."""

    host: str
    zk_port: int
    kafka_port: int
    controller_port: int
    cluster_id: str
    services: dict[str, ProcessRecord] = field(default_factory=dict)

    @property
    def info(self) -> StackInfo:
        """The addresses clients use."""
        return StackInfo(
            kafka=f"{self.host}:{self.kafka_port}", zookeeper=f"{self.host}:{self.zk_port}"
        )

    def address(self, service: str) -> str:
        """``host:port`` of ``service``."""
        return self.info.kafka if service == "kafka" else self.info.zookeeper

    def to_json(self) -> dict[str, Any]:
        """JSON form written to ``stack.json``."""
        return {
            "host": self.host,
            "zk_port": self.zk_port,
            "kafka_port": self.kafka_port,
            "controller_port": self.controller_port,
            "cluster_id": self.cluster_id,
            "services": {k: v.to_json() for k, v in self.services.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StackState:
        """Parse ``stack.json``.

        Raises:
            StackError: if a key is missing or malformed.
        """
        try:
            return cls(
                host=str(data["host"]),
                zk_port=int(data["zk_port"]),
                kafka_port=int(data["kafka_port"]),
                controller_port=int(data["controller_port"]),
                cluster_id=str(data["cluster_id"]),
                services={
                    str(k): ProcessRecord.from_json(v)
                    for k, v in dict(data.get("services", {})).items()
                },
            )
        except (KeyError, TypeError, ValueError) as e:
            raise StackError(f"malformed stack state: {e}") from e


def layout_of(state: Path | None) -> Layout:
    """The file layout of the stack kept in ``state`` (``state_dir()/stack`` when None)."""
    return Layout(state if state is not None else state_dir() / "stack")


def load_state(layout: Layout) -> StackState | None:
    """Read ``stack.json``; None when there is none.

    Raises:
        StackError: if it exists but cannot be parsed (names the file and what to do).
    """
    try:
        text = layout.state_file.read_text()
    except FileNotFoundError:
        return None
    try:
        return StackState.from_json(json.loads(text))
    except (ValueError, StackError) as e:
        raise StackError(
            f"{layout.state_file} is unreadable ({e}); stop the stack's java processes by hand "
            "and delete the file"
        ) from e


def save_state(layout: Layout, st: StackState) -> None:
    """Write ``stack.json`` atomically and refresh the pid files."""
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(st.to_json(), indent=2) + "\n")
    tmp.replace(layout.state_file)
    for name in SERVICES:
        rec = st.services.get(name)
        if rec is None:
            layout.pid_file(name).unlink(missing_ok=True)
        else:
            layout.pid_file(name).write_text(f"{rec.pid}\n")


@contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    # Two `up`s at once (two terminals, parallel tests) must not start two stacks.
    layout.root.mkdir(parents=True, exist_ok=True)
    with layout.lock_file.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ("" if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class _Died(StackError):
    """A service's process exited while ``up`` waited for it."""


def _died(layout: Layout, name: str) -> StackError:
    tail = log_tail(layout.log(name))
    return _Died(
        f"{name} exited during start-up; last {LOG_TAIL_LINES} lines of {layout.log(name)}:\n"
        f"{tail or '(empty log)'}"
    )


def _alive_check(layout: Layout, name: str, rec: ProcessRecord) -> Callable[[], None]:
    def check() -> None:
        if not processes.is_alive(rec):
            processes.stop(rec)  # reaps the zombie
            raise _died(layout, name)

    return check


def _validate_ports(host: str, ports: dict[str, int]) -> None:
    for flag, port in ports.items():
        if not 1 <= port <= 65535:
            raise StackError(f"{flag} {port} is not a TCP port (1-65535)")
    if len(set(ports.values())) != len(ports):
        raise StackError(
            "ports must differ: "
            + ", ".join(f"{flag} {port}" for flag, port in ports.items())
            + f" on {host}"
        )


def _write_common(layout: Layout) -> Path:
    layout.conf.mkdir(parents=True, exist_ok=True)
    layout.logs.mkdir(parents=True, exist_ok=True)
    log4j = layout.conf / "log4j2.xml"
    log4j.write_text(install.resource("log4j2.xml"))
    return log4j


def _cluster_id(layout: Layout, old: StackState | None) -> str:
    """The id Kafka's storage was formatted with, else the recorded one, else a new one."""
    meta = layout.data("kafka") / "meta.properties"
    try:
        for line in meta.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id" and value.strip():
                return value.strip()
    except OSError:
        pass
    return old.cluster_id if old else config.new_cluster_id()


def _start_zookeeper(layout: Layout, st: StackState, java: str, log4j: Path) -> ProcessRecord:
    data = layout.data("zookeeper")
    data.mkdir(parents=True, exist_ok=True)
    cfg = layout.conf / "zoo.cfg"
    cfg.write_text(config.render_properties(config.zookeeper_properties(data, st.host, st.zk_port)))
    cmd = config.zookeeper_command(java, install.pyspark_jars(), cfg, log4j)
    return processes.spawn(cmd, layout.log("zookeeper"), cwd=layout.root)


def _start_kafka(layout: Layout, st: StackState, java: str, log4j: Path) -> ProcessRecord:
    libs = install.ensure_kafka()
    data = layout.data("kafka")
    data.mkdir(parents=True, exist_ok=True)
    props = layout.conf / "server.properties"
    props.write_text(
        config.render_properties(
            config.kafka_properties(data, st.host, st.kafka_port, st.controller_port)
        )
    )
    if (data / "meta.properties").exists():
        # Formatted by an earlier `up`: formatting again would only start one more JVM.
        return processes.spawn(
            config.kafka_command(java, libs, props, log4j, layout.logs),
            layout.log("kafka"),
            cwd=layout.root,
            nice=config.harness_nice(),
        )
    fmt = config.format_command(java, libs, props, log4j, layout.logs, st.cluster_id)
    try:
        res = subprocess.run(
            fmt, cwd=layout.root, capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise StackError(f"formatting Kafka's storage in {data} took over 120s") from e
    if res.returncode != 0:
        out = "\n".join((res.stdout + res.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
        raise StackError(
            f"formatting Kafka's storage in {data} failed (exit {res.returncode}):\n{out}\n"
            "if the data belongs to an old stack, run 'arfl stack down --purge'"
        )
    cmd = config.kafka_command(java, libs, props, log4j, layout.logs)
    return processes.spawn(cmd, layout.log("kafka"), cwd=layout.root, nice=config.harness_nice())


def up(
    host: str = "127.0.0.1",
    zk_port: int = 2181,
    kafka_port: int = 9092,
    controller_port: int = 9093,
    state: Path | None = None,
    *,
    timeout: float = START_TIMEOUT_S,
) -> StackInfo:
    """Start ZooKeeper and a KRaft Kafka in the background, or reuse the running ones.

    Idempotent: services of this state directory that still run are kept (and waited for);
    only missing ones are started. Returns once both answer through their clients.

    Args:
        host: address both services listen on (and Kafka advertises).
        zk_port: ZooKeeper client port.
        kafka_port: Kafka PLAINTEXT listener port.
        controller_port: Kafka KRaft controller listener port.
        state: state directory; ``state_dir()/stack`` when None.
        timeout: seconds to wait for both services to answer.

    Raises:
        StackError: no java or jars; a port is taken; a stack with other ports runs in this
            state directory; a service died or did not answer in time (with its log's tail).
    """
    layout = layout_of(state)
    flags = {"--zk-port": zk_port, "--kafka-port": kafka_port, "--controller-port": controller_port}
    _validate_ports(host, flags)
    java = install.java()
    with _locked(layout):
        old = load_state(layout)
        running = {k: r for k, r in old.services.items() if processes.is_alive(r)} if old else {}
        wanted = (host, zk_port, kafka_port, controller_port)
        if (
            old
            and running
            and (old.host, old.zk_port, old.kafka_port, old.controller_port) != wanted
        ):
            raise StackError(
                f"a stack already runs from {layout.root} with kafka at {old.info.kafka}, "
                f"zookeeper at {old.info.zookeeper} (controller port "
                f"{old.controller_port}); run 'arfl stack down' first or use those ports"
            )
        st = StackState(
            host=host,
            zk_port=zk_port,
            kafka_port=kafka_port,
            controller_port=controller_port,
            cluster_id=_cluster_id(layout, old),
            services=dict(running),
        )
        # Check every port before starting anything, so a conflict leaves nothing behind.
        if "zookeeper" not in running:
            processes.check_port(host, zk_port, "--zk-port")
        if "kafka" not in running:
            processes.check_port(host, kafka_port, "--kafka-port")
            processes.check_port(host, controller_port, "--controller-port")
        save_state(layout, st)
        started: list[str] = []
        try:
            log4j = _write_common(layout)
            for name, start in (("zookeeper", _start_zookeeper), ("kafka", _start_kafka)):
                if name in running:
                    continue
                try:
                    st.services[name] = start(layout, st, java, log4j)
                except processes.ExitedAtStart:
                    raise _died(layout, name) from None
                started.append(name)
                save_state(layout, st)
            for name, wait in (
                ("zookeeper", health.wait_zookeeper),
                ("kafka", health.wait_kafka),
            ):
                try:
                    wait(
                        st.address(name),
                        timeout,
                        alive=_alive_check(layout, name, st.services[name]),
                        hint=f"last {LOG_TAIL_LINES} lines of {layout.log(name)}:",
                    )
                except _Died:
                    raise
                except StackError as e:
                    raise StackError(f"{e}\n{log_tail(layout.log(name)) or '(empty log)'}") from e
        except BaseException:
            # Whatever this call started is stopped again: a failed `up` leaves no process.
            for name in reversed(started):
                processes.stop(st.services.pop(name), timeout=5.0)
            save_state(layout, st)
            raise
        return st.info


def down(state: Path | None = None, purge: bool = False) -> list[str]:
    """Stop exactly the processes ``up`` started (pid and create time must match).

    Kafka first (a controlled shutdown), then ZooKeeper; SIGTERM, then SIGKILL after a timeout.

    Args:
        state: state directory; ``state_dir()/stack`` when None.
        purge: also delete data, logs and configuration.

    Returns:
        Names of the services that were running and are now stopped.
    """
    layout = layout_of(state)
    if not layout.root.exists():
        return []
    stopped: list[str] = []
    with _locked(layout):
        st = load_state(layout)
        failed: list[str] = []
        if st is not None:
            for name in reversed(SERVICES):
                rec = st.services.get(name)
                if rec is None:
                    continue
                try:
                    if processes.stop(rec, timeout=_STOP_TIMEOUT_S[name]):
                        stopped.append(name)
                except StackError as e:
                    # Go on with the other service; this one stays recorded for another try.
                    failed.append(f"{name}: {e}")
                    continue
                del st.services[name]
                save_state(layout, st)
            if failed:
                raise StackError("could not stop " + "; ".join(failed))
            layout.state_file.unlink(missing_ok=True)
        for name in SERVICES:
            layout.pid_file(name).unlink(missing_ok=True)
        if purge:
            for sub in (layout.root / "data", layout.logs, layout.conf):
                shutil.rmtree(sub, ignore_errors=True)
    return stopped


def status(state: Path | None = None) -> list[ServiceStatus]:
    """Each service's pid, address, and whether it runs and answers its protocol.

    Args:
        state: state directory; ``state_dir()/stack`` when None.
    """
    layout = layout_of(state)
    st = load_state(layout)
    out: list[ServiceStatus] = []
    for name in SERVICES:
        rec = st.services.get(name) if st else None
        running = rec is not None and processes.is_alive(rec)
        address = st.address(name) if st else ""
        healthy = False
        if running:
            healthy = (
                health.kafka_ok(address, 3.0)
                if name == "kafka"
                else health.zookeeper_ruok(address, 2.0)
            )
        out.append(
            ServiceStatus(
                name=name,
                pid=rec.pid if rec is not None and running else None,
                address=address,
                running=running,
                healthy=healthy,
                log=str(layout.log(name)) if st else "",
            )
        )
    return out


def running_info(state: Path | None = None) -> StackInfo | None:
    """Addresses of the embedded stack if both of its processes run, else None."""
    st = load_state(layout_of(state))
    if st is None or not all(
        name in st.services and processes.is_alive(st.services[name]) for name in SERVICES
    ):
        return None
    return st.info


def resolve(stack_spec: Stack, start: bool = True, state: Path | None = None) -> StackInfo:
    """The stack a deployment uses, per the spec's ``[stack]`` table.

    Embedded: the running stack of ``state`` is reused (started with its recorded, or the
    default, ports if ``start``). External: Kafka (and ZooKeeper, if given) must answer within
    ~10 s.

    Args:
        stack_spec: the spec's ``stack`` section.
        start: start the embedded stack if it is not running.
        state: state directory of the embedded stack; ``state_dir()/stack`` when None.

    Raises:
        StackError: the stack is not running/reachable (with what to do next).
    """
    if stack_spec.kind == "external":
        assert stack_spec.kafka is not None  # the spec model guarantees it
        health.wait_kafka(
            stack_spec.kafka,
            EXTERNAL_TIMEOUT_S,
            hint="run 'arfl stack up' or set stack.kafka",
        )
        if stack_spec.zookeeper:
            health.wait_zookeeper(
                stack_spec.zookeeper,
                EXTERNAL_TIMEOUT_S,
                hint="run 'arfl stack up' or set stack.zookeeper",
            )
        return StackInfo(kafka=stack_spec.kafka, zookeeper=stack_spec.zookeeper or "")
    layout = layout_of(state)
    old = load_state(layout)
    if not start:
        info = running_info(state)
        if info is None:
            raise StackError(
                f"the embedded stack in {layout.root} is not running; run 'arfl stack up'"
            )
        health.wait_zookeeper(info.zookeeper, EXTERNAL_TIMEOUT_S, hint="run 'arfl stack up'")
        health.wait_kafka(info.kafka, EXTERNAL_TIMEOUT_S, hint="run 'arfl stack up'")
        return info
    if old is None:
        return up(state=state)
    return up(old.host, old.zk_port, old.kafka_port, old.controller_port, state=state)
