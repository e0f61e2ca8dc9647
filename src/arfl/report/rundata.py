"""Everything ``arfl report`` reads from one run directory, parsed once.

The run directory layout is :mod:`arfl.run.rundir`'s contract. Only ``spec.json`` and
``journal.jsonl`` are required; a run that failed early may lack the latency log, the monitor
stream or the summary, and the report then shows what is known (empty phases, ``None`` values).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from arfl.errors import ReportError
from arfl.measure.histogram import IntervalHistogram, read_latency_log
from arfl.run.events import Event
from arfl.run.progress import LateDrop, batch_timing, from_journal, late_drops
from arfl.run.rundir import RunPaths, read_journal, read_jsonl
from arfl.run.streams import InjectorSummary, MonitorSnapshot

if TYPE_CHECKING:
    from arfl.configs.spec import Spec


@dataclass(frozen=True)
class RunData:
    """The parsed files of one run directory.

    Attributes:
        root: the run directory.
        spec: the resolved spec (``spec.json``).
        journal: every journal event, in file order.
        intervals: the 1-s latency intervals of ``latency.hlog`` (empty when missing).
        monitor: the merger's per-second lines (empty when missing).
        injector_seconds: the injector's per-second lines (raw dicts).
        injector_summary: the injector's final line, when it got that far.
        merger: ``merger.json`` (empty dict when missing).
        summary: ``summary.json`` (empty dict when missing).
        progress: replica index -> that replica's StreamingQueryProgress lines.
        check: ``check.json``, the independent check deploy ran (empty dict when missing).
        sent_intervals: the 1-s intervals of ``latency-sent.hlog`` (latency from the actual
            send time; empty when missing).
        notes: what loading left out (a torn last journal line), for the report's warnings.
    """

    root: Path
    spec: Spec
    journal: list[dict[str, Any]]
    intervals: list[IntervalHistogram]
    monitor: list[MonitorSnapshot]
    injector_seconds: list[dict[str, Any]] = field(default_factory=list)
    injector_summary: InjectorSummary | None = None
    merger: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    progress: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    sent_intervals: list[IntervalHistogram] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def replica_batches(self) -> dict[int, list[Batch]]:
        """Replica index -> its micro-batches (see :func:`batches`)."""
        return {r: batches(lines) for r, lines in sorted(self.progress.items())}

    def late_drops(self) -> dict[int, list[LateDrop]]:
        """Replica -> its batches that dropped rows behind the watermark, by batch id.

        Read from the progress files, so a batch the watcher never saw (the run was killed, or
        the batch ran while the replicas were being stopped) counts too; ``late-drop`` journal
        events add the batches whose progress lines are gone. Only replicas with progress lines
        or such events are keys: for the others nothing is known.
        """
        out: dict[int, list[LateDrop]] = {
            r: late_drops(lines, r) for r, lines in sorted(self.progress.items())
        }
        counted = {r: {d.batch for d in ds} for r, ds in out.items()}
        for ev in self.journal:
            drop = from_journal(ev)
            if drop is None or drop.batch in counted.setdefault(drop.replica, set()):
                continue
            counted[drop.replica].add(drop.batch)
            out.setdefault(drop.replica, []).append(drop)
        return {r: sorted(ds, key=lambda d: d.batch) for r, ds in sorted(out.items())}

    @property
    def name(self) -> str:
        """The run's id (its directory name)."""
        return self.root.name

    def events(self, *names: Event) -> list[dict[str, Any]]:
        """Journal events whose ``event`` is one of ``names``, in order."""
        return [e for e in self.journal if e.get("event") in names]

    def first_event(self, name: Event) -> dict[str, Any] | None:
        """The first journal event called ``name``."""
        found = self.events(name)
        return found[0] if found else None

    @property
    def input_start(self) -> float | None:
        """Epoch seconds when the input started: the injector's ``t0`` (event 0's intended send
        time, which latencies are measured from), else the ``workload-started`` event."""
        for ev in self.events(Event.INJECTOR_STARTED, Event.INJECTOR_FINISHED):
            if ev.get("t0") is not None:
                return float(ev["t0"])
        if self.injector_summary is not None:
            return self.injector_summary.t0
        for sec in self.injector_seconds:
            if sec.get("t0") is not None:
                return float(sec["t0"])
        started = self.first_event(Event.WORKLOAD_STARTED)
        return None if started is None else float(started["t"])

    @property
    def input_end(self) -> float | None:
        """Epoch seconds when the input ended (injector summary, else ``workload-finished``,
        else the last injector second, else the scheduled end)."""
        if self.injector_summary is not None:
            return self.injector_summary.end
        ev = self.first_event(Event.INJECTOR_FINISHED)
        if ev is not None and ev.get("end") is not None:
            return float(ev["end"])
        ev = self.first_event(Event.WORKLOAD_FINISHED)
        if ev is not None:
            return float(ev["t"])
        if self.injector_seconds:
            return float(self.injector_seconds[-1]["t"])
        start = self.input_start
        return None if start is None else start + self.spec.workload.duration


@dataclass(frozen=True)
class Batch:
    """One micro-batch of a replica (from a ``StreamingQueryProgress`` line).

    Attributes:
        start: epoch seconds when the batch's trigger fired (``timestamp``).
        duration_ms: ``durationMs.triggerExecution``.
        batch_id: ``batchId``.
        rows: ``numInputRows``.
    """

    start: float
    duration_ms: float
    batch_id: int
    rows: int

    @property
    def end(self) -> float:
        """Epoch seconds when the batch finished."""
        return self.start + self.duration_ms / 1000.0


def batches(lines: list[dict[str, Any]]) -> list[Batch]:
    """The batches of one replica's progress lines, in time order (unparseable lines skipped)."""
    out: list[Batch] = []
    for d in lines:
        timing = batch_timing(d)
        if timing is None:
            continue
        try:
            batch_id, rows = int(d.get("batchId", -1)), int(d.get("numInputRows", 0))
        except (TypeError, ValueError):
            continue
        out.append(Batch(timing[0], timing[1], batch_id, rows))
    return sorted(out, key=lambda b: b.start)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: not valid JSON ({e}); is the run still being written?") from e
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return data


def load_run(root: Path) -> RunData:
    """Read a run directory.

    Args:
        root: a directory written by ``arfl deploy``.

    Raises:
        ReportError: it is not a run directory, or ``spec.json`` / ``latency.hlog`` is broken.
    """
    # Imported here: the spec module imports arfl.report.slo to validate [report.slo].
    from arfl.configs.load import saved_spec

    if not root.is_dir():
        raise ReportError(f"run directory {root} not found; pass a directory under runs/")
    paths = RunPaths(root)
    spec_path = root / "spec.json"
    if not spec_path.exists():
        raise ReportError(f"{root} has no spec.json: not a run directory written by 'arfl deploy'")
    try:
        spec = saved_spec(_read_json(spec_path))
    except ValidationError as e:
        raise ReportError(
            f"{spec_path}: not a spec this arfl version understands: "
            f"{e.errors()[0]['loc']}: {e.errors()[0]['msg']}"
        ) from e
    if not paths.journal.exists():
        raise ReportError(f"{root} has no journal.jsonl: not a run directory")
    try:
        journal, torn = read_journal(paths.journal)
    except ValueError as e:
        raise ReportError(f"{e}; mend or remove that line to report on the run") from e
    intervals = read_latency_log(paths.hlog) if paths.hlog.exists() else []
    monitor: list[MonitorSnapshot] = []
    for d in read_jsonl(paths.monitor):
        try:
            monitor.append(MonitorSnapshot.from_dict(d))
        except (KeyError, TypeError, ValueError):
            continue
    inj_seconds: list[dict[str, Any]] = []
    inj_summary: InjectorSummary | None = None
    for d in read_jsonl(root / "injector.jsonl"):
        try:
            if d.get("type") == "summary":
                inj_summary = InjectorSummary.from_dict(d)
            elif d.get("type") == "second":
                inj_seconds.append(d)
        except (KeyError, TypeError, ValueError):
            continue
    if inj_summary is None:
        ev = next((e for e in journal if e.get("event") == Event.INJECTOR_FINISHED), None)
        if ev is not None:
            try:
                inj_summary = InjectorSummary.from_dict(ev)
            except (KeyError, TypeError, ValueError):
                inj_summary = None
    progress: dict[int, list[dict[str, Any]]] = {}
    pdir = root / "progress"
    if pdir.is_dir():
        for f in sorted(pdir.glob("replica-*.jsonl")):
            try:
                index = int(f.stem.split("-", 1)[1])
            except ValueError:
                continue
            progress[index] = read_jsonl(f)
    return RunData(
        root=root,
        spec=spec,
        journal=journal,
        intervals=intervals,
        monitor=monitor,
        injector_seconds=inj_seconds,
        injector_summary=inj_summary,
        merger=_read_json(root / "merger.json"),
        summary=_read_json(paths.summary),
        progress=progress,
        check=_read_json(paths.check),
        sent_intervals=read_latency_log(paths.hlog_sent) if paths.hlog_sent.exists() else [],
        notes=[torn] if torn else [],
    )
