"""``arfl experiment SPEC --modes ...``: the same workload and chaos once per replication mode.

The runs go one after the other (never concurrently: they would compete for the same cores)
into one experiment directory, each with the spec's workload and seed unchanged and only
``replication`` changed. The chaos schedule is kept; where a target does not exist in a mode it
is mapped and the mapping is written down: replica ``N`` becomes ``N mod R`` for a mode with
``R`` replicas, and ``leader`` (``kill-leader``) becomes replica 0 (``kill-replica``) outside
``active-leader``. Then the runs are reported and compared, the first mode being the reference;
``comparison.json`` and ``compare.html`` are written into the experiment directory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arfl.configs.load import parse_spec
from arfl.configs.spec import MODE_OPTIONS, Spec
from arfl.errors import ArflError, SpecError, StackError
from arfl.orchestrate.deploy import DeployOptions, DeployResult, Tick, deploy
from arfl.orchestrate.exporter import serve_metrics
from arfl.registry import FAULTS, MODES, mode_names
from arfl.run.rundir import write_json_atomic

if TYPE_CHECKING:
    from arfl.report.comparison import Comparison
    from arfl.report.model import Report

DEFAULT_ACTIVE_REPLICAS = 2


def parse_modes(text: str) -> list[str]:
    """``"none,passive"`` -> ``["none", "passive"]``.

    Raises:
        SpecError: an unknown or repeated mode, or none at all.
    """
    modes = [m.strip() for m in text.split(",") if m.strip()]
    known = mode_names()
    problems = [f"unknown mode {m!r} (one of {', '.join(known)})" for m in modes if m not in known]
    dups = sorted({m for m in modes if modes.count(m) > 1})
    if dups:
        problems.append(f"mode(s) given twice: {', '.join(dups)}")
    if not modes:
        problems.append("no mode given")
    if problems:
        raise SpecError("--modes: " + "; ".join(problems))
    return modes


def replicas_for(spec: Spec, mode: str) -> int:
    """1 for ``none``/``passive``; the spec's R for active modes if it is active, else 2."""
    if not mode.startswith("active"):
        return 1
    r = spec.replication.replicas
    return r if spec.replication.mode.startswith("active") and r >= 2 else DEFAULT_ACTIVE_REPLICAS


def mode_spec(spec: Spec, mode: str, origin: str = "<spec>") -> tuple[Spec, list[str]]:
    """The spec for one mode of the experiment and the notes on mapped chaos targets.

    The name becomes ``<name>-<mode>`` so that each run has its own topics, ZooKeeper paths
    and run directory name.

    Raises:
        SpecError: the derived spec does not validate (e.g. a network fault needs root).
    """
    # exclude_none: a step dumps all four kinds with None for the three it is not.
    raw: dict[str, Any] = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    n = replicas_for(spec, mode)
    raw["name"] = f"{spec.name}-{mode}"
    repl = raw["replication"]
    repl["mode"] = mode
    repl["replicas"] = n
    # Mode-specific settings: kept where the spec's mode and this one both take them (the
    # spec set them for such a mode), else this mode's defaults.
    for key in MODE_OPTIONS - (
        MODES.info(mode).options & MODES.info(spec.replication.mode).options
    ):
        repl.pop(key, None)
    notes: list[str] = []
    for i, c in enumerate(raw.get("chaos") or []):
        target = c.get("replica")
        where = f"chaos[{i}] ({c['fault']} at {c['at']})"
        instead = FAULTS.info(c["fault"]).without_leader
        if (target == "leader" or instead) and not MODES.info(mode).leader:
            c["replica"] = 0
            c["fault"] = instead or c["fault"]
            notes.append(f"{mode}: {where} has no leader to aim at; replica 0 instead")
        elif isinstance(target, int) and target >= n:
            c["replica"] = target % n
            notes.append(f"{mode}: {where} replica {target} -> {target % n} ({n} replica(s))")
    return parse_spec(raw, f"{origin} (mode {mode})"), notes


@dataclass
class ExperimentResult:
    """What ``run_experiment`` did.

    Attributes:
        root: the experiment directory.
        runs: mode -> its run directory (modes whose deploy failed are absent).
        failed: mode -> the error that stopped its run.
        notes: chaos target mappings.
        reports: the reports of the runs that ran, in mode order.
        comparison: the comparison (None with fewer than two reports).
    """

    root: Path
    runs: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    comparison: Comparison | None = None
    html: Path | None = None


def run_experiment(
    spec: Spec,
    modes: Sequence[str],
    spec_path: Path | None = None,
    runs_root: Path = Path("runs"),
    options: DeployOptions | None = None,
    on_run_start: Callable[[str, Path], None] | None = None,
    on_tick: Callable[[str, Tick], None] | None = None,
    on_run_done: Callable[[str, DeployResult | None, str | None], None] | None = None,
) -> ExperimentResult:
    """Deploy ``spec`` once per mode, sequentially, then report and compare the runs.

    Every mode's spec is derived and validated before the first run starts, so that a
    problem in any of them is reported before an hour of runs. A failed run is recorded and
    the next mode runs; Ctrl-C stops the experiment (the running deploy cleans up first).
    With ``options.metrics_port`` one metrics endpoint serves every run in turn (each run's
    series under its own ``run`` label), from before the first run until after the last.

    Raises:
        SpecError: a derived spec does not validate, or the metrics endpoint's address cannot
            be served.
        StackError: ZooKeeper or Kafka is not available (no mode could run).
    """
    from arfl.report import build_report, compare, render_compare_html

    origin = spec_path.name if spec_path is not None else "<spec>"
    derived: list[tuple[str, Spec]] = []
    notes: list[str] = []
    problems: list[str] = []
    for mode in modes:
        try:
            s, n = mode_spec(spec, mode, origin)
        except SpecError as e:
            problems.append(str(e))
            continue
        derived.append((mode, s))
        notes.extend(n)
    if problems:
        raise SpecError("\n".join(problems))

    base = options or DeployOptions()
    with contextlib.ExitStack() as served:
        exporter = None
        if base.metrics_port is not None:
            server = served.enter_context(serve_metrics(base.metrics_host, base.metrics_port))
            exporter = server.exporter
        stamp = time.strftime("%Y%m%d-%H%M%S")
        root = (runs_root / f"{spec.name}-experiment-{stamp}").absolute()
        suffix = 1
        while root.exists():
            suffix += 1
            root = (runs_root / f"{spec.name}-experiment-{stamp}-{suffix}").absolute()
        root.mkdir(parents=True)
        result = ExperimentResult(root=root, notes=notes)
        for mode, mspec in derived:
            opts = DeployOptions(
                runs_root=root,
                ready_timeout_s=base.ready_timeout_s,
                drain_s=base.drain_s,
                master=base.master,
                stack_state=base.stack_state,
            )

            def started(path: Path, mode: str = mode) -> None:
                result.runs[mode] = path
                if on_run_start is not None:
                    on_run_start(mode, path)

            tick = None if on_tick is None else (lambda t, mode=mode: on_tick(mode, t))
            try:
                done = deploy(
                    mspec, spec_path, opts, on_tick=tick, on_run_dir=started, exporter=exporter
                )
            except StackError:
                raise  # no later mode can run either
            except ArflError as e:
                result.failed[mode] = f"{type(e).__name__}: {e}"
                if on_run_done is not None:
                    on_run_done(mode, None, result.failed[mode])
                continue
            finally:
                _write_index(result, spec, modes)
            if on_run_done is not None:
                on_run_done(mode, done, None)

    labels: list[str] = []
    for mode in modes:
        if mode in result.runs and mode not in result.failed:
            result.reports.append(build_report(result.runs[mode]))
            labels.append(mode)
    if len(result.reports) >= 2:
        result.comparison = compare(result.reports, labels)
        result.html = render_compare_html(result.comparison, result.root / "compare.html")
    _write_index(result, spec, modes)
    return result


def _write_index(result: ExperimentResult, spec: Spec, modes: Sequence[str]) -> None:
    """``comparison.json``: which run is which mode, failures, mappings, the comparison."""
    doc: dict[str, Any] = {
        "experiment": {
            "spec": spec.name,
            "modes": list(modes),
            "runs": {m: str(p) for m, p in result.runs.items()},
            "failed": dict(result.failed),
            "chaos_mapping": list(result.notes),
        },
        "runs": [r.to_dict() for r in result.reports],
        "comparison": None if result.comparison is None else result.comparison.to_dict(),
    }
    write_json_atomic(result.root / "comparison.json", doc)
