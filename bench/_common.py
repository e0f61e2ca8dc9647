"""What the benchmark scripts share: the results table they print and the JSON they write;
the machine's CPU lock each deployment holds and a per-process CPU sampler.

A script is run as ``.venv/bin/python bench/<name>.py``, so this module is importable as
``_common`` (the script's folder is first on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from arfl.processes import process_tree, start_key
from arfl.run.rundir import read_jsonl

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of a results table.

    Attributes:
        title: the header, right-aligned over the values.
        width: the column's width.
        fmt: the format spec of a value (``".1f"``), after the alignment and width.
        value: the value of a row.
        on_failure: also shown on a failed variant's line (the columns that name the variant).
    """

    title: str
    width: int
    fmt: str
    value: Callable[[Row], Any]
    on_failure: bool = False

    def cell(self, row: Row) -> str:
        """The formatted value of ``row``."""
        return format(self.value(row), f">{self.width}{self.fmt}")


def num(v: Any) -> float:
    """A table cell's number: NaN for a figure the run did not give."""
    return math.nan if v is None else float(v)


def yes_no(v: Any) -> str:
    """A verdict's cell: yes, no, or ? when it was not given."""
    return {True: "yes", False: "no"}.get(v, "?")


def print_table(
    rows: Sequence[Row],
    name: Column,
    columns: Sequence[Column],
    *,
    error_chars: int = 80,
) -> None:
    """Print a blank line, a header and a line per row; a row with an ``error`` says so.

    Args:
        rows: the results, one per variant.
        name: the first column (left-aligned): what the variant is.
        columns: the figures.
        error_chars: how much of a failed variant's error to show.
    """
    print()
    print(" ".join([f"{name.title:<{name.width}}", *(f"{c.title:>{c.width}}" for c in columns)]))
    for r in rows:
        first = format(name.value(r), f"<{name.width}{name.fmt}")
        if "error" in r:
            named = [c.cell(r) for c in columns if c.on_failure]
            print(" ".join([first, *named, f"failed: {r['error'][:error_chars]}"]))
            continue
        print(" ".join([first, *(c.cell(r) for c in columns)]))


def write_rows(path: Path | None, rows: Sequence[Row]) -> None:
    """Write the results as a JSON list to ``path`` (nothing when ``path`` is None)."""
    if path:
        path.write_text(json.dumps(rows, indent=2) + "\n")


CPU_LOCK = Path("/tmp/arfl-cpu.lock")
"""The machine's CPU lock: integration tests run under ``flock`` on it, benchmark runs hold it
for the duration of each deployment, so that they interleave between runs, not during them."""


@contextlib.contextmanager
def cpu_lock(path: Path = CPU_LOCK) -> Iterator[float]:
    """Hold ``path`` exclusively (``fcntl.flock``, as the ``flock`` command does); yields the
    seconds waited for it."""
    t = time.monotonic()
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {path} (another run holds it)", file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - t
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


HOST = "host"
"""The label of the whole machine's busy CPU in :class:`ProcessCpu` (every process, anyone's)."""


def host_busy_s() -> float:
    """The machine's busy CPU seconds since boot: what ran (guest time is already in user;
    steal and iowait ran nothing here)."""
    t = psutil.cpu_times()
    return float(sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq")))


def _role(cmdline: list[str]) -> str:
    """What a process of a replica's tree is, from its command line."""
    line = " ".join(cmdline)
    if "CoarseGrainedExecutorBackend" in line:
        return "executor"
    if "SparkSubmit" in line:
        return "driver-jvm"
    if "pyspark" in line and ("daemon" in line or "worker" in line):
        return "py-workers"
    if "arfl.replica.driver" in line:
        return "driver-py"
    return "other"


class Periodic:
    """Calls :meth:`_sample` every ``interval_s`` in a daemon thread from :meth:`start`, and
    once more at :meth:`stop`."""

    def __init__(self, interval_s: float, name: str) -> None:
        self.interval_s = interval_s
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sampling."""
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        raise NotImplementedError


class ProcessCpu(Periodic):
    """CPU seconds of a deployment's processes by role, sampled once a second in a thread.

    ``summary.json`` keeps only each replica's total; to name the process that saturates, this
    samples every process of the run (from its ``state.json``: each replica's tree as
    ``r<i> driver-py`` / ``driver-jvm`` / ``executor`` / ``py-workers``, ``merger``,
    ``injector``), the embedded stack's ``kafka`` and ``zookeeper``, and the machine's busy
    time (:data:`HOST`). A process that exits keeps its last sample.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        super().__init__(interval_s, "process-cpu")
        self.run_dir: Path | None = None
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._last: dict[tuple[int, float], tuple[str, float]] = {}
        self._stack: dict[str, int] = {}

    def watch(self, run_dir: Path) -> None:
        """Sample the run in ``run_dir`` from now on (deploy's ``on_run_dir``)."""
        self.run_dir = run_dir

    def start(self) -> None:
        """Start sampling (the stack's pids are read once, here)."""
        from arfl import stack

        self._stack = {s.name: s.pid for s in stack.status() if s.pid is not None}
        super().start()

    def cores(self, start: float, end: float) -> dict[str, float]:
        """Average cores each label used over ``[start, end]`` (epoch seconds), from the
        samples nearest inside it; empty when fewer than two samples fall in it."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return {}
        (t0, a), (t1, b) = inside[0], inside[-1]
        if t1 <= t0:
            return {}
        return {k: max(0.0, (v - a.get(k, 0.0)) / (t1 - t0)) for k, v in b.items()}

    def _sample(self) -> None:
        pids: dict[str, int] = dict(self._stack)
        trees: dict[int, str] = {}
        state = self._state()
        for key in ("merger", "injector"):
            pid = state.get(f"{key}_pid")
            if isinstance(pid, int):
                pids[key] = pid
        for i, rep in (state.get("replicas") or {}).items():
            pid = rep.get("driver_pid") if isinstance(rep, dict) else None
            if isinstance(pid, int):
                trees[pid] = f"r{i}"
        for label, pid in pids.items():
            with contextlib.suppress(psutil.Error):
                self._record(psutil.Process(pid), label)
        for pid, replica in trees.items():
            for p in process_tree(pid):
                with contextlib.suppress(psutil.Error):
                    self._record(p, f"{replica} {_role(p.cmdline())}")
        totals: dict[str, float] = {}
        for label, secs in self._last.values():
            totals[label] = totals.get(label, 0.0) + secs
        totals[HOST] = host_busy_s()
        self.samples.append((time.time(), totals))

    def _record(self, p: psutil.Process, label: str) -> None:
        t = p.cpu_times()
        self._last[start_key(p)] = (label, t.user + t.system)

    def _state(self) -> dict[str, Any]:
        if self.run_dir is None:
            return {}
        try:
            doc = json.loads((self.run_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}


GC_LINE = re.compile(
    r"^\[(?P<time>[^\]]+)\]\[[^\]]+\] GC\(\d+\) (?:[YO]: )?Pause (?P<what>.*?) (?P<ms>[\d.]+)ms$"
)
"""A pause in a JVM's ``-Xlog:gc,gc+phases`` log with ``time,uptime`` decorators: G1's
(``Pause Young ...``), ZGC's (``Pause Mark Start``) and generational ZGC's (``Y: Pause ...``)."""


LOG_TIME = re.compile(r"^\[(?P<time>\d{4}-[^\]]+)\]\[")
"""Any line of such a log: its ``time`` decorator."""


def gc_pauses(log: Path, lo: float, hi: float) -> list[float] | None:
    """Durations (ms) of the pauses in a JVM's GC log (as the stack's broker writes
    ``arfl.stack.config.KAFKA_GC_LOG``, and the files the JVM rotated it to, ``<log>.<n>``) that
    overlap [lo, hi) in wall-clock time (a line's time is its pause's end), in time order; None
    when there is no such log (another broker) or it does not reach back to ``lo`` (rotated away,
    or a broker started since)."""
    paths = [
        p
        for p in log.parent.glob(f"{log.name}*")
        if re.fullmatch(rf"{re.escape(log.name)}(\.\d+)?", p.name)
    ]
    out: list[tuple[float, float]] = []
    earliest = math.inf
    for path in paths:
        lines = path.read_text(errors="replace").splitlines()
        # A file is written in time order: its first stamped line is its earliest.
        first = next((m for m in map(LOG_TIME.match, lines) if m), None)
        if first is not None:
            earliest = min(earliest, _log_time(first["time"]))
        for line in lines:
            m = GC_LINE.match(line)
            if not m:
                continue
            end, ms = _log_time(m["time"]), float(m["ms"])
            if end > lo and end - ms / 1000 < hi:
                out.append((end, ms))
    if earliest > lo:
        return None
    return [ms for _, ms in sorted(out)]


def _log_time(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def stalled_seconds(run_dir: Path, after_s: float) -> dict[str, Any]:
    """The merged output's seconds (the merger's 1-s intervals, ``monitor.jsonl``) from
    ``after_s`` past the input's start while the input flows: the worst one's p99, and how many
    had a p99 over 1.5 x their median (the stalls a fault's impact window is judged against)."""
    flowing = [r for r in read_jsonl(run_dir / "monitor.jsonl") if r.get("input_flowing")]
    if not flowing:
        return {"worst_second_p99": None, "stalled_seconds": None, "seconds": 0}
    t0 = min(r["t"] for r in flowing)
    seconds = sorted(
        r["interval"]["p99"]
        for r in flowing
        if r["t"] >= t0 + after_s and r["interval"]["p99"] is not None
    )
    median = seconds[len(seconds) // 2] if seconds else math.nan
    return {
        "worst_second_p99": seconds[-1] if seconds else None,
        "stalled_seconds": sum(p > 1.5 * median for p in seconds),
        "seconds": len(seconds),
    }
