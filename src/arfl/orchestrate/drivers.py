"""Starting driver processes: the launch settings every replica and standby driver shares
(:class:`DriverLaunch`) and the one place that turns them into a config file, an environment
and a process (:class:`Drivers`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from arfl.configs.spec import REHEARSAL_INPUT_KEY, REHEARSAL_KEY, Spec
from arfl.errors import DeployError, FaultError
from arfl.processes import ManagedProcess
from arfl.replica.app import DriverConfig
from arfl.replica.sparkenv import driver_env, ensure_spark_home
from arfl.replica.standby import REHEARSAL_RECORDS
from arfl.run.rundir import RunPaths
from arfl.run.sparkhome import driver_spark_home
from arfl.targets.shares import CpuShares
from arfl.workload.generate import EventShape
from arfl.workload.injector import sample_events

CommandFactory = Callable[[int, Path], Sequence[str]]
"""(replica, config file) -> argv of the driver process (tests substitute a fake)."""

STANDBY = -1
"""The replica argument of the command factory for a standby driver."""


def default_command(replica: int, config: Path) -> list[str]:
    """The real driver: this interpreter running :mod:`arfl.replica.driver`."""
    del replica
    return [sys.executable, "-m", "arfl.replica.driver", "--config", str(config)]


def rehearsal_events(spec: Spec) -> list[list[str]]:
    """What a real-time standby rehearses its pipeline on (``DriverConfig.rehearsal_input``):
    :data:`~arfl.replica.standby.REHEARSAL_RECORDS` events as the injector would send them,
    ``[key, value]`` texts; none without a rehearsal, with ``arfl.rehearsalInput = false``
    or with ``[source.replay]`` (whose records the injector does not make)."""
    if (
        spec.replication.trigger != "realtime"
        or spec.source.replay is not None
        or not spec.spark.flag(REHEARSAL_KEY, True)
        or not spec.spark.flag(REHEARSAL_INPUT_KEY, True)
    ):
        return []
    events = sample_events(
        spec.workload, EventShape.from_spec(spec), REHEARSAL_RECORDS, int(time.time() * 1000)
    )
    return [[k.decode(), v.decode()] for k, v in events]


@dataclass(frozen=True)
class DriverLaunch:
    """How a run's drivers are started.

    Attributes:
        bootstrap: Kafka bootstrap servers.
        jars: Spark's Kafka connector jars (``spark.jars``).
        master: override ``spec.spark.master`` (e.g. a standalone ``spark://`` URL).
        extra_conf: Spark conf applied last.
        mode_options: passed to the replication mode (``ReplicaContext.options``).
        spark_home: the run's SPARK_HOME directory
            (:func:`arfl.replica.sparkenv.run_spark_home`), one SPARK_HOME per driver in it;
            None: every driver in the shared one (:func:`ensure_spark_home`).
        command: argv factory for a driver (tests); default :func:`default_command`.
        shares: each driver's CPU share (``[placement]``): it starts inside a cgroup of its
            own (:mod:`arfl.targets.shares`); None: no quota.
        promote: ``(standby, replica)`` when a standby takes a replica over, for a driver that
            runs in a container (the docker target's renaming); None: drivers are local
            processes (niced while they wait).
    """

    bootstrap: str
    jars: Sequence[Path] = ()
    master: str | None = None
    extra_conf: dict[str, str] = field(default_factory=dict)
    mode_options: dict[str, str] = field(default_factory=dict)
    spark_home: Path | None = None
    command: CommandFactory = default_command
    shares: CpuShares | None = None
    promote: Callable[[int, int], None] | None = None


class Drivers:
    """Configs, environments and processes of one run's drivers (replicas and standbys)."""

    def __init__(self, spec: Spec, paths: RunPaths, launch: DriverLaunch) -> None:
        self.spec = spec
        self.paths = paths
        self.launch = launch
        self.master = launch.master or spec.spark.master
        self.jars = [str(j) for j in launch.jars]
        self._env: dict[str, str] | None = None
        self._envs: dict[str, dict[str, str]] = {}

    def config(
        self,
        *,
        replica: int,
        output_topic: str,
        checkpoint_dir: Path,
        progress_file: Path,
        app_id_file: Path,
        mode_options: dict[str, str],
        attempt: int = 0,
        standby: bool = False,
        assignment_file: Path | None = None,
        rehearsal_input: list[list[str]] | None = None,
        control_dir: Path | None = None,
    ) -> DriverConfig:
        """A driver's config: its own files and options over the run's settings."""
        return DriverConfig(
            spec=self.spec.model_dump(mode="json", by_alias=True),
            replica=replica,
            bootstrap=self.launch.bootstrap,
            output_topic=output_topic,
            checkpoint_dir=str(checkpoint_dir),
            progress_file=str(progress_file),
            app_id_file=str(app_id_file),
            master=self.master,
            conf=dict(self.launch.extra_conf),
            jars=self.jars,
            attempt=attempt,
            mode_options=mode_options,
            standby=standby,
            assignment_file="" if assignment_file is None else str(assignment_file),
            rehearsal_input=list(rehearsal_input or []),
            control_dir="" if control_dir is None else str(control_dir),
        )

    def prepare(self, names: Sequence[str]) -> None:
        """Build the environments of ``names`` now (a failure fails the start, not a later
        restart on the supervision thread)."""
        if self.launch.spark_home is None:
            self._env = _env_in(None)
        for name in names:
            self.env(name)

    def env(self, name: str) -> dict[str, str]:
        """The environment of driver ``name`` (``replica-N``, ``standby-K``). In a run's own
        SPARK_HOME each driver gets a home of its own under it
        (:func:`arfl.run.sparkhome.driver_spark_home`): two ``local-cluster`` drivers started
        in one second get one application id, and in one home they would share
        ``work/<app>/0/`` (one executor's log replacing the other's).

        Raises:
            DeployError: that home cannot be created.
        """
        home = self.launch.spark_home
        if home is None:
            if self._env is None:
                self._env = _env_in(None)
            return self._env
        env = self._envs.get(name)
        if env is None:  # built once: a restart on the supervision thread only reuses it
            env = _env_in(ensure_spark_home(driver_spark_home(home, name)))
            self._envs[name] = env
        return env

    def start(self, name: str, replica: int, config: Path, log: Path) -> ManagedProcess:
        """Start driver ``name`` on its config file (``replica``: its index, or
        :data:`STANDBY`), logging to ``log``.

        Raises:
            DeployError: the process cannot be started (or, with a CPU share, its cgroup
                cannot be made).
        """
        argv = list(self.launch.command(replica, config))
        if self.launch.shares is not None:
            try:
                argv = self.launch.shares.wrap(name, argv)
            except (FaultError, OSError) as e:
                raise DeployError(f"cannot place {name.replace('-', ' ')}: {e}") from None
        try:
            return ManagedProcess.start(name, argv, log, env=self.env(name), cwd=self.paths.root)
        except OSError as e:
            raise DeployError(f"cannot start {name.replace('-', ' ')} ({argv[0]}): {e}") from None


def _env_in(home: Path | None) -> dict[str, str]:
    """A driver's environment with ``home`` as its SPARK_HOME (None: the shared one)."""
    env = driver_env(home or ensure_spark_home())
    # Let the driver import arfl even when it is not installed (a source checkout).
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
