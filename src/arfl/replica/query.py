"""The Spark query of one replica: parse input events, apply the spec's steps, shape results.

Used identically by the streaming driver (:mod:`arfl.replica.driver`) and the batch
recomputation (:mod:`arfl.replica.offline`), so both have the same semantics.

Pipeline::

    raw (value, partition, offset)        from the replication mode's source
      -> parse_input: JSON -> user columns + hidden __partition, __offset, __ts, __sent, __eoi
         (and __et); unparseable records dropped and counted
      -> parse_events: window pipelines: watermark on __et, then end-of-input markers dropped;
         per-record pipelines: markers dropped, or kept to the end in the streaming query
         where Spec.passes_markers holds (a marker copy, arfl.run.records)
      -> steps (filter / select / window / transform), hidden columns carried along
      -> build_output: (key = rid, value = JSON result record, see arfl.run.records)

Hidden columns start with ``__`` and never appear in a result's ``data``:

* ``__partition``, ``__offset``: the input record's Kafka position (rid of per-record results).
* ``__ts``: the event's ``ts`` (intended send time, ms); ``max(__ts)`` after a window.
* ``__sent``: the event's ``sent_ms`` (actual send time, ms, null when absent);
  ``max(__sent)`` after a window. Written as the result's ``sent_ts``.
* ``__eoi``: true for an end-of-input marker (:mod:`arfl.run.records`). Always false where
  the user's steps see rows, and a grouping column of the window (see below); except in a
  streaming query where ``Spec.passes_markers`` holds: there the filter and select steps see
  the markers (a filter passes them, a select keeps the hidden columns) and each becomes a
  marker copy (its fields but ``ts`` null).
* ``__et``: the event-time column as a timestamp (only when the pipeline has a window); a
  marker's is its ``ts``.
* ``__wstart``, ``__wend`` (ms) and ``__key`` (string): set by the window step (its rid).
* ``__n``: records aggregated into the window so far (only when the window emits updates,
  ``Spec.emits_updates``: real-time mode, one update per input record, rid ``<window>#<n>``).
* ``__late``: the agreed watermark of the row's agreed batch (the source's ``late_before``,
  :mod:`arfl.replica.source.late`; only when the source has the column): the window step
  aggregates a row only if its window ends after it, and counts the others in the
  ``arfl_late`` observed metric (``rows``).

End-of-input markers advance the watermark, so that a finite input ends with every window
emitted (docs/design.md §4 "complete"), and are then dropped by a filter right above the watermark.
Spark's optimizer pushes every filter conjunct that does not reference the event-time column
below ``EventTimeWatermark`` (``PushPredicateThroughNonJoin``), and filters on grouping
columns through the aggregation too; a user's filter pushed down there would drop the markers
before the watermark saw them. So the marker filter references ``__et`` (it stays above), and
each user filter step becomes ``__eoi OR (filter)``: wherever it lands, markers pass it.
``__eoi`` is a window grouping column for the same reason (a filter after the window that
Spark pushes below it still passes markers); it is false for every aggregated row. A
``transform`` step must likewise keep rows whose ``__eoi`` is true.

A ``transform = "module:function"`` step receives and must return a DataFrame that still has
every hidden column present before it (checked; :class:`~arfl.errors.DeployError` otherwise).
A step that emits several rows per input record (a generator such as ``explode``) without a
later window step is refused: those rows would share one rid.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arfl.configs.spec import Spec, Step
from arfl.configs.workload import FieldType, Workload, field_types
from arfl.errors import DeployError
from arfl.run.progress import LATE_METRICS
from arfl.run.records import END_OF_INPUT_FIELD, UPDATE_SEP

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

HIDDEN_PREFIX = "__"
TS_FIELD = "ts"
"""Input field holding the intended send time in epoch ms (``src_ts`` derives from it)."""
SENT_FIELD = "sent_ms"
"""Input field holding the actual send time in epoch ms (``sent_ts`` derives from it)."""
LATE_SOURCE_COLUMN = "late_before"
"""The arfl-kafka source's per-row agreed watermark (epoch ms, null: none)."""
INPUT_METRICS = "arfl_input"
"""Name of the ``observe()`` metric with ``rows``, ``bad`` (unparseable) and ``markers``
(end-of-input) input counts; it appears in each progress event's ``observedMetrics``."""

SPARK_TYPES: dict[FieldType, str] = {"string": "string", "long": "bigint", "double": "double"}
"""Spark SQL type of each neutral field type of :mod:`arfl.configs.workload`."""


def event_fields(spec: Spec | None = None) -> dict[str, str]:
    """The fields parsed from an input event, with their Spark SQL types.

    The generated fields (:func:`arfl.configs.workload.field_types`: the declared ones, or the
    default shape). For the default shape only, ``source.event_time`` (bigint, epoch ms) and
    ``source.key`` (string) are added when missing: a topic written by another producer may
    carry them; a declaration already names both (the spec's cross-checks).

    Args:
        spec: the pipeline spec (None: the default shape).
    """
    workload = spec.workload if spec is not None else Workload()
    fields = {name: SPARK_TYPES[t] for name, t in field_types(workload).items()}
    if spec is not None and not workload.declared:
        if spec.source.event_time and spec.source.event_time not in fields:
            fields[spec.source.event_time] = "bigint"
        if spec.source.key not in fields:
            fields[spec.source.key] = "string"
    return fields


EVENT_FIELDS: dict[str, str] = event_fields()
"""The default shape's fields (``seq, user, amount, ts, sent_ms``) with their Spark types."""


def event_schema(spec: Spec | None = None) -> StructType:
    """Schema of input events (:func:`event_fields`) for ``from_json``.

    Args:
        spec: the pipeline spec (None: the default shape).

    Returns:
        A Spark ``StructType``.
    """
    from pyspark.sql.types import DataType, DoubleType, LongType, StringType, StructType

    # The type objects themselves: parsing type names would need a running JVM.
    types: dict[str, DataType] = {
        "string": StringType(),
        "bigint": LongType(),
        "double": DoubleType(),
    }
    schema = StructType()
    for name, typ in event_fields(spec).items():
        schema = schema.add(name, types[typ], nullable=True)
    return schema


def parse_input(raw: DataFrame, spec: Spec) -> DataFrame:
    """Parse Kafka-shaped rows into events (end-of-input markers included), no watermark.

    Rows whose value is not a JSON object with a numeric ``ts`` (and event-time field, for
    window pipelines) are dropped and counted in the ``arfl_input`` observed metric (``bad``).
    A marker needs only ``ts``, its event time.

    Args:
        raw: columns ``value`` (binary or string), ``partition`` (int), ``offset`` (long).
        spec: the pipeline spec.

    Returns:
        The event columns plus ``__partition``, ``__offset``, ``__ts``, ``__sent``, ``__eoi``
        (and ``__et`` for window pipelines).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType

    schema = event_schema(spec)
    # The marker flag is parsed with the events (one JSON parse) but is no user column.
    own_flag = END_OF_INPUT_FIELD not in schema.fieldNames()
    parse_schema = (
        StructType([*schema.fields, StructField(END_OF_INPUT_FIELD, BooleanType(), True)])
        if own_flag
        else schema
    )
    late = spec.has_window and LATE_SOURCE_COLUMN in raw.columns
    # Where the source applies the agreed watermark its scan reads the values with Python's
    # JSON parser, which refuses single quotes: so does this parse there (Spark's default
    # accepts them), or Spark would count event times the scan missed.
    json_options = {"allowSingleQuotes": "false"} if late else {}
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), parse_schema, json_options).alias("__e"),
        F.col("partition").cast("int").alias("__partition"),
        F.col("offset").cast("long").alias("__offset"),
        *([F.col(LATE_SOURCE_COLUMN).cast("long").alias("__late")] if late else []),
    )
    marker: Column = (
        F.coalesce(F.col(f"__e.{END_OF_INPUT_FIELD}"), F.lit(False)) if own_flag else F.lit(False)
    )
    event_time = spec.source.event_time if spec.has_window else None
    ok: Column = F.col("__e").isNotNull() & F.col(f"__e.{TS_FIELD}").isNotNull()
    if event_time is not None:
        ok = ok & (marker | F.col(f"__e.{event_time}").isNotNull())
    parsed = parsed.withColumn("__ok", F.coalesce(ok, F.lit(False))).withColumn(
        "__eoi", F.col("__ok") & marker
    )
    parsed = parsed.observe(
        INPUT_METRICS,
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col("__ok"), 0).otherwise(1)).alias("bad"),
        F.sum(F.when(F.col("__eoi"), 1).otherwise(0)).alias("markers"),
    )
    hidden: list[Column | str] = [
        "__partition",
        "__offset",
        F.col(f"__e.{TS_FIELD}").alias("__ts"),
        F.col(f"__e.{SENT_FIELD}").cast("long").alias("__sent"),
        "__eoi",
        *(["__late"] if late else []),
    ]
    if event_time is not None:
        et = F.when(F.col("__eoi"), F.col(f"__e.{TS_FIELD}")).otherwise(F.col(f"__e.{event_time}"))
        hidden.append(F.timestamp_millis(et).alias("__et"))
    return parsed.filter(F.col("__ok")).select(
        *[F.col(f"__e.{f.name}").alias(f.name) for f in schema.fields], *hidden
    )


def parse_events(raw: DataFrame, spec: Spec, *, keep_markers: bool = False) -> DataFrame:
    """Parse input rows, set the watermark, and drop end-of-input markers after it.

    Args:
        raw: columns ``value`` (binary or string), ``partition`` (int), ``offset`` (long).
        spec: the pipeline spec.
        keep_markers: keep the markers where ``spec.passes_markers`` (the streaming query;
            the batch recomputation drops them).

    Returns:
        :func:`parse_input`'s columns, without markers (unless ``keep_markers``); watermarked
        on ``__et`` for window pipelines.
    """
    from pyspark.sql import functions as F

    events = parse_input(raw, spec)
    window = spec.window
    if window is None:
        if keep_markers and spec.passes_markers:
            return events
        # Nothing waits for a watermark: a marker only has to yield no result.
        return events.filter(~F.col("__eoi"))
    events = events.withWatermark("__et", _interval(window.watermark))
    # Referencing __et keeps this filter above the watermark operator (see the module
    # docstring); a marker's __et is never null, so the second term keeps no marker.
    return events.filter(~F.col("__eoi") | F.col("__et").isNull())


def apply_steps(events: DataFrame, spec: Spec) -> DataFrame:
    """Apply the spec's steps in order, keeping hidden columns alongside the user's."""
    df = events
    last_window = max((i for i, s in enumerate(spec.steps) if s.window is not None), default=-1)
    for i, step in enumerate(spec.steps):
        before = _row_generators(df) if i > last_window else []
        df = _STEPS[step.kind](df, step, spec, i)
        if i > last_window and len(_row_generators(df)) > len(before):
            raise DeployError(
                f"steps[{i}].{step.kind}: emits several rows per input record "
                f"({_row_generators(df)[-1]}); they would share one result id, so the merger "
                "would keep one of them; aggregate them in a later window step"
            )
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
        # concat_ws skips nulls: a null key gives "<start>-<end>" with no ":", which no
        # string key (not even "null") can produce.
        rid = F.concat_ws(
            ":",
            F.concat_ws("-", F.col("__wstart").cast("string"), F.col("__wend").cast("string")),
            F.col("__key"),
        )
    else:
        rid = F.concat_ws(
            ":", F.col("__partition").cast("string"), F.col("__offset").cast("string")
        )
    # The Kafka key: the rid, or for updates the window's rid (a compacted topic then keeps
    # each window's final value, see arfl.run.records).
    kafka_key = rid
    if spec.emits_updates:
        rid = F.concat(rid, F.lit(UPDATE_SEP), F.col("__n").cast("string"))
    # A marker copy says so (`eoi`); to_json leaves the null of every result out.
    marker = spec.passes_markers and "__eoi" in df.columns
    staged = df.select(
        kafka_key.alias("__kafka_key"),
        rid.alias("rid"),
        F.col("__ts").cast("long").alias("src_ts"),
        F.col("__sent").cast("long").alias("sent_ts"),
        F.lit(replica).cast("int").alias("replica"),
        data.alias("data"),
        *([F.when(F.col("__eoi"), F.lit(True)).alias(END_OF_INPUT_FIELD)] if marker else []),
    )
    staged = staged.withColumn("hash", F.sha2(F.to_json(F.col("data")), 256))
    fields = ["rid", "src_ts", "sent_ts", "replica", "hash", "data"]
    return staged.select(
        F.col("__kafka_key").alias("key"),
        F.to_json(F.struct(*fields, *([END_OF_INPUT_FIELD] if marker else []))).alias("value"),
    )


def output_mode(spec: Spec) -> str:
    """Structured Streaming output mode: ``append`` (a window is emitted once, when final), or
    ``update`` in real-time mode (which requires it: a window emits one update per record)."""
    return "update" if spec.replication.trigger == "realtime" else "append"


# --- steps ------------------------------------------------------------------------------


def _hidden(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith(HIDDEN_PREFIX)]


def _filter(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    from pyspark.sql import functions as F

    del spec, index
    assert step.filter is not None
    if "__eoi" not in df.columns:
        return df.filter(F.expr(step.filter))
    # Markers reach this step only where Spec.passes_markers holds, but Spark may push the filter
    # below the watermark, where they still flow: it lets them through (module docstring).
    return df.filter(F.col("__eoi") | F.expr(step.filter))


def _select(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    del spec, index
    assert step.select is not None
    # Resolve the user's columns first: "*" may already bring the hidden ones along.
    user_cols = df.selectExpr(*step.select).columns
    extras = [h for h in _hidden(df) if h not in user_cols]
    return df.selectExpr(*step.select, *extras)


def _window(df: DataFrame, step: Step, spec: Spec, index: int) -> DataFrame:
    from pyspark.sql import functions as F

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
    if spec.emits_updates:
        aggs.append(F.count(F.lit(1)).alias("__n"))
    windowed = df.withColumn("__w", win)
    if "__late" in df.columns:
        # The agreed watermark (arfl.replica.source.late): per window, as Spark's own.
        keep = F.col("__late").isNull() | (F.unix_millis(F.col("__w.end")) > F.col("__late"))
        windowed = windowed.withColumn("__keep", keep).observe(
            LATE_METRICS, F.sum(F.when(F.col("__keep"), 0).otherwise(1)).alias("rows")
        )
        windowed = windowed.filter(F.col("__keep"))
    # __eoi (false for every row that gets here) groups too, so that a later filter step
    # that Spark pushes below the aggregation can still let markers through.
    grouped = windowed.groupBy("__w", F.col(_quote(w.key)).alias(w.key), "__eoi").agg(
        *aggs, F.max("__ts").alias("__ts"), F.max("__sent").alias("__sent")
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
        "__sent",
        "__eoi",
        *(["__n"] if spec.emits_updates else []),
    )


_GENERATE = re.compile(r"\bGenerate (\w+)\(")
_ONE_ROW_GENERATORS = frozenset({"json_tuple"})


def _row_generators(df: DataFrame) -> list[str]:
    """Generators in ``df``'s analyzed plan that may emit several rows per input row."""
    plan = str(df._jdf.queryExecution().analyzed().toString())
    return [
        m.group(1) + "()"
        for m in _GENERATE.finditer(plan)
        if m.group(1).lower() not in _ONE_ROW_GENERATORS
    ]


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


def _interval(seconds: float | None) -> str:
    """Spark interval string for a duration in seconds (millisecond precision)."""
    if seconds is None:
        raise ValueError("no duration")
    return f"{round(seconds * 1000)} milliseconds"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
