"""A spec compiled for the independent check: the input's fields and types, the steps before
and after the window as row functions, the window's size, slide, delay, key and aggregates
(:func:`compile_pipeline`). :mod:`arfl.measure.check.evaluate` runs it over the input."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from arfl.configs.expr import (
    Column,
    Expr,
    Schema,
    Type,
    Unsupported,
    Value,
    compile_predicate,
    compile_select_item,
)
from arfl.configs.lateness import late_lag_ms
from arfl.configs.spec import Spec, Step, Window
from arfl.configs.workload import Workload, field_types


def input_fields(spec: Spec | None = None) -> dict[str, Type]:
    """The fields a replica parses from an input record, with their types: the generated
    ones (:func:`arfl.configs.workload.field_types`, declared or the default shape); for the
    default shape also ``source.event_time`` (long) and ``source.key`` (string) when missing.
    Other fields are not visible to the pipeline."""
    workload = spec.workload if spec is not None else Workload()
    fields: dict[str, Type] = dict(field_types(workload))
    if spec is not None and not workload.declared:
        et = spec.source.event_time
        if et and et not in fields:
            fields[et] = "long"
        if spec.source.key not in fields:
            fields[spec.source.key] = "string"
    return fields


INPUT_FIELDS: dict[str, Type] = input_fields()
"""The default shape's fields (``seq, user, amount, ts, sent_ms``)."""


# --- result ids: the one place to align with the replicas' format -------------------------


RowT = dict[str, Value]


@dataclass(frozen=True)
class RowStep:
    """A filter or a select: a row goes in, zero or one row comes out."""

    apply: Callable[[RowT], RowT | None]


@dataclass(frozen=True)
class Agg:
    name: str
    fn: str
    column: str | None  # None for count(*)
    type: Type


@dataclass(frozen=True)
class Windowing:
    size_ms: int
    slide_ms: int
    delay_ms: int
    key_name: str  # as the spec writes it: the output column's name
    key_column: str  # the input column it resolves to
    aggs: tuple[Agg, ...]


@dataclass(frozen=True)
class Pipeline:
    """A spec compiled for the check: steps before the window, the window, steps after it."""

    fields: dict[str, Type]
    event_time: str | None
    before: tuple[RowStep, ...]
    window: Windowing | None
    after: tuple[RowStep, ...]
    updates: bool = False
    """The window emits one update per row that reaches it (real-time mode)."""
    late_lag_ms: int | None = None
    """Events lagging ``ts`` by this much are generated late events (window pipelines)."""


def compile_pipeline(spec: Spec) -> Pipeline:
    """Compile the spec's steps.

    Raises:
        Unsupported: a step or expression outside the subset (``transform``, a function call,
            a second window, ...), with the step's key path.
    """
    fields = input_fields(spec)
    et = spec.source.event_time
    schema = Schema([Column(n, t) for n, t in fields.items()])
    before: list[RowStep] = []
    after: list[RowStep] = []
    window: Windowing | None = None
    for i, step in enumerate(spec.steps):
        where = f"steps[{i}].{step.kind}"
        target = after if window is not None else before
        if step.transform is not None:
            raise Unsupported(f"{where} = {step.transform!r}: transform steps are opaque code")
        if step.window is not None:
            if window is not None:
                raise Unsupported(f"{where}: a second window step")
            if not et:
                raise Unsupported(f"{where}: a window needs source.event_time")
            window, schema = _compile_window(step.window, schema, where)
        else:
            row_step, schema = _compile_row_step(step, schema, where)
            target.append(row_step)
    updates = window is not None and spec.emits_updates
    lag = late_lag_ms(spec) if window is not None else None
    return Pipeline(fields, et, tuple(before), window, tuple(after), updates, lag)


def _compile_row_step(step: Step, schema: Schema, where: str) -> tuple[RowStep, Schema]:
    if step.filter is not None:
        pred = compile_predicate(step.filter, schema, where)

        def keep(row: RowT) -> RowT | None:
            return row if pred.eval(row) is True else None

        return RowStep(keep), schema
    assert step.select is not None
    items: list[tuple[str, Expr]] = []
    for j, text in enumerate(step.select):
        if text.strip() == "*":
            items += [(c.name, compile_select_item(f"`{c.name}`", schema, where)[1])
                      for c in schema.columns]  # fmt: skip
        else:
            items.append(compile_select_item(text, schema, f"{where}[{j}]"))
    names = [n for n, _ in items]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise Unsupported(f"{where}: duplicate output column(s) {', '.join(dup)}")

    def project(row: RowT) -> RowT | None:
        return {n: e.eval(row) for n, e in items}

    return RowStep(project), Schema([Column(n, e.type) for n, e in items])


def _millis(seconds: float, what: str) -> int:
    ms = seconds * 1000
    if abs(ms - round(ms)) > 1e-6:
        raise Unsupported(f"{what} = {seconds}s is not a whole number of milliseconds")
    return round(ms)


_AGG_TYPES: dict[str, tuple[Type, ...]] = {
    "count": ("long", "double", "decimal", "string", "boolean", "null"),
    "sum": ("long", "double", "decimal"),
    "avg": ("long", "double"),
    "min": ("long", "double", "decimal", "string", "boolean"),
    "max": ("long", "double", "decimal", "string", "boolean"),
}


def _compile_window(w: Window, schema: Schema, where: str) -> tuple[Windowing, Schema]:
    key_col = schema.resolve(w.key, f"{where}.key")
    if key_col.type not in ("long", "string", "boolean"):
        raise Unsupported(f"{where}.key: a {key_col.type} key's string form is not modelled")
    aggs: list[Agg] = []
    for name, text in w.agg.items():
        m = re.fullmatch(r"\s*(\w+)\s*\(\s*(\*|[A-Za-z_]\w*)\s*\)\s*", text)
        if m is None or m.group(1).lower() not in _AGG_TYPES:
            raise Unsupported(f"{where}.agg.{name} = {text!r}: not one of the aggregates")
        fn = m.group(1).lower()
        if m.group(2) == "*":
            if fn != "count":
                raise Unsupported(f"{where}.agg.{name} = {text!r}: only count takes *")
            aggs.append(Agg(name, fn, None, "long"))
            continue
        col = schema.resolve(m.group(2), f"{where}.agg.{name}")
        if col.type not in _AGG_TYPES[fn]:
            raise Unsupported(f"{where}.agg.{name} = {text!r}: {fn} of a {col.type} column")
        out: Type = "long" if fn == "count" else "double" if fn == "avg" else col.type
        aggs.append(Agg(name, fn, col.name, out))
    size = _millis(w.size, f"{where}.size")
    slide = _millis(w.slide, f"{where}.slide") if w.slide is not None else size
    windowing = Windowing(
        size, slide, _millis(w.watermark, f"{where}.watermark"), w.key, key_col.name, tuple(aggs)
    )
    out_schema = Schema(
        [
            Column("window_start", "long"),
            Column("window_end", "long"),
            Column(w.key, key_col.type),
            *[Column(a.name, a.type) for a in aggs],
        ]
    )
    return windowing, out_schema


# --- parsing input records --------------------------------------------------------------
