"""The run a deployment works in: its directory, the spec scoped to it, its journal.

Topics are scoped to the run (``<topic>.<run id>``) so that runs never read each other's data;
the names are in ``state.json`` and ``summary.json``.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from arfl.configs.spec import Spec
from arfl.run.rundir import Journal, RunPaths, new_run_dir, write_json_atomic

METRICS_HOST = "127.0.0.1"
"""Where the metrics endpoint listens unless told: loopback, as it has no authentication."""


@dataclass(frozen=True)
class DeployOptions:
    """How to run a deployment (not what: that is the spec).

    Attributes:
        runs_root: parent of new run directories.
        run_dir: use this run directory instead of a new one under ``runs_root``.
        ready_timeout_s: how long replicas may take to start.
        drain_s: how long to wait for the last results after the input ends (None: derived
            from the pipeline: window size + watermark + a margin).
        master: override ``spark.master`` (e.g. a standalone cluster for a test).
        stack_state: state directory of the embedded stack (tests use their own).
        metrics_port: serve Prometheus metrics on this port for the deployment's life
            (:mod:`arfl.orchestrate.exporter`; None: no endpoint, 0: a port the kernel picks).
        metrics_host: the address the metrics endpoint listens on.
    """

    runs_root: Path = Path("runs")
    run_dir: Path | None = None
    ready_timeout_s: float = 240.0
    drain_s: float | None = None
    master: str | None = None
    stack_state: Path | None = None
    metrics_port: int | None = None
    metrics_host: str = METRICS_HOST


def scoped(spec: Spec, run_id: str) -> Spec:
    """The spec with this run's topic names (``<topic>.<run id>``)."""
    return spec.model_copy(
        update={
            "source": spec.source.model_copy(update={"topic": f"{spec.source.topic}.{run_id}"}),
            "sink": spec.sink.model_copy(update={"topic": f"{spec.sink.topic}.{run_id}"}),
        }
    )


@dataclass(frozen=True)
class RunContext:
    """What every step of a deployment shares.

    Attributes:
        spec: the spec as the user wrote it.
        rspec: the spec with this run's topic names (what the processes run).
        options: how to run it.
        dir: the run directory (absolute: drivers run with another working directory).
        paths: the files in it.
        journal: ``journal.jsonl``.
    """

    spec: Spec
    rspec: Spec
    options: DeployOptions
    dir: Path
    paths: RunPaths
    journal: Journal

    @property
    def run_id(self) -> str:
        """The run's name (its directory's name)."""
        return self.dir.name

    @property
    def injector_stats(self) -> Path:
        """The injector's per-second stream (``injector.jsonl``)."""
        return self.dir / "injector.jsonl"


def create_run(spec: Spec, spec_path: Path | None, options: DeployOptions) -> RunContext:
    """Create the run directory and write the spec into it (``spec.toml``, ``spec.json``)."""
    run_dir = (options.run_dir or new_run_dir(options.runs_root, spec.name)).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    for sub in ("progress", "logs"):
        (run_dir / sub).mkdir(exist_ok=True)
    paths = RunPaths(run_dir)
    if spec_path is not None:
        shutil.copyfile(spec_path, run_dir / "spec.toml")
    write_json_atomic(run_dir / "spec.json", spec.model_dump(mode="json", by_alias=True))
    return RunContext(
        spec=spec,
        rspec=scoped(spec, run_dir.name),
        options=options,
        dir=run_dir,
        paths=paths,
        journal=Journal(paths.journal),
    )


def python_env() -> dict[str, str]:
    """The environment of arfl's own child processes (merger, injector): this interpreter's
    source tree first on ``PYTHONPATH``, unbuffered output."""
    import os

    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


PYTHON = sys.executable
