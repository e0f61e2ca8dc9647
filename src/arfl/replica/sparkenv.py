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
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from arfl.errors import DeployError
from arfl.paths import state_dir
from arfl.processes import kill_all, process_tree
from arfl.run.sparkhome import claim_spark_home, driver_scratch, spark_home_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Entries of the pyspark package that a SPARK_HOME needs (spark-class, jars, python libs, ...).
_LINKED = ("bin", "sbin", "jars", "python", "data", "examples", "licenses", "conf")
WRITABLE_SPARK_DIRS = ("work", "logs", "tmp")
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
EXECUTOR_DEFAULT_JAVA_OPTIONS = "spark.executor.defaultJavaOptions"
"""Prepended by Spark to :data:`EXECUTOR_JAVA_OPTIONS`: a spec that sets those keeps this."""
C1_ONLY_JIT = "-XX:TieredStopAtLevel=1"
"""JVM option of arfl's Spark JVMs: C1-only JIT (why: :func:`arfl.replica.app.spark_conf`)."""
SCRATCH_ENV = "ARFL_SPARK_SCRATCH"
"""A driver's environment: its JVM's ``java.io.tmpdir`` (:func:`driver_scratch`), which the
driver makes (``arfl.replica.driver``) before it starts the JVM."""


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


def run_spark_home(run_dir: Path) -> Path:
    """Create the directory of one deployment's SPARK_HOMEs
    (:func:`arfl.run.sparkhome.spark_home_path`, its owner file naming ``run_dir``). Each
    driver's own SPARK_HOME (:func:`ensure_spark_home`) lives in it
    (:func:`arfl.run.sparkhome.driver_spark_home`), so that what its Spark applications leave
    there is removed with it (:func:`arfl.run.sparkhome.retire_spark_home`).

    Raises:
        DeployError: it cannot be created.
    """
    home = spark_home_path(run_dir)
    try:
        home.mkdir(parents=True, exist_ok=True)
        claim_spark_home(home, run_dir)
    except OSError as e:
        raise DeployError(
            f"cannot create the run's SPARK_HOME directory {home}: {e}; set ARFL_STATE_DIR to "
            "a writable directory"
        ) from None
    return home


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
    # The driver JVM's temp dirs and PySpark's sockets in a directory that goes with SPARK_HOME
    # (docs/design.md, "Spark's scratch"). spark-submit adds SPARK_SUBMIT_OPTS to the driver
    # JVM, whatever the spec's spark.driver.extraJavaOptions.
    scratch = driver_scratch(spark_home)
    env[SCRATCH_ENV] = str(scratch)
    opts = env.get("SPARK_SUBMIT_OPTS", "")
    env["SPARK_SUBMIT_OPTS"] = f"{opts} -Djava.io.tmpdir={scratch}".strip()
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

    # The JVM's temp dirs (java.io.tmpdir: ``spark-*``, ``artifacts-*``, Spark's local dirs) in
    # one of ours, removed below: the JVM is killed, so its own shutdown hooks never run.
    scratch = Path(tempfile.mkdtemp(prefix="arfl-spark-"))
    conf = dict(conf or {})
    jvm_opts = conf.pop(DRIVER_JAVA_OPTIONS, C1_ONLY_JIT)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config(DRIVER_JAVA_OPTIONS, f"{jvm_opts} -Djava.io.tmpdir={scratch}")
    )
    for k, v in conf.items():
        builder = builder.config(k, v)
    try:
        session = builder.getOrCreate()
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
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
        shutil.rmtree(scratch, ignore_errors=True)
