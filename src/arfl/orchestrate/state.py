"""Writing ``state.json`` (:class:`arfl.run.state.RunState`) from a running deployment: what
``arfl chaos`` and ``arfl chaos recover`` act on (pids, app ids, namespaces, topics)."""

from __future__ import annotations

import os

from arfl.orchestrate.context import RunContext
from arfl.orchestrate.network import RunNetwork
from arfl.orchestrate.supervisor import ReplicaRunner
from arfl.processes import ManagedProcess, create_time, same_process
from arfl.run.names import leader_path
from arfl.run.records import replica_topic
from arfl.run.state import ReplicaRecord, RunState, StackRecord, StandbyRecord, TopicsRecord
from arfl.targets.shares import CpuShares


def dk_address(net: RunNetwork, replica: int) -> str | None:
    """The replica container's address on the run's docker network (None off that target)."""
    return net.docker.addresses.get(replica) if net.docker else None


def write_state(
    ctx: RunContext,
    net: RunNetwork,
    runner: ReplicaRunner | None,
    merger: ManagedProcess | None,
    injector: ManagedProcess | None,
    merger_standby: ManagedProcess | None = None,
    shares: CpuShares | None = None,
) -> None:
    """Write ``state.json`` atomically (``shares``: the drivers' CPU-share groups, recorded
    before the first driver starts in one).

    The first one is written before anything is created (``stack`` null until the stack is
    known, ``target`` says whether containers may follow), again once the run's namespaces are
    planned and once its docker network exists: a ``kill -9`` of arfl at any moment leaves a
    file through which ``arfl chaos recover`` finds them.
    """
    iso = net.isolation
    # Standbys first: one promoted in between is then in one list or both, never in none.
    standby_states = runner.standby_states() if runner is not None else []
    replicas: dict[int, ReplicaRecord] = {}
    if runner is not None:
        for i, st in runner.states().items():
            ns = iso.namespaces.get(i) if iso else None
            proc = same_process(st.pid, None) if st.pid is not None else None
            replicas[i] = ReplicaRecord(
                driver_pid=st.pid,
                driver_create_time=create_time(proc) if proc is not None else None,
                app_id=st.app_id,
                state=st.status,
                restarts=st.restarts,
                netns=ns.name if ns else None,
                address=ns.address if ns else dk_address(net, i),
                container=net.docker.containers.get(i) if net.docker else None,
            )
    standbys: dict[int, StandbyRecord] = {}
    for sb in standby_states:
        proc = same_process(sb.pid, None)
        standbys[sb.standby] = StandbyRecord(
            pid=sb.pid, create_time=create_time(proc) if proc is not None else None, ready=sb.ready
        )
    n = ctx.spec.replication.replicas
    RunState(
        run=ctx.run_id,
        pid=os.getpid(),
        # This arfl's create time: with ``pid`` it tells a later ``recover`` whether we run.
        pid_create_time=create_time(os.getpid()),
        mode=ctx.spec.replication.mode,
        spec_name=ctx.spec.name,
        target=ctx.spec.spark.target,
        stack=(
            StackRecord(kafka=net.info.kafka, zookeeper=net.info.zookeeper)
            if net.info is not None
            else None
        ),
        topics=TopicsRecord(
            source=ctx.rspec.source.topic,
            sink=ctx.rspec.sink.topic,
            replicas=[replica_topic(ctx.rspec.sink.topic, i) for i in range(n)],
        ),
        replicas=replicas,
        standbys=standbys,
        leader_path=leader_path(ctx.spec.name, ctx.run_id),
        isolation=iso,
        docker=net.docker,
        spark_home=str(runner.spark_home) if runner and runner.spark_home else None,
        shares=shares.record() if shares is not None else None,
        master=ctx.options.master or ctx.spec.spark.master,
        merger_pid=merger.pid if merger else None,
        merger_create_time=merger.create_time if merger else None,
        merger_standby_pid=merger_standby.pid if merger_standby else None,
        merger_standby_create_time=merger_standby.create_time if merger_standby else None,
        injector_pid=injector.pid if injector else None,
        injector_create_time=injector.create_time if injector else None,
    ).write(ctx.dir)
