"""A spec's pipeline checked against its input schema, step by step, without Spark.

Every column a step uses must exist, with a type that fits, at that point of the pipeline:
``steps[i].filter`` (a boolean), ``steps[i].select[j]``, ``steps[i].window.key`` and
``window.agg`` (``sum``/``avg`` of a number), and ``source.event_time`` (a long, epoch ms).
The columns start as the workload's fields (:func:`arfl.configs.workload.field_types`); a
select replaces them by its items (aliases, renames, ``*``), a window by ``window_start``,
``window_end`` (epoch ms), its key and its aggregates, as :mod:`arfl.replica.query` builds them.
A ``transform`` step is opaque code: checking stops there.

Expressions are typed by the parser of the documented subset (:mod:`arfl.configs.expr`, shared
with the independent check). An expression beyond it (a function call, ``CASE``, ``IN``, ...) is
not an error, since Spark may well accept it: only its plain column references are checked,
read with sqlglot's Spark dialect; nothing when even that cannot read it. Validation so stays
a parse, in milliseconds, rather than a local Spark session's seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from arfl.configs.expr import (
    Column,
    Expr,
    Schema,
    Type,
    TypeMismatch,
    Unsupported,
    compile_predicate,
    compile_select_item,
)
from arfl.configs.workload import Workload, field_types

Problem = tuple[str, str]

_AGG = re.compile(r"^\s*(\w+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
_NUMERIC: frozenset[str] = frozenset({"long", "double", "decimal", "null"})
_HIDDEN = "__"
"""Prefix of the query's own columns (:mod:`arfl.replica.query`): never reported unknown."""


@dataclass
class _Columns:
    """The columns a step sees."""

    typed: list[Column]
    untyped: list[str] = field(default_factory=list)
    """Names whose type the parser cannot tell (select items beyond the subset)."""
    complete: bool = True
    """False after an unaliased select item beyond the subset: Spark names it, we cannot."""
    at_input: bool = True
    """No step has changed the columns yet: they are the workload's fields."""

    def names(self) -> list[str]:
        return [c.name for c in self.typed] + self.untyped

    def has(self, name: str) -> bool:
        low = name.lower()
        return low.startswith(_HIDDEN) or any(n.lower() == low for n in self.names())

    def type_of(self, name: str) -> Type | None:
        low = name.lower()
        return next((c.type for c in self.typed if c.name.lower() == low), None)

    def schema(self) -> Schema:
        return Schema(self.typed)


def schema_problems(raw: dict[str, Any]) -> list[Problem]:
    """Columns the spec's steps (and ``source.event_time``) use that do not exist, or whose type
    does not fit, where they are used; on the raw TOML dict, so that they are reported with the
    spec's other problems.

    Parts that do not validate are skipped (their own problems are reported elsewhere): bad
    ``[workload.fields]`` leave no schema to check against; a malformed step ends the checking.

    Returns:
        ``(key path, message)`` pairs, e.g. ``("steps[0].filter", "unknown column 'qty' ...")``.
    """
    workload = raw.get("workload", {})
    fields = workload.get("fields", {}) if isinstance(workload, dict) else {}
    try:
        types = field_types(Workload.model_validate({"fields": fields}))
    except ValidationError:
        return []
    declared = bool(fields)
    source = raw.get("source") if isinstance(raw.get("source"), dict) else {}
    assert isinstance(source, dict)
    event_time, key = source.get("event_time"), source.get("key", "user")
    out: list[Problem] = []
    if not declared:
        # Records not made by arfl's generator (tests', a replayed topic's) may carry the
        # key and event-time fields the spec names: the query parses them (string, long), and
        # so does the independent check. Declared fields are checked by workload_problems.
        if isinstance(event_time, str):
            found = types.get(event_time)
            if found is not None and found != "long":
                out.append(
                    (
                        "source.event_time",
                        f"{event_time!r} is a {found}; the event time needs a long "
                        "(epoch milliseconds), e.g. 'ts'",
                    )
                )
            types.setdefault(event_time, "long")
        if isinstance(key, str):
            types.setdefault(key, "string")
    cols = _Columns([Column(n, t) for n, t in types.items()])
    hint = (
        "add it to [workload.fields]"
        if declared
        else "the default workload has only these; declare the fields you need in [workload.fields]"
    )
    steps = raw.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        kinds = (
            [k for k in ("filter", "select", "window", "transform") if k in step]
            if isinstance(step, dict)
            else []
        )
        if len(kinds) != 1 or kinds[0] == "transform":
            break  # malformed (reported elsewhere) or opaque: the columns after it are unknown
        where = f"steps[{i}].{kinds[0]}"
        after = _STEPS[kinds[0]](step[kinds[0]], cols, where, out, hint if cols.at_input else "")
        if after is None:
            break
        cols = after
    return out


# --- steps ------------------------------------------------------------------------------


def _filter(
    value: Any, cols: _Columns, where: str, out: list[Problem], hint: str
) -> _Columns | None:
    if not isinstance(value, str):
        return None
    _expression(value, cols, where, compile_predicate, out, hint)
    return cols


def _select(
    value: Any, cols: _Columns, where: str, out: list[Problem], hint: str
) -> _Columns | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    new = _Columns([], at_input=False)
    for j, text in enumerate(value):
        if text.strip() == "*":
            new.typed += cols.typed
            new.untyped += cols.untyped
            new.complete = new.complete and cols.complete
            continue

        def item(t: str, s: Schema, w: str) -> Expr:
            name, e = compile_select_item(t, s, w)
            return Expr(e.type, name, e.fn)

        compiled = _expression(text, cols, f"{where}[{j}]", item, out, hint)
        if compiled is not None:
            new.typed.append(Column(compiled.name, compiled.type))
            continue
        name = _output_name(text)
        if name is None:
            new.complete = False
        else:
            new.untyped.append(name)
    return new


def _window(
    value: Any, cols: _Columns, where: str, out: list[Problem], hint: str
) -> _Columns | None:
    if not isinstance(value, dict):
        return None
    key, agg = value.get("key"), value.get("agg")
    if not isinstance(key, str) or not isinstance(agg, dict):
        return None
    if not cols.has(key) and cols.complete:
        out.append((f"{where}.key", _unknown([key], cols, hint)))
    result = [Column("window_start", "long"), Column("window_end", "long")]
    untyped: list[str] = []
    key_type = cols.type_of(key)
    if key_type is None:
        untyped.append(key)
    else:
        result.append(Column(key, key_type))
    for name, text in agg.items():
        m = _AGG.match(text) if isinstance(text, str) else None
        if m is None:
            return None  # not an aggregate arfl takes (reported elsewhere)
        fn, col = m.group(1).lower(), m.group(2)
        loc = f"{where}.agg.{name}"
        typ: Type | None = "long"
        if col == "*":
            if fn != "count":
                out.append((loc, f"{text!r}: only count takes *; name a column, {fn}(col)"))
        elif not cols.has(col):
            if cols.complete:
                out.append((loc, _unknown([col], cols, hint)))
            typ = None
        else:
            found = cols.type_of(col)
            if fn in ("sum", "avg") and found is not None and found not in _NUMERIC:
                out.append(
                    (loc, f"{text!r}: {col!r} is a {found}; {fn} needs a number (long or double)")
                )
            typ = "long" if fn == "count" else "double" if fn == "avg" else found
        if typ is None:
            untyped.append(name)
        else:
            result.append(Column(name, typ))
    return _Columns(result, untyped, at_input=False)


_STEPS: dict[str, Callable[[Any, _Columns, str, list[Problem], str], _Columns | None]] = {
    "filter": _filter,
    "select": _select,
    "window": _window,
}


# --- expressions ------------------------------------------------------------------------


def _expression(
    text: str,
    cols: _Columns,
    where: str,
    compile_: Callable[[str, Schema, str], Expr],
    out: list[Problem],
    hint: str,
) -> Expr | None:
    """Type ``text`` against ``cols``; record what is wrong in ``out``.

    Returns:
        The typed expression, or None when it is wrong or beyond the parser.
    """
    mismatch: TypeMismatch | None = None
    try:
        return compile_(text, cols.schema(), where)
    except TypeMismatch as e:
        mismatch = e
    except Unsupported:
        # Also UnknownColumn: the parser stops at its first unknown name, and takes a keyword
        # it does not model (CASE, ...) for one; sqlglot tells the column references apart.
        pass
    if cols.complete:
        unknown = [n for n in _references(text) if not cols.has(n)]
        if unknown:
            out.append((where, _unknown(unknown, cols, hint)))
    if mismatch is not None:
        out.append((where, f"wrong type in {text!r}: {mismatch.found}; needs {mismatch.needed}"))
    return None


def _unknown(names: list[str], cols: _Columns, hint: str) -> str:
    what = "column" if len(names) == 1 else "columns"
    known = ", ".join(n for n in cols.names() if not n.startswith(_HIDDEN))
    msg = f"unknown {what} {', '.join(repr(n) for n in names)} (known here: {known})"
    return f"{msg}; {hint}" if hint else msg


def _references(text: str) -> list[str]:
    """The plain column names ``text`` refers to, in order; none when sqlglot cannot read it.

    Qualified names (``s.f``: a struct's field) and lambda variables are left out.
    """
    parsed = _parse(text)
    if parsed is None:
        return []
    from sqlglot import exp

    found = [c for c in parsed.find_all(exp.Column) if not c.table and c.name]
    # find_all walks breadth-first; report in the order the text names them.
    return sorted(dict.fromkeys(c.name for c in found), key=lambda n: _position(text, n))


def _output_name(text: str) -> str | None:
    """The column name a select item beyond the parser produces: its alias, or the column
    it names; None when Spark generates the name (``upper(user)``)."""
    parsed = _parse(text)
    if parsed is None:
        return None
    from sqlglot import exp

    if isinstance(parsed, exp.Alias):
        return parsed.alias or None
    if isinstance(parsed, exp.Column) and not parsed.table:
        return parsed.name or None
    return None


def _parse(text: str) -> Any:
    # Imported here: only expressions beyond the typed parser need it (~0.3 s to import).
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        return sqlglot.parse_one(text, read="spark")
    except (SqlglotError, ValueError):
        return None


def _position(text: str, name: str) -> int:
    m = re.search(rf"(?<![\w`]){re.escape(name)}(?![\w`])", text, re.IGNORECASE)
    return m.start() if m else len(text)
