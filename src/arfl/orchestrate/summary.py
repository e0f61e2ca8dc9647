"""``summary.json``: a finished run in one file, from what its components left behind."""

from __future__ import annotations

import json
from typing import Any

from arfl.orchestrate.context import RunContext
from arfl.orchestrate.resources import ResourceSampler
from arfl.run.events import Event
from arfl.run.rundir import read_jsonl, write_json_atomic
from arfl.run.streams import InjectorStatsTail
from arfl.targets.shares import CpuShares


def placement_summary(
    cores: float,
    usage: dict[str, tuple[float | None, float]],
    *,
    quota: str,
    cgroup_version: int | None = None,
    root: str | None = None,
) -> dict[str, Any]:
    """``summary.json`` ``placement``: each replica's share and how much of it it used (its
    CPU seconds over the wall seconds from its start to the run's stop, in cores). ``quota``
    says what enforced the share: ``cgroup`` (a group of arfl's under ``root``) or
    ``container`` (each replica container's own CFS quota)."""
    groups: dict[str, Any] = {}
    for name, (cpu_s, wall_s) in usage.items():
        used = None if cpu_s is None or wall_s <= 0 else cpu_s / wall_s
        groups[name] = {
            "share_cores": cores,
            "cpu_s": None if cpu_s is None else round(cpu_s, 2),
            "wall_s": round(wall_s, 2),
            "used_cores": None if used is None else round(used, 3),
            "used_fraction": None if used is None else round(used / cores, 3),
        }
    return {
        "cpus_per_replica": cores,
        "quota": quota,
        "cgroup_version": cgroup_version,
        "root": root,
        "groups": groups,
    }


def cgroup_placement(
    shares: CpuShares, usage: dict[str, tuple[float | None, float]]
) -> dict[str, Any]:
    """:func:`placement_summary` of the local target's share groups."""
    return placement_summary(
        shares.cores,
        usage,
        quota="cgroup",
        cgroup_version=shares.hierarchy.version,
        root=str(shares.root),
    )


def summarise(
    ctx: RunContext,
    resources: ResourceSampler,
    master: str,
    placement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build and write ``summary.json`` (injector stats, merger counts, restarts, costs; with
    ``[placement]`` the drivers' CPU shares and their use, :func:`placement_summary`)."""
    inj = InjectorStatsTail(ctx.injector_stats)
    inj.poll()
    merged: dict[str, Any] = {}
    merger_json = ctx.dir / "merger.json"
    if merger_json.exists():
        merged = json.loads(merger_json.read_text())
    events = read_jsonl(ctx.paths.journal)
    restarts = sum(1 for e in events if e.get("event") == Event.REPLICA_RESTARTED)
    lags = [e for e in events if e.get("event") == Event.REPLICA_LAG]
    cpu = resources.cpu_seconds()
    spec = ctx.spec
    summary: dict[str, Any] = {
        "run": ctx.run_id,
        "spec": spec.name,
        "mode": spec.replication.mode,
        "replicas": spec.replication.replicas,
        "master": master,
        "topics": {"source": ctx.rspec.source.topic, "sink": ctx.rspec.sink.topic},
        "workload": {"target_rate": spec.workload.rate, "duration_s": spec.workload.duration},
        "produced": inj.summary.produced if inj.summary else None,
        "achieved_rate": inj.summary.achieved_rate if inj.summary else None,
        "injector": inj.summary.to_dict() if inj.summary else None,
        "results": merged.get("results"),
        "duplicates_dropped": merged.get("duplicates"),
        "divergent": merged.get("divergent"),
        "bad_records": merged.get("bad"),
        "replay_skipped": inj.summary.bad if inj.summary else None,
        "latency_ms": merged.get("latency_ms"),
        "longest_gap_ms": merged.get("longest_gap_ms"),
        "replica_restarts": restarts,
        "max_lag_s": lags[-1].get("max_lag_s") if lags else None,
        "cpu_s": {str(k): round(v, 1) for k, v in sorted(cpu.items())},
        "cpu_s_total": round(sum(cpu.values()) + resources.standby_cpu_seconds(), 1),
        "cpu_s_standby": round(resources.standby_cpu_seconds(), 1),
        "replicas_peak_rss_mb": round(resources.peak_rss / 2**20, 1),
        "merger": merged,
        "placement": placement,
    }
    write_json_atomic(ctx.paths.summary, summary)
    return summary
