"""Flink as a peer: a standalone session cluster (a JobManager and a TaskManager JVM) running
the pipeline as Flink SQL, checkpointing every second.

The distribution is the union of PyPI's ``apache-flink`` and ``apache-flink-libraries`` wheels
(their ``pyflink/`` folder has ``bin/``, ``lib/``, ``opt/`` and ``conf/``), unpacked once into
``<arfl cache>/flink-<version>``; the Kafka SQL connector comes from Maven Central (``mvn
dependency:copy``). Each run gets a configuration directory of its own (``FLINK_CONF_DIR``):
loopback only, free ports, 2 task slots (one per input partition), the sink's delivery
guarantee with the matching checkpointing mode, and Flink's heartbeat (default: 10 s interval,
50 s timeout) or 1 s / 5 s. The JobManager and TaskManager run in the foreground as our child
processes (``flink-console.sh`` execs the JVM, so their pids are the JVMs'); the SQL client
submits the job and exits. The fault: SIGKILL the TaskManager and start a new one at once, as a
supervisor (Kubernetes, systemd) would; the job restarts from its last checkpoint with Flink's
default restart strategy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from peer_systems import LOOPBACK, MIN_AMOUNT, Load, PeerError, PeerSystem, wait_alive

from arfl.paths import cache_dir
from arfl.processes import ManagedProcess, process_tree, signal_all
from arfl.stack.embedded import free_ports
from arfl.stack.install import MVN_TIMEOUT_S

FLINK_VERSION = "2.3.0"
WHEELS = (f"apache-flink=={FLINK_VERSION}", f"apache-flink-libraries=={FLINK_VERSION}")
CONNECTOR = ("org.apache.flink", "flink-sql-connector-kafka", "5.0.0-2.2")
"""The Kafka SQL connector (group, artifact, version): built for Flink 2.2, the newest line
published when this was written; whether it runs on 2.3 is what the first run checks."""
GATEWAY = ("org.apache.flink", "flink-sql-gateway", FLINK_VERSION)
"""The SQL gateway's jar, which the SQL client loads from ``opt/``: PyPI's wheels lack it."""
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MARKER = "installed.json"
SLOTS = 2
"""Task slots and parallelism: one per input partition."""
GUARANTEES = ("at-least-once", "exactly-once")
HEARTBEATS = {"fast": ("1000 ms", "5000 ms"), "default": None}
"""``heartbeat.interval`` / ``heartbeat.timeout`` of each choice; None: Flink's own."""
TRANSACTION_TIMEOUT_MS = 900_000
"""An exactly-once sink's ``transaction.timeout.ms``: Flink's default (1 h) exceeds the
broker's ``transaction.max.timeout.ms`` (15 min), which refuses it."""
START_TIMEOUT_S = 180.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Flink's REST API on loopback, never through a proxy from the environment."""


def flink_home(cache: Path | None = None) -> Path:
    """FLINK_HOME, downloaded and unpacked on first use (module docstring).

    Raises:
        PeerError: pip failed or a wheel lacks what Flink needs.
    """
    root = (cache or cache_dir()) / f"flink-{FLINK_VERSION}"
    home = root / "pyflink"
    if (root / MARKER).exists():
        maven_jar(GATEWAY, home / "opt")
        return home
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if len(list(wheels.glob("*.whl"))) < len(WHEELS):
        _run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "-d", str(wheels), *WHEELS],
            "pip download of the Flink wheels",
        )  # fmt: skip
    tmp = root / ".unpack"
    shutil.rmtree(tmp, ignore_errors=True)
    for whl in sorted(wheels.glob("*.whl")):
        unpack(whl, tmp, "pyflink/")
    for need in ("bin/jobmanager.sh", "bin/taskmanager.sh", "bin/sql-client.sh", "lib", "opt"):
        if not (tmp / "pyflink" / need).exists():
            raise PeerError(f"the Flink wheels in {wheels} have no pyflink/{need}")
    shutil.rmtree(home, ignore_errors=True)
    (tmp / "pyflink").replace(home)
    shutil.rmtree(tmp, ignore_errors=True)
    (root / MARKER).write_text(json.dumps({"flink": FLINK_VERSION}) + "\n")
    maven_jar(GATEWAY, home / "opt")
    return home


def unpack(whl: Path, dest: Path, prefix: str) -> None:
    """The members of ``whl`` under ``prefix`` into ``dest``, with their modes (zipfile drops
    them, and Flink's scripts call each other)."""
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            path = Path(z.extract(info, dest))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                path.chmod(mode)


def kafka_connector(cache: Path | None = None) -> Path:
    """The Kafka SQL connector's jar, fetched with Maven on first use.

    Raises:
        PeerError: no ``mvn``, or Maven failed (its output's tail).
    """
    return maven_jar(CONNECTOR, (cache or cache_dir()) / f"flink-{FLINK_VERSION}" / "connectors")


def maven_jar(coordinates: tuple[str, str, str], dest: Path) -> Path:
    """``dest/<artifact>-<version>.jar``, copied there by Maven when missing.

    Raises:
        PeerError: no ``mvn``, or Maven failed (its output's tail).
    """
    group, artifact, version = coordinates
    jar = dest / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PeerError(f"no 'mvn' on PATH: Maven fetches {group}:{artifact}")
    _run(
        [mvn, "-q", "-B", f"{DEPENDENCY_PLUGIN}:copy",
         f"-Dartifact={group}:{artifact}:{version}", f"-DoutputDirectory={dest}"],
        f"mvn fetching {group}:{artifact}:{version}",
    )  # fmt: skip
    if not jar.exists():
        raise PeerError(f"mvn fetched no {jar.name} into {dest}")
    return jar


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PeerError(f"{what}: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise PeerError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def java_opts(home: Path) -> str:
    """``env.java.opts.all`` of the distribution's config.yaml (the JDK module openings Flink
    needs on Java 17).

    Raises:
        PeerError: the file has none.
    """
    text = (home / "conf" / "config.yaml").read_text()
    m = re.search(r"^env:\s*\n\s+java:\s*\n\s+opts:\s*\n\s+all:\s*(.+)$", text, re.MULTILINE)
    if m is None:
        raise PeerError(f"{home / 'conf' / 'config.yaml'}: no env.java.opts.all")
    return m.group(1).strip()


def flink_config(
    work: Path,
    ports: dict[str, int],
    guarantee: str,
    heartbeat: str,
    checkpoint_ms: int,
    opts: str,
) -> dict[str, str]:
    """The run's configuration (flattened keys; module docstring). Memory sizes are the
    distribution's defaults, which a configuration without them must state."""
    conf = {
        "env.java.opts.all": opts,
        "env.pid.dir": str(work),
        "jobmanager.rpc.address": LOOPBACK,
        "jobmanager.rpc.port": str(ports["rpc"]),
        "jobmanager.bind-host": LOOPBACK,
        "jobmanager.memory.process.size": "1600m",
        "taskmanager.bind-host": LOOPBACK,
        "taskmanager.host": LOOPBACK,
        "taskmanager.numberOfTaskSlots": str(SLOTS),
        "taskmanager.memory.process.size": "1728m",
        "parallelism.default": str(SLOTS),
        "rest.address": LOOPBACK,
        "rest.bind-address": LOOPBACK,
        "rest.port": str(ports["rest"]),
        "blob.server.port": str(ports["blob"]),
        "io.tmp.dirs": str(work / "tmp"),
        "execution.checkpointing.interval": f"{checkpoint_ms} ms",
        "execution.checkpointing.mode": guarantee.upper().replace("-", "_"),
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": (work / "checkpoints").as_uri(),
    }
    beat = HEARTBEATS[heartbeat]
    if beat is not None:
        conf["heartbeat.interval"], conf["heartbeat.timeout"] = beat
    return conf


def render_yaml(conf: dict[str, str]) -> str:
    """Flattened ``key: "value"`` lines (a JSON string is a YAML scalar)."""
    return "".join(f"{k}: {json.dumps(v)}\n" for k, v in conf.items())


def _literal(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _with(options: dict[str, str]) -> str:
    return ",\n".join(f"  {_literal(k)} = {_literal(v)}" for k, v in options.items())


def flink_sql(
    bootstrap: str, source: str, sink: str, guarantee: str, run_id: str, linger_ms: float
) -> str:
    """The job: the input as a JSON table, the filter and projection, a JSON Kafka sink with
    ``guarantee``."""
    columns = "seq BIGINT, `user` STRING, amount DOUBLE, ts BIGINT"
    src = {
        "connector": "kafka",
        "topic": source,
        "properties.bootstrap.servers": bootstrap,
        "properties.group.id": f"peers-flink-{run_id}",
        "scan.startup.mode": "earliest-offset",
        "format": "json",
        "json.ignore-parse-errors": "true",
    }
    out = {
        "connector": "kafka",
        "topic": sink,
        "properties.bootstrap.servers": bootstrap,
        "properties.linger.ms": f"{linger_ms:g}",
        "format": "json",
        "sink.delivery-guarantee": guarantee,
    }
    if guarantee == "exactly-once":
        out["sink.transactional-id-prefix"] = f"peers-flink-{run_id}"
        out["properties.transaction.timeout.ms"] = str(TRANSACTION_TIMEOUT_MS)
    return (
        f"SET 'pipeline.name' = {_literal(f'peers-{run_id}')};\n"
        f"CREATE TABLE events ({columns}) WITH (\n{_with(src)}\n);\n"
        f"CREATE TABLE results ({columns}) WITH (\n{_with(out)}\n);\n"
        "INSERT INTO results SELECT seq, `user`, amount, ts FROM events "
        f"WHERE amount > {MIN_AMOUNT:g};\n"
    )


class FlinkSystem(PeerSystem):
    """Flink with a ``guarantee`` sink and a ``heartbeat`` choice (module docstring)."""

    fault_name = "kill-taskmanager"

    def __init__(
        self, guarantee: str, heartbeat: str, checkpoint_ms: int = 1000, linger_ms: float = 1.0
    ) -> None:
        super().__init__()
        self.guarantee = guarantee
        self.heartbeat = heartbeat
        self.checkpoint_ms = checkpoint_ms
        self.linger_ms = linger_ms
        short = {"at-least-once": "alo", "exactly-once": "eos"}[guarantee]
        self.label = f"flink {short}" + (" hb-default" if heartbeat == "default" else "")
        self.home = Path(".")
        self.connector = Path(".")
        self.rest_port = 0
        self.env: dict[str, str] = {}
        self.jobmanager: ManagedProcess | None = None
        self.taskmanagers: list[ManagedProcess] = []
        self.sql_client: ManagedProcess | None = None
        self.job_id: str | None = None

    def prepare(self) -> None:
        self.home = flink_home()
        self.connector = kafka_connector()

    def start(self, bootstrap: str, source: str, sink: str, load: Load) -> None:
        conf_dir = self.work / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        for f in (self.home / "conf").iterdir():
            if f.is_file() and f.name != "config.yaml":
                shutil.copy2(f, conf_dir / f.name)
        ports = dict(zip(("rpc", "rest", "blob"), free_ports(3), strict=True))
        self.rest_port = ports["rest"]
        conf = flink_config(
            self.work, ports, self.guarantee, self.heartbeat, self.checkpoint_ms,
            java_opts(self.home),
        )  # fmt: skip
        (conf_dir / "config.yaml").write_text(render_yaml(conf))
        logs = self.work / "logs" / "flink"
        for d in (self.work / "tmp", logs):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "FLINK_CONF_DIR": str(conf_dir), "FLINK_LOG_DIR": str(logs)}
        bin_dir = self.home / "bin"
        self.jobmanager = self.procs.start(
            "jobmanager", [str(bin_dir / "jobmanager.sh"), "start-foreground"], env=self.env
        )
        self._start_taskmanager()
        live = [self.jobmanager, self.taskmanagers[-1]]
        wait_alive(self._slots_ready, live, START_TIMEOUT_S, "Flink's task slots")
        sql = self.work / "job.sql"
        sql.write_text(
            flink_sql(bootstrap, source, sink, self.guarantee, self.work.name, self.linger_ms)
        )
        self.sql_client = self.procs.start(
            "sql-client",
            [str(bin_dir / "sql-client.sh"), "--jar", str(self.connector), "-f", str(sql)],
            env=self.env,
        )
        wait_alive(self._job_running, live, START_TIMEOUT_S, "the Flink job's tasks")

    def _start_taskmanager(self) -> None:
        name = f"taskmanager-{len(self.taskmanagers)}"
        argv = [str(self.home / "bin" / "taskmanager.sh"), "start-foreground"]
        self.taskmanagers.append(self.procs.start(name, argv, env=self.env))

    def _rest(self, path: str) -> Any:
        url = f"http://{LOOPBACK}:{self.rest_port}{path}"
        try:
            with _DIRECT.open(url, timeout=5) as r:
                return json.loads(r.read() or b"null")
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def _slots_ready(self) -> bool:
        o = self._rest("/overview")
        return isinstance(o, dict) and int(o.get("slots-available", 0)) >= SLOTS

    def _job_running(self) -> bool:
        """The job's every task runs (a RUNNING job may still be deploying its tasks)."""
        if self.sql_client is not None and self.sql_client.returncode not in (None, 0):
            raise PeerError(
                f"the SQL client failed ({self.sql_client.returncode}); "
                f"{self.sql_client.log_path}:\n{self.sql_client.tail()}"
            )
        jobs = (self._rest("/jobs/overview") or {}).get("jobs", [])
        running = [j["jid"] for j in jobs if j.get("state") == "RUNNING"]
        if not running:
            return False
        self.job_id = running[0]
        job = self._rest(f"/jobs/{self.job_id}") or {}
        vertices = job.get("vertices") or []
        return bool(vertices) and all(v.get("status") == "RUNNING" for v in vertices)

    def kill_one(self) -> str:
        tm = self.taskmanagers[-1]
        signal_all(process_tree(tm.pid), signal.SIGKILL)  # the JVM may be a child
        self._start_taskmanager()
        return f"SIGKILL taskmanager (pid {tm.pid}), a new one started at once"

    def groups(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        if self.jobmanager is not None:
            out["jobmanager"] = [self.jobmanager.pid]
        if self.taskmanagers:
            out["taskmanager"] = [tm.pid for tm in self.taskmanagers]
        if self.sql_client is not None:
            out["sql-client"] = [self.sql_client.pid]
        return out

    def info(self) -> dict[str, Any]:
        return {
            "flink": FLINK_VERSION,
            "connector": ":".join(CONNECTOR),
            "guarantee": self.guarantee,
            "heartbeat": self.heartbeat,
            "checkpoint_ms": self.checkpoint_ms,
            "job_id": self.job_id,
        }
