"""Configuration files and command lines of the embedded ZooKeeper and Kafka JVMs."""

from __future__ import annotations

import base64
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from arfl.errors import StackError

# ZooKeeper's tick bounds session timeouts (min = 2 ticks); a short tick lets the active-leader
# mode use short sessions, i.e. fast leader failover. maxSessionTimeout is raised explicitly
# because its default (20 ticks = 4 s) would silently cap clients that ask for longer ones.
ZK_TICK_MS = 200
ZK_MAX_SESSION_MS = 60_000
ZK_HEAP = "128m"

HARNESS_NICE = -10
"""The niceness of the processes every replica's results pass through — the Kafka broker arfl
starts, the merger, the injector — on a host they share with the replicas: what no replica can
mask runs first (measured in docs/benchmarks.md, "Niceness that works"). A deployment gives
them hosts of their own; here they get the CPU first. ``ARFL_HARNESS_NICE`` overrides it (0:
none); a negative niceness needs root (CAP_SYS_NICE), else they keep 0."""


def harness_nice() -> int:
    """:data:`HARNESS_NICE`, or ``ARFL_HARNESS_NICE`` when set (an integer from -20 to 19).

    Raises:
        StackError: it is set to something else (exit code 3).
    """
    raw = os.environ.get("ARFL_HARNESS_NICE", "").strip()
    if not raw:
        return HARNESS_NICE
    value = int(raw) if re.fullmatch(r"[+-]?\d+", raw) else None
    if value is None or not -20 <= value <= 19:
        raise StackError(f"ARFL_HARNESS_NICE={raw!r}: expected an integer from -20 to 19 (0: none)")
    return value


# A fixed-size heap (-Xms = -Xmx) well above the live set: with the old 512m heap growing from
# 128m, the broker's live ~190 MB (128 MB of it Kafka's default log-cleaner dedupe buffer) sat
# above G1's marking threshold (35 % of the heap), so marking cycles ran every ~30 s and their
# Remark pauses (20-70 ms) and the young pauses on a busy host (up to 100 ms) stalled every hop
# through the broker at once: the one shared component the replicas cannot mask
# (docs/benchmarks.md, "The shared path").
KAFKA_HEAP = "1g"
KAFKA_DEDUPE_BUFFER = 16 * 1024 * 1024
"""``log.cleaner.dedupe.buffer.size``: Kafka's 128 MB default is sized for compacting large
production topics; this stack compacts only its small internal topics."""
KAFKA_GC = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
)
"""The broker's garbage collector and its settings."""
KAFKA_GC_LOG = "kafka-gc.log"
"""The broker's GC log (pauses with wall-clock times) in the stack's log directory."""
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


@dataclass(frozen=True)
class Layout:
    """Where the embedded stack keeps its files (``state_dir()/stack`` by default)."""

    root: Path

    @property
    def state_file(self) -> Path:
        """``stack.json``: pids, create times, ports."""
        return self.root / "stack.json"

    @property
    def lock_file(self) -> Path:
        """Serialises concurrent ``up``/``down`` on the same state directory."""
        return self.root / ".lock"

    @property
    def conf(self) -> Path:
        """Rendered configuration files."""
        return self.root / "conf"

    @property
    def logs(self) -> Path:
        """``<service>.log``: stdout/stderr of each JVM."""
        return self.root / "logs"

    def data(self, service: str) -> Path:
        """Data directory of ``service`` (``zookeeper`` or ``kafka``)."""
        return self.root / "data" / service

    def log(self, service: str) -> Path:
        """Log file of ``service``."""
        return self.logs / f"{service}.log"

    def pid_file(self, service: str) -> Path:
        """Pid file of ``service`` (for humans and shell tools; ``stack.json`` is authoritative)."""
        return self.root / f"{service}.pid"


def render_properties(props: dict[str, str | int]) -> str:
    """Render a Java properties file (``key=value`` lines, in the given order)."""
    return "".join(f"{k}={v}\n" for k, v in props.items())


def zookeeper_properties(data_dir: Path, host: str, port: int) -> dict[str, str | int]:
    """Settings of a standalone ZooKeeper server (``zoo.cfg``)."""
    return {
        "tickTime": ZK_TICK_MS,
        "minSessionTimeout": 2 * ZK_TICK_MS,
        "maxSessionTimeout": ZK_MAX_SESSION_MS,
        "initLimit": 10,
        "syncLimit": 5,
        "dataDir": str(data_dir),
        "clientPort": port,
        "clientPortAddress": host,
        "maxClientCnxns": 0,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,stat,srvr",
        "autopurge.snapRetainCount": 3,
        "autopurge.purgeInterval": 1,
    }


def kafka_properties(
    data_dir: Path, host: str, port: int, controller_port: int
) -> dict[str, str | int]:
    """Settings of a single-node KRaft Kafka (broker and controller in one JVM)."""
    return {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "auto.create.topics.enable": "false",
        "num.partitions": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": 1,
        # Fewer internal partitions than the default 50: the first consumer group then does
        # not wait for 50 partitions to be created on a two-core machine.
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.retention.hours": 24,
        "log.cleaner.dedupe.buffer.size": KAFKA_DEDUPE_BUFFER,
    }


def new_cluster_id() -> str:
    """A random Kafka cluster id (16 bytes, URL-safe base64 without padding, as Kafka's Uuid).

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-``: the storage tool's argument
    parser would take such an id for an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def zookeeper_command(java: str, jars: Path, zoo_cfg: Path, log4j: Path) -> list[str]:
    """Command line of the ZooKeeper JVM (pyspark's bundled ZooKeeper jars)."""
    return [
        java,
        f"-Xmx{ZK_HEAP}",
        "-XX:+UseSerialGC",
        "-Djava.awt.headless=true",
        "-Dzookeeper.admin.enableServer=false",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{jars}/*",
        ZK_MAIN,
        str(zoo_cfg),
    ]


def _kafka_jvm(
    java: str, libs: Path, log4j: Path, logs: Path, heap: str, min_heap: str
) -> list[str]:
    return [
        java,
        f"-Xmx{heap}",
        f"-Xms{min_heap}",
        *KAFKA_GC,
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={logs}",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs}/*",
    ]


def kafka_command(
    java: str, libs: Path, server_properties: Path, log4j: Path, logs: Path
) -> list[str]:
    """Command line of the Kafka JVM (broker + controller), its GC pauses logged to
    ``logs/kafka-gc.log`` (two files of at most 10 MB)."""
    return [
        *_kafka_jvm(java, libs, log4j, logs, KAFKA_HEAP, KAFKA_HEAP),
        f"-Xlog:gc,gc+phases:file={logs / KAFKA_GC_LOG}:time,uptime:filecount=2,filesize=10m",
        KAFKA_MAIN,
        str(server_properties),
    ]


def format_command(
    java: str, libs: Path, server_properties: Path, log4j: Path, logs: Path, cluster_id: str
) -> list[str]:
    """Command line that formats the KRaft storage (idempotent: ``--ignore-formatted``)."""
    # A short-lived tool: the C1 compiler alone starts it noticeably faster.
    return [
        *_kafka_jvm(java, libs, log4j, logs, "256m", "128m"),
        "-XX:TieredStopAtLevel=1",
        STORAGE_TOOL,
        "format",
        "-t",
        cluster_id,
        "-c",
        str(server_properties),
        "--ignore-formatted",
    ]
