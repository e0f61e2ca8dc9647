"""Kafka Streams as a peer: two instances of one application (``bench/peers/kstreams``), the
pipeline as ``mapValues`` (parse) + ``filter`` + ``mapValues`` (project) on JSON strings.

Built once with Maven against ``kafka-streams`` at the embedded broker's version (Kafka's
clients and broker are released together). Each run: a fresh ``application.id``, a state
directory per instance, ``processing.guarantee = at_least_once``, ``num.standby.replicas = 1``
(a stateless topology has no store to keep warm, so it changes nothing here: recovery is the
consumer group's rebalance), one stream thread each (one per input partition), commits every
``commit_ms``, the producer's ``linger.ms`` as arfl's merger's. The group's session timeout is
Kafka's default (45 s, heartbeat 3 s) or the broker's minimum, 6 s (heartbeat 1 s): a SIGKILLed
member's partitions move only once it expires. The fault: SIGKILL one instance; with
``restart`` a new one starts at once (it joins the group, whose rebalance still waits for the
dead member's session to expire under the classic protocol).
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

from peer_systems import HERE, MIN_AMOUNT, Load, PeerError, PeerSystem, wait_alive

from arfl.processes import ManagedProcess, process_tree, signal_all
from arfl.stack.install import KAFKA_VERSION, MVN_TIMEOUT_S

APP = HERE / "kstreams"
JAR = APP / "target" / "peers-kstreams.jar"
BUILT_FOR = APP / "target" / "kafka.version"
"""The kafka-streams version the jar was built against."""
MAIN = "arfl.bench.PeersFilter"
INSTANCES = 2
SESSION = {"fast": (6000, 1000), "default": None}
"""The consumer's ``session.timeout.ms`` / ``heartbeat.interval.ms`` of each choice (None:
Kafka's own)."""
HEAP = "512m"
START_TIMEOUT_S = 120.0


def ensure_jar(version: str = KAFKA_VERSION) -> Path:
    """``target/peers-kstreams.jar`` (its dependencies in ``target/lib``), rebuilt with ``mvn
    -q -B package`` when missing, older than a source, or built for another Kafka.

    Raises:
        PeerError: no ``mvn``, or the build failed.
    """
    import subprocess

    sources = [APP / "pom.xml", *(APP / "src").rglob("*.java")]
    fresh = (
        JAR.exists()
        and BUILT_FOR.exists()
        and BUILT_FOR.read_text().strip() == version
        and all(s.stat().st_mtime <= JAR.stat().st_mtime for s in sources)
    )
    if fresh:
        return JAR
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PeerError("no 'mvn' on PATH: Maven builds the Kafka Streams app")
    argv = [mvn, "-q", "-B", "-f", str(APP / "pom.xml"), f"-Dkafka.version={version}", "package"]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PeerError(f"mvn package of {APP}: {e}") from e
    if proc.returncode != 0 or not JAR.exists():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise PeerError(f"mvn package of {APP} failed (exit {proc.returncode}):\n{tail}")
    BUILT_FOR.write_text(version + "\n")
    return JAR


def streams_properties(
    *,
    bootstrap: str,
    app_id: str,
    instance: int,
    state_dir: Path,
    source: str,
    sink: str,
    session: str,
    commit_ms: int,
    linger_ms: float,
) -> dict[str, str]:
    """One instance's properties file (module docstring)."""
    props = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "client.id": f"{app_id}-{instance}",
        "processing.guarantee": "at_least_once",
        "num.standby.replicas": "1",
        "num.stream.threads": "1",
        "state.dir": str(state_dir),
        "commit.interval.ms": str(commit_ms),
        "producer.linger.ms": f"{linger_ms:g}",
        "consumer.auto.offset.reset": "earliest",
        "arfl.input": source,
        "arfl.output": sink,
        "arfl.min.amount": f"{MIN_AMOUNT:g}",
    }
    timeouts = SESSION[session]
    if timeouts is not None:
        props["consumer.session.timeout.ms"] = str(timeouts[0])
        props["consumer.heartbeat.interval.ms"] = str(timeouts[1])
    return props


def render_properties(props: dict[str, str]) -> str:
    """Java properties text (values here need no escaping but ``\\`` and ``:``/``=``)."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")

    return "".join(f"{k}={esc(v)}\n" for k, v in props.items())


class KStreamsSystem(PeerSystem):
    """Two Kafka Streams instances (module docstring)."""

    fault_name = "kill-instance"

    def __init__(
        self, session: str, restart: bool = False, commit_ms: int = 1000, linger_ms: float = 1.0
    ) -> None:
        super().__init__()
        self.session = session
        self.restart = restart
        self.commit_ms = commit_ms
        self.linger_ms = linger_ms
        self.label = "kstreams" + (" session-default" if session == "default" else "")
        self.label += " +restart" if restart else ""
        self.java = "java"
        self.instances: dict[int, list[ManagedProcess]] = {}
        self.app_id = ""
        self._argv: list[list[str]] = []
        self._admin: Any = None

    def prepare(self) -> None:
        from arfl.stack import install

        ensure_jar()
        self.java = install.java()

    def start(self, bootstrap: str, source: str, sink: str, load: Load) -> None:
        self.app_id = f"peers-kstreams-{self.work.name}"
        classpath = f"{JAR}:{JAR.parent / 'lib'}/*"
        for i in range(INSTANCES):
            props = streams_properties(
                bootstrap=bootstrap,
                app_id=self.app_id,
                instance=i,
                state_dir=self.work / f"state-{i}",
                source=source,
                sink=sink,
                session=self.session,
                commit_ms=self.commit_ms,
                linger_ms=self.linger_ms,
            )
            path = self.work / f"streams-{i}.properties"
            path.write_text(render_properties(props))
            self._argv.append([self.java, f"-Xmx{HEAP}", "-cp", classpath, MAIN, str(path)])
            self._start(i)
        wait_alive(
            lambda: self._group_stable(bootstrap, load.partitions),
            [ps[-1] for ps in self.instances.values()],
            START_TIMEOUT_S,
            "the Kafka Streams group",
        )

    def _start(self, i: int) -> None:
        started = self.instances.setdefault(i, [])
        name = f"kstreams-{i}" + (f"-{len(started)}" if started else "")
        started.append(self.procs.start(name, self._argv[i]))

    def _group_stable(self, bootstrap: str, partitions: int) -> bool:
        """Every instance joined and the input's partitions are all assigned."""
        from confluent_kafka import ConsumerGroupState, KafkaException
        from confluent_kafka.admin import AdminClient

        if self._admin is None:  # one client for all the looks, not one every 0.5 s
            self._admin = AdminClient({"bootstrap.servers": bootstrap})
        admin = self._admin
        try:
            desc = admin.describe_consumer_groups([self.app_id])[self.app_id].result(timeout=5)
        except KafkaException:
            return False
        assigned = sum(len(m.assignment.topic_partitions) for m in desc.members)
        return bool(
            desc.state == ConsumerGroupState.STABLE
            and len(desc.members) == INSTANCES
            and assigned >= partitions
        )

    def kill_one(self) -> str:
        victim = self.instances[0][-1]
        signal_all(process_tree(victim.pid), signal.SIGKILL)  # the JVM may be a child
        if self.restart:
            self._start(0)
            return f"SIGKILL kstreams instance 0 (pid {victim.pid}), a new one started at once"
        return f"SIGKILL kstreams instance 0 (pid {victim.pid})"

    def groups(self) -> dict[str, list[int]]:
        return {f"kstreams-{i}": [p.pid for p in ps] for i, ps in self.instances.items()}

    def info(self) -> dict[str, Any]:
        return {
            "kafka_streams": KAFKA_VERSION,
            "application_id": self.app_id,
            "session": self.session,
            "commit_ms": self.commit_ms,
            "restart": self.restart,
        }
