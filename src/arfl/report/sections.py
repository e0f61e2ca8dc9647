"""The report's secondary sections (part of the ``--json`` contract, :mod:`arfl.report.model`):
late drops per replica, per-second series, resource use, the workload's key skew."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arfl.coerce import opt_float

if TYPE_CHECKING:
    # Only a type here: importing arfl.measure.check would load the spec module, which the
    # spec validator's import of arfl.report.slo must not (a cycle).
    pass


@dataclass(frozen=True)
class ReplicaLateDrops:
    """What one replica's stateful operators dropped as older than its watermark.

    Attributes:
        rows: rows dropped, every batch together.
        batches: batches that dropped any.
        first_batch: the first such batch id (None: none).
        last_batch: the last such batch id (None: none).
        unreported_batches: batch ids it ran without a progress line
            (:func:`arfl.run.progress.unreported_batches`): their drops are unknown, so
            ``rows`` is a lower bound when there are any.
    """

    rows: int = 0
    batches: int = 0
    first_batch: int | None = None
    last_batch: int | None = None
    unreported_batches: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """One entry of ``late_drops.replicas``."""
        return {
            "rows": self.rows,
            "batches": self.batches,
            "first_batch": self.first_batch,
            "last_batch": self.last_batch,
            "unreported_batches": list(self.unreported_batches),
        }


@dataclass(frozen=True)
class LateDrops:
    """Rows the replicas dropped behind the watermark (``numRowsDroppedByWatermark``).

    Where a replica's batches end decides its watermark, so one replica may drop a row another
    keeps: a determinism risk between replicas, shown next to the divergence count.

    Attributes:
        replicas: replica index -> its drops; None when nothing is known of it (no progress
            recorded). Every replica of the spec is a key.
        agreed: every drop was the agreed watermark's (:mod:`arfl.replica.source.late`): the
            same rows in every replica, whatever their batches.
    """

    replicas: dict[int, ReplicaLateDrops | None] = field(default_factory=dict)
    agreed: bool = False

    @property
    def rows(self) -> int | None:
        """Rows dropped by every replica together; None when no replica is known."""
        known = [r.rows for r in self.replicas.values() if r is not None]
        return sum(known) if known else None

    @property
    def batches(self) -> int | None:
        """Batches that dropped rows, every replica together; None when no replica is known."""
        known = [r.batches for r in self.replicas.values() if r is not None]
        return sum(known) if known else None

    def to_dict(self) -> dict[str, Any]:
        """The ``late_drops`` object of the JSON output."""
        return {
            "rows": self.rows,
            "batches": self.batches,
            "agreed": self.agreed,
            "replicas": {
                str(i): None if r is None else r.to_dict() for i, r in sorted(self.replicas.items())
            },
        }


@dataclass(frozen=True)
class Series:
    """Per-second series for plots (times relative to the input start).

    Attributes:
        t_s: end of each latency interval.
        p50_ms, p99_ms, max_ms: per-interval latency (None where nothing arrived).
        rate_t_s: monitor tick times.
        output_rate: first copies per second (merged output).
        replica_rate: replica -> records received from it per second.
        replica_wins: replica -> results it delivered first, per second.
        distribution: phase name -> list of (percentile, latency ms) for the distribution plot.
        batches: replica -> (batch start s, batch duration ms) of its micro-batches.
        batch_ends: replica -> when each of its micro-batches ended, in time order
            (:func:`arfl.run.progress.batch_ends`); only replicas with progress lines.
    """

    t_s: list[float]
    p50_ms: list[float | None]
    p99_ms: list[float | None]
    max_ms: list[float | None]
    rate_t_s: list[float]
    output_rate: list[float]
    replica_rate: dict[int, list[float]]
    distribution: dict[str, list[tuple[float, float]]]
    batches: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    replica_wins: dict[int, list[float]] = field(default_factory=dict)
    batch_ends: dict[int, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Resources:
    """What the replicas cost (from ``summary.json``; None where the run did not record it).

    Attributes:
        cpu_s: CPU seconds of every replica process (drivers, driver JVMs, executors).
        cpu_s_per_replica: the same per replica index.
        peak_rss_mb: the highest sum of the replicas' resident memory seen at one time.
        placement: ``summary.json`` ``placement`` (``[placement]``): the cores each driver's
            cgroup had and how much of them it used; None without placement.
    """

    cpu_s: float | None = None
    cpu_s_per_replica: dict[int, float] = field(default_factory=dict)
    peak_rss_mb: float | None = None
    cpu_s_standby: float | None = None
    placement: dict[str, Any] | None = None

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> Resources:
        """Read the deploy summary's ``cpu_s*`` and ``replicas_peak_rss_mb``."""
        total = summary.get("cpu_s_total")
        rss = summary.get("replicas_peak_rss_mb")
        per = summary.get("cpu_s") or {}
        return cls(
            cpu_s=opt_float(total),
            cpu_s_per_replica={int(k): float(v) for k, v in per.items()},
            peak_rss_mb=opt_float(rss),
            cpu_s_standby=opt_float(summary.get("cpu_s_standby")),
            placement=summary.get("placement") or None,
        )

    def placement_line(self) -> str | None:
        """``CPU share 0.5 cores per replica; used: replica-0 0.31 (62%), ...`` (None without
        placement)."""
        p = self.placement
        if not p:
            return None
        used = []
        for name, g in sorted((p.get("groups") or {}).items()):
            cores = opt_float(g.get("used_cores"))
            frac = opt_float(g.get("used_fraction"))
            used.append(
                f"{name} " + ("?" if cores is None else f"{cores:.2f}")
                + ("" if frac is None else f" ({frac:.0%})")
            )  # fmt: skip
        share = opt_float(p.get("cpus_per_replica"))
        quota = str(p.get("quota") or "cgroup")
        return (
            f"CPU share {'?' if share is None else f'{share:g}'} core(s) per replica ({quota} "
            f"quota); used: {', '.join(used) or 'not measured'}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``resources`` object of the JSON output."""
        return {
            "cpu_s": self.cpu_s,
            "cpu_s_per_replica": {str(k): v for k, v in sorted(self.cpu_s_per_replica.items())},
            "peak_rss_mb": self.peak_rss_mb,
            "cpu_s_standby": self.cpu_s_standby,
            "placement": self.placement,
        }


@dataclass(frozen=True)
class WorkloadSkew:
    """How the input spread over partitions and Kafka keys (the independent check's count of
    the input topic, ``check.json``'s ``workload``; markers left out).

    Attributes:
        records: input records counted.
        partitions: partition -> records (empty partitions as 0).
        keys: distinct Kafka keys.
        keyless: records without a key.
        top_keys: up to 10 ``(key, records, share of the keyed records)``, hottest first.
        key_max_mean: the hottest key's records over the mean per key (1.0: uniform).
        partition_max_mean: the fullest partition's records over the mean per partition.
    """

    records: int
    partitions: dict[int, int]
    keys: int
    keyless: int = 0
    top_keys: list[tuple[str, int, float]] = field(default_factory=list)
    key_max_mean: float | None = None
    partition_max_mean: float | None = None

    @classmethod
    def from_check(cls, doc: dict[str, Any]) -> WorkloadSkew | None:
        """Read ``check.json``'s ``workload`` object; None when absent or malformed."""
        w = doc.get("workload")
        if not isinstance(w, dict):
            return None
        try:
            return cls(
                records=int(w["records"]),
                partitions={int(p): int(n) for p, n in dict(w.get("partitions") or {}).items()},
                keys=int(w.get("keys", 0)),
                keyless=int(w.get("keyless", 0)),
                top_keys=[
                    (str(k["key"]), int(k["records"]), float(k["share"]))
                    for k in list(w.get("top_keys") or [])
                ],
                key_max_mean=opt_float(w.get("key_max_mean")),
                partition_max_mean=opt_float(w.get("partition_max_mean")),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        """The ``workload`` object of the JSON output."""
        return {
            "records": self.records,
            "partitions": {str(p): n for p, n in sorted(self.partitions.items())},
            "keys": self.keys,
            "keyless": self.keyless,
            "top_keys": [{"key": k, "records": n, "share": s} for k, n, s in self.top_keys],
            "key_max_mean": self.key_max_mean,
            "partition_max_mean": self.partition_max_mean,
        }
