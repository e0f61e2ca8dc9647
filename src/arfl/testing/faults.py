"""Test harness for fault tests (shared by arfl's tests and by users checking their setup):
a tiny real Spark application with executor JVMs, a ``state.json`` writer, and stopping a
process tree by pid."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arfl.processes import ManagedProcess, create_time, stop_pid, wait_until
from arfl.run.state import IsolationState, RunState, to_json
from arfl.targets.local import executors_of_app

SPARK_APP = """\
import sys
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master(sys.argv[1]).appName("arfl-chaos-test")
    .config("spark.ui.enabled", "false")
    .config("spark.executor.memory", "512m")
    .config("spark.driver.memory", "512m")
    .getOrCreate()
)
print("APPID", spark.sparkContext.applicationId, flush=True)
query = (
    spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    .writeStream.format("noop").trigger(processingTime="500 milliseconds").start()
)
query.awaitTermination()
"""

BUSY_LOOP = """\
import os, sys, time
path = sys.argv[1]
n = 0
last = time.monotonic()
while True:
    n += 1
    if n % 100000 == 0 and time.monotonic() - last > 0.05:
        with open(path + ".tmp", "w") as f:
            f.write(str(n))
        os.replace(path + ".tmp", path)
        last = time.monotonic()
"""


def spark_home(directory: Path) -> Path:
    """A writable ``SPARK_HOME`` of links into pip's pyspark (executors write work dirs there)."""
    import pyspark

    src = Path(pyspark.__file__).parent
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("jars", "bin", "sbin", "python"):
        link = directory / name
        if (src / name).exists() and not link.exists():
            link.symlink_to(src / name)
    return directory


@dataclass
class SparkApp:
    """A running test Spark application."""

    process: ManagedProcess
    app_id: str

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The driver's Popen (its exit code)."""
        return self.process.popen

    @property
    def log(self) -> Path:
        """The driver's log (stdout and stderr)."""
        return self.process.log_path

    @property
    def driver_pid(self) -> int:
        """The driver (Python) process."""
        return self.process.pid

    def executors(self) -> dict[str, int]:
        """Executor id -> pid."""
        return executors_of_app(self.app_id)

    def stop(self) -> None:
        """Stop the driver and every descendant, by pid."""
        self.process.stop(grace_s=10)


def start_spark_app(
    work: Path,
    master: str = "local-cluster[1,1,512]",
    prefix: list[str] | None = None,
    timeout_s: float = 300.0,
) -> SparkApp:
    """Start the tiny streaming app and wait until it has an executor JVM.

    Args:
        work: a directory for the script, SPARK_HOME links and the log.
        master: Spark master URL (needs a cluster master for separate executor JVMs).
        prefix: argv prefix (e.g. ``nsenter --net=...``) to start the driver with.
        timeout_s: how long to wait for the app id and an executor.

    Raises:
        RuntimeError: the app did not come up (the log tail is in the message).
    """
    work.mkdir(parents=True, exist_ok=True)
    script = work / "chaos_spark_app.py"
    script.write_text(SPARK_APP, encoding="utf-8")
    log = work / "spark-app.log"
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home(work / "spark-home")),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),  # loopback only
    )
    log.unlink(missing_ok=True)
    proc = ManagedProcess.start(
        "spark-app",
        [*(prefix or []), sys.executable, str(script), master],
        log,
        env=env,
        cwd=work,
        new_session=False,
    )
    app_id: str | None = None

    def up_or_exited() -> bool:
        nonlocal app_id
        if not proc.alive():
            return True
        if app_id is None:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("APPID "):
                    app_id = line.split()[1]
        return bool(app_id and executors_of_app(app_id))

    try:
        wait_until(up_or_exited, timeout_s=timeout_s, what="test spark app")
    except TimeoutError:
        pass
    else:
        if proc.alive() and app_id:
            return SparkApp(proc, app_id)
    proc.stop(grace_s=10)
    raise RuntimeError(f"test spark app did not start within {timeout_s:g}s:\n{proc.tail(30)}")


def start_busy_loop(work: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """A CPU-bound process that writes its iteration count to a file every ~50 ms."""
    work.mkdir(parents=True, exist_ok=True)
    script = work / "busy.py"
    script.write_text(BUSY_LOOP, encoding="utf-8")
    counter = work / "busy.count"
    proc = subprocess.Popen([sys.executable, str(script), str(counter)])
    return proc, counter


def stop_tree(pid: int, timeout_s: float = 10.0) -> None:
    """SIGCONT (in case it is paused), SIGTERM, then SIGKILL ``pid`` and its descendants."""
    stop_pid(pid, grace_s=timeout_s, tree=True)


def write_state(
    run_dir: Path,
    run: str,
    replicas: dict[int, dict[str, Any]],
    *,
    pid: int | None = None,
    stack: dict[str, str] | None = None,
    leader_path: str | None = None,
    isolation: IsolationState | None = None,
    mode: str = "active-leaderless",
    standbys: dict[int, int] | None = None,
    merger: int | None = None,
    merger_standby: int | None = None,
    master: str = "local-cluster[1,1,1024]",
) -> Path:
    """Write a ``state.json`` as deploy would (replica dicts: driver_pid, app_id, ...;
    ``standbys``: standby -> pid; ``merger``: the merger's pid; ``master``: the Spark master).

    ``driver_create_time`` is filled in from the live process when missing.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    reps: dict[str, dict[str, Any]] = {}
    for idx, rep in replicas.items():
        rep = {"state": "running", "netns": None, "address": None, **rep}
        if rep.get("driver_pid") and "driver_create_time" not in rep:
            rep["driver_create_time"] = create_time(int(rep["driver_pid"]))
        reps[str(idx)] = rep
    RunState.model_validate(
        {
            "run": run,
            "pid": os.getpid() if pid is None else pid,
            "mode": mode,
            "spec_name": run,
            "stack": stack or {},
            "replicas": reps,
            "leader_path": leader_path,
            "isolation": to_json(isolation) if isolation else None,
            "standbys": {
                str(k): {"pid": p, "create_time": create_time(p), "ready": True}
                for k, p in (standbys or {}).items()
            },
            "merger_pid": merger,
            "merger_create_time": create_time(merger) if merger else None,
            "merger_standby_pid": merger_standby,
            "merger_standby_create_time": (create_time(merger_standby) if merger_standby else None),
            "master": master,
        },
    ).write(run_dir)
    return run_dir
