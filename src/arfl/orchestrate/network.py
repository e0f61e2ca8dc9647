"""Where the run's ZooKeeper and Kafka are, and how replicas reach them.

Without network faults the stack is resolved as the spec says (the embedded one, started if
needed, or an external one). With network faults (partition, delay) each replica runs in its
own network namespace on a bridge, and the run gets a ZooKeeper + Kafka of its own listening
on the bridge address: replicas in namespaces cannot reach 127.0.0.1.

On the docker target (``spark.target = "docker"``) each replica's driver runs in a container
on a docker network of the run's own (explicit subnet, labelled ``arfl.run``), started by
:mod:`arfl.orchestrate.launcher`; the run's own ZooKeeper and Kafka listen on the network's
gateway, the host's address on that bridge (the same design as the namespaces: a replica's
only way to its stack is its own network, so cutting the network cuts the stack). A standby
driver runs in a container of its own on that network too; when it takes a replica over, its
container is renamed the replica's (every fault finds a replica's container by that name) and
its address becomes the replica's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from arfl import stack
from arfl.errors import ArflError, DeployError, FaultError
from arfl.orchestrate.context import RunContext
from arfl.orchestrate.drivers import STANDBY, default_command
from arfl.paths import state_dir
from arfl.replica.sparkenv import WRITABLE_SPARK_DIRS, java_home
from arfl.run.events import Event
from arfl.run.state import DockerNetState, IsolationState, to_json
from arfl.stack.embedded import EmbeddedStack
from arfl.targets import docker as dk
from arfl.targets.netns import (
    create_isolation,
    needs_isolation,
    netns_command,
    require_net_admin,
    teardown_isolation,
)


class RunNetwork:
    """The stack a run uses and, with network faults, its namespaces and own stack.

    :meth:`open` fills it step by step, so that :meth:`close` also undoes a half-done open
    (namespaces created, run stack failed to start).
    """

    def __init__(self) -> None:
        self.info: stack.StackInfo | None = None
        self.isolation: IsolationState | None = None
        self.run_stack: EmbeddedStack | None = None
        self.docker: DockerNetState | None = None
        self._run: str | None = None
        self._run_dir: Path | None = None
        self.container_cpus: float | None = None
        """Each replica container's CPU quota in cores (``[placement]`` on the docker target)."""

    def open(self, ctx: RunContext, on_change: Callable[[], None] | None = None) -> stack.StackInfo:
        """Resolve (or start) the stack the run uses; isolate the replicas if faults need it.

        ``on_change`` is called when there is something new to record in ``state.json``: the
        namespaces once planned, before they exist; the docker network once created (until
        then ``state.json``'s ``target`` lets recover find it by its label).

        Raises:
            StackError: the stack is not available.
            DeployError: network faults with an external stack.
        """
        spec = ctx.spec
        changed = on_change or (lambda: None)
        if spec.spark.target == "docker":
            return self._open_docker(ctx, changed)
        if not needs_isolation(c.fault for c in spec.chaos):
            self.info = stack.resolve(spec.stack, state=ctx.options.stack_state)
            return self.info
        if spec.stack.kind != "embedded":
            raise DeployError(
                "network faults (partition, delay) need stack.kind = 'embedded': arfl starts "
                "ZooKeeper and Kafka on the replicas' bridge; an external stack is out of reach"
            )
        require_net_admin("network faults (partition, delay)")

        def planned(iso: IsolationState) -> None:
            self.isolation = iso
            changed()

        self.isolation = create_isolation(ctx.run_id, range(spec.replication.replicas), planned)
        ctx.journal.write(Event.ISOLATION_CREATED, **to_json(self.isolation))
        self.run_stack = EmbeddedStack(ctx.dir / "stack", host=self.isolation.host_ip)
        self.info = self.run_stack.start()
        ctx.journal.write(
            Event.RUN_STACK_STARTED, kafka=self.info.kafka, zookeeper=self.info.zookeeper
        )
        return self.info

    def _open_docker(self, ctx: RunContext, changed: Callable[[], None]) -> stack.StackInfo:
        """The run's docker network, the image, and the run's own stack on the gateway.

        Raises:
            DeployError: no docker daemon, the image is missing, no free subnet.
        """
        self._run, self._run_dir = ctx.run_id, ctx.dir
        spec = ctx.spec
        self.container_cpus = spec.placement.cpus_per_replica
        try:
            image = dk.ensure_image(spec.docker.image)
            ctx.journal.write(
                Event.DOCKER_IMAGE,
                image=image.tag,
                built=image.built,
                build_s=round(image.build_s, 3),
                size_bytes=image.size_bytes,
            )
            self.docker = dk.create_network(ctx.run_id, range(spec.replication.replicas), image.tag)
        except FaultError as e:
            raise DeployError(str(e)) from None
        changed()
        ctx.journal.write(Event.DOCKER_NETWORK_CREATED, **to_json(self.docker))
        self.run_stack = EmbeddedStack(ctx.dir / "stack", host=self.docker.gateway)
        self.info = self.run_stack.start()
        ctx.journal.write(
            Event.RUN_STACK_STARTED, kafka=self.info.kafka, zookeeper=self.info.zookeeper
        )
        return self.info

    def driver_command(self, replica: int, config: Path) -> Sequence[str]:
        """A replica's driver command line: inside its namespace when the run has them, as a
        :mod:`launcher <arfl.orchestrate.launcher>` of its container on the docker target."""
        argv = default_command(replica, config)
        if self.docker is not None:
            return self._container_command(replica, config, argv)
        if self.isolation is None:
            return argv
        return netns_command(self.isolation.namespaces[replica].name, argv)

    def _container_command(self, replica: int, config: Path, argv: Sequence[str]) -> list[str]:
        """The launcher's argv and its launch spec (next to ``config``). A standby's number is
        its config's (``standby-K.json``): the command factory is given :data:`STANDBY`."""
        assert self.docker is not None and self._run is not None and self._run_dir is not None
        if replica == STANDBY:
            sid = int(config.stem.removeprefix("standby-"))
            name = dk.standby_container_name(self._run, sid)
            address = dk.standby_address(self.docker.subnet, sid)
            hostname, labels = f"standby-{sid}", {dk.LABEL_STANDBY: str(sid)}
            timing = config.with_name(f"standby-{sid}.container.json")
        else:
            name, address = self.docker.containers[replica], self.docker.addresses[replica]
            hostname, labels = f"replica-{replica}", {dk.LABEL_REPLICA: str(replica)}
            timing = config.with_name(f"replica-{replica}.container.json")
        jars = json.loads(config.read_text(encoding="utf-8")).get("jars") or []
        jar_dirs = sorted({str(Path(j).parent) for j in jars})
        host_runtime = self.docker.image.startswith(dk.RUNTIME_REPO + ":")
        if host_runtime:  # the host's interpreter, virtualenv, source and Spark home, read-only
            read_only = [
                sys.prefix,
                sys.base_prefix,
                str(Path(__file__).resolve().parents[2]),  # the source tree (PYTHONPATH)
                str(state_dir() / "spark-home"),
                *jar_dirs,
                *([jh] if (jh := java_home()) else []),  # a JDK outside /usr, /opt
            ]
            scratch = [str(state_dir() / "spark-home" / d) for d in WRITABLE_SPARK_DIRS]
        else:  # the user's image has Java, Python and arfl: only the jars and the run come in
            read_only, scratch = jar_dirs, []
            argv = ["python3", *argv[1:]]
        launch = {
            "name": name,
            "hostname": hostname,
            "image": self.docker.image,
            "network": self.docker.network,
            "address": address,
            "labels": {
                dk.LABEL_RUN: self._run,
                dk.LABEL_KIND: "replica" if replica != STANDBY else "standby",
                **labels,
            },
            "host_runtime": host_runtime,
            "read_only": read_only,
            "writable": [str(self._run_dir)],
            "scratch": scratch,
            "cwd": str(self._run_dir),
            "run_dir": str(self._run_dir),  # pending faults that outlive a restart
            "timing": str(timing),
            "cpus": self.container_cpus,
            # A waiting standby yields the CPU as a local one does by its niceness.
            "cpu_shares": dk.STANDBY_CPU_SHARES if replica == STANDBY else None,
        }
        spec_path = config.with_name(f"{config.stem}.launch.json")
        spec_path.write_text(json.dumps(launch, indent=1), encoding="utf-8")
        return [sys.executable, "-m", "arfl.orchestrate.launcher", "--spec", str(spec_path),
                "--", *argv]  # fmt: skip

    def standby_container(self, standby: int) -> str:
        """Standby ``standby``'s container name on the docker target."""
        assert self._run is not None
        return dk.standby_container_name(self._run, standby)

    def promote_standby(self, standby: int, replica: int) -> None:
        """Standby ``standby``'s container becomes ``replica``'s: the dead replica's container
        removed if its launcher left it, the standby's renamed to the replica's name, and its
        address recorded as the replica's (faults and ``state.json`` find it by both), and
        its CPU weight raised to a replica's.

        Raises:
            FaultError: the daemon refused (the standby keeps serving under its own name).
        """
        assert self.docker is not None and self._run is not None
        name = self.docker.containers[replica]
        dk.remove_container(name)
        dk.rename(dk.standby_container_name(self._run, standby), name)
        dk.set_cpu_shares(name, dk.DEFAULT_CPU_SHARES)
        self.docker.addresses[replica] = dk.standby_address(self.docker.subnet, standby)

    def close(self, ctx: RunContext) -> list[str]:
        """Stop the run's own stack and remove its namespaces; the errors, as lines."""
        errors: list[str] = []
        if self.run_stack is not None:
            try:
                self.run_stack.stop()
            except ArflError as e:
                errors.append(str(e))
        if self.docker is not None and self._run is not None:
            try:
                removed = dk.remove_run(self._run)
                ctx.journal.write(Event.DOCKER_REMOVED, removed=removed)
            except Exception as e:  # keep going: 'arfl chaos recover' can finish it
                errors.append(f"docker: {e}; run 'arfl chaos recover {ctx.dir}'")
        if self.isolation is not None:
            try:
                removed = teardown_isolation(self.isolation)
                ctx.journal.write(Event.ISOLATION_REMOVED, removed=removed)
            except Exception as e:  # keep going: 'arfl chaos recover' can finish it
                errors.append(f"isolation: {e}; run 'arfl chaos recover {ctx.dir}'")
        return errors
