"""The local target: replicas are processes on this machine, described by ``state.json``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import psutil

from arfl.errors import FaultError
from arfl.processes import same_process, tree_pids
from arfl.run.state import DockerNetState, IsolationState, RunState, load_state
from arfl.targets import docker as dk
from arfl.targets.base import Reach
from arfl.targets.container import ContainerReach
from arfl.targets.process import ProcessReach

EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


def no_restart_marker(run_dir: Path, replica: int) -> Path:
    """The file whose presence tells the supervisor not to restart ``replica``'s driver."""
    return run_dir / f"no-restart-{replica}"


def restart_suppressed(run_dir: Path, replica: int) -> bool:
    """True when a ``kill-replica`` with ``restart = false`` asked the supervisor to stand down."""
    return no_restart_marker(run_dir, replica).exists()


def executors_of_app(
    app_id: str | None, keep: Callable[[int], bool] | None = None
) -> dict[str, int]:
    """Executor id -> pid of every ``CoarseGrainedExecutorBackend`` running for ``app_id``
    (any application's when None; only pids for which ``keep`` is true, when given).

    Spark's REST API has no pids, so command lines are matched:
    ``... CoarseGrainedExecutorBackend ... --executor-id N ... --app-id APP ...``.
    """
    matches: dict[int, tuple[str, int]] = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        if keep is not None and not keep(int(proc.info["pid"])):
            continue
        cmd = proc.info.get("cmdline") or []
        if EXECUTOR_MAIN not in " ".join(cmd[:200]):
            continue
        exe_id = _arg(cmd, "--executor-id")
        if exe_id is None or (app_id is not None and _arg(cmd, "--app-id") != app_id):
            continue
        matches[int(proc.info["pid"])] = (exe_id, int(proc.info["ppid"] or 0))
    return _executors(matches)


def _executors(matches: dict[int, tuple[str, int]]) -> dict[str, int]:
    """Executor id -> pid from ``{pid: (executor id, parent pid)}`` of the processes whose
    command line is an executor's, leaving out those whose parent is one of them: a process
    the executor JVM starts carries its command line from fork to exec (the supervisor counts
    executors the same way)."""
    roots = not_forked_from_another({pid: parent for pid, (_, parent) in matches.items()})
    return {exe: pid for pid, (exe, _) in sorted(matches.items()) if pid in roots}


def not_forked_from_another(parent_of: dict[int, int]) -> set[int]:
    """The pids of ``{pid: parent pid}`` (processes whose command line is an executor's) whose
    parent is not one of them: the executor JVMs, without the processes they start, which
    carry the JVM's command line from fork to exec (a windowed replica's executors start
    hundreds at state checkpoints). The supervisor and ``kill-executor`` both use it."""
    return {pid for pid, parent in parent_of.items() if parent not in parent_of}


def _arg(cmd: list[str], flag: str) -> str | None:
    for i, part in enumerate(cmd[:-1]):
        if part == flag:
            return cmd[i + 1]
    return None


class LocalTarget:
    """Replicas as local processes; ``state.json`` is re-read on every query (deploy updates it
    when it restarts a driver)."""

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir.resolve()
        self._state = load_state(self._run_dir)

    @classmethod
    def from_run_dir(cls, path: Path) -> LocalTarget:
        """Build a target from a run directory that holds ``state.json``.

        Raises:
            FaultError: no or malformed ``state.json``.
        """
        return cls(path)

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return self._run_dir

    @property
    def run(self) -> str:
        """The run's name."""
        return self._state.run

    def state(self) -> RunState:
        """The current ``state.json`` (re-read)."""
        self._state = load_state(self._run_dir)
        return self._state

    def replicas(self) -> list[int]:
        """Replica indices."""
        return sorted(self.state().replicas)

    def _replica(self, replica: int) -> RunState:
        st = self.state()
        if replica not in st.replicas:
            raise FaultError(
                f"{self._run_dir}/state.json: run {st.run} has no replica {replica} "
                f"(replicas: {', '.join(map(str, sorted(st.replicas))) or 'none'})"
            )
        return st

    def driver_pid(self, replica: int) -> int:
        """The driver's pid, checked against its recorded create time (pids are reused).

        Raises:
            FaultError: the driver is not running.
        """
        rep = self._replica(replica).replicas[replica]
        if rep.driver_pid is None:
            raise FaultError(
                f"replica {replica} of run {self.run} has no driver pid in state.json "
                f"(state {rep.state!r}); wait until it is running"
            )
        if same_process(rep.driver_pid, rep.driver_create_time) is None:
            raise FaultError(
                f"replica {replica} of run {self.run}: driver pid {rep.driver_pid} is not running "
                f"(state {rep.state!r}); is the deployment still up?"
            )
        return rep.driver_pid

    def merger_pid(self) -> int:
        """The merger's pid, checked against its recorded create time (pids are reused).

        Raises:
            FaultError: the merger is not running.
        """
        st = self.state()
        if st.merger_pid is None or (same_process(st.merger_pid, st.merger_create_time) is None):
            raise FaultError(
                f"run {self.run}: no running merger in state.json (pid {st.merger_pid}); is the "
                "deployment still up?"
            )
        return st.merger_pid

    def replica_pids(self, replica: int) -> list[int]:
        """Driver plus descendants; on the docker target every process of its container."""
        name = self.container(replica)
        if name is not None:
            return sorted(dk.host_pids(dk.container(name)))
        return tree_pids(self.driver_pid(replica))

    def container(self, replica: int) -> str | None:
        """The replica's container (``docker.containers`` of ``state.json``), if any."""
        st = self._replica(replica)
        return st.docker.containers.get(replica) if st.docker else None

    def reach(self, replica: int) -> Reach:
        """Its container's primitives on the docker target, else its processes'."""
        name = self.container(replica)
        if name is not None:
            return ContainerReach(self, replica, name)
        return ProcessReach(self, replica)

    def docker(self) -> DockerNetState | None:
        """The run's docker network and containers (``docker`` of ``state.json``)."""
        return self.state().docker

    def executor_pids(self, replica: int) -> dict[str, int]:
        """Executors of the replica's Spark application, matched by ``--app-id``.

        Two ``local-cluster`` replicas started in the same second get the same application id
        (``app-<yyyyMMddHHmmss>-0000``, one per master), so executors that descend from another
        replica's driver never count (also while this replica's own executor is being replaced);
        a remote cluster's executors descend from no driver and count, a standby driver's
        (``state.json`` ``standbys``) never. Falls back to the driver's descendants when
        ``state.json`` has no app id yet.
        """
        st = self._replica(replica)
        rep = st.replicas[replica]
        name = self.container(replica)
        if name is not None:  # the container holds this replica's JVMs and nobody else's
            mine = set(dk.host_pids(dk.container(name)))
            return executors_of_app(rep.app_id, keep=mine.__contains__)
        if rep.app_id:
            theirs: set[int] = set()
            for other in st.replicas:
                if other != replica:
                    with contextlib.suppress(FaultError):
                        theirs.update(self.replica_pids(other))
            for sb in st.standbys.values():
                if same_process(sb.pid, sb.create_time) is not None:
                    theirs.update(tree_pids(sb.pid))
            return executors_of_app(rep.app_id, keep=lambda pid: pid not in theirs)
        matches: dict[int, tuple[str, int]] = {}
        for pid in self.replica_pids(replica):
            try:
                proc = psutil.Process(pid)
                cmd, parent = proc.cmdline(), proc.ppid()
            except psutil.NoSuchProcess:
                continue
            exe_id = _arg(cmd, "--executor-id")
            if EXECUTOR_MAIN in " ".join(cmd) and exe_id is not None:
                matches[pid] = (exe_id, parent)
        return _executors(matches)

    def netns(self, replica: int) -> str | None:
        """The replica's network namespace (``replicas.N.netns`` or the isolation table)."""
        st = self._replica(replica)
        if st.replicas[replica].netns:
            return st.replicas[replica].netns
        if st.isolation and replica in st.isolation.namespaces:
            return st.isolation.namespaces[replica].name
        return None

    def isolation(self) -> IsolationState | None:
        """Bridge and namespaces of this run."""
        return self.state().isolation

    def leader(self) -> int | None:
        """Read the leader from ZooKeeper: the first contender of the kazoo ``Election`` under
        ``leader_path``; contenders identify themselves with their replica index.

        Raises:
            FaultError: no ZooKeeper address or leader path in state.json, or ZooKeeper is down.
        """
        st = self.state()
        hosts = st.stack.zookeeper if st.stack else None
        if not hosts or not st.leader_path:
            raise FaultError(
                f"{self._run_dir}/state.json: no stack.zookeeper or leader_path; "
                "kill-leader needs a deployment in mode active-leader"
            )
        return read_leader(hosts, st.leader_path)


def read_leader(hosts: str, path: str, timeout_s: float = 5.0) -> int | None:
    """The replica index of the first contender of the election at ``path`` (None if none).

    Raises:
        FaultError: ZooKeeper at ``hosts`` is not reachable.
    """
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.recipe.election import Election

    client = KazooClient(hosts=hosts, timeout=timeout_s)
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError as e:
        raise FaultError(
            f"zookeeper at {hosts} not reachable after {timeout_s:g}s; is the stack up?"
        ) from e
    try:
        contenders = Election(client, path).contenders()
    finally:
        client.stop()
        client.close()
    for ident in contenders:
        try:
            return int(str(ident))
        except ValueError:
            continue
    return None
