"""Spark's real-time mode (RTM) and coordination-free replication: what a spec may ask for, and
how many task slots each replica needs.

Two kinds of rules, both checked on the raw TOML dict (so they report with their key path even
when another section is bad) by :func:`realtime_problems`, which the spec validator calls:

* ``replication.trigger = "realtime"`` (any mode) runs only what Spark's RTM runs: no Python
  ``transform`` steps (UDFs are off RTM's operator allowlist) and a checkpoint interval of at
  least ``spark.sql.streaming.realTimeMode.minBatchDuration`` (5 s). Tumbling and sliding
  windows run (Spark >= 4.3, update output mode).
* A mode whose replicas agree on nothing at run time (``ModeInfo.coordination_free``) must not
  produce results that depend on how a replica batches its input (``docs/design.md``, DESIGN
  §2.1): a window is keyed by the partitioning key (``source.key``), so a key's records arrive
  in offset order from one partition; no ``transform`` (a Python function cannot be proven
  deterministic).

Slots: RTM runs one long task per Kafka partition for a whole batch, and a stateful query runs
its source and aggregation stages at once, so a replica needs ``partitions`` (+
``spark.sql.shuffle.partitions`` with a window) free task slots, else Spark refuses to start the
batch (``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT``) or, with just enough, serves partitions in
turns. :func:`slots_needed`, :func:`replica_master` and :func:`slots_warning` say how many, what
master gives them, and when a host is oversubscribed; :func:`plan_slots` bundles them for
``arfl validate``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arfl.registry import MODES
from arfl.units import format_duration, parse_duration

if TYPE_CHECKING:
    from arfl.configs.spec import Spec

REALTIME = "realtime"
RTM_MIN_BATCH_CONF = "spark.sql.streaming.realTimeMode.minBatchDuration"
RTM_MIN_BATCH_S = 5.0
"""Spark's default ``minBatchDuration``; ``trigger_interval = "0s"`` means this (see passive)."""
RTM_ALLOWLIST_CONF = "spark.sql.streaming.realTimeMode.allowlistCheck"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
DEFAULT_SHUFFLE_PARTITIONS = 2
"""arfl's default ``spark.sql.shuffle.partitions`` (``arfl.replica.app.spark_conf``)."""
SHUFFLE_FLUSH_CONF = "spark.shuffle.streaming.networkBufferMaxWaitTimeMs"
SHUFFLE_FLUSH_MS = 5
"""arfl's default ``spark.shuffle.streaming.networkBufferMaxWaitTimeMs`` under real-time mode
(``arfl.replica.app.spark_conf``): how long RTM's streaming-shuffle writer holds a partly
filled buffer before it sends it to the aggregation's reader. Spark's default, 50 ms, put a
windowed replica's p50 at 25-28 ms here (a record waited 0-50 ms at the shuffle);
docs/benchmarks.md "A windowed pipeline: the streaming shuffle's flush wait"."""
DEFAULT_SOURCE_KEY = "user"
TIMES = "\N{MULTIPLICATION SIGN}"
OVERSUBSCRIPTION = 4
"""Task slots per host core above which :func:`slots_warning` speaks up."""

_LOCAL_RE = re.compile(r"^local(?:\[(\d+|\*)\])?$")
_LOCAL_CLUSTER_RE = re.compile(r"^local-cluster\[(\d+),\s*(\d+),\s*(\d+)\]$")
_IDENT_RE = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s*$")
_ALIAS_RE = re.compile(r"^\s*(.+?)\s+as\s+`?([A-Za-z_][A-Za-z0-9_]*)`?\s*$", re.IGNORECASE | re.S)


# --- validation -------------------------------------------------------------------------


def realtime_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Problems of a raw spec under real-time mode and under a coordination-free mode.

    Args:
        raw: the parsed TOML document, not yet validated (bad sections are skipped).

    Returns:
        ``(key path, message)`` pairs; each message says why and what to do instead.
    """
    repl = _dict(raw.get("replication"))
    mode = repl.get("mode", "none")
    info = MODES.info(mode) if isinstance(mode, str) and mode in MODES else None
    realtime = repl.get("trigger") == REALTIME
    out: list[tuple[str, str]] = []
    if realtime:
        out += _rtm_problems(raw, repl)
    if info is not None and info.coordination_free:
        out += _coordination_free_problems(raw, mode)
    return out


def _rtm_problems(raw: dict[str, Any], repl: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    conf = _dict(_dict(raw.get("spark")).get("conf"))
    allowlist_off = str(conf.get(RTM_ALLOWLIST_CONF, "true")).lower() == "false"
    for i, step in enumerate(_list(raw.get("steps"))):
        if isinstance(step, dict) and "transform" in step and not allowlist_off:
            out.append(
                (
                    f"steps[{i}].transform",
                    "real-time mode runs only the operators on Spark's allowlist, and arfl "
                    "cannot check a Python function against it (Python and pandas UDFs and "
                    "mapInPandas are off it: Spark would refuse the query); write the step as "
                    'filter/select/window steps, or use trigger = "micro-batch" (if it uses '
                    f'only JVM functions, [spark.conf] "{RTM_ALLOWLIST_CONF}" = "false" lets '
                    "it through at your own risk)",
                )
            )
    interval = repl.get("trigger_interval")
    seconds = _duration(interval)
    minimum = _min_batch_s(conf)
    if seconds is not None and 0 < seconds < minimum:
        out.append(
            (
                "replication.trigger_interval",
                f"{interval} is below real-time mode's minimum of {format_duration(minimum)} "
                f"({RTM_MIN_BATCH_CONF}; Spark refuses the query): in real-time mode the "
                "interval is how often a long batch ends and checkpoints, not a latency (records "
                f'are emitted as they arrive); use at least "{format_duration(minimum)}", or '
                '"0s" for arfl\'s default (5s)',
            )
        )
    if any(isinstance(s, dict) and "window" in s for s in _list(raw.get("steps"))):
        shuffle = conf.get(SHUFFLE_PARTITIONS_CONF)
        if shuffle is not None and _positive_int(shuffle) is None:
            out.append(
                (
                    f'spark.conf."{SHUFFLE_PARTITIONS_CONF}"',
                    f"expected a positive whole number, got {shuffle!r}: real-time mode needs "
                    "one task slot per shuffle partition, so arfl must know how many",
                )
            )
    return out


def _coordination_free_problems(raw: dict[str, Any], mode: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    source_key = _dict(raw.get("source")).get("key", DEFAULT_SOURCE_KEY)
    steps = _list(raw.get("steps"))
    trigger = _dict(raw.get("replication")).get("trigger", "micro-batch")
    coordinated = [m for m in MODES.names() if MODES.info(m).agreed_batches]
    instead = ""
    if coordinated:
        instead = " or use mode " + " / ".join(f"'{m}'" for m in coordinated)
        if not all(trigger in MODES.info(m).triggers for m in coordinated):
            instead += ' with trigger = "micro-batch"'
        instead += " (shared batch boundaries)"
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        if "transform" in step:
            out.append(
                (
                    f"steps[{i}].transform",
                    f"mode {mode!r} replicas agree on nothing, so each result must come out the "
                    "same however a replica batches its input, and arfl cannot prove a Python "
                    "function deterministic; write it as filter/select/window steps," + instead,
                )
            )
        window = step.get("window")
        if isinstance(window, dict):
            out += _disorder_problems(raw, window, i, mode, instead)
        key = window.get("key") if isinstance(window, dict) else None
        if not isinstance(key, str) or not isinstance(source_key, str):
            continue
        carriers = _key_columns(steps[:i], source_key)
        if key.casefold() in carriers:
            continue
        if key.casefold() == source_key.casefold():
            what = (
                f"the partitioning key {key!r} (source.key) is dropped or redefined by an "
                "earlier select step"
            )
            fix = f"keep {source_key!r} as it is (or renamed: '{source_key} AS k')"
        else:
            what = f"{key!r} is not the partitioning key (source.key = {source_key!r})"
            fix = f"aggregate by {source_key!r}"
        out.append(
            (
                f"steps[{i}].window.key",
                f"{what}: a key's records would come from several partitions, so its running "
                "values and late drops depend on how each replica batches them, and "
                f"mode {mode!r} replicas agree on no batches; {fix}," + instead,
            )
        )
    return out


def _disorder_problems(
    raw: dict[str, Any], window: dict[str, Any], i: int, mode: str, instead: str
) -> list[tuple[str, str]]:
    """A window whose watermark delay is below the workload's declared disorder: whether an
    out-of-order row is dropped depends on which earlier batch moved the watermark."""
    disorder = _duration(_dict(raw.get("workload")).get("disorder"))
    delay = _duration(window.get("watermark", "0s"))
    if disorder is None or delay is None or disorder <= delay:
        return []
    return [
        (
            f"steps[{i}].window.watermark",
            f"{format_duration(delay)} is below workload.disorder "
            f"({format_duration(disorder)}): a row up to {format_duration(disorder)} out of "
            "order is dropped or kept depending on which earlier batch advanced the watermark, "
            f"and mode {mode!r} replicas agree on no batches; set watermark >= disorder," + instead,
        )
    ]


def _key_columns(steps: list[Any], source_key: str) -> set[str]:
    """Names (case-folded) that still hold the partitioning key after ``steps``.

    A select keeps the key under its name (``"user"``, ``"*"``) or a plain rename
    (``"user AS u"``); anything else computed from it (``"lower(user) AS user"``) may merge keys
    of several partitions, so it no longer counts. Steps other than select keep every column.
    """
    names = {source_key.casefold()}
    for step in steps:
        select = step.get("select") if isinstance(step, dict) else None
        if not isinstance(select, list):
            continue
        kept: set[str] = set()
        redefined: set[str] = set()
        star = False
        for expr in select:
            if not isinstance(expr, str):
                continue
            if expr.strip() == "*":
                star = True
                continue
            alias = _ALIAS_RE.match(expr)
            source, name = (alias.group(1), alias.group(2)) if alias else (expr, None)
            ident = _IDENT_RE.match(source)
            from_key = ident is not None and ident.group(1).casefold() in names
            out_name = (name or (ident.group(1) if ident else "")).casefold()
            if from_key and out_name:
                kept.add(out_name)
            elif out_name:
                redefined.add(out_name)
        if star:
            kept |= names - redefined
        # A name both kept and computed is ambiguous in Spark: it counts as redefined.
        names = kept - redefined
    return names


def _min_batch_s(conf: dict[str, Any]) -> float:
    """RTM's minimum batch duration: the spec's Spark conf (ms, or with a unit) or 5 s."""
    value = conf.get(RTM_MIN_BATCH_CONF)
    if isinstance(value, int) and not isinstance(value, bool):
        return value / 1000
    if isinstance(value, str):
        if value.strip().isdigit():
            return int(value) / 1000
        seconds = _duration(value)
        if seconds is not None:
            return seconds
    return RTM_MIN_BATCH_S


# --- slots ------------------------------------------------------------------------------


def host_cores() -> int:
    """Cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def declared_slots(master: str) -> int | None:
    """Task slots a master declares: ``local[N]`` N, ``local`` 1, ``local[*]`` the host's cores,
    ``local-cluster[w,c,m]`` w * c; None for a cluster (``spark://``), whose slots are the
    cluster's business."""
    m = _LOCAL_RE.match(master)
    if m:
        n = m.group(1)
        return 1 if n is None else host_cores() if n == "*" else int(n)
    m = _LOCAL_CLUSTER_RE.match(master)
    if m:
        return int(m.group(1)) * int(m.group(2))
    return None


def shuffle_partitions(spec: Spec) -> int:
    """``spark.sql.shuffle.partitions`` of a replica: the spec's, else arfl's default (2)."""
    value = spec.spark.conf.get(SHUFFLE_PARTITIONS_CONF)
    return (
        _positive_int(value) or DEFAULT_SHUFFLE_PARTITIONS
        if value is not None
        else DEFAULT_SHUFFLE_PARTITIONS
    )


def slots_needed(spec: Spec, master: str | None = None) -> int:
    """Task slots one replica needs.

    Real-time mode: one per input partition, plus one per shuffle partition when the pipeline
    has a window (source and aggregation stages run at once). Micro-batch: what the master
    declares (any number works; tasks wait their turn), 1 for a cluster master.

    Args:
        spec: a validated spec.
        master: the master replicas actually use, if not ``spec.spark.master``.
    """
    if spec.replication.trigger == REALTIME:
        return spec.source.partitions + (shuffle_partitions(spec) if spec.has_window else 0)
    return declared_slots(master or spec.spark.master) or 1


def replica_master(spec: Spec, master: str | None = None) -> tuple[str, str | None]:
    """The master each replica should ask for, and a one-line note when it is not the spec's.

    Under real-time mode a ``local-cluster[w,c,m]`` or ``local[N]`` master with fewer task slots
    than :func:`slots_needed` becomes ``local-cluster[1,<needed>,m]`` or ``local[<needed>]``
    (slots are threads: RTM tasks mostly wait on Kafka, so more slots than cores is fine). A
    cluster master is kept, with a note, since arfl cannot see its free slots.

    Args:
        spec: a validated spec.
        master: the master replicas would use, if not ``spec.spark.master`` (``--master``).

    Returns:
        ``(master, note)``; ``note`` is None when nothing needs saying.
    """
    master = master or spec.spark.master
    if spec.replication.trigger != REALTIME:
        return master, None
    need = slots_needed(spec, master)
    why = _need_text(spec)
    have = declared_slots(master)
    if have is None:
        return master, (
            f"{master}: task slots unknown here; real-time mode needs {need} free per replica "
            f"({why}), else Spark refuses each batch (CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT)"
        )
    if have >= need:
        return master, None
    lc = _LOCAL_CLUSTER_RE.match(master)
    chosen = f"local-cluster[1,{need},{lc.group(3)}]" if lc else f"local[{need}]"
    return chosen, (
        f"{master} has {_count(have, 'task slot')}, but real-time mode runs a long task for "
        f"every partition at once and needs {need} ({why}): each replica asks for {chosen}"
    )


def slots_warning(spec: Spec, cores: int, master: str | None = None) -> str | None:
    """A warning when all replicas' task slots exceed 4 per host core, else None.

    Only for masters whose executors run on this host (``local``, ``local-cluster``).

    Args:
        spec: a validated spec.
        cores: the host's cores (:func:`host_cores`).
        master: the master replicas would use, if not ``spec.spark.master``.
    """
    chosen, _ = replica_master(spec, master)
    slots = declared_slots(chosen)
    if slots is None:
        return None
    replicas = spec.replication.replicas
    total = replicas * slots
    if total <= OVERSUBSCRIPTION * cores:
        return None
    why = (
        "RTM tasks mostly wait on Kafka; above that they compete for CPU and latency suffers"
        if spec.replication.trigger == REALTIME
        else "above that tasks compete for CPU and batches slow down"
    )
    return (
        f"{_count(replicas, 'replica')} {TIMES} {_count(slots, 'task slot')} = {total} on "
        f"{_count(cores, 'core')}, more than {OVERSUBSCRIPTION} per core: {why}; use fewer "
        "partitions or replicas, or a bigger host"
    )


@dataclass(frozen=True)
class SlotPlan:
    """What a spec asks of the host: per replica a master and its task slots.

    Attributes:
        replicas: how many replicas run.
        master: the master each replica asks for (see :func:`replica_master`).
        realtime: the replicas run Spark's real-time mode.
        partitions: input partitions.
        shuffle_partitions: shuffle partitions that need slots (0 unless RTM with a window).
        slots: task slots each replica needs (RTM) or gets (micro-batch; None on a cluster).
        host_cores: the host's cores.
        note: why ``master`` differs from the spec's, or what arfl cannot check.
        warning: the host is oversubscribed (see :func:`slots_warning`).
        standby: standby drivers (``replication.standby``), each with the replicas' master;
            idle until one takes a replica over, so not counted against the cores.
    """

    replicas: int
    master: str
    realtime: bool
    partitions: int
    shuffle_partitions: int
    slots: int | None
    host_cores: int
    note: str | None
    warning: str | None
    standby: int = 0

    def describe(self) -> str:
        """One line: ``2 replicas x local-cluster[1,4,1024] (RTM: 2 partitions + 2 shuffle
        partitions = 4 task slots each) on 2 cores``."""
        if self.realtime:
            parts = _count(self.partitions, "partition")
            if self.shuffle_partitions:
                parts += f" + {_count(self.shuffle_partitions, 'shuffle partition')}"
            what = f"RTM: {parts} = {_count(self.slots or 0, 'task slot')} each"
        elif self.slots is None:
            what = "micro-batch: the cluster's task slots"
        else:
            what = f"micro-batch: {_count(self.slots, 'task slot')} each"
        spare = f" + {self.standby} standby" if self.standby else ""
        return (
            f"{_count(self.replicas, 'replica')}{spare} {TIMES} {self.master} ({what}) on "
            f"{_count(self.host_cores, 'core')}"
        )


def plan_slots(spec: Spec, cores: int, master: str | None = None) -> SlotPlan:
    """What ``spec`` will ask for on a host with ``cores`` cores (see :class:`SlotPlan`)."""
    realtime = spec.replication.trigger == REALTIME
    chosen, note = replica_master(spec, master)
    return SlotPlan(
        replicas=spec.replication.replicas,
        master=chosen,
        realtime=realtime,
        partitions=spec.source.partitions,
        shuffle_partitions=shuffle_partitions(spec) if realtime and spec.has_window else 0,
        slots=slots_needed(spec, chosen) if realtime else declared_slots(chosen),
        host_cores=cores,
        note=note,
        warning=slots_warning(spec, cores, master),
        standby=spec.replication.standby,
    )


# --- helpers ----------------------------------------------------------------------------


def _need_text(spec: Spec) -> str:
    text = _count(spec.source.partitions, "partition")
    if spec.has_window:
        text += f" + {_count(shuffle_partitions(spec), 'shuffle partition')}"
    return text


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _duration(v: Any) -> float | None:
    try:
        return parse_duration(v)
    except ValueError:
        return None


def _positive_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v > 0 else None
    if isinstance(v, str) and v.strip().isdigit() and int(v) > 0:
        return int(v)
    return None
