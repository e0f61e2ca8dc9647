"""arfl as one of the systems: the demo's pipeline deployed through arfl's own deploy.

Unlike a peer, arfl runs its load, its fault and its drain itself (``arfl deploy``): the
spec's ``[[chaos]]`` kills at ``fault_at`` seconds of input, the moment the peers' faults come
at, and its injector is the one the peers get. The probe reads arfl's final topic (the
merger's output) from outside, as it reads every peer's; the run's own report is kept beside
it, so the probe's figure checks the merger's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from peer_probe import ProbeFile
from peer_sampler import Sampler
from peer_systems import (
    FIELDS,
    MIN_AMOUNT,
    Load,
    Outcome,
    PeerError,
    Procs,
    drain,
    probe_argv,
    save_points,
    stack_groups,
)

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.orchestrate.context import python_env
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.run.events import Event
from arfl.run.rundir import read_jsonl
from arfl.run.state import load_state
from arfl.stack.config import harness_nice

MODES = {"active": 2, "passive": 1}
"""arfl's modes here and their replicas: active R=2 (arfl adds the standby), passive R=1."""
FAULTS = ("kill-replica", "kill-executor")
PROBE_IDLE_S = 3.0
"""After deploy returned (its merger drained), the probe has read everything once it has
been idle this long."""


def arfl_spec(mode: str, load: Load, fault: str | None) -> Spec:
    """The demo's pipeline (configs/clicks.toml) keeping ``seq`` for the probe, on real-time
    mode; standby, real-time interval and warm-up left to arfl."""
    raw: dict[str, Any] = {
        "name": f"peers-arfl-{mode}",
        "source": {"topic": "peers", "partitions": load.partitions},
        "steps": [{"filter": f"amount > {MIN_AMOUNT:g}"}, {"select": list(FIELDS)}],
        "sink": {"topic": "peers-out"},
        "replication": {"mode": mode, "replicas": MODES[mode], "trigger": "realtime"},
        "spark": {"master": "local-cluster[1,2,1024]"},
        "workload": {
            "rate": load.rate,
            "duration": f"{load.duration_s:g}s",
            "keys": load.keys,
            "seed": load.seed,
        },
    }
    if fault is not None:
        raw["chaos"] = [{"at": f"{load.fault_at_s:g}s", "fault": fault, "replica": 0}]
    return parse_spec(raw, "peers")


def arfl_groups(run_dir: Path) -> dict[str, list[int]]:
    """The run's processes from its ``state.json``: each replica's and standby's driver (with
    its JVMs), the merger(s) and the injector."""
    st = load_state(run_dir)
    out: dict[str, list[int]] = {}
    for i, rep in st.replicas.items():
        if rep.driver_pid is not None:
            out[f"replica-{i}"] = [rep.driver_pid]
    for i, sb in st.standbys.items():
        out[f"standby-{i}"] = [sb.pid]
    for label, pid in (
        ("merger", st.merger_pid),
        ("merger-standby", st.merger_standby_pid),
        ("injector", st.injector_pid),
    ):
        if pid is not None:
            out[label] = [pid]
    return out


class ArflSystem:
    """arfl in ``mode`` with ``fault_name`` as its kill (module docstring)."""

    def __init__(self, mode: str, fault_name: str = "kill-replica") -> None:
        self.mode = mode
        self.fault_name = fault_name
        self.label = "arfl" if mode == "active" else f"arfl {mode}"

    def prepare(self) -> None:
        """Nothing: deploy installs what it needs."""

    def run(
        self, bootstrap: str, load: Load, fault: bool, runs: Path, expected: set[int]
    ) -> Outcome:
        """Deploy the spec with the probe and the sampler started on its run directory."""
        spec = arfl_spec(self.mode, load, self.fault_name if fault else None)
        shared = stack_groups()
        state: dict[str, Any] = {}
        sampler = Sampler(lambda: shared)

        def on_run_dir(run_dir: Path) -> None:
            procs = Procs(run_dir / "logs")
            csv = run_dir / "peers-probe.csv"
            topic = f"{spec.sink.topic}.{run_dir.name}"  # deploy scopes topics to the run
            p = procs.start(
                "peers-probe", probe_argv(bootstrap, topic, csv), env=python_env(),
                nice=harness_nice(),
            )  # fmt: skip
            state.update(run_dir=run_dir, procs=procs, probe=ProbeFile(csv))
            sampler.groups = lambda: {**arfl_groups(run_dir), **shared, "probe": [p.pid]}
            sampler.start()

        try:
            res = deploy(spec, None, DeployOptions(runs_root=runs), on_run_dir=on_run_dir)
            drain(state["probe"], expected, PROBE_IDLE_S, load.drain_max_s)
        finally:
            if "procs" in state:
                state["procs"].stop_all()
                sampler.stop()
                save_points(state["run_dir"] / "peers-cpu.json", sampler.points)
        probe: ProbeFile = state["probe"]
        probe.poll()
        t0, fault_s, what = _input_and_fault(res.run_dir)
        return Outcome(
            probe.path,
            round(t0 * 1000),
            fault_s,
            what,
            sampler.points,
            res.run_dir / "peers-cpu.json",
            {"work": str(res.run_dir), **report_figures(res.run_dir)},
            probe.samples,
            probe.unparsed,
        )


def _input_and_fault(run_dir: Path) -> tuple[float, float | None, str | None]:
    """The injector's t0 (epoch s) and the first fault's injection (s after it) and what it
    was, from the run's journal."""
    journal = read_jsonl(run_dir / "journal.jsonl")
    started = next((e for e in journal if e.get("event") == Event.INJECTOR_STARTED), None)
    if started is None:
        raise PeerError(f"{run_dir}: no injector start in its journal")
    t0 = float(started["t0"])
    fault = next((e for e in journal if e.get("event") == Event.FAULT_INJECTED), None)
    if fault is None:
        return t0, None, None
    return t0, float(fault["started"]) - t0, str(fault.get("description") or fault.get("kind"))


def report_figures(run_dir: Path) -> dict[str, Any]:
    """arfl's own report on the run, beside the probe's: its steady p50 / p99 (from the
    merger's histograms, its own warm-up), the fault's verdict, its correctness check."""
    from arfl.errors import ArflError
    from arfl.report.build import build_report

    try:
        report = build_report(run_dir)
    except ArflError as e:  # the probe's figures stand without it
        return {"report_error": str(e)}
    steady = next((p for p in report.phases if p.name == "steady"), None)
    out: dict[str, Any] = {
        "report_steady_p50": steady.percentiles_ms.get("p50") if steady else None,
        "report_steady_p99": steady.percentiles_ms.get("p99") if steady else None,
        "report_missing": report.correctness.missing,
        "report_duplicates": report.correctness.duplicates,
    }
    if report.faults:
        out["report_verdict"] = report.faults[0].verdict
    return out
