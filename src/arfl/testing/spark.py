"""Spark for tests (and users): a standalone cluster and an in-process session, stopped by pid.

* :class:`StandaloneCluster` starts one master and one worker
  (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``: pip's pyspark
  has no ``start-master.sh``) on free loopback ports, and stops both, with every executor the
  worker launched, by pid.
* :func:`local_session` yields a ``local[N]`` SparkSession and, at exit, stops it *and* the
  py4j gateway JVM pyspark started (``SparkSession.stop()`` alone leaves that JVM running
  until the Python process exits).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import psutil

from arfl.errors import StackError
from arfl.pipelines.sparkenv import driver_env, ensure_spark_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    descendants: list[psutil.Process] = field(default_factory=list)


class StandaloneCluster:
    """One Spark standalone master and one worker on loopback.

    Example::

        with StandaloneCluster(tmp_path) as cluster:
            spec.spark.master == cluster.master_url   # "spark://127.0.0.1:<port>"

    Attributes:
        master_url: ``spark://127.0.0.1:<port>`` once started.
        web_url: the master's web UI (``/json/`` lists workers and apps).
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        cores: int = 1,
        memory: str = "1g",
        start_timeout_s: float = 120.0,
    ) -> None:
        """Prepare a cluster whose SPARK_HOME, work dirs and logs live under ``base_dir``."""
        self.base_dir = base_dir
        self.cores = cores
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.master_url = ""
        self.web_url = ""
        self._daemons: list[_Daemon] = []

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start master then worker and wait until the worker registered.

        Raises:
            StackError: a daemon exited or did not come up in time (names its log file).
        """
        home = ensure_spark_home(self.base_dir / "spark-home")
        env = driver_env(home)
        env["SPARK_NO_DAEMONIZE"] = "1"
        env["SPARK_DAEMON_MEMORY"] = "256m"
        port, web = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self.web_url = f"http://127.0.0.1:{web}"
        spark_class = str(home / "bin" / "spark-class")
        try:
            self._spawn(
                "master",
                [spark_class, "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web)],
                env,
            )
            self._wait_log("master", "I have been elected leader")
            work = self.base_dir / "worker-work"
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(
                "worker",
                [spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url,
                 "--host", "127.0.0.1", "--port", str(free_port()),
                 "--webui-port", str(free_port()), "--cores", str(self.cores),
                 "--memory", self.memory, "--work-dir", str(work)],
                env,
            )
            self._wait_log("worker", "Successfully registered with master")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop worker (and its executors) then master: SIGTERM, wait, SIGKILL, by pid."""
        for d in reversed(self._daemons):
            with contextlib.suppress(psutil.Error):
                d.descendants = psutil.Process(d.proc.pid).children(recursive=True)
            if d.proc.poll() is None:
                d.proc.terminate()
            try:
                d.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                d.proc.kill()
                d.proc.wait()
            for p in d.descendants:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(d.descendants, timeout=10)
            d.log.close()
        self._daemons.clear()

    def pids(self) -> dict[str, int]:
        """Pids of the running daemons by name (``master``, ``worker``)."""
        return {d.name: d.proc.pid for d in self._daemons}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log_path = self.base_dir / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )
        except OSError as e:
            log.close()
            raise StackError(f"cannot start spark {name} ({argv[0]}): {e}") from None
        self._daemons.append(_Daemon(name, proc, log_path, log))

    def _wait_log(self, name: str, needle: str) -> None:
        d = next(x for x in self._daemons if x.name == name)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if needle in d.log_path.read_text(errors="replace"):
                return
            if d.proc.poll() is not None:
                raise StackError(
                    f"spark {name} exited with code {d.proc.returncode} while starting; "
                    f"see {d.log_path}"
                )
            time.sleep(0.2)
        raise StackError(
            f"spark {name} not up after {self.start_timeout_s:.0f}s "
            f"(no {needle!r} in {d.log_path})"
        )


@contextlib.contextmanager
def local_session(
    master: str = "local[1]",
    conf: dict[str, str] | None = None,
    app_name: str = "arfl-test",
) -> Iterator[SparkSession]:
    """A SparkSession whose gateway JVM is killed (by pid) when the block exits.

    Args:
        master: Spark master (``local[N]``).
        conf: extra Spark configuration (e.g. ``spark.jars``).
        app_name: application name.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    try:
        yield session
    finally:
        session.stop()
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        if isinstance(proc, subprocess.Popen):
            with contextlib.suppress(psutil.Error):
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
                for p in tree:
                    p.kill()
                psutil.wait_procs(tree, timeout=10)
            proc.wait()
