"""What every system's run shares: the load, the processes, the probe, and the run itself.

A peer (Flink, Kafka Streams, the bare-Kafka floor) is a :class:`PeerSystem`: ``start`` its
processes on fresh topics and return once it processes, ``kill_one`` worker at the fault's
moment, ``stop`` everything. :func:`run_peer` drives it the same way for all: the system
first, then the probe, then arfl's injector on a schedule that starts a moment later (as
deploy starts it), the fault at ``fault_at`` seconds of input (deploy's chaos schedule is timed
from the same first intended send), the drain, the stop. arfl itself runs through its
own deploy (:mod:`peer_arfl`), which schedules the same fault at the same input moment.

Every process is a :class:`arfl.processes.ManagedProcess` (its own session, its output in a
log, stopped with its whole tree); each run stops all of its own in a ``finally``, so an
error or a Ctrl-C (SIGTERM too, :func:`peers.main`) leaves none behind.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peer_probe import ProbeFile
from peer_sampler import Point, Sampler
from peer_stats import Sample

from arfl.errors import ArflError
from arfl.orchestrate.context import python_env
from arfl.orchestrate.deploy import INJECTOR_LEAD_S
from arfl.processes import ManagedProcess, wait_until
from arfl.stack.config import harness_nice
from arfl.stack.topics import ensure_topic
from arfl.workload.injector import InjectorConfig

HERE = Path(__file__).resolve().parent
PROBE = HERE / "peer_probe.py"
LOOPBACK = "127.0.0.1"
MIN_AMOUNT = 10.0
"""The pipeline everywhere: keep ``amount > MIN_AMOUNT``, then ``seq, user, amount, ts``."""
FIELDS = ("seq", "user", "amount", "ts")


class PeerError(ArflError):
    """A system could not be installed, started, faulted or stopped (the message says which
    and names its log)."""


@dataclass(frozen=True)
class Load:
    """The workload and the timing every system gets.

    Attributes:
        rate: events per second.
        duration_s: how long the input lasts.
        partitions: of the input (and output) topic.
        keys: distinct users.
        seed: the events' seed.
        fault_at_s: when the fault comes, seconds of input.
        warmup_s: excluded from the steady figures.
        window_s: the impact window after the fault.
        drain_idle_s: after the input, stop waiting for output once none came for this long.
        drain_max_s: after the input, wait at most this long for the output.
    """

    rate: int
    duration_s: float
    partitions: int
    keys: int
    seed: int
    fault_at_s: float
    warmup_s: float
    window_s: float
    drain_idle_s: float = 15.0
    drain_max_s: float = 180.0


@dataclass
class Outcome:
    """What one run leaves for the analysis.

    Attributes:
        probe_csv: the probe's file (``peer_probe``).
        t0_ms: the input's first intended send time.
        fault_s: when the fault was injected, seconds after ``t0_ms`` (None: no fault).
        fault: what the fault did.
        points: the CPU / memory samples.
        cpu_json: where they were saved (:func:`save_points`).
        info: what else the system tells (its run directory, job id, ...).
        samples: the probe's.
        unparsed: records the probe could not read a ``seq`` and ``ts`` from.
    """

    probe_csv: Path
    t0_ms: int
    fault_s: float | None
    fault: str | None
    points: list[Point]
    cpu_json: Path
    info: dict[str, Any] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    unparsed: int = 0


class Procs:
    """The processes of one run: started with a log each, all stopped by :meth:`stop_all`."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.all: list[ManagedProcess] = []

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        nice: int = 0,
    ) -> ManagedProcess:
        """Start ``argv`` with its output in ``<logs>/<name>.log``."""
        try:
            p = ManagedProcess.start(
                name, argv, self.logs / f"{name}.log", env=env, cwd=cwd, nice=nice
            )
        except OSError as e:
            raise PeerError(f"could not start {name} ({argv[0]}): {e}") from e
        self.all.append(p)
        return p

    def stop_all(self, grace_s: float = 15.0) -> None:
        """Stop every process, the last started first (SIGTERM, ``grace_s``, SIGKILL)."""
        for p in reversed(self.all):
            with contextlib.suppress(Exception):
                p.stop(grace_s)


def wait_alive(
    check: Callable[[], Any], procs: Sequence[ManagedProcess], timeout_s: float, what: str
) -> Any:
    """:func:`wait_until` ``check`` holds, failing at once when one of ``procs`` has exited
    (with its log's tail)."""

    def alive_check() -> Any:
        for p in procs:
            if not p.alive():
                raise PeerError(
                    f"{p.name} exited ({p.returncode}) while waiting for {what}; "
                    f"{p.log_path}:\n{p.tail()}"
                )
        return check()

    def timeout() -> Exception:
        logs = procs[0].log_path.parent
        return PeerError(f"{what}: not ready after {timeout_s:.0f}s (logs in {logs})")

    return wait_until(alive_check, timeout_s=timeout_s, interval_s=0.5, what=what, error=timeout)


class PeerSystem:
    """A peer's runner (module docstring). Subclasses set :attr:`label` and :attr:`fault_name`
    and implement :meth:`start` and :meth:`kill_one`."""

    label = "peer"
    fault_name: str | None = None
    """The name of the fault :meth:`kill_one` injects (None: it has none)."""
    filters = True
    """Whether its output is the filtered input (the floor's is the input itself)."""

    def __init__(self) -> None:
        self.procs = Procs(Path("."))
        self.work = Path(".")

    def prepare(self) -> None:
        """Install what it needs once, before any run (downloads, builds)."""

    def topics(self, stamp: str) -> tuple[str, str]:
        """Its fresh input and output topics."""
        base = f"peers-{self.slug()}-{stamp}"
        return base, f"{base}-out"

    def slug(self) -> str:
        """The label as a name for topics and directories."""
        return "".join(c if c.isalnum() else "-" for c in self.label).strip("-")

    def start(self, bootstrap: str, source: str, sink: str, load: Load) -> None:
        """Start its processes; return once it processes ``source`` into ``sink``."""
        raise NotImplementedError

    def kill_one(self) -> str:
        """Inject :attr:`fault_name` now; returns what it did."""
        raise NotImplementedError

    def groups(self) -> dict[str, list[int]]:
        """Its processes to sample: a label and root pids each."""
        return {}

    def info(self) -> dict[str, Any]:
        """What else the row should say about it."""
        return {}

    def stop(self) -> None:
        """Stop every process it started."""
        self.procs.stop_all()


class Floor(PeerSystem):
    """No system: the injector writes the topic the probe reads (one produce and one consume,
    the floor any Kafka → processor → Kafka path pays twice)."""

    label = "kafka floor"
    filters = False

    def topics(self, stamp: str) -> tuple[str, str]:
        base = f"peers-floor-{stamp}"
        return base, base

    def start(self, bootstrap: str, source: str, sink: str, load: Load) -> None:
        return None

    def kill_one(self) -> str:
        raise PeerError("the floor has no process to kill")


def stack_groups() -> dict[str, list[int]]:
    """The embedded stack's processes (the broker every system shares)."""
    from arfl import stack

    return {s.name: [s.pid] for s in stack.status() if s.pid is not None}


def probe_argv(bootstrap: str, topic: str, out: Path) -> list[str]:
    """The probe's command line (``peer_probe``)."""
    return [
        sys.executable, str(PROBE), "--bootstrap", bootstrap, "--topic", topic, "--out", str(out)
    ]  # fmt: skip


def drain(probe: ProbeFile, expected: set[int], idle_s: float, max_s: float) -> None:
    """Read the probe until every expected result arrived, none came for ``idle_s``, or
    ``max_s`` passed."""
    now = time.monotonic()
    deadline, last_new = now + max_s, now
    while True:
        now = time.monotonic()
        if probe.poll():
            last_new = now
        if probe.seen(expected) >= len(expected) or now - last_new >= idle_s or now >= deadline:
            return
        time.sleep(0.5)


def save_points(path: Path, points: list[Point]) -> None:
    """The CPU / memory samples as JSON (what ``--from`` reads back)."""
    path.write_text(json.dumps([[p.t, p.cpu, p.rss] for p in points]))


def load_points(path: Path) -> list[Point]:
    """The samples :func:`save_points` wrote."""
    return [Point(t, cpu, rss) for t, cpu, rss in json.loads(path.read_text())]


def run_peer(
    system: PeerSystem, bootstrap: str, load: Load, fault: bool, work: Path, expected: set[int]
) -> Outcome:
    """One run of a peer (module docstring); every process is stopped when it returns."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    system.work, system.procs = work, Procs(work / "logs")
    harness = Procs(work / "logs")
    source, sink = system.topics(stamp)
    for topic in dict.fromkeys((source, sink)):
        ensure_topic(bootstrap, topic, load.partitions)
    pids: dict[str, list[int]] = {}
    shared = stack_groups()
    sampler = Sampler(lambda: {**system.groups(), **shared, **pids})
    probe_csv = work / "probe.csv"
    probe = ProbeFile(probe_csv)
    fault_s: float | None = None
    what: str | None = None
    try:
        sampler.start()
        system.start(bootstrap, source, sink, load)
        env, nice = python_env(), harness_nice()
        p = harness.start("probe", probe_argv(bootstrap, sink, probe_csv), env=env, nice=nice)
        pids["probe"] = [p.pid]
        wait_alive(probe_csv.exists, [p], 60, "the probe")
        begin = time.time() + INJECTOR_LEAD_S  # as deploy starts arfl's
        cfg = InjectorConfig(
            bootstrap=bootstrap,
            topic=source,
            rate=load.rate,
            duration_s=load.duration_s,
            keys=load.keys,
            seed=load.seed,
            stats_path=work / "injector.jsonl",
            start_at=begin,
            end_of_input=False,
        )
        inj = harness.start("injector", cfg.command(work / "injector.json"), env=env, nice=nice)
        pids["injector"] = [inj.pid]
        # The injector's t0, as it rounds it (arfl.workload.injector.Injector.run).
        t0_ms = round(begin * 1000)
        if fault:
            while (wait := t0_ms / 1000 + load.fault_at_s - time.time()) > 0:
                time.sleep(min(wait, 0.5))
                probe.poll()
            fault_s = time.time() - t0_ms / 1000
            what = system.kill_one()
        wait_until(
            lambda: not inj.alive(),
            timeout_s=load.duration_s + 120,
            what="the injector's end",
            interval_s=0.5,
        )
        if inj.returncode != 0:
            raise PeerError(f"the injector failed ({inj.returncode}); {inj.log_path}")
        drain(probe, expected, load.drain_idle_s, load.drain_max_s)
    finally:
        harness.stop_all()
        system.stop()
        sampler.stop()
        save_points(work / "cpu.json", sampler.points)
    probe.poll()
    return Outcome(
        probe_csv,
        t0_ms,
        fault_s,
        what,
        sampler.points,
        work / "cpu.json",
        {"work": str(work), "source": source, "sink": sink, **system.info()},
        probe.samples,
        probe.unparsed,
    )
