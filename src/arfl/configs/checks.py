"""Checks across the sections of a spec, on the raw TOML dict: they report with their key path
even when another section does not validate (:func:`arfl.configs.load.parse_spec` runs them)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from arfl.configs.chaos import CHAOS_KEYS
from arfl.configs.realtime import REALTIME, RTM_MIN_BATCH_S, realtime_problems
from arfl.configs.replay import drop_generator_problems, replay_problems
from arfl.configs.spec import (
    DEFAULT_BATCH_INTERVAL_S,
    GENERATOR_RE,
    MODE_OPTIONS,
    Spec,
)
from arfl.configs.workload import workload_problems
from arfl.registry import FAULTS, MODES, mode_names
from arfl.units import parse_duration


def raw_key(raw: dict[str, Any], *keys: str) -> Any:
    """``raw[keys[0]][keys[1]]...``, or None where a level is missing or not a table."""
    cur: Any = raw
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _safe_duration(v: Any) -> float | None:
    try:
        return parse_duration(v)
    except ValueError:
        return None


def _docker_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """The docker target runs its own stack on the run's network and local-cluster drivers."""
    if raw_key(raw, "spark", "target") != "docker":
        return []
    out: list[tuple[str, str]] = []
    if (raw_key(raw, "stack", "kind") or "embedded") != "embedded":
        out.append(
            (
                "stack.kind",
                "spark.target = 'docker' starts ZooKeeper and Kafka of its own on the run's "
                "docker network; use stack.kind = 'embedded'",
            )
        )
    master = raw_key(raw, "spark", "master") or "local-cluster[1,1,1024]"
    if isinstance(master, str) and not master.startswith(("local-cluster[", "local[")):
        out.append(
            (
                "spark.master",
                f"{master!r}: with spark.target = 'docker' each replica's driver runs its own "
                "local-cluster (workers and executors in the replica's container)",
            )
        )
    return out


def placement_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """``[placement] cpus_per_replica`` puts each driver's process tree under a quota (a
    cgroup of this host, or its container's): the executors must be in that tree."""
    if raw_key(raw, "placement", "cpus_per_replica") is None:
        return []
    out: list[tuple[str, str]] = []
    out.extend(
        _needs_local_master(
            raw,
            "placement.cpus_per_replica",
            "the executors of a spark:// cluster run under its workers, outside the replica's "
            "process tree and its quota",
        )
    )
    return out


def _needs_local_master(raw: dict[str, Any], key: str, why: str) -> list[tuple[str, str]]:
    """``key`` refused, with ``why``, unless ``spark.master`` is a local one."""
    master = raw_key(raw, "spark", "master")
    if isinstance(master, str) and not master.startswith("local"):
        return [
            (key, f"needs a local master (local-cluster[...] or local[...]), not {master!r}: {why}")
        ]
    return []


def placement_warning(spec: Spec, cores: int) -> str | None:
    """When the replicas' and standbys' CPU quotas add up to more than this host's cores (each
    may then get less than its share); None when they fit or there is no placement."""
    share = spec.placement.cpus_per_replica
    if share is None:
        return None
    rep = spec.replication
    drivers = rep.replicas + rep.standby
    if share * drivers <= cores + 1e-9:
        return None
    standbys = f" + {rep.standby} standby" if rep.standby else ""
    return (
        f"placement.cpus_per_replica {share:g} x ({rep.replicas} replica"
        f"{'s' if rep.replicas != 1 else ''}{standbys}) = {share * drivers:g} cores, more than "
        f"this host's {cores}: the quotas overcommit it and a replica may get less than its "
        "share; lower cpus_per_replica"
    )


def standby_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """A standby driver takes a dead driver's place: on this host outside any replica's
    network namespace, or (docker target) in a container of its own on the run's network."""
    standby = raw_key(raw, "replication", "standby")
    if not isinstance(standby, int) or isinstance(standby, bool) or standby <= 0:
        return []
    out: list[tuple[str, str]] = []
    docker = raw_key(raw, "spark", "target") == "docker"
    out.extend(
        _needs_local_master(
            raw,
            "replication.standby",
            "a standby is a Spark application of its own, kept warm on this host",
        )
    )
    if raw_key(raw, "replication", "restart") is False:
        out.append(("replication.standby", "replication.restart = false: nothing to take over"))
    chaos = raw.get("chaos") if isinstance(raw.get("chaos"), list) else []
    assert isinstance(chaos, list)
    kinds = [str(c.get("fault")) for c in chaos if isinstance(c, dict)]
    network = [k for k in kinds if k in FAULTS and FAULTS.info(k).network]
    if network and not docker:  # a container takes its place on the run's network instead
        out.append(
            (
                "replication.standby",
                f"not with network faults ({', '.join(sorted(set(network)))}): a standby "
                "driver runs on this host in no replica's namespace; with spark.target = "
                "'docker' it runs in a container of its own on the run's network",
            )
        )
    return out


def _resume_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """``resume = "output"`` skips input whose results are delivered: only sound where a
    result depends on its own record and some replica delivered it. ``resume = "peer"`` takes
    another replica's state: only sound in ``active``."""
    resume = raw_key(raw, "replication", "resume")
    mode = raw_key(raw, "replication", "mode") or "none"
    if not isinstance(mode, str) or mode not in MODES:
        return []  # the unknown mode is the problem to read
    takes = " or ".join(repr(m) for m in mode_names() if MODES.info(m).resumes_from_peers)
    elsewhere = MODES.info(mode).resumes_from_peers
    if resume == "peer" and not elsewhere:
        return [
            (
                "replication.resume",
                f"'peer' needs mode {takes}, not {mode!r}: only replicas whose state does not "
                "depend on their batch boundaries can start from another replica's checkpoint",
            )
        ]
    if resume == "window":
        return _window_resume_problems(raw, mode, takes)
    if resume != "output":
        return []
    out: list[tuple[str, str]] = []
    if not elsewhere:
        out.append(
            (
                "replication.resume",
                f"'output' needs mode {takes}, not {mode!r}: only independent replicas reading "
                "Spark's Kafka source can start at another replica's output",
            )
        )
    steps = raw.get("steps") if isinstance(raw.get("steps"), list) else []
    assert isinstance(steps, list)
    for i, s in enumerate(steps):
        if isinstance(s, dict) and not ({"filter", "select"} & set(s)):
            kind = next(iter(s), "?")
            out.append(
                (
                    "replication.resume",
                    f"'output' needs a stateless pipeline, but steps[{i}] is a {kind}: its "
                    "results depend on earlier records, which a fresh start would not read",
                )
            )
    return out


def _window_resume_problems(raw: dict[str, Any], mode: str, takes: str) -> list[tuple[str, str]]:
    """``resume = "window"`` starts a fresh query at a window boundary: only sound where every
    result is one tumbling window's and event times never go back
    (:mod:`arfl.configs.window_start`)."""
    if not MODES.info(mode).resumes_from_peers:
        return [
            (
                "replication.resume",
                f"'window' needs mode {takes}, not {mode!r}: only independent replicas reading "
                "Spark's Kafka source can start at another position than their own",
            )
        ]
    from arfl.configs.masking import window_start_problem

    why = window_start_problem(raw)
    if why is None:
        return []
    return [("replication.resume", f"'window' cannot be placed: {why}; leave it 'auto'")]


def cross_checks(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Checks across sections; run on the raw dict so they report even if a section is bad."""
    out: list[tuple[str, str]] = []
    repl = raw.get("replication") if isinstance(raw.get("replication"), dict) else {}
    assert isinstance(repl, dict)
    mode = repl.get("mode", "none")
    info = MODES.info(mode) if isinstance(mode, str) and mode in MODES else None
    replicas = repl.get("replicas", info.min_replicas if info else 1)
    if isinstance(replicas, int) and info is not None:
        if info.max_replicas == info.min_replicas and replicas != info.min_replicas:
            out.append(
                (
                    "replication.replicas",
                    f"mode {mode!r} runs exactly {info.min_replicas} replica, got {replicas}",
                )
            )
        elif replicas < info.min_replicas:
            out.append(
                (
                    "replication.replicas",
                    f"mode {mode!r} needs at least {info.min_replicas} replicas, got {replicas}",
                )
            )
    if info is not None:
        for key in sorted(MODE_OPTIONS):
            if key in repl and key not in info.options:
                owners = [m for m in MODES.names() if key in MODES.info(m).options]
                out.append(
                    (f"replication.{key}", "only for mode " + ", ".join(f"'{m}'" for m in owners))
                )
        if info.agreed_batches and raw_key(raw, "source", "options"):
            out.append(
                (
                    "source.options",
                    f"mode {mode!r} reads the input with arfl's own source, not Spark's Kafka "
                    "source: its consumer settings are arfl's",
                )
            )
        trigger = repl.get("trigger", "micro-batch")
        if isinstance(trigger, str) and trigger not in info.triggers:
            owners = [m for m in MODES.names() if trigger in MODES.info(m).triggers]
            out.append(
                (
                    "replication.trigger",
                    f"'{trigger}' needs mode "
                    + ", ".join(f"'{m}'" for m in owners)
                    + " (Spark's Kafka source)",
                )
            )

    steps = raw.get("steps") if isinstance(raw.get("steps"), list) else []
    assert isinstance(steps, list)
    has_window = False
    for i, s in enumerate(steps):
        if isinstance(s, dict) and "window" in s:
            if has_window:
                out.append((f"steps[{i}].window", "only one window step per pipeline"))
            has_window = True
    out.extend(_generator_problems(steps))
    if has_window and not raw_key(raw, "source", "event_time"):
        out.append(
            (
                "source.event_time",
                'a window step needs event_time = "<field>" (processing-time windows are '
                "not deterministic across replicas)",
            )
        )
    out.extend(realtime_problems(raw))
    out.extend(_docker_problems(raw))
    out.extend(standby_problems(raw))
    out.extend(placement_problems(raw))
    out.extend(_resume_problems(raw))
    generated = workload_problems(
        raw.get("workload", {}), raw_key(raw, "source", "key"), raw_key(raw, "source", "event_time")
    )
    out.extend(drop_generator_problems(generated, raw))
    out.extend(replay_problems(raw))

    duration = _safe_duration(raw_key(raw, "workload", "duration") or "60s")
    n_replicas = replicas if isinstance(replicas, int) else 1
    chaos = raw.get("chaos") if isinstance(raw.get("chaos"), list) else []
    assert isinstance(chaos, list)
    for i, c in enumerate(chaos):
        if not isinstance(c, dict):
            continue
        at = _safe_duration(c.get("at"))
        if at is not None and duration is not None and at >= duration:
            out.append(
                (
                    f"chaos[{i}].at",
                    f"{c.get('at')} is not inside the workload duration "
                    f"({raw_key(raw, 'workload', 'duration') or '60s'})",
                )
            )
        after = _safe_duration(c.get("after_boundary"))
        if (
            at is not None
            and after is not None
            and duration is not None
            and at < duration <= at + after
        ):
            out.append(
                (
                    f"chaos[{i}].after_boundary",
                    f"{c.get('at')} + {c.get('after_boundary')} (at the earliest) is not inside "
                    f"the workload duration ({raw_key(raw, 'workload', 'duration') or '60s'})",
                )
            )
        target = c.get("replica")
        fault = str(c.get("fault"))
        kind = FAULTS.info(fault) if fault in FAULTS else None
        if (
            isinstance(target, int)
            and not isinstance(target, bool)
            and not (0 <= target < n_replicas)
        ):
            out.append(
                (
                    f"chaos[{i}].replica",
                    f"replica {target} out of range (0..{n_replicas - 1} for {n_replicas} "
                    "replica(s))",
                )
            )
        if (target == "leader" or (kind and kind.targets_leader)) and not (info and info.leader):
            leaders = [m for m in MODES.names() if MODES.info(m).leader]
            out.append(
                (
                    f"chaos[{i}]",
                    "a leader exists only in mode " + ", ".join(f"'{m}'" for m in leaders),
                )
            )
        if kind and kind.on == "replica" and not kind.targets_leader and target is None:
            out.append((f"chaos[{i}].replica", 'which replica? set replica = N or "leader"'))
    out.extend(_stacked_faults(chaos, _boundary_spacing_s(raw)))
    return out


BOUNDARY_LINE_LAG_S = 3.0
"""How late a batch's progress line may come after the batch's end, about (a real-time replica
writes it after the boundary's stall: 0.7-2.8 s in the demo's runs, docs/design.md §5).
A fault placed ``after_boundary`` counts from the first line appended after ``at``, so it may
start up to this much earlier than ``at + after_boundary`` (never before ``at``), and later."""


def _boundary_spacing_s(raw: dict[str, Any]) -> float:
    """How far apart a replica's batch ends are, about: one real-time interval (``0s``:
    Spark's 5-s minimum), or a micro-batch trigger interval of at least the agreed batch
    interval (``batch_interval``, default :data:`DEFAULT_BATCH_INTERVAL_S`; the active modes end
    a batch per agreed group, the others about as often or more)."""
    repl = raw.get("replication") if isinstance(raw.get("replication"), dict) else {}
    assert isinstance(repl, dict)
    interval = _safe_duration(repl.get("trigger_interval")) or 0.0
    if repl.get("trigger") == REALTIME:
        return interval or RTM_MIN_BATCH_S
    agreed = _safe_duration(repl.get("batch_interval")) or DEFAULT_BATCH_INTERVAL_S
    return max(interval, agreed)


def _placed_start_s(at: float, after: float, spacing_s: float) -> tuple[float, float]:
    """When a fault placed ``after`` seconds after a boundary from ``at`` on starts, at the
    earliest and (about) the latest: ``after`` past the first boundary whose line is read from
    ``at`` on, or when that line is read if later (:mod:`arfl.faults.align`); a boundary comes
    at least every ``spacing_s`` (:func:`_boundary_spacing_s`), its line up to
    :data:`BOUNDARY_LINE_LAG_S` after it."""
    earliest = max(at, at + after - BOUNDARY_LINE_LAG_S)
    return earliest, at + spacing_s + max(after, BOUNDARY_LINE_LAG_S)


def _stacked_faults(chaos: list[Any], spacing_s: float) -> list[tuple[str, str]]:
    """Lasting faults whose windows overlap on the same thing: the first revert would lift both
    (the runner refuses the second at run time; here every such pair is named at once). What a
    fault holds mirrors the kinds' ``claims``: a partition the replica's link, or with ``from``
    the routes between the replica and each peer (both directions); the other kinds the replica.
    The replica is compared as written (``"leader"`` is not matched with an index, which the
    leader may be at run time); the runner's check at injection is the one that decides.
    A fault placed ``after_boundary`` is held from its earliest to its latest start
    (:func:`_placed_start_s`) plus its duration, and a pair that may overlap is named as such.
    """

    def index(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def span(start: float, end: float, placed: bool) -> str:
        return f"{'placed: ' if placed else ''}{start:g}s to {end:g}s"

    out: list[tuple[str, str]] = []
    seen: list[tuple[int, float, float, bool, str, set[tuple[Any, ...]]]] = []
    for i, c in enumerate(chaos):
        fault = str(c.get("fault")) if isinstance(c, dict) else ""
        if fault not in FAULTS or not FAULTS.info(fault).takes_duration:
            continue
        assert isinstance(c, dict)
        at, length = _safe_duration(c.get("at")), _safe_duration(c.get("duration"))
        target = c.get("replica")
        if at is None or length is None or not (index(target) or target == "leader"):
            continue
        after = _safe_duration(c.get("after_boundary"))
        placed = after is not None
        first, last = _placed_start_s(at, after, spacing_s) if after is not None else (at, at)
        peers = _peers(fault, c)
        held: set[tuple[Any, ...]]
        what = f"{fault} of replica {target}"
        if peers:
            held = {(fault, "route", a, b) for p in peers for a, b in ((target, p), (p, target))}
            what += f" from {list(peers)}"
        else:
            held = {(fault, target)}
        for j, start, end, theirs_placed, theirs_what, theirs in seen:
            if first < end and start < last + length and held & theirs:
                mine = (
                    f"starts between {first:g}s and {last:g}s (after a batch boundary) and "
                    if placed
                    else ""
                )
                verb = "may overlap" if placed or theirs_placed else "overlaps"
                out.append(
                    (
                        f"chaos[{i}]",
                        f"{mine}{verb} chaos[{j}] ({theirs_what}, "
                        f"{span(start, end, theirs_placed)}): faults of one kind on one replica "
                        "do not stack (the first revert would lift both); let one end before "
                        "the other starts",
                    )
                )
        seen.append((i, first, last + length, placed, what, held))
    return out


def _peers(fault: str, entry: dict[str, Any]) -> tuple[int, ...]:
    """The peers a raw ``[[chaos]]`` entry names besides its replica (its kind's
    :meth:`~arfl.params.Params.peers`; none where its own keys do not validate)."""
    own = {k: v for k, v in entry.items() if k not in CHAOS_KEYS}
    try:
        return FAULTS.info(fault).params.model_validate(own).peers()
    except ValidationError:
        return ()


def _generator_problems(steps: list[Any]) -> list[tuple[str, str]]:
    """Generators in select steps that no later window step aggregates."""
    out: list[tuple[str, str]] = []
    last_window = max(
        (i for i, s in enumerate(steps) if isinstance(s, dict) and "window" in s), default=-1
    )
    for i, s in enumerate(steps):
        select = s.get("select") if isinstance(s, dict) and i > last_window else None
        if not isinstance(select, list):
            continue
        for j, expr in enumerate(select):
            m = GENERATOR_RE.search(expr) if isinstance(expr, str) else None
            if m:
                out.append(
                    (
                        f"steps[{i}].select[{j}]",
                        f"{m.group(1)}() emits several rows per input record, and they would "
                        "share one result id (the merger keeps one of them); aggregate them in "
                        "a later window step",
                    )
                )
    return out


def network_privilege_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    chaos = raw.get("chaos") if isinstance(raw.get("chaos"), list) else []
    assert isinstance(chaos, list)

    stack = raw.get("stack") if isinstance(raw.get("stack"), dict) else {}
    spark = raw.get("spark") if isinstance(raw.get("spark"), dict) else {}
    assert isinstance(stack, dict) and isinstance(spark, dict)
    external = stack.get("kind") == "external" and spark.get("target", "local") != "docker"
    out = []
    for i, c in enumerate(chaos):
        fault = str(c.get("fault")) if isinstance(c, dict) else ""
        kind = FAULTS.info(fault) if fault in FAULTS else None
        if kind and kind.network and external:
            out.append(
                (
                    f"chaos[{i}].fault",
                    f"{fault} needs stack.kind = 'embedded': arfl starts ZooKeeper and Kafka on "
                    "the replicas' bridge, where an external stack is out of reach; use the "
                    "embedded stack or remove the fault",
                )
            )
        if kind and kind.network and os.geteuid() != 0:
            out.append(
                (
                    f"chaos[{i}].fault",
                    f"{fault} needs network namespaces (root or CAP_NET_ADMIN); "
                    "run as root or remove the fault",
                )
            )
    return out
