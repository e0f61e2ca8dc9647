"""A deployment's own SPARK_HOME directory (one SPARK_HOME per driver in it): where it lives,
whose it is, and retiring it. Called "the run's SPARK_HOME" below, ``state.json``'s
``spark_home``.

Built by :func:`arfl.replica.sparkenv.run_spark_home`; retired by deploy at its stop and by
``arfl chaos recover`` for a dead deployment (docs/design.md, "Spark's scratch").
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import psutil

from arfl.paths import state_dir

RUN_SPARK_HOMES = "spark-runs"
"""Directory of :func:`state_dir` that holds each deployment's own SPARK_HOME directory."""
EXECUTOR_LOGS = "logs/executors"
"""Where a run directory keeps its executors' logs (moved there from its SPARK_HOME)."""
OWNER_FILE = "ARFL_RUN"
"""In a run's SPARK_HOME directory: the run directory it belongs to (what ``recover`` checks)."""


def spark_home_path(run_dir: Path) -> Path:
    """Where the SPARK_HOMEs of ``run_dir``'s drivers live: ``state_dir()/spark-runs/<run>-<h>``
    (``h`` from the run directory's absolute path: two runs of one name under two runs roots
    get two)."""
    tag = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return state_dir().resolve() / RUN_SPARK_HOMES / f"{run_dir.name}-{tag}"


def driver_scratch(home: Path) -> Path:
    """The ``java.io.tmpdir`` of the driver JVM whose SPARK_HOME is ``home``
    (``<tmp>/arfl-spark-<h>``, ``h`` from ``home``'s absolute path): where it keeps ``spark-*``
    and ``artifacts-*`` and PySpark binds its Unix sockets, whose paths must stay under 108
    bytes (the SPARK_HOME's own path can be longer). Deleted with the home
    (:func:`retire_spark_home`): a killed JVM never deletes it, and in /tmp nobody would."""
    tag = hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"arfl-spark-{tag}"


class ScratchTaken(OSError):
    """A driver's scratch name is a symlink, not a directory, or another user's."""


def make_scratch(path: Path) -> Path:
    """Create ``path`` (:func:`driver_scratch`), private to this user, or check the one there.

    Raises:
        ScratchTaken: what is there is a symlink, not a directory, or another user's (a name in
            a shared /tmp anyone could have taken first).
        OSError: it cannot be made.
    """
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise ScratchTaken(f"{path} is not a directory of this user's") from None
    return path


def driver_spark_home(run_home: Path, driver: str) -> Path:
    """The SPARK_HOME of one driver of a deployment (``replica-N``, ``standby-K``): a
    directory of ``run_home`` (its replicas' restarts use it again, one after the other)."""
    return run_home / driver


def claim_spark_home(home: Path, run_dir: Path) -> None:
    """Write ``home``'s :data:`OWNER_FILE`: it is ``run_dir``'s.

    Raises:
        OSError: it cannot be written.
    """
    (home / OWNER_FILE).write_text(f"{run_dir.resolve()}\n", encoding="utf-8")


def owns_spark_home(run_dir: Path, home: Path) -> bool:
    """Whether ``home`` is ``run_dir``'s own SPARK_HOME directory
    (:func:`arfl.replica.sparkenv.run_spark_home`): not a symlink, under a ``spark-runs``
    directory, its
    :data:`OWNER_FILE` naming ``run_dir``. ``recover`` deletes nothing else, whatever
    ``state.json`` says."""
    try:
        owner = (home / OWNER_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return (
        not home.is_symlink()
        and home.parent.name == RUN_SPARK_HOMES
        and owner == str(run_dir.resolve())
    )


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


def _executor_dirs(home: Path) -> list[tuple[str, Path]]:
    """``(prefix, executor directory)`` of every executor a deployment's SPARK_HOME holds:
    ``<driver>/work/<app id>/<executor id>/`` (prefix ``<driver>.<app id>.<executor id>``), and
    ``work/<app id>/<executor id>/`` of a home whose drivers shared it (an older arfl's)."""
    homes = [("", home)] + [
        (f"{d.name}.", d) for d in sorted(home.iterdir()) if d.is_dir() and not d.is_symlink()
    ]
    found: list[tuple[str, Path]] = []
    for prefix, h in homes:
        work = h / "work"
        if not work.is_dir() or work.is_symlink():
            continue
        for app in sorted(p for p in work.iterdir() if p.is_dir() and not p.is_symlink()):
            for ex in sorted(p for p in app.iterdir() if p.is_dir() and not p.is_symlink()):
                found.append((f"{prefix}{app.name}.{ex.name}", ex))
    return found


def retire_spark_home(home: Path, logs: Path) -> RetiredHome | None:
    """Keep the executors' logs of a deployment's SPARK_HOME, then delete it.

    A ``local-cluster`` worker writes each executor's ``stdout`` and ``stderr`` under
    ``work/<app id>/<executor id>/`` of its driver's SPARK_HOME (next to a copy of every jar the
    application ships, ~10 MB per application), and every Spark JVM its scratch under ``tmp/``
    (``spark-*``, ``blockmgr-*``), which a JVM that is killed never removes: measured here, one
    run of the test suite left 26 applications (279 MB) under ``work`` and 14 scratch
    directories (58 MB) under ``tmp`` of the shared SPARK_HOME. The non-empty logs are moved to
    ``logs/<driver>.<app id>.<executor id>.<stdout|stderr>`` (:func:`_executor_dirs`; a name
    already there gets ``.1``, ``.2``, ...). The home's symlinks are removed, never followed;
    its :data:`OWNER_FILE` last, so that one whose deletion failed half-way is still found (and
    owned) by ``recover``. Its drivers' :func:`driver_scratch` directories go first.

    Returns:
        None when ``home`` does not exist (nothing to do).

    Raises:
        OSError: the logs could not be moved or the home not deleted.
    """
    if home.is_symlink():
        raise OSError(f"{home} is a symlink, not a run's SPARK_HOME directory")
    if not home.is_dir():
        return None
    kept: list[str] = []
    for name, ex in _executor_dirs(home):
        for stream in ("stdout", "stderr"):
            src = ex / stream
            if src.is_file() and not src.is_symlink() and src.stat().st_size > 0:
                logs.mkdir(parents=True, exist_ok=True)
                dst = logs / f"{name}.{stream}"
                n = 0
                while dst.exists():
                    n += 1
                    dst = logs / f"{name}.{stream}.{n}"
                shutil.move(src, dst)
                kept.append(str(dst))
    size = 0
    for root, _dirs, files in os.walk(home):  # does not descend into symlinked directories
        for f in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(root, f)).st_size
    for scratch in [driver_scratch(home)] + [
        driver_scratch(d) for d in home.iterdir() if d.is_dir() and not d.is_symlink()
    ]:
        with contextlib.suppress(FileNotFoundError):
            st = scratch.lstat()
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():  # never another's
                shutil.rmtree(scratch)
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


@dataclasses.dataclass(frozen=True, slots=True)
class Retirement:
    """What :func:`retire_unless_used` did: retired, kept for a process, or failed."""

    retired: RetiredHome | None = None
    """Set when the home was deleted (None also when it did not exist)."""
    using: tuple[int, ...] = ()
    """The pids that still use it (then it was kept)."""
    error: str | None = None
    """Why deleting it failed."""


def retire_unless_used(home: Path, run_dir: Path) -> Retirement:
    """The stop of a deployment's SPARK_HOME, defined once for deploy's stop and ``recover``:
    kept while a process names it (:func:`processes_using`), else retired
    (:func:`retire_spark_home`) with its executors' logs moved to ``run_dir``'s
    :data:`EXECUTOR_LOGS`."""
    using = processes_using(home)
    if using:
        return Retirement(using=tuple(using))
    try:
        return Retirement(retired=retire_spark_home(home, run_dir / EXECUTOR_LOGS))
    except OSError as e:
        return Retirement(error=str(e))
