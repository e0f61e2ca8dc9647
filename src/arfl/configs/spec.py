"""The experiment spec: typed models of a TOML file.

The models check each section on its own; :mod:`arfl.configs.load` reads a file, runs the checks
across sections (:mod:`arfl.configs.checks`) and reports every problem at once with its key
path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from arfl.configs.chaos import Chaos
from arfl.configs.defaults import MERGER_FETCH_WAIT_MS, MERGER_LINGER_MS
from arfl.configs.kafka_options import KafkaOptions, keeps_partition_order
from arfl.configs.masking import MASKING_INTERVAL_S, MAX_STANDBY, STATELESS_INTERVAL_S
from arfl.configs.realtime import RTM_MIN_BATCH_S
from arfl.configs.replay import Replay
from arfl.configs.window_start import window_start_blocker as _window_start_blocker
from arfl.configs.workload import LingerDuration, Workload
from arfl.params import Duration
from arfl.registry import MODES, UnknownKind
from arfl.units import format_duration

if TYPE_CHECKING:
    from pydantic.config import JsonDict

    from arfl.configs.masking import Chosen

MODE_OPTIONS = frozenset({"heartbeat_interval", "session_timeout", "batch_interval", "catch_up"})
"""``[replication]`` keys that only some modes take (each mode lists its own in ``ModeInfo``)."""
AGG_FUNCTIONS = ("count", "sum", "avg", "min", "max")
DEFAULT_HEARTBEAT_INTERVAL_S = 0.5
"""active-leaderless: the epoch length when ``replication.heartbeat_interval`` is not given."""
DEFAULT_BATCH_INTERVAL_S = 2.0
"""active-leader/-leaderless: ``replication.batch_interval`` when not given (but see
:data:`DEFAULT_STATELESS_BATCH_INTERVAL_S`): above the 1-2 s a micro-batch takes on this kind
of machine (docs/benchmarks.md), so replicas keep up with the agreed batches."""
DEFAULT_STATELESS_BATCH_INTERVAL_S = 0.5
"""The same for filter/select pipelines whose replicas merge ready agreed batches: read by the
JVM reader their batches take ~0.25 s here, so 500-ms agreed batches keep up, and a replica
that does not merges instead of falling behind; a result waits half as long for its batch to
close (docs/benchmarks.md "The JVM reader": p50 0.59x of 1 s at 1,000 ev/s; with the Python
reader 500 ms and 1 s were within the noise, "Shorter agreed batches"). Not windows: a windowed
batch takes ~1.2 s here, and with 1-s agreed batches the replicas ran behind, merging, at
1.2-1.4x the p50 of 2 s."""

# Spark SQL functions whose result depends on when or where a row is processed: replicas
# would disagree, so deduplication by result id would keep arbitrary copies.
NON_DETERMINISTIC = (
    "rand",
    "randn",
    "random",
    "uuid",
    "shuffle",
    "current_timestamp",
    "current_date",
    "current_time",
    "now",
    "localtimestamp",
    "unix_timestamp",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "first",
    "last",
    "collect_list",
    "collect_set",
)
# Generators that may turn one row into several: rows from one input record would share its
# result id (or, after a window, the window's), so the merger would keep one of them.
# json_tuple is a generator too, but emits exactly one row.
ROW_GENERATORS = (
    "explode",
    "explode_outer",
    "posexplode",
    "posexplode_outer",
    "inline",
    "inline_outer",
    "stack",
    "variant_explode",
    "variant_explode_outer",
)
GENERATOR_RE = re.compile(r"\b(" + "|".join(ROW_GENERATORS) + r")\s*\(", re.IGNORECASE)
_NONDET_RE = re.compile(r"\b(" + "|".join(NON_DETERMINISTIC) + r")\s*\(", re.IGNORECASE)
_AGG_RE = re.compile(
    r"^\s*(count|sum|avg|min|max)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.IGNORECASE
)
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOSTPORT_RE = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}(,[A-Za-z0-9.-]+:\d{1,5})*$")
_MASTER_RE = re.compile(
    r"^(local(\[(\d+|\*)\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|spark://[A-Za-z0-9.-]+:\d+)$"
)
SUPPORTED_MASTERS = "local[N], local-cluster[workers,cores,memMB] and spark://host:port"
"""The Spark masters arfl runs replicas on (``local`` and ``local[*]`` are ``local[N]`` forms)."""
_TOPIC_RULE: JsonDict = {"constraint": "letters, digits, '.', '_', '-'; at most 249 characters"}
_HOSTPORT_RULE: JsonDict = {"constraint": 'host:port[,host:port...]; only with kind = "external"'}
_DETERMINISTIC_RULE: JsonDict = {
    "constraint": "no function whose result differs between replicas (rand(), uuid(), now(), "
    "first(), collect_list(), ...)"
}


def check_master(master: str) -> str:
    """``master`` if arfl can run replicas on it.

    Raises:
        ValueError: another master (Kubernetes, YARN, a typo), naming the supported ones.
    """
    if _MASTER_RE.match(master):
        return master
    what = (
        f"master {master!r} is not supported"
        if master.startswith("k8s://")
        else f"unknown master {master!r}"
    )
    raise ValueError(f"{what}: only {SUPPORTED_MASTERS} are supported")


def _check_deterministic(expr: str) -> str:
    m = _NONDET_RE.search(expr)
    if m:
        raise ValueError(
            f"{m.group(1)}() is not deterministic: replicas would produce different results; "
            "derive the value from the event's fields instead"
        )
    return expr


def _check_topic(v: str) -> str:
    if not _TOPIC_RE.match(v):
        raise ValueError(f"bad topic name {v!r}: use letters, digits, '.', '_' or '-'")
    return v


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Source(_Model):
    """The input topic; records are JSON objects."""

    topic: str = Field(json_schema_extra=_TOPIC_RULE)
    """The input topic."""
    partitions: int = Field(4, ge=1, le=1024)
    """The input topic's partitions (arfl creates the topic)."""
    event_time: str | None = None
    """Field holding the event time in epoch milliseconds (needed by window steps)."""
    key: str = "user"
    """Field used as the Kafka record key by the injector."""
    replay: Replay | None = None
    """``[source.replay]``: replay an existing topic instead of generating (see
    :mod:`arfl.configs.replay`)."""
    options: KafkaOptions = Field(default_factory=dict)
    """Consumer settings of Spark's Kafka source in the replicas (``kafka.*`` keys, e.g.
    ``kafka.fetch.max.wait.ms``); not for the agreed-batch modes, whose own source reads."""

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        return _check_topic(v)


class Window(_Model):
    """Keyed event-time window aggregation (tumbling, or sliding with ``slide``)."""

    size: Duration = Field(json_schema_extra={"constraint": "> 0"})
    """The window's length."""
    slide: Duration | None = Field(None, json_schema_extra={"constraint": "> 0, at most size"})
    """How far apart sliding windows start; unset: tumbling windows."""
    key: str
    """The column the aggregates are grouped by (mode ``active``: ``source.key``)."""
    watermark: Duration = 0.0
    """How far behind the latest event time a row may come and still count; later rows are
    dropped."""
    agg: dict[str, str] = Field(
        min_length=1,
        json_schema_extra={
            "constraint": ", ".join(f + "(column)" for f in AGG_FUNCTIONS) + " or count(*)"
        },
    )
    """The result columns by name, each an aggregate of the window's rows."""

    @field_validator("agg")
    @classmethod
    def _agg(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [f"{name} = {expr!r}" for name, expr in v.items() if not _AGG_RE.match(expr)]
        if bad:
            raise ValueError(
                f"unsupported aggregate {', '.join(bad)}: use one of "
                f"{', '.join(f + '(col)' for f in AGG_FUNCTIONS)} or count(*)"
            )
        return v

    @model_validator(mode="after")
    def _slide(self) -> Window:
        if self.size <= 0:
            raise ValueError("size must be positive")
        if self.slide is not None and not 0 < self.slide <= self.size:
            raise ValueError("slide must be positive and at most size")
        return self


class Step(_Model):
    """One pipeline step: exactly one of ``filter``, ``select``, ``window``, ``transform``."""

    filter: Annotated[str, BeforeValidator(_check_deterministic)] | None = Field(
        None, json_schema_extra=_DETERMINISTIC_RULE
    )
    """A Spark SQL condition: the rows for which it is not true are dropped."""
    select: list[Annotated[str, BeforeValidator(_check_deterministic)]] | None = Field(
        None, json_schema_extra=_DETERMINISTIC_RULE
    )
    """Spark SQL expressions, one per output column (``expr AS name`` names one)."""
    window: Window | None = None
    transform: str | None = Field(
        None,
        json_schema_extra={"constraint": "not under real-time mode nor in mode active"},
    )
    """``"module:function"``: a DataFrame -> DataFrame function for what steps cannot say."""

    @field_validator("transform")
    @classmethod
    def _transform(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", v):
            raise ValueError(f"expected 'module:function', got {v!r}")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> Step:
        given = [k for k in ("filter", "select", "window", "transform") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "a step has exactly one of filter, select, window, transform "
                f"(got {', '.join(given) or 'none'})"
            )
        return self

    @property
    def kind(self) -> str:
        """The step's kind name."""
        for k in ("filter", "select", "window", "transform"):
            if getattr(self, k):
                return k
        raise AssertionError("validated step without a kind")


class Sink(_Model):
    """The final output topic (written by the merger)."""

    topic: str = Field(json_schema_extra=_TOPIC_RULE)
    """The final output topic, which the merger writes."""
    options: KafkaOptions = Field(default_factory=dict)
    """Producer settings of the replicas' Kafka sink (``kafka.*`` keys, e.g.
    ``kafka.linger.ms``)."""

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        return _check_topic(v)

    @field_validator("options")
    @classmethod
    def _ordered(
        cls, v: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        return keeps_partition_order(v)


class Replication(_Model):
    """How many replicas run and how they agree.

    ``mode`` is a name registered in :data:`arfl.registry.MODES`.
    """

    mode: str = "none"
    """The replication mode: how many replicas run and what they agree on."""
    replicas: int = Field(1, ge=1, le=16)
    """How many replicas run (as many as the mode allows)."""
    heartbeat_interval: Duration | None = Field(
        None,
        description="active-leaderless: the epoch, the step its batch boundaries fall on; "
        f"unset: {format_duration(DEFAULT_HEARTBEAT_INTERVAL_S)}.",
    )
    batch_interval: Duration | None = Field(
        None,
        description="active-leader/-leaderless: the length of an agreed batch (active-"
        "leaderless: a multiple of heartbeat_interval); unset: "
        f"{format_duration(DEFAULT_STATELESS_BATCH_INTERVAL_S)} for filter/select pipelines, "
        f"else {format_duration(DEFAULT_BATCH_INTERVAL_S)}.",
        json_schema_extra={"constraint": "> 0"},
    )
    """active-leader: the leader decides one batch per interval; active-leaderless: the length
    of one batch's aligned group of epochs (a multiple of ``heartbeat_interval``)."""
    session_timeout: Duration | None = None
    """active-leader: the ZooKeeper session timeout of a replica in the leader election (how
    soon a dead leader is replaced); unset: 2s."""
    catch_up: Literal["auto", "aligned"] = Field(
        "auto",
        description="active-leader/-leaderless: how a replica that fell behind catches up: "
        "aligned = one agreed batch per Spark batch; auto = the ready agreed batches as one "
        "when every step is a filter, select or window (no result depends on the grouping).",
    )
    """active-leader/-leaderless: how a replica that fell behind catches up. ``aligned``: it
    runs the same agreed batches as the others, one per Spark batch (only faster). ``auto``
    (default): the same, unless every step is a filter, select or window: then it runs the
    agreed batches that are ready as one Spark batch, up to ``max_records_per_batch`` — no
    result can depend on the grouping (a window's late rows are dropped per agreed batch by
    the source), and the per-batch cost is paid once (:attr:`Spec.merges_agreed_batches`)."""
    max_records_per_batch: int = Field(100_000, ge=1)
    """The most input records one batch reads (Spark's ``maxOffsetsPerTrigger``, the cap of an
    agreed or merged batch); not under real-time mode."""
    reader: Literal["jvm", "python"] = Field(
        "jvm",
        description="active-leader/-leaderless: who reads an agreed batch on the executors: jvm "
        "= arfl's JVM reader; python = arfl's Python data source (the same batches either "
        "way).",
    )
    """active-leader/-leaderless: who reads an agreed batch on the executors. ``jvm``: arfl's
    JVM reader (Kafka's Java client in the executor, no Python worker on the data path);
    ``python``: arfl's Python data source (a Python worker per read task). Both cut the same
    batches: the boundaries are decided by the same policy in the driver's Python process. The
    JVM reader's batches took 0.7x the time at 1,000 ev/s (docs/benchmarks.md "The JVM
    reader")."""
    trigger: Literal["micro-batch", "realtime"] = "micro-batch"
    """How Spark runs a replica's query: in micro-batches, or in Spark's real-time mode."""
    trigger_interval: Duration = Field(
        0.0,
        description="micro-batch: how often a batch starts (0s: as soon as the last ends); "
        "real-time: how often a long batch ends and checkpoints (0s: "
        f"{format_duration(RTM_MIN_BATCH_S)}, Spark's minimum); mode active on real-time "
        f"without it: {format_duration(STATELESS_INTERVAL_S)} for a filter/select pipeline, "
        f"else {format_duration(MASKING_INTERVAL_S)}.",
        json_schema_extra={"constraint": f"real-time: 0s or >= {format_duration(RTM_MIN_BATCH_S)}"},
    )
    stagger: bool = Field(
        True,
        description="active on real-time mode: keep the replicas' batch boundaries "
        "trigger_interval / replicas apart; false: start them together.",
    )
    """``active`` on real-time mode: keep the replicas' batch boundaries ``interval / R`` apart
    (a start delay, then :mod:`arfl.replica.phase`); false starts them together and lets them
    drift (for comparison)."""
    restart: bool = True
    """Restart a replica whose driver died (from its checkpoint where it has one)."""
    resume: Literal["auto", "checkpoint", "output", "peer", "window"] = Field(
        "auto",
        description="Where a restarted replica starts reading: checkpoint = its own "
        "checkpoint; peer = the freshest committed checkpoint of any replica (active); output "
        "= a fresh checkpoint at the output frontier, no replay (active, filter/select steps); "
        "window = a fresh checkpoint at a recent window's first events (active, one tumbling "
        "window on generated input); auto = output, else window where allowed, else peer in "
        "active, else checkpoint.",
    )
    """Where a restarted replica starts reading. ``checkpoint``: from its own checkpoint (it
    replays what it read since its last batch end; the merger drops the copies). ``peer``: from
    the freshest committed checkpoint of any replica, its own or a copy of another's
    (:mod:`arfl.orchestrate.checkpoints`): only ``active``, whose state after a given input
    prefix is the same in every replica; with staggered real-time boundaries it replays at most
    about interval / R instead of up to an interval. ``output``: from the output frontier, a
    fresh checkpoint at the input offsets below which every result is already delivered
    (:mod:`arfl.measure.frontier`), so it is caught up within about a second instead of
    replaying an interval: only ``active`` with a stateless pipeline (filter and select steps),
    whose results depend on one record each. ``window``: a fresh checkpoint at every partition's
    first event of a recent window boundary (:mod:`arfl.configs.window_start`), replaying about a
    window: only ``active`` with one tumbling window on generated input. ``auto`` (default):
    ``output`` where allowed, else ``window``, else ``peer`` for ``active``, else ``checkpoint``
    (:attr:`Spec.resumes_from_output`, :attr:`Spec.resumes_from_window_start`,
    :attr:`Spec.resumes_from_peer`)."""
    standby: int = Field(
        0,
        ge=0,
        le=MAX_STANDBY,
        description="Spare drivers kept warm at low CPU priority: a dead replica's driver is "
        "replaced by one at once instead of by a new Spark application; mode active on "
        "real-time without it: 1 where a standby can run, or one per kill when kills come "
        "less than 80 s apart (a used spare's successor is warm only ~65-75 s later).",
        json_schema_extra={
            "constraint": "only with a local master, the local target, restart = true and no "
            "network fault"
        },
    )
    """Spare drivers kept warm (Spark session up, executors warmed, on real-time mode the
    pipeline rehearsed once, at low CPU priority): a
    replica whose driver died is restarted by promoting one, which starts the replica's query
    at once instead of a new Spark application (~25-45 s here); a new spare follows later
    (:mod:`arfl.orchestrate.supervisor`). Local masters, no network faults."""
    standby_yield: bool = Field(
        True,
        description="A promoted standby keeps its low CPU priority until it has caught up, "
        "10 s at most (only a replica resuming at the output frontier); false: full priority "
        "at once.",
    )
    """A promoted standby keeps its low CPU priority until the merger sees it caught up, for
    10 s at most (the surviving replicas keep the CPU while it starts its query and catches up;
    a saturated host would starve it longer); false: full priority at once. Only for a
    replica that resumes at the output frontier (:attr:`Spec.resumes_from_output`, once the
    merger has one for every input partition): one that replays from a checkpoint (a window,
    a transform, ``resume = "checkpoint"`` or ``"peer"``, a mode other than ``active``, a kill
    before the first frontier) covers no one until it is done, and at low priority it barely
    replays (a windowed newcomer was still ~10 s behind after 10 s; docs/benchmarks.md)."""

    @model_validator(mode="after")
    def _aligned(self) -> Replication:
        if self.batch_interval is not None and self.batch_interval <= 0:
            raise ValueError("batch_interval must be positive")
        check = MODES.info(self.mode).check if self.mode in MODES else None
        for _, message in check(self) if check else []:
            raise ValueError(message)  # the mode's own rules (ModeInfo.check)
        return self

    @field_validator("mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        try:
            MODES.entry(v)
        except UnknownKind:
            raise ValueError(f"unknown {v!r} (known: {', '.join(MODES.names())})") from None
        return v


ASYNC_PROGRESS_KEY = "arfl.asyncProgressTracking"
"""``[spark.conf]`` key read by arfl, not passed to Spark: Spark's asynchronous progress
tracking on (``true``) or off (``false``) for a stateless micro-batch query, the only kind Spark
allows it for; default on in every mode but ``passive``. Read by ``replica/app.async_progress``."""
REHEARSAL_KEY = "arfl.standbyRehearsal"
"""``[spark.conf]`` key read by arfl, not passed to Spark: a real-time standby runs the pipeline
once while it waits (``true``, the default) or not (``false``). Read by
``replica/standby.rehearse``."""
REHEARSAL_INPUT_KEY = "arfl.rehearsalInput"
"""``[spark.conf]`` key read by arfl, not passed to Spark: a real-time standby's rehearsal
processes a few input-shaped records of its own (``true``, the default) or reads the input
topic's empty end (``false``, and always with ``[source.replay]``)."""
BUILD_AHEAD_KEY = "arfl.standbyBuildAhead"
"""``[spark.conf]`` key read by arfl, not passed to Spark: a standby builds each replica's
pipeline while it waits (``true``, the default), so that a take-over resuming from a checkpoint
only adds the sink and starts the query; ``false``: it does not. Read by
``replica/standby.build_ahead``."""
ARFL_CONF_KEYS = frozenset(
    {ASYNC_PROGRESS_KEY, REHEARSAL_KEY, REHEARSAL_INPUT_KEY, BUILD_AHEAD_KEY}
)
"""The ``arfl.*`` keys of ``[spark.conf]``: arfl reads them and Spark never sees them."""


class Spark(_Model):
    """Where replicas run."""

    master: str = Field(
        "local-cluster[1,1,1024]", json_schema_extra={"constraint": SUPPORTED_MASTERS}
    )
    """The Spark master each replica's application runs on."""
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Spark settings for every replica; the ``arfl.*`` keys are arfl's own."""
    driver_memory: str = "512m"
    """Each replica driver's memory (``spark.driver.memory``)."""
    target: Literal["local", "docker"] = Field(
        "local",
        description="Where a replica's driver runs: local = a process on this host; docker = "
        "a container of its own on a docker network arfl creates.",
    )
    """``local``: each replica's driver is a process on this host; ``docker``: in a container
    of its own on a docker network arfl creates (see :mod:`arfl.targets.docker`)."""

    @field_validator("master")
    @classmethod
    def _master(cls, v: str) -> str:
        return check_master(v)

    def flag(self, key: str, default: bool) -> bool:
        """An ``arfl.*`` boolean of ``conf`` (:data:`ARFL_CONF_KEYS`, checked to be true or
        false), ``default`` when unset."""
        return str(self.conf.get(key, default)).lower() == "true"

    @field_validator("conf")
    @classmethod
    def _conf(cls, v: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        problems = [
            f"unknown arfl key {k!r} (arfl reads only {', '.join(sorted(ARFL_CONF_KEYS))}; "
            "every other key goes to Spark as it is)"
            for k in v
            if k.startswith("arfl.") and k not in ARFL_CONF_KEYS
        ]
        for key in sorted(ARFL_CONF_KEYS):
            flag = v.get(key)
            if flag is not None and str(flag).lower() not in ("true", "false"):
                problems.append(f"{key} must be true or false, got {flag!r}")
        if problems:
            raise ValueError("; ".join(problems))
        return v


class Docker(_Model):
    """The docker target's options (``[docker]``; only read when ``spark.target = "docker"``)."""

    image: str | None = None
    """An image present on the docker host with Java 17, Python 3.11 and arfl at the same
    paths as here (see the Dockerfile); unset: arfl's local runtime image (host directories
    bind-mounted read-only), built on first use."""


class Stack(_Model):
    """ZooKeeper and Kafka: started by arfl (embedded) or already running (external)."""

    kind: Literal["embedded", "external"] = "embedded"
    """embedded: arfl starts ZooKeeper and Kafka; external: they run at ``kafka`` and
    ``zookeeper``."""
    kafka: str | None = Field(None, json_schema_extra=_HOSTPORT_RULE)
    """The external Kafka's bootstrap servers (required with kind = "external")."""
    zookeeper: str | None = Field(None, json_schema_extra=_HOSTPORT_RULE)
    """The external ZooKeeper (active-leader's election)."""

    @field_validator("kafka", "zookeeper")
    @classmethod
    def _hostport(cls, v: str | None) -> str | None:
        if v is not None and not _HOSTPORT_RE.match(v):
            raise ValueError(f"expected host:port[,host:port...], got {v!r}")
        return v

    @model_validator(mode="after")
    def _external(self) -> Stack:
        if self.kind == "external" and not self.kafka:
            raise ValueError("kind = 'external' needs kafka = \"host:port\"")
        if self.kind == "embedded" and (self.kafka or self.zookeeper):
            raise ValueError("kafka/zookeeper addresses are only for kind = 'external'")
        return self


class Report(_Model):
    """Percentiles shown and SLOs checked."""

    percentiles: list[float] = Field(
        default_factory=lambda: [50.0, 90.0, 99.0, 99.9],
        json_schema_extra={"constraint": "each in (0, 100]"},
    )
    """The latency percentiles the report shows."""
    slo: dict[str, str | bool | float | int] = Field(default_factory=dict)
    """Objectives the run is checked against; ``arfl report`` exits 1 when one is breached."""
    tolerance: float = Field(1.10, ge=1.0)
    """How far above the steady state the output may go and still count as masked or
    recovered: a factor on the steady state's p99 and longest gap."""
    settle: Duration = 5.0
    """How long the output (and a faulted replica) must stay good to count as recovered."""

    @field_validator("percentiles")
    @classmethod
    def _pcts(cls, v: list[float]) -> list[float]:
        bad = [p for p in v if not 0 < p <= 100]
        if bad:
            raise ValueError(f"percentiles must be in (0, 100], got {bad}")
        return sorted(v)


MAX_FETCH_WAIT_MS = 59_000
"""``[merger] fetch_wait`` at most: librdkafka warns (and its fetches time out) unless
``fetch.wait.max.ms`` is at least 1 s below ``socket.timeout.ms`` (60 s by default)."""


class Merger(_Model):
    """arfl's merger: reads every replica's topic, writes the first copy of each result to
    ``sink.topic`` and measures the latency. Its Kafka clients' latency settings."""

    fetch_wait: Duration = Field(
        MERGER_FETCH_WAIT_MS / 1000,
        json_schema_extra={
            "constraint": f"whole milliseconds, 0ms to {format_duration(MAX_FETCH_WAIT_MS / 1000)}"
        },
    )
    """Its consumer's ``fetch.wait.max.ms``: how long the broker may hold a fetch that found no
    new record (a whole number of milliseconds, below the consumer's 60-s socket timeout by at
    least a second, as librdkafka asks)."""
    linger: LingerDuration = MERGER_LINGER_MS / 1000
    """Its producer's ``linger.ms`` on the final topic (after the latency is measured)."""
    standby: int = Field(default=0, ge=0, le=1)
    """Standby mergers (0 or 1): one follows the replica topics and the final topic, writes
    nothing, and takes over when the serving merger dies or its lease runs out; the final topic
    is then written in Kafka transactions, whose producer epoch fences the old merger
    (docs/design.md, "A standby merger")."""
    lease: Duration = Field(1.0, json_schema_extra={"constraint": "50ms to 60s"})
    """How late a result the serving merger owes may be before the standby takes over (it
    kills the serving merger first): the longest pause of the serving merger that is waited
    out. Counted while the broker goes on appending the replicas' copies (a stalled broker
    holds up every writer), and at most ten leases whatever the broker did."""

    @field_validator("lease")
    @classmethod
    def _lease(cls, v: float) -> float:
        if not 0.05 <= v <= 60:
            raise ValueError(f"must be from 50ms to 60s, got {format_duration(v)}")
        return v

    @field_validator("fetch_wait")
    @classmethod
    def _fetch_wait(cls, v: float) -> float:
        ms = v * 1000
        if not 0 <= ms <= MAX_FETCH_WAIT_MS or abs(ms - round(ms)) > 1e-6:
            raise ValueError(
                "must be a whole number of milliseconds from 0 to 59s (Kafka's "
                "fetch.wait.max.ms, at least 1 s below the consumer's 60-s socket timeout), "
                f"got {format_duration(v)}"
            )
        return v

    @property
    def fetch_wait_ms(self) -> int:
        """``fetch.wait.max.ms``."""
        return round(self.fetch_wait * 1000)

    @property
    def linger_ms(self) -> float:
        """``linger.ms``."""
        return self.linger * 1000


class Placement(_Model):
    """Where each replica runs: a CPU share of its own (``[placement]``)."""

    cpus_per_replica: float | None = Field(
        None,
        gt=0,
        json_schema_extra={
            "constraint": "unset: no quota; a local master only; needs root (local target)"
        },
    )
    """The cores each replica may use: its whole process tree (the driver, its JVM and
    executor JVMs; a standby driver's too) runs under a CPU quota of that many cores per 10-ms
    CFS period. On the local target a cgroup of its own (cgroup v2 ``cpu.max`` or v1
    ``cpu.cfs_quota_us``; needs root); on the docker target its container's CFS quota
    (``docker run --cpu-period --cpu-quota``), a new container of the replica's getting it
    again. Kafka, ZooKeeper, the merger and the
    injector stay outside. Every mode gets the same share per replica, so one replica and two
    compare as on hosts of equal size. A ``slow`` fault nests a lower quota inside the share
    and restores the share at its revert. Unset: no quota."""


class Spec(_Model):
    """A whole experiment."""

    name: str = Field(json_schema_extra={"constraint": "lower-case letters, digits, '_', '.', '-'"})
    """The experiment's name; its runs' directories are named after it."""
    source: Source
    steps: list[Step] = Field(default_factory=list)
    sink: Sink
    replication: Replication = Field(default_factory=Replication)
    spark: Spark = Spark()
    docker: Docker = Docker()
    stack: Stack = Stack()
    workload: Workload = Workload()
    merger: Merger = Merger()
    chaos: list[Chaos] = Field(default_factory=list)
    report: Report = Report()
    placement: Placement = Placement()
    _chosen: tuple[Chosen, ...] = PrivateAttr(default=())

    @property
    def chosen_defaults(self) -> tuple[Chosen, ...]:
        """Keys the user left out and arfl set so that the spec can mask a fault
        (:func:`arfl.configs.masking.chosen_defaults`; set by ``parse_spec``)."""
        return self._chosen

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"bad name {v!r}: use lower-case letters, digits, '_', '.', '-'")
        return v

    @property
    def stateless(self) -> bool:
        """Every step is a filter or a select: a record's results depend on that record only
        (a window keeps state; a transform may)."""
        return all(s.filter is not None or s.select is not None for s in self.steps)

    @property
    def resumes_from_output(self) -> bool:
        """A restarted replica starts at the output frontier instead of its checkpoint
        (``replication.resume``): ``active`` and :attr:`stateless`, with ``auto`` or ``output``."""
        return (
            self.replication.resume in ("auto", "output")
            and MODES.info(self.replication.mode).resumes_from_peers
            and self.stateless
        )

    @property
    def window_start_blocker(self) -> str | None:
        """Why a restarted replica cannot start at a window's start; None when it can
        (:func:`arfl.configs.window_start.window_start_blocker`)."""
        w = self.window
        fields = self.workload.fields
        decl = fields.get(self.source.event_time or "") if fields else None
        return _window_start_blocker(
            [s.kind for s in self.steps],
            None if w is None else float(w.size),
            None if w is None or w.slide is None else float(w.slide),
            replayed=self.source.replay is not None,
            event_time=self.source.event_time,
            event_time_kind=None if decl is None else decl.kind,
            declared_fields=bool(fields),
            disorder_s=float(self.workload.disorder),
            late=self.workload.late,
        )

    @property
    def resumes_from_window_start(self) -> bool:
        """A restarted replica starts at every partition's first event of a recent window
        boundary (``replication.resume``): ``active`` with one tumbling window on generated
        input (:attr:`window_start_blocker`), with ``auto`` or ``window``."""
        return (
            self.replication.resume in ("auto", "window")
            and MODES.info(self.replication.mode).resumes_from_peers
            and not self.resumes_from_output
            and self.window_start_blocker is None
        )

    @property
    def resumes_from_peer(self) -> bool:
        """A restarted replica starts from the freshest committed checkpoint of any replica
        (``replication.resume``): ``active`` when it resumes neither from the output nor at a
        window's start, unless ``checkpoint``. A planned window start that cannot be placed
        falls back to it (:mod:`arfl.orchestrate.resume`)."""
        return (
            self.replication.resume in ("auto", "peer")
            and MODES.info(self.replication.mode).resumes_from_peers
            and not self.resumes_from_output
            and not self.resumes_from_window_start
        )

    @property
    def restart_plan(self) -> str | None:
        """Where a restarted ``active`` replica starts reading, in words (None: other modes)."""
        if not MODES.info(self.replication.mode).resumes_from_peers:
            return None
        if not self.replication.restart:
            return "a dead replica is not restarted (replication.restart = false)"
        if self.resumes_from_output:
            return (
                "a restarted replica starts at the output frontier (a fresh checkpoint, no "
                "replay: replication.resume)"
            )
        if self.resumes_from_window_start:
            return (
                "a restarted replica starts at a recent window's first events (a fresh "
                "checkpoint, about a window replayed: replication.resume)"
            )
        if self.resumes_from_peer:
            why = (
                ""
                if self.replication.resume == "peer"
                else f" (not only filter/select steps, and {self.window_start_blocker})"
            )
            return (
                "a restarted replica replays from the freshest committed checkpoint of any "
                f"replica, its own or a copy of another's{why}"
            )
        return "a restarted replica replays from its own checkpoint (replication.resume)"

    @property
    def merges_agreed_batches(self) -> bool:
        """An agreed-batch replica that fell behind runs the ready agreed batches as one:
        ``replication.catch_up = "auto"`` and every step a filter, select or window (a window's
        late rows are dropped by the agreed watermark, :mod:`arfl.replica.source.late`, and its
        aggregates do not depend on the order rows are added in; a transform might)."""
        return self.replication.catch_up == "auto" and all(s.transform is None for s in self.steps)

    @property
    def agreed_batch_interval(self) -> float:
        """active-leader/-leaderless: seconds per agreed batch: ``replication.batch_interval``,
        else :data:`DEFAULT_STATELESS_BATCH_INTERVAL_S` for a filter/select pipeline whose
        replicas merge agreed batches (:attr:`merges_agreed_batches`), else
        :data:`DEFAULT_BATCH_INTERVAL_S`; at least one epoch of ``heartbeat_interval``."""
        repl = self.replication
        if repl.batch_interval is not None:
            return float(repl.batch_interval)
        short = self.stateless and self.merges_agreed_batches
        default = DEFAULT_STATELESS_BATCH_INTERVAL_S if short else DEFAULT_BATCH_INTERVAL_S
        return max(default, repl.heartbeat_interval or DEFAULT_HEARTBEAT_INTERVAL_S)

    @property
    def has_window(self) -> bool:
        """True when the pipeline aggregates (results are keyed by window and key)."""
        return self.window is not None

    @property
    def window(self) -> Window | None:
        """The pipeline's (first) window step, or None."""
        return next((s.window for s in self.steps if s.window is not None), None)

    @property
    def emits_updates(self) -> bool:
        """True when window results are updates, one per input record (real-time mode, update
        output mode; rids ``<window>#<n>``, see :mod:`arfl.run.records`)."""
        return self.has_window and self.replication.trigger == "realtime"

    @property
    def passes_markers(self) -> bool:
        """True when a replica's streaming query passes the input's end-of-input markers on to
        its topic as marker copies (:mod:`arfl.run.records`): a per-record real-time pipeline
        of filter and select steps (a user's ``transform`` may drop them or fail on their null
        columns). A real-time batch reports its progress only when it ends, up to an interval
        after the input did; a marker copy says at once that a replica read to the end."""
        return (
            self.replication.trigger == "realtime"
            and not self.has_window
            and all(step.kind in ("filter", "select") for step in self.steps)
        )
