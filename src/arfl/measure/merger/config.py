"""What a merger process is told: :class:`MergerConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from arfl.configs.defaults import MERGER_FETCH_WAIT_MS, MERGER_LINGER_MS
from arfl.errors import DeployError
from arfl.measure.histogram import (
    DEFAULT_PERCENTILES,
)
from arfl.run.childconfig import ChildConfig
from arfl.run.records import replica_topic
from arfl.run.rundir import RunPaths


@dataclass(frozen=True)
class MergerConfig(ChildConfig):
    """Where to read, write and report (``python -m arfl.measure.merger --config FILE``).

    Attributes:
        bootstrap: Kafka ``host:port[,...]``.
        sink: the final sink topic; replica ``i`` writes ``replica_topic(sink, i)``.
        replicas: how many replicas.
        run_dir: the run directory (``latency.hlog``, ``monitor.jsonl``, ``merger.json``,
            ``journal.jsonl`` go there).
        input_stats: the injector's stats file (gives the input window for gaps).
        input_start: epoch seconds input starts (instead of / overriding ``input_stats``).
        input_end: epoch seconds input ends.
        until: stop at this epoch time.
        idle_s: stop after this long without records, once input has ended (or, with no input
            information, once something was received).
        percentiles: shown in monitor lines and ``merger.json``.
        group_id: ``group.id`` of the consumer (default: a fresh one per run). The merger
            never joins the group nor commits under it.
        connect_timeout_s: how long to wait for the broker at start.
        owner_pid: the process the merger belongs to (the deploy process): when it is gone,
            the merger flushes, writes ``merger.json`` and exits.
        owner_create_time: the owner's create time (:func:`arfl.processes.create_time`), so
            that a recycled pid is not mistaken for the owner.
        fetch_wait_ms: the consumer's ``fetch.wait.max.ms``.
        linger_ms: the sink producer's ``linger.ms``.
        transactional_id: the sink producer's ``transactional.id`` (None: no transactions).
            Every merger of a run with a standby has the same one: the next one's
            ``init_transactions`` fences the one before (:mod:`.standby`).
        transaction_timeout_ms: how long the broker lets a transaction of the sink producer
            stay open (None: :data:`arfl.measure.merger.kafka.TRANSACTION_TIMEOUT_MS`); its
            records time out after it too.
        standby: follow ``serving_pid`` and write nothing until taking over from it.
        serving_pid: the serving merger a standby follows.
        serving_create_time: its create time (a recycled pid is not it).
        lease_s: how late a result the serving merger owes may be before a standby takes over.
    """

    module = "arfl.measure.merger"

    bootstrap: str
    sink: str
    replicas: int
    run_dir: Path
    input_stats: Path | None = None
    input_start: float | None = None
    input_end: float | None = None
    until: float | None = None
    idle_s: float | None = None
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    group_id: str | None = None
    connect_timeout_s: float = 15.0
    owner_pid: int | None = None
    owner_create_time: float | None = None
    fetch_wait_ms: int = MERGER_FETCH_WAIT_MS
    linger_ms: float = MERGER_LINGER_MS
    transactional_id: str | None = None
    transaction_timeout_ms: int | None = None
    standby: bool = False
    serving_pid: int | None = None
    serving_create_time: float | None = None
    lease_s: float = 1.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise DeployError(f"merger: replicas must be >= 1, got {self.replicas}")
        if self.owner_create_time is not None and self.owner_pid is None:
            raise DeployError("merger: an owner create time needs the owner's pid")
        if self.fetch_wait_ms < 0 or self.linger_ms < 0:
            raise DeployError("merger: fetch wait and linger must be >= 0 ms")
        if self.standby and (self.serving_pid is None or self.transactional_id is None):
            raise DeployError(
                "merger: a standby needs the serving merger's pid and a transactional id"
            )
        if self.lease_s <= 0:
            raise DeployError(f"merger: lease must be > 0 s, got {self.lease_s}")
        if not self.percentiles or any(not 0 < p <= 100 for p in self.percentiles):
            raise DeployError(f"merger: percentiles must be in (0, 100], got {self.percentiles}")

    @property
    def paths(self) -> RunPaths:
        """Named paths in the run directory."""
        return RunPaths(self.run_dir)

    @property
    def result_path(self) -> Path:
        """Where the final counts go."""
        return self.run_dir / "merger.json"

    def topics(self) -> list[str]:
        """The replica topics consumed."""
        return [replica_topic(self.sink, i) for i in range(self.replicas)]
