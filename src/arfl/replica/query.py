"""The Spark query of one replica: parse input events, apply the spec's steps, shape results.

Used identically by the streaming driver (:mod:`arfl.replica.driver`) and the batch
recomputation (:mod:`arfl.replica.offline`), so both have the same semantics.

Pipeline::

    raw (value, partition, offset)        from the replication mode's source
      -> parse_events: JSON -> user columns + hidden __partition, __offset, __ts, __et
      -> steps (filter / select / window / transform), hidden columns carried along
      -> build_output: (key = rid, value = JSON result record, see arfl.run.records)

Hidden columns start with ``__`` and never appear in a result's ``data``:

* ``__partition``, ``__offset``: the input record's Kafka position (rid of per-record results).
* ``__ts``: the event's ``ts`` (intended send time, ms); ``max(__ts)`` after a window.
* ``__et``: the event-time column as a timestamp (only when the pipeline has a window).
* ``__wstart``, ``__wend`` (ms) and ``__key`` (string): set by the window step (its rid).

A ``transform = "module:function"`` step receives and must return a DataFrame that still has
every hidden column present before it (checked; :class:`~arfl.errors.DeployError` otherwise).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arfl.configs.spec import Spec, Step, Window
from arfl.errors import DeployError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

HIDDEN_PREFIX = "__"
TS_FIELD = "ts"
"""Input field holding the intended send time in epoch ms (``src_ts`` derives from it)."""
INPUT_METRICS = "arfl_input"
"""Name of the ``observe()`` metric with ``rows`` and ``bad`` (unparseable) input counts; it
appears in each progress event's ``observedMetrics``."""

# The injector's event format (arfl.run.records): field name -> Spark SQL type.
EVENT_FIELDS: dict[str, str] = {
    "seq": "bigint",
    "user": "string",
    "amount": "double",
    "ts": "bigint",
    "sent_ms": "bigint",
}


def event_schema(spec: Spec | None = None) -> StructType:
    """Schema of input events: the injector's fields, plus the spec's key/event-time fields.

    Args:
        spec: if given, its ``source.event_time`` (bigint, epoch ms) and ``source.key``
            (string) are added when the injector format lacks them.

    Returns:
        A Spark ``StructType`` for ``from_json``.
    """
    from pyspark.sql.types import StructType, _parse_datatype_string

    fields = dict(EVENT_FIELDS)
    if spec is not None:
        if spec.source.event_time and spec.source.event_time not in fields:
            fields[spec.source.event_time] = "bigint"
        if spec.source.key not in fields:
            fields[spec.source.key] = "string"
    schema = StructType()
    for name, typ in fields.items():
        schema = schema.add(name, _parse_datatype_string(typ), nullable=True)
    return schema


def parse_events(raw: DataFrame, spec: Spec) -> DataFrame:
    """Parse Kafka-shaped rows into events with hidden bookkeeping columns.

    Rows whose value is not a JSON object with a numeric ``ts`` (and event-time field, for
    window pipelines) are dropped and counted in the ``arfl_input`` observed metric (``bad``).

    Args:
        raw: columns ``value`` (binary or string), ``partition`` (int), ``offset`` (long).
        spec: the pipeline spec.

    Returns:
        The event columns plus ``__partition``, ``__offset``, ``__ts`` (and ``__et``).
    """
    from pyspark.sql import functions as F

    schema = event_schema(spec)
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), schema).alias("__e"),
        F.col("partition").cast("int").alias("__partition"),
        F.col("offset").cast("long").alias("__offset"),
    )
    required = [TS_FIELD]
    if spec.has_window and spec.source.event_time:
        required.append(spec.source.event_time)
    ok: Column = F.col("__e").isNotNull()
    for name in required:
        ok = ok & F.col(f"__e.{name}").isNotNull()
    parsed = parsed.withColumn("__ok", F.coalesce(ok, F.lit(False)))
    parsed = parsed.observe(
        INPUT_METRICS,
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col("__ok"), 0).otherwise(1)).alias("bad"),
    )
    events = parsed.filter(F.col("__ok")).select(
        *[F.col(f"__e.{f.name}").alias(f.name) for f in schema.fields],
        "__partition",
        "__offset",
        F.col(f"__e.{TS_FIELD}").alias("__ts"),
    )
    window = _window_of(spec)
    if window is not None:
        assert spec.source.event_time is not None  # arfl validate requires it
        events = events.withColumn(
            "__et", F.timestamp_millis(F.col(spec.source.event_time))
        ).withWatermark("__et", _interval(window.watermark))
    return events


def apply_steps(events: DataFrame, spec: Spec) -> DataFrame:
    """Apply the spec's steps in order, keeping hidden columns alongside the user's."""
    df = events
    for i, step in enumerate(spec.steps):
        df = _STEPS[step.kind](df, step, spec, i)
    return df


def build_output(df: DataFrame, spec: Spec, replica: int) -> DataFrame:
    """Apply the steps to parsed events and shape replica output records.

    Args:
        df: output of :func:`parse_events`.
        spec: the pipeline spec.
        replica: this replica's index (written into every record).

    Returns:
        A DataFrame ``(key: string, value: string)``: key = rid, value = the JSON record of
        :mod:`arfl.run.records`.
    """
    return shape_results(apply_steps(df, spec), spec, replica)


def shape_results(df: DataFrame, spec: Spec, replica: int) -> DataFrame:
    """Turn a stepped DataFrame into ``(key, value)`` result records."""
    from pyspark.sql import functions as F

    visible = [c for c in df.columns if not c.startswith(HIDDEN_PREFIX)]
    data = F.struct(*[F.col(_quote(c)) for c in visible]) if visible else F.struct()
    if spec.has_window:
        rid = F.concat_ws(
            "",
            F.col("__wstart").cast("string"),
            F.lit("-"),
            F.col("__wend").cast("string"),
            F.lit(":"),
            F.coalesce(F.col("__key"), F.lit("null")),
        )
    else:
        rid = F.concat_ws(
            ":", F.col("__partition").cast("string"), F.col("__offset").cast("string")
        )
    staged = df.select(
        rid.alias("rid"),
        F.col("__ts").cast("long").alias("src_ts"),
        F.lit(replica).cast("int").alias("replica"),
        data.alias("data"),
    )
    staged = staged.withColumn("hash", F.sha2(F.to_json(F.col("data")), 256))
    return staged.select(
        F.col("rid").alias("key"),
        F.to_json(F.struct("rid", "src_ts", "replica", "hash", "data")).alias("value"),
    )


def output_mode(spec: Spec) -> str:
    """Structured Streaming output mode: ``append`` (a window is emitted once, when final)."""
    del spec
    return "append"


# --- steps ------------------------------------------------------------------------------


def _hidden(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith(HIDDEN_PREFIX)]


def _filter(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    from pyspark.sql import functions as F

    del spec, index
    assert step.filter is not None
    return df.filter(F.expr(step.filter))


def _select(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    del spec, index
    assert step.select is not None
    # Resolve the user's columns first: "*" may already bring the hidden ones along.
    user_cols = df.selectExpr(*step.select).columns
    extras = [h for h in _hidden(df) if h not in user_cols]
    return df.selectExpr(*step.select, *extras)


def _window(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    from pyspark.sql import functions as F

    del spec
    w = step.window
    assert w is not None
    if "__et" not in df.columns:
        raise DeployError(
            f"steps[{index}].window: the event-time column was dropped by an earlier "
            "transform step; keep columns starting with '__'"
        )
    if w.key not in df.columns:
        raise DeployError(
            f"steps[{index}].window.key: no column {w.key!r} at this step "
            f"(columns: {', '.join(c for c in df.columns if not c.startswith('__'))})"
        )
    size = _interval(w.size)
    win = (
        F.window(F.col("__et"), size, _interval(w.slide))
        if w.slide is not None and w.slide != w.size
        else F.window(F.col("__et"), size)
    )
    aggs = [_deterministic_agg(df, e).alias(name) for name, e in w.agg.items()]
    grouped = df.groupBy(win.alias("__w"), F.col(_quote(w.key)).alias(w.key)).agg(
        *aggs, F.max("__ts").alias("__ts")
    )
    return grouped.select(
        F.unix_millis(F.col("__w.start")).alias("window_start"),
        F.unix_millis(F.col("__w.end")).alias("window_end"),
        F.col(_quote(w.key)),
        *[F.col(_quote(name)) for name in w.agg],
        F.unix_millis(F.col("__w.start")).alias("__wstart"),
        F.unix_millis(F.col("__w.end")).alias("__wend"),
        F.col(_quote(w.key)).cast("string").alias("__key"),
        "__ts",
    )


_AGG = re.compile(r"^\s*(\w+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


def _deterministic_agg(df: DataFrame, expression: str) -> Column:
    """An aggregate whose result does not depend on the order rows are added in.

    Floating-point addition is not associative: replicas whose batches group the same rows
    differently (and so add partial sums in another order) get sums that differ in the last
    bits, which the divergence check rightly reports. ``sum``/``avg`` of a floating column are
    therefore computed in exact decimal arithmetic and converted back to double once.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    m = _AGG.match(expression)
    if m is None or m.group(2) == "*" or m.group(1).lower() not in ("sum", "avg"):
        return F.expr(expression)
    fn, col = m.group(1).lower(), m.group(2)
    fields = {f.name.lower(): f for f in df.schema.fields}
    field = fields.get(col.lower())
    if field is None or not isinstance(field.dataType, DoubleType | FloatType):
        return F.expr(expression)
    exact = F.col(_quote(col)).cast(EXACT_DECIMAL)
    agg = F.sum(exact) if fn == "sum" else F.avg(exact)
    return agg.cast("double")


EXACT_DECIMAL = "decimal(38,10)"
"""Exact type for summing doubles: 28 integer digits, 10 decimals."""


def _transform(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    del spec
    assert step.transform is not None
    fn = load_transform(step.transform, f"steps[{index}].transform")
    before = set(_hidden(df))
    out = fn(df)
    from pyspark.sql import DataFrame as SparkDataFrame

    if not isinstance(out, SparkDataFrame):
        raise DeployError(
            f"steps[{index}].transform: {step.transform} returned {type(out).__name__}, "
            "expected a DataFrame"
        )
    missing = sorted(before - set(out.columns))
    if missing:
        raise DeployError(
            f"steps[{index}].transform: {step.transform} dropped hidden column(s) "
            f"{', '.join(missing)}; keep every column whose name starts with '__'"
        )
    return out


def load_transform(ref: str, where: str = "transform") -> Callable[[DataFrame], DataFrame]:
    """Import ``"module:function"``.

    Raises:
        DeployError: the module cannot be imported or has no such callable.
    """
    module_name, _, func_name = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise DeployError(
            f"{where}: cannot import {module_name!r}: {e}; make it importable "
            "(installed, or on PYTHONPATH of the driver)"
        ) from None
    fn: Any = getattr(module, func_name, None)
    if not callable(fn):
        raise DeployError(f"{where}: {module_name} has no function {func_name!r}")
    return fn  # type: ignore[no-any-return]


_STEPS: dict[str, Callable[[DataFrame, Step, Spec, int], DataFrame]] = {
    "filter": _filter,
    "select": _select,
    "window": _window,
    "transform": _transform,
}


def _window_of(spec: Spec) -> Window | None:
    for s in spec.steps:
        if s.window is not None:
            return s.window
    return None


def _interval(seconds: float | None) -> str:
    """Spark interval string for a duration in seconds (millisecond precision)."""
    if seconds is None:
        raise ValueError("no duration")
    return f"{round(seconds * 1000)} milliseconds"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
