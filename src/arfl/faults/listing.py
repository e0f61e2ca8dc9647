"""What ``arfl chaos list RUN`` shows, and how a RUN argument names a run directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from arfl.errors import FaultError
from arfl.processes import same_process, tree_pids
from arfl.targets import docker
from arfl.targets.local import LocalTarget


@dataclass(frozen=True)
class ReplicaSummary:
    """One replica as a fault would see it."""

    index: int
    state: str
    driver_pid: int | None
    pids: list[int]
    executors: dict[str, int]
    netns: str | None
    address: str | None
    problem: str | None = None
    container: str | None = None
    """``<name> <status>`` on the docker target (``running``, ``paused``, ``exited``...)."""


@dataclass(frozen=True)
class StandbySummary:
    """A standby driver waiting to take a replica over (``replication.standby``)."""

    index: int
    pid: int
    pids: list[int]
    """The standby's driver and its descendants (driver JVM, executors); empty when gone."""


@dataclass(frozen=True)
class TargetSummary:
    """Everything that can be targeted in a run."""

    run: str
    run_dir: Path
    mode: str
    replicas: list[ReplicaSummary] = field(default_factory=list)
    leader: int | None = None
    leader_problem: str | None = None
    standbys: list[StandbySummary] = field(default_factory=list)
    merger: int | None = None
    """The serving merger's pid (``kill-merger``, ``pause-merger``); None when it is not
    running."""
    merger_problem: str | None = None
    merger_standby: int | None = None
    """The standby merger's pid (``[merger] standby``); None: none runs."""


def _alive(pid: int | None, create_time: float | None) -> int | None:
    """``pid`` when it is still the process recorded, else None."""
    if pid is None or same_process(pid, create_time) is None:
        return None
    return pid


def resolve_run_dir(run: str, runs_root: Path = Path("runs")) -> Path:
    """A run directory from a path or a run name under ``runs_root``.

    Raises:
        FaultError: neither exists or it has no ``state.json``.
    """
    for candidate in (Path(run), runs_root / run):
        if (candidate / "state.json").is_file():
            return candidate.resolve()
    raise FaultError(
        f"run {run!r}: no run directory with a state.json at {run} or {runs_root / run}; "
        f"pass the directory 'arfl deploy' printed (runs/<name>-<timestamp>)"
    )


def summarize(target: LocalTarget) -> TargetSummary:
    """Collect replicas, pids, executors and the leader (problems are reported, not raised)."""
    state = target.state()
    replicas: list[ReplicaSummary] = []
    for idx, rep in sorted(state.replicas.items()):
        problem: str | None = None
        pids: list[int] = []
        executors: dict[str, int] = {}
        try:
            pids = target.replica_pids(idx)
            executors = target.executor_pids(idx)
        except FaultError as e:
            problem = str(e)
        iso_ns = state.isolation.namespaces.get(idx) if state.isolation else None
        container = target.container(idx)
        if container is not None:
            try:
                container = f"{container} {docker.status(container)}"
            except FaultError as e:
                container, problem = f"{container} ?", problem or str(e)
        replicas.append(
            ReplicaSummary(
                index=idx,
                state=rep.state,
                driver_pid=rep.driver_pid,
                pids=pids,
                executors=executors,
                netns=target.netns(idx),
                address=rep.address or (iso_ns.address if iso_ns else None),
                problem=problem,
                container=container,
            )
        )
    leader: int | None = None
    leader_problem: str | None = None
    if state.leader_path and state.stack and state.stack.zookeeper:
        try:
            leader = target.leader()
        except FaultError as e:
            leader_problem = str(e)
    standbys = [
        StandbySummary(
            index=k,
            pid=sb.pid,
            pids=tree_pids(sb.pid) if same_process(sb.pid, sb.create_time) else [],
        )
        for k, sb in sorted(state.standbys.items())
    ]
    merger: int | None = None
    merger_problem: str | None = None
    try:
        merger = target.merger_pid()
    except FaultError as e:
        merger_problem = str(e)
    return TargetSummary(
        merger=merger,
        merger_problem=merger_problem,
        merger_standby=(
            state.merger_standby_pid
            if state.merger_standby_pid is not None
            and same_process(state.merger_standby_pid, state.merger_standby_create_time)
            else None
        ),
        run=state.run,
        run_dir=target.run_dir,
        mode=state.mode,
        replicas=replicas,
        leader=leader,
        leader_problem=leader_problem,
        standbys=standbys,
    )
