"""A writable SPARK_HOME and the environment of every Spark process arfl starts.

pip's pyspark lives in site-packages. Pointed at it directly, executors of ``local-cluster``
and standalone workers write their work directories (``$SPARK_HOME/work``) into the virtual
environment. :func:`ensure_spark_home` builds a directory of symlinks to pyspark's ``bin``,
``jars``, ``python``, ... next to real, writable ``work`` and ``logs`` directories, and
:func:`driver_env` is the environment a driver process (or a standalone master/worker) needs:
``SPARK_HOME`` there, ``PYSPARK_PYTHON`` = the interpreter that has pyarrow and pandas (Python
data sources fail with "Python worker failed to connect back" otherwise), loopback binding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from arfl.errors import DeployError
from arfl.paths import state_dir
from arfl.processes import kill_all, process_tree

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Entries of the pyspark package that a SPARK_HOME needs (spark-class, jars, python libs, ...).
_LINKED = ("bin", "sbin", "jars", "python", "data", "examples", "licenses", "conf")
WRITABLE_SPARK_DIRS = ("work", "logs", "tmp")


def pyspark_dir() -> Path:
    """The installed pyspark package directory (the one pip unpacked)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def ensure_spark_home(base: Path | None = None) -> Path:
    """Create (idempotently) a writable SPARK_HOME of symlinks to the installed pyspark.

    Args:
        base: directory to create it in; default ``state_dir()/spark-home``.

    Returns:
        The SPARK_HOME path.

    Raises:
        DeployError: pyspark has no ``jars`` directory, or the directory cannot be written.
    """
    home = base if base is not None else state_dir() / "spark-home"
    src = pyspark_dir()
    if not (src / "jars").is_dir():
        raise DeployError(
            f"{src}: pyspark has no jars/ directory; reinstall it with "
            "'pip install \"pyspark[sql]>=4.3,<4.4\"'"
        )
    try:
        home.mkdir(parents=True, exist_ok=True)
        for name in _LINKED:
            target = src / name
            link = home / name
            if not target.exists():
                continue
            if link.is_symlink():
                if Path(os.readlink(link)) == target:
                    continue
                link.unlink()
            elif link.exists():
                # A real directory left behind: replace it so jars always match the venv.
                shutil.rmtree(link)
            link.symlink_to(target, target_is_directory=True)
        for name in WRITABLE_SPARK_DIRS:
            (home / name).mkdir(exist_ok=True)
        (home / "RELEASE").write_text(f"Spark (pyspark {_pyspark_version()}) linked by arfl\n")
    except OSError as e:
        raise DeployError(
            f"cannot create SPARK_HOME at {home}: {e}; set ARFL_STATE_DIR to a writable directory"
        ) from None
    return home


RUN_SPARK_HOMES = "spark-runs"
"""Directory of :func:`state_dir` that holds each deployment's own SPARK_HOME."""
OWNER_FILE = "ARFL_RUN"
"""In a run's SPARK_HOME: the run directory it belongs to (what ``recover`` checks)."""


def run_spark_home(run_dir: Path) -> Path:
    """Build the SPARK_HOME of one deployment's drivers: ``state_dir()/spark-runs/<run>-<h>``
    (``h`` from the run directory's absolute path: two runs of one name under two runs roots
    get two homes), its :data:`OWNER_FILE` naming ``run_dir``. Its own, so that what its Spark
    applications leave there is removed with it (:func:`retire_spark_home`).

    Raises:
        DeployError: it cannot be created.
    """
    owner = str(run_dir.resolve())
    tag = hashlib.sha1(owner.encode()).hexdigest()[:8]
    home = ensure_spark_home(state_dir().resolve() / RUN_SPARK_HOMES / f"{run_dir.name}-{tag}")
    try:
        (home / OWNER_FILE).write_text(owner + "\n", encoding="utf-8")
    except OSError as e:
        raise DeployError(f"cannot write {home / OWNER_FILE}: {e}") from None
    return home


def owns_spark_home(run_dir: Path, home: Path) -> bool:
    """Whether ``home`` is ``run_dir``'s own SPARK_HOME (:func:`run_spark_home`): under a
    ``spark-runs`` directory, its :data:`OWNER_FILE` naming ``run_dir``. ``recover`` deletes
    nothing else, whatever ``state.json`` says."""
    try:
        owner = (home / OWNER_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return home.parent.name == RUN_SPARK_HOMES and owner == str(run_dir.resolve())


def processes_using(home: Path) -> list[int]:
    """Pids of live processes whose command line names a path in ``home`` (a Spark JVM's
    ``-cp <home>/conf/:<home>/jars/*``): while there is one, the home is in use."""
    needle = str(home) + os.sep
    found: list[int] = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any(needle in part for part in cmd):
            found.append(p.pid)
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class RetiredHome:
    """What :func:`retire_spark_home` did."""

    home: str
    removed_mb: float
    executor_logs: tuple[str, ...]
    """The executor logs it kept (paths under the run's ``logs/executors``)."""

    def to_json(self) -> dict[str, object]:
        return {"home": self.home, "removed_mb": self.removed_mb,
                "executor_logs": list(self.executor_logs)}  # fmt: skip


def retire_spark_home(home: Path, logs: Path) -> RetiredHome | None:
    """Keep the executors' logs of a deployment's SPARK_HOME, then delete it.

    A ``local-cluster`` worker writes each executor's ``stdout`` and ``stderr`` under
    ``work/<app id>/<executor id>/`` (next to a copy of every jar the application ships, ~10 MB
    per application), and every Spark JVM its scratch under ``tmp/`` (``spark-*``,
    ``blockmgr-*``), which a JVM that is killed never removes: measured here, 7 applications
    of a test session left 87 MB under ``work`` and 49 MB under ``tmp`` of the shared
    SPARK_HOME. The non-empty logs are moved to ``logs/<app id>.<executor id>.<stdout|stderr>``
    (an application id two drivers shared keeps both: ``...stderr``, ``...stderr.1``). The
    home's symlinks are removed, never followed; its :data:`OWNER_FILE` last, so that one whose
    deletion failed half-way is still found (and owned) by ``recover``.

    Returns:
        None when ``home`` does not exist (nothing to do).

    Raises:
        OSError: the logs could not be moved or the home not deleted.
    """
    if not home.is_dir():
        return None
    kept: list[str] = []
    work = home / "work"
    if work.is_dir():
        for app in sorted(p for p in work.iterdir() if p.is_dir() and not p.is_symlink()):
            for ex in sorted(p for p in app.iterdir() if p.is_dir() and not p.is_symlink()):
                for stream in ("stdout", "stderr"):
                    src = ex / stream
                    if src.is_file() and not src.is_symlink() and src.stat().st_size > 0:
                        logs.mkdir(parents=True, exist_ok=True)
                        dst = logs / f"{app.name}.{ex.name}.{stream}"
                        n = 0
                        while dst.exists():
                            n += 1
                            dst = logs / f"{app.name}.{ex.name}.{stream}.{n}"
                        shutil.move(src, dst)
                        kept.append(str(dst))
    size = 0
    for root, _dirs, files in os.walk(home):  # does not descend into symlinked directories
        for f in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(root, f)).st_size
    for child in home.iterdir():
        if child.name == OWNER_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()  # a file, or a symlink (never what it points to)
    (home / OWNER_FILE).unlink(missing_ok=True)
    home.rmdir()
    return RetiredHome(str(home), round(size / 1e6, 1), tuple(kept))


def _pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def java_home() -> str | None:
    """JAVA_HOME from the environment, else derived from ``java`` on PATH (None if no java)."""
    env = os.environ.get("JAVA_HOME")
    if env and (Path(env) / "bin" / "java").exists():
        return env
    java = shutil.which("java")
    if java is None:
        return None
    return str(Path(java).resolve().parent.parent)


def driver_env(spark_home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a Spark driver process, master or worker.

    Args:
        spark_home: from :func:`ensure_spark_home`.
        base: environment to start from; default ``os.environ``.

    Returns:
        A new dict; ``base`` is not modified.

    Raises:
        DeployError: no Java runtime was found.
    """
    env = dict(os.environ if base is None else base)
    jh = java_home()
    if jh is None:
        raise DeployError("no Java runtime: install Java 17 (java on PATH) or set JAVA_HOME")
    env["JAVA_HOME"] = jh
    env["SPARK_HOME"] = str(spark_home)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Executors and workers bind to loopback only (no traffic leaves the machine).
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_LOCAL_DIRS"] = str(spark_home / "tmp")
    env["SPARK_WORKER_DIR"] = str(spark_home / "work")
    env["SPARK_LOG_DIR"] = str(spark_home / "logs")
    # A user's PYSPARK_SUBMIT_ARGS would override the driver's --master and jars.
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return env


@contextlib.contextmanager
def local_session(
    master: str = "local[1]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "arfl",
) -> Iterator[SparkSession]:
    """An in-process SparkSession whose gateway JVM is killed (by pid) when the block exits.

    ``SparkSession.stop()`` alone leaves pyspark's py4j gateway JVM running until the Python
    process exits; tests and short-lived commands must not leave it behind.

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
        # Short jobs: C1-only JIT (see arfl.replica.driver.spark_conf).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
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
            # The JVM's descendants through psutil, the JVM itself through its Popen (which
            # must reap it: psutil would reap it behind its back).
            if proc.poll() is None:
                kill_all(process_tree(proc.pid)[1:])
            proc.kill()
            proc.wait()
