"""A Spark standalone cluster in a container, for tests (and users) of the remote-cluster path.

:class:`DockerSparkCluster` creates a docker network of its own (labelled, explicit subnet,
like a run's), a ZooKeeper + Kafka on its gateway (the host's address on that network), and one
container running a standalone master and a worker (arfl's runtime image: the host's Java and
pyspark mounted read-only). Executors are JVMs inside that container. A deployment then uses
``spark.master = cluster.master_url`` with ``stack.kind = "external"`` and the cluster's Kafka
and ZooKeeper: its drivers run on the host in client mode and listen on the host's address
towards the master (:func:`arfl.replica.app.driver_address`), which the executors reach over
the network, as with a cluster arfl did not start.

Example::

    with DockerSparkCluster(tmp_path) as cluster:
        spec.spark.master == cluster.master_url        # "spark://10.214.<k>.2:7077"
        spec.stack.kafka == cluster.stack.kafka        # "10.214.<k>.1:<port>"
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from arfl.errors import StackError
from arfl.processes import wait_until
from arfl.replica.sparkenv import WRITABLE_SPARK_DIRS, driver_env, ensure_spark_home
from arfl.run.state import DockerNetState
from arfl.stack import StackInfo
from arfl.stack.embedded import EmbeddedStack
from arfl.targets import docker as dk

MASTER_PORT = 7077


class DockerSparkCluster:
    """One master and one worker in a container on a network of the cluster's own."""

    def __init__(
        self,
        base_dir: Path,
        *,
        cores: int = 2,
        memory: str = "1g",
        start_timeout_s: float = 120.0,
    ) -> None:
        """Prepare; nothing starts before :meth:`start`.

        Args:
            base_dir: directory for the stack's files and the Spark home.
            cores: the worker's cores (task slots).
            memory: the worker's memory for executors.
            start_timeout_s: how long master and worker may take to register.
        """
        self.base_dir = base_dir
        self.cores = cores
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.name = f"sparkcluster{os.getpid()}"
        self.net: DockerNetState | None = None
        self.harness: EmbeddedStack | None = None
        self.stack: StackInfo | None = None
        self.container: Any = None
        self.master_url = ""

    def __enter__(self) -> DockerSparkCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """The cluster container's address."""
        assert self.net is not None
        return self.net.addresses[0]

    def start(self) -> None:
        """Network, stack on its gateway, the master + worker container; returns once the
        worker registered with the master.

        Raises:
            FaultError: no docker daemon.
            StackError: the cluster did not come up (the message has the container's log).
        """
        image = dk.ensure_image()
        self.net = dk.create_network(self.name, [0], image.tag)
        self.harness = EmbeddedStack(self.base_dir / "stack", host=self.net.gateway)
        self.stack = self.harness.start()
        home = ensure_spark_home()
        env = driver_env(home)
        ip = self.address
        # Executors bind to the container's address: the driver (on the host) connects back.
        env.update(SPARK_LOCAL_IP=ip, SPARK_NO_DAEMONIZE="1", SPARK_DAEMON_MEMORY="256m")
        env.pop("HOSTNAME", None)
        self.master_url = f"spark://{ip}:{MASTER_PORT}"
        spark_class = home / "bin" / "spark-class"
        script = (
            f"{spark_class} org.apache.spark.deploy.master.Master --host {ip} "
            f"--port {MASTER_PORT} --webui-port 8080 & "
            f"{spark_class} org.apache.spark.deploy.worker.Worker --host {ip} "
            f"--cores {self.cores} --memory {self.memory} --work-dir /tmp/work "
            f"{self.master_url} & wait"
        )
        cid = dk.create_container(
            name=dk.container_name(self.name, 0),
            image=image.tag,
            command=["/bin/bash", "-c", script],
            network=self.net.network,
            address=ip,
            labels={dk.LABEL_RUN: self.name, dk.LABEL_KIND: "spark-cluster"},
            environment=env,
            mounts=dk.mounts_for([sys.prefix, sys.base_prefix, home]),
            scratch=["/tmp", *(str(home / d) for d in WRITABLE_SPARK_DIRS)],
            hostname="spark-cluster",
        )
        with dk.sdk_errors(f"spark cluster container {cid[:12]}"):
            dk.client().api.start(cid)
        self.container = dk.container(cid)

        def registered() -> bool:
            if "Successfully registered with master" in self.container.logs().decode(
                errors="replace"
            ):
                return True
            self.container.reload()
            if self.container.status != "running":
                raise StackError(f"spark cluster container {self.container.name} exited")
            return False

        with contextlib.suppress(TimeoutError, StackError):
            wait_until(registered, timeout_s=self.start_timeout_s, interval_s=0.5)
            return
        raise StackError(
            f"spark cluster in container {self.container.name} did not come up:\n"
            + self.container.logs(tail=40).decode(errors="replace")
        )

    def stop(self) -> None:
        """Remove the container and the network, stop the stack."""
        try:
            if self.harness is not None:
                self.harness.stop()
        finally:
            dk.remove_run(self.name)
