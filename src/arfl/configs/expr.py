"""A small typed parser and evaluator of the Spark SQL expression subset arfl documents
(docs/correctness.md).

Two users: the independent check (:mod:`arfl.measure.check`) evaluates a spec's steps with it,
and spec validation (:mod:`arfl.configs.schema`) types them against the workload's fields.
Written from Spark's documented semantics, not from arfl's Spark query code, so that a bug
there shows up as a difference in the check. The subset:

* column names (bare or back-quoted; resolved case-insensitively, as Spark does by default);
* literals: integers, decimals (``1.5``), exponent numbers (``1e3``, a double), strings in
  single or double quotes, ``TRUE``, ``FALSE``, ``NULL``;
* arithmetic ``+ - * / %`` and unary ``-`` / ``+``;
* comparisons ``= == != <> < <= > >=``, ``IS [NOT] NULL``;
* ``AND``, ``OR``, ``NOT`` (three-valued: NULL is unknown);
* in a select list, ``expr AS name``.

Anything else (function calls, ``CASE``, ``IN``, ``LIKE``, casts, ...) raises
:class:`Unsupported` naming the expression: the check then says "unsupported", never guesses.
Two kinds of it are mistakes in the spec rather than limits of the model, and say so with their
own subclasses: a name no column has (:class:`UnknownColumn`) and an operand whose type the
operation does not take (:class:`TypeMismatch`).

Types follow Spark's rules for the subset: ``long`` op ``long`` is ``long`` except ``/`` (always
``double``); a ``double`` operand makes the result ``double``; decimal literals are exact
(``decimal``) until they meet a ``double``. Where Spark's result depends on settings or on
rounding rules the check does not model (division by zero, decimal division, 64-bit overflow,
comparing a string with a number), evaluation raises :class:`Unsupported` too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

Type = Literal["long", "double", "decimal", "string", "boolean", "null"]
Value = int | float | Decimal | str | bool | None
Row = Mapping[str, Value]

_NUMERIC: frozenset[str] = frozenset({"long", "double", "decimal"})
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class Unsupported(Exception):
    """The pipeline, or a value it meets, is outside what the check models.

    ``str(e)`` is the reason, starting with the expression or place concerned.
    """


class UnknownColumn(Unsupported):
    """An expression names a column the schema does not have."""

    def __init__(self, message: str, name: str, known: list[str]) -> None:
        super().__init__(message)
        self.name = name
        """The name as written."""
        self.known = known
        """The schema's column names, in order."""


class TypeMismatch(Unsupported):
    """An operand's type is not one the operation takes (Spark refuses it, or casts it in a
    way that yields NULL or fails for the values arfl generates)."""

    def __init__(self, message: str, found: str, needed: str) -> None:
        super().__init__(message)
        self.found = found
        """What the operand is, e.g. ``"country (string) compared with 1 (long)"``."""
        self.needed = needed
        """What the operation takes, e.g. ``"numbers"``."""


@dataclass(frozen=True)
class Column:
    """A column of a step's input: its name as the data carries it, and its type."""

    name: str
    type: Type


class Schema:
    """The columns visible to a step, resolved case-insensitively like Spark's default."""

    def __init__(self, columns: list[Column]) -> None:
        self.columns = columns
        self._by_lower: dict[str, list[Column]] = {}
        for c in columns:
            self._by_lower.setdefault(c.name.lower(), []).append(c)

    def resolve(self, name: str, where: str) -> Column:
        """The column ``name`` refers to.

        Raises:
            Unsupported: no such column, or the name is ambiguous.
        """
        found = self._by_lower.get(name.lower(), [])
        if not found:
            known = [c.name for c in self.columns]
            raise UnknownColumn(
                f"{where}: no column {name!r} here (columns: {', '.join(known)})", name, known
            )
        if len(found) > 1:
            raise Unsupported(f"{where}: column {name!r} is ambiguous")
        return found[0]


# --- typed expression tree --------------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    """A typed expression: ``type``, the name Spark gives it unaliased, and its evaluator."""

    type: Type
    name: str
    fn: Callable[[Row], Value]
    is_column: bool = False

    def eval(self, row: Row) -> Value:
        """The expression's value on ``row`` (column name -> value)."""
        return self.fn(row)


# --- tokens -----------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<suffix>[A-Za-z_]\w*)?
    | (?P<str>'(?:[^'\\]|'')*'|"(?:[^"\\]|"")*")
    | (?P<bq>`(?:[^`]|``)+`)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op><=>|<=|>=|<>|!=|==|\|\||[=<>+\-*/%(),])
    )""",
    re.VERBOSE,
)

_KEYWORDS = frozenset({"and", "or", "not", "is", "null", "true", "false", "as"})
_OUTSIDE_PREDICATES = frozenset({"in", "like", "ilike", "rlike", "regexp", "between"})
"""Spark predicates outside the subset (:meth:`_Parser.parse_cmp`)."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, str, ident, op, kw, end
    text: str
    value: Any = None


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise Unsupported(f"{text!r}: cannot read {text[pos:].strip()[:20]!r}")
        pos = m.end()
        if m.group("num") is not None:
            if m.group("suffix"):
                raise Unsupported(f"{text!r}: typed literal {m.group(0).strip()!r}")
            out.append(_Tok("num", m.group("num")))
        elif m.group("str") is not None:
            q = m.group("str")
            out.append(_Tok("str", q, q[1:-1].replace(q[0] * 2, q[0])))
        elif m.group("bq") is not None:
            out.append(_Tok("ident", m.group("bq")[1:-1].replace("``", "`"), "quoted"))
        elif m.group("ident") is not None:
            word = m.group("ident")
            kind = "kw" if word.lower() in _KEYWORDS else "ident"
            out.append(_Tok(kind, word.lower() if kind == "kw" else word))
        else:
            out.append(_Tok("op", m.group("op")))
    out.append(_Tok("end", ""))
    return out


# --- parser (precedence climbing, Spark SQL's order) ------------------------------------


class _Parser:
    """Parses and types one expression against a schema."""

    def __init__(self, text: str, schema: Schema, where: str) -> None:
        self.text = text
        self.schema = schema
        self.where = where
        self.toks = _tokens(text)
        self.i = 0

    def fail(self, why: str) -> Unsupported:
        return Unsupported(f"{self.where} {self.text!r}: {why}")

    def mismatch(self, why: str, found: str, needed: str) -> TypeMismatch:
        return TypeMismatch(f"{self.where} {self.text!r}: {why}", found, needed)

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, kind: str, text: str) -> bool:
        t = self.peek()
        if t.kind == kind and t.text == text:
            self.i += 1
            return True
        return False

    def done(self) -> None:
        t = self.peek()
        if t.kind != "end":
            raise self.fail(f"unexpected {t.text!r} (outside the subset the check models)")

    # boolean layer
    def parse_or(self) -> Expr:
        left = self.parse_and()
        while self.accept("kw", "or"):
            left = _logic("OR", left, self.parse_and(), self)
        return left

    def parse_and(self) -> Expr:
        left = self.parse_not()
        while self.accept("kw", "and"):
            left = _logic("AND", left, self.parse_not(), self)
        return left

    def parse_not(self) -> Expr:
        if self.accept("kw", "not"):
            return _not(self.parse_not(), self)
        return self.parse_cmp()

    def parse_cmp(self) -> Expr:
        left = self.parse_add()
        t = self.peek()
        if t.kind == "op" and t.text in ("=", "==", "!=", "<>", "<", "<=", ">", ">="):
            self.take()
            return _compare(t.text, left, self.parse_add(), self)
        if t.kind == "op" and t.text in ("<=>", "||"):
            raise self.fail(f"operator {t.text!r} is outside the subset")
        # Predicates the subset leaves out: said here, before AND or OR takes the bare operand
        # before them for theirs (a string column is no boolean: a false type error).
        word = t.text.lower() if t.kind in ("ident", "kw") else ""
        if word == "not" and self.toks[self.i + 1].text.lower() in _OUTSIDE_PREDICATES:
            word = self.toks[self.i + 1].text.lower()
        if word in _OUTSIDE_PREDICATES:
            raise self.fail(f"{word.upper()} is outside the subset")
        if self.accept("kw", "is"):
            negate = self.accept("kw", "not")
            if not self.accept("kw", "null"):
                raise self.fail("only IS [NOT] NULL is modelled")
            return _is_null(left, negate)
        return left

    # arithmetic layer
    def parse_add(self) -> Expr:
        left = self.parse_mul()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.take().text
            left = _arith(op, left, self.parse_mul(), self)
        return left

    def parse_mul(self) -> Expr:
        left = self.parse_unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "%"):
            op = self.take().text
            left = _arith(op, left, self.parse_unary(), self)
        return left

    def parse_unary(self) -> Expr:
        t = self.peek()
        if t.kind == "op" and t.text in ("-", "+"):
            self.take()
            nxt = self.peek()
            if t.text == "-" and nxt.kind == "num":
                # Spark's grammar reads "-5" as one negative literal (named "-5"), but
                # "-amount" as a unary minus (named "(- amount)").
                self.take()
                return _number(nxt.text, negative=True, parser=self)
            operand = self.parse_unary()
            if operand.type not in _NUMERIC and operand.type != "null":
                raise self.mismatch(
                    f"unary {t.text} on a {operand.type}",
                    f"{operand.name} ({operand.type})",
                    "a number",
                )
            if t.text == "+":
                return Expr(operand.type, f"(+ {operand.name})", operand.fn)
            f = operand.fn
            return Expr(operand.type, f"(- {operand.name})", lambda r: _neg(f(r)))
        return self.parse_primary()

    def parse_primary(self) -> Expr:
        t = self.take()
        if t.kind == "num":
            return _number(t.text, negative=False, parser=self)
        if t.kind == "str":
            s = str(t.value)
            if "\\" in s:
                raise self.fail("backslash escapes in string literals are not modelled")
            return Expr("string", s, lambda r: s)
        if t.kind == "kw" and t.text in ("true", "false"):
            b = t.text == "true"
            return Expr("boolean", t.text, lambda r: b)
        if t.kind == "kw" and t.text == "null":
            return Expr("null", "NULL", lambda r: None)
        if t.kind == "op" and t.text == "(":
            inner = self.parse_or()
            if not self.accept("op", ")"):
                raise self.fail("missing ')'")
            return inner
        if t.kind == "ident":
            if self.peek().kind == "op" and self.peek().text == "(":
                raise self.fail(f"function {t.text}() is outside the subset")
            col = self.schema.resolve(t.text, f"{self.where} {self.text!r}")
            name = col.name

            # Spark names an unaliased column reference as it was written.
            def get(r: Row) -> Value:
                return r.get(name)

            return Expr(col.type, t.text, get, is_column=True)
        if t.kind == "end":
            raise self.fail("ends too early")
        raise self.fail(f"unexpected {t.text!r} (outside the subset the check models)")


# --- semantics --------------------------------------------------------------------------


def _number(text: str, negative: bool, parser: _Parser) -> Expr:
    sign = "-" if negative else ""
    if re.fullmatch(r"\d+", text):
        n = int(sign + text)
        return Expr("long", str(n), lambda r: n)
    if "e" in text.lower():
        x = float(sign + text)
        return Expr("double", _java_double(x, parser), lambda r: x)
    d = Decimal(sign + text)
    # Java's BigDecimal.toString keeps the written scale, as Decimal's str does ("1.50").
    return Expr("decimal", str(d), lambda r: d)


def _java_double(x: float, parser: _Parser) -> str:
    """Java's ``Double.toString`` where it agrees with Python's ``repr`` (plain notation)."""
    if x == int(x) and abs(x) < 1e7:
        return f"{x:.1f}"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)
    raise parser.fail(f"the name Spark gives the literal {x!r} is not modelled; add AS name")


def _neg(v: Value) -> Value:
    if v is None:
        return None
    assert isinstance(v, int | float | Decimal) and not isinstance(v, bool)
    return _check_long(-v) if isinstance(v, int) else -v


def _check_long(v: int) -> int:
    if not _LONG_MIN <= v <= _LONG_MAX:
        raise Unsupported(f"64-bit overflow ({v}): Spark's result depends on ANSI mode")
    return v


def _arith_type(op: str, left: Expr, right: Expr, parser: _Parser) -> Type:
    a, b = left.type, right.type
    for e in (left, right):
        if e.type not in _NUMERIC and e.type != "null":
            raise parser.mismatch(
                f"arithmetic {op!r} on a {e.type} is outside the subset",
                f"{e.name} ({e.type})",
                "numbers",
            )
    if op == "/":
        if "decimal" in (a, b) and "double" not in (a, b):
            raise parser.fail("decimal division (Spark rounds to a derived scale) is not modelled")
        return "double"
    if "double" in (a, b):
        return "double"
    if "decimal" in (a, b):
        return "decimal"
    return "long"


def _arith(op: str, left: Expr, right: Expr, parser: _Parser) -> Expr:
    typ = _arith_type(op, left, right, parser)
    lf, rf = left.fn, right.fn
    expr_text = parser.text

    def run(r: Row) -> Value:
        a, b = lf(r), rf(r)
        if a is None or b is None:
            return None
        assert isinstance(a, int | float | Decimal) and isinstance(b, int | float | Decimal)
        if typ == "double":
            x, y = float(a), float(b)
        elif typ == "decimal":
            x, y = Decimal(a), Decimal(b)  # type: ignore[assignment]
        else:
            x, y = a, b  # type: ignore[assignment]
        if op in ("/", "%") and y == 0:
            raise Unsupported(
                f"{expr_text!r}: division by zero (Spark fails or yields NULL, by ANSI mode)"
            )
        if op == "+":
            out: Value = x + y
        elif op == "-":
            out = x - y
        elif op == "*":
            out = x * y
        elif op == "/":
            out = x / y
        elif isinstance(x, int) and isinstance(y, int):
            # Java's remainder takes the dividend's sign; Python's % takes the divisor's.
            out = abs(x) % abs(y) * (-1 if x < 0 else 1)
        elif isinstance(x, float):
            out = math.fmod(x, y)
        else:
            out = x % y  # Decimal's % already truncates like Java's
        return _check_long(out) if isinstance(out, int) else out

    return Expr(typ, f"({left.name} {op} {right.name})", run)


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: bool(a == b),
    "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    ">=": lambda a, b: bool(a >= b),
}


def _compare(op: str, left: Expr, right: Expr, parser: _Parser) -> Expr:
    a_t, b_t = left.type, right.type
    numeric = a_t in _NUMERIC and b_t in _NUMERIC
    if not (numeric or a_t == b_t or "null" in (a_t, b_t)):
        raise parser.mismatch(
            f"comparing a {a_t} with a {b_t} (Spark casts) is not modelled",
            f"{left.name} ({a_t}) compared with {right.name} ({b_t})",
            "two numbers, or two values of one type",
        )
    as_double = "double" in (a_t, b_t)
    base = "=" if op in ("=", "==", "!=", "<>") else op
    cmp = _CMP[base]
    lf, rf = left.fn, right.fn

    def run(r: Row) -> Value:
        a, b = lf(r), rf(r)
        if a is None or b is None:
            return None
        if as_double:
            # Spark compares a long or decimal with a double as doubles.
            a, b = float(a), float(b)
        return cmp(a, b)

    name = f"({left.name} = {right.name})" if base == "=" else f"({left.name} {op} {right.name})"
    eq = Expr("boolean", name, run)
    if op in ("!=", "<>"):
        return _not(eq, parser)
    return eq


def _require_bool(e: Expr, what: str, parser: _Parser) -> None:
    if e.type not in ("boolean", "null"):
        raise parser.mismatch(
            f"{what} needs a boolean, got a {e.type} ({e.name})",
            f"{e.name} ({e.type})",
            "a boolean",
        )


def _not(e: Expr, parser: _Parser) -> Expr:
    _require_bool(e, "NOT", parser)
    f = e.fn

    def run(r: Row) -> Value:
        v = f(r)
        return None if v is None else not v

    return Expr("boolean", f"(NOT {e.name})", run)


def _logic(op: str, left: Expr, right: Expr, parser: _Parser) -> Expr:
    _require_bool(left, op, parser)
    _require_bool(right, op, parser)
    lf, rf = left.fn, right.fn
    dominant = op == "OR"  # the value that decides alone: TRUE for OR, FALSE for AND

    def run(r: Row) -> Value:
        a, b = lf(r), rf(r)
        if a is dominant or b is dominant:
            return dominant
        if a is None or b is None:
            return None
        return not dominant

    return Expr("boolean", f"({left.name} {op} {right.name})", run)


def _is_null(e: Expr, negate: bool) -> Expr:
    f = e.fn
    if negate:
        return Expr("boolean", f"({e.name} IS NOT NULL)", lambda r: f(r) is not None)
    return Expr("boolean", f"({e.name} IS NULL)", lambda r: f(r) is None)


# --- entry points -----------------------------------------------------------------------


def compile_predicate(text: str, schema: Schema, where: str) -> Expr:
    """Compile a filter condition.

    Raises:
        Unsupported: outside the subset, or not a boolean.
    """
    p = _Parser(text, schema, where)
    e = p.parse_or()
    p.done()
    _require_bool(e, "a filter", p)
    return e


def compile_select_item(text: str, schema: Schema, where: str) -> tuple[str, Expr]:
    """Compile one select-list item into ``(output name, expression)``.

    The output name is the alias, else the name Spark generates (``(amount * 2)``; a column
    keeps the spelling it was written with).

    Raises:
        Unsupported: outside the subset.
    """
    p = _Parser(text, schema, where)
    e = p.parse_or()
    if p.accept("kw", "as"):
        t = p.take()
        if t.kind not in ("ident", "kw"):
            raise p.fail("AS needs a name")
        p.done()
        return t.text, e
    p.done()
    return e.name, e
