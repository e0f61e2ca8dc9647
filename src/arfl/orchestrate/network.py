"""Where the run's ZooKeeper and Kafka are, and how replicas reach them.

Without network faults the stack is resolved as the spec says (the embedded one, started if
needed, or an external one). With network faults (partition, delay) each replica runs in its
own network namespace on a bridge, and the run gets a ZooKeeper + Kafka of its own listening
on the bridge address: replicas in namespaces cannot reach 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from arfl import stack
from arfl.errors import ArflError, DeployError
from arfl.faults.netns import (
    create_isolation,
    needs_isolation,
    netns_command,
    require_net_admin,
    teardown_isolation,
)
from arfl.faults.state import IsolationState
from arfl.orchestrate.context import RunContext
from arfl.orchestrate.supervisor import default_command
from arfl.stack.embedded import EmbeddedStack


class RunNetwork:
    """The stack a run uses and, with network faults, its namespaces and own stack.

    :meth:`open` fills it step by step, so that :meth:`close` also undoes a half-done open
    (namespaces created, run stack failed to start).
    """

    def __init__(self) -> None:
        self.info: stack.StackInfo | None = None
        self.isolation: IsolationState | None = None
        self.run_stack: EmbeddedStack | None = None

    def open(self, ctx: RunContext) -> stack.StackInfo:
        """Resolve (or start) the stack the run uses; isolate the replicas if faults need it.

        Raises:
            StackError: the stack is not available.
            DeployError: network faults with an external stack.
        """
        spec = ctx.spec
        if not needs_isolation(c.fault for c in spec.chaos):
            self.info = stack.resolve(spec.stack, state=ctx.options.stack_state)
            return self.info
        if spec.stack.kind != "embedded":
            raise DeployError(
                "network faults (partition, delay) need stack.kind = 'embedded': arfl starts "
                "ZooKeeper and Kafka on the replicas' bridge; an external stack is out of reach"
            )
        require_net_admin("network faults (partition, delay)")
        self.isolation = create_isolation(ctx.run_id, range(spec.replication.replicas))
        ctx.journal.write("isolation-created", **self.isolation.to_json())
        self.run_stack = EmbeddedStack(ctx.dir / "stack", host=self.isolation.host_ip)
        self.info = self.run_stack.start()
        ctx.journal.write("run-stack-started", kafka=self.info.kafka, zookeeper=self.info.zookeeper)
        return self.info

    def driver_command(self, replica: int, config: Path) -> Sequence[str]:
        """A replica's driver command line, inside its namespace when the run has them."""
        argv = default_command(replica, config)
        if self.isolation is None:
            return argv
        return netns_command(self.isolation.namespaces[replica].name, argv)

    def close(self, ctx: RunContext) -> list[str]:
        """Stop the run's own stack and remove its namespaces; the errors, as lines."""
        errors: list[str] = []
        if self.run_stack is not None:
            try:
                self.run_stack.stop()
            except ArflError as e:
                errors.append(str(e))
        if self.isolation is not None:
            try:
                removed = teardown_isolation(self.isolation)
                ctx.journal.write("isolation-removed", removed=removed)
            except Exception as e:  # keep going: 'arfl chaos recover' can finish it
                errors.append(f"isolation: {e}; run 'arfl chaos recover {ctx.dir}'")
        return errors
