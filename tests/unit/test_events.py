"""The journal's events: one definition each, written as their plain names."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from arfl.run.events import Event
from arfl.run.rundir import Journal

SRC = Path(__file__).resolve().parents[2] / "src" / "arfl"


def test_an_event_is_written_as_its_name_and_read_back_as_the_member(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    j.write(Event.FAULT_INJECTED, kind="pause")
    line = json.loads((tmp_path / "journal.jsonl").read_text())
    assert line["event"] == "fault-injected" and type(line["event"]) is str
    assert [e["event"] for e in j.read()] == [Event.FAULT_INJECTED]


def _spelled(tree: ast.AST, names: set[str]) -> list[ast.Constant]:
    """Event names as string literals where an event is written or matched: the first
    argument of ``write``/``events``/``first_event`` calls, and comparisons."""
    out: list[ast.Constant] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in ("write", "events", "first_event"):
                out += [a for a in n.args if isinstance(a, ast.Constant)]
        elif isinstance(n, ast.Compare):
            for c in [n.left, *n.comparators]:
                elts = c.elts if isinstance(c, (ast.Tuple, ast.List, ast.Set)) else [c]
                out += [e for e in elts if isinstance(e, ast.Constant)]
    return [c for c in out if isinstance(c.value, str) and c.value in names]


def test_no_event_name_is_spelled_where_events_are_written_or_matched() -> None:
    """A name spelled as a string there would be a second definition (a typo would match
    nothing, silently)."""
    names = {e.value for e in Event}
    assert len(names) == len(Event)
    spelled = [
        f"{p.relative_to(SRC)}:{c.lineno}: {c.value}"
        for p in SRC.rglob("*.py")
        for c in _spelled(ast.parse(p.read_text()), names)
    ]
    assert spelled == []
    assert _spelled(ast.parse('j.write("fault-injected")\nx == "warning"'), names)


def _declared() -> dict[str, tuple[set[str], bool, set[str]]]:
    """Event member -> (its fields, takes a record passed along, files that write it), read
    from the docstring under each member of ``Event``."""
    tree = ast.parse((SRC / "run" / "events.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Event")
    out: dict[str, tuple[set[str], bool, set[str]]] = {}
    for node, doc in zip(cls.body, cls.body[1:], strict=False):
        if not (isinstance(node, ast.Assign) and isinstance(doc, ast.Expr)):
            continue
        text = " ".join(str(ast.literal_eval(doc.value)).split())
        fields_part, _, writers = text.partition(" Written by ")
        fields_part = fields_part.removeprefix("Fields: ").rstrip(".")
        passed = "those of a record passed along" in fields_part
        names = fields_part.replace("and those of a record passed along", "")
        fields = {f.strip() for f in names.split(",") if f.strip() and " " not in f.strip()}
        files = {w.strip() for w in writers.rstrip(".").split(",") if w.strip()}
        out[node.targets[0].id] = (fields, passed, files)  # type: ignore[attr-defined]
    return out


def _members(node: ast.expr | None) -> list[str]:
    """``Event.X`` -> [X]; ``Event.X if c else Event.Y`` -> [X, Y]; anything else -> []."""
    if isinstance(node, ast.IfExp):
        return _members(node.body) + _members(node.orelse)
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Event"
    ):
        return [node.attr]
    return []


def _writes(sources: dict[str, str]) -> list[tuple[str, str, int, set[str], bool]]:
    """(member, file, line, keyword fields, splats a record) of every journal write."""
    out = []
    for path, source in sources.items():
        for n in ast.walk(ast.parse(source)):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                continue
            if n.func.attr != "write" or not n.args:
                continue
            kws = {k.arg for k in n.keywords if k.arg is not None}
            splat = any(k.arg is None for k in n.keywords)
            out += [(m, path, n.lineno, kws, splat) for m in _members(n.args[0])]
    return out


def _problems(sources: dict[str, str]) -> list[str]:
    declared = _declared()
    problems = []
    written: dict[str, set[str]] = {}
    for member, path, line, kws, splat in _writes(sources):
        fields, passed, files = declared[member]
        written.setdefault(member, set()).update(kws)
        if kws - fields:
            problems.append(f"{path}:{line}: {member} writes undeclared {sorted(kws - fields)}")
        if splat and not passed:
            problems.append(f"{path}:{line}: {member} passes a record along; none declared")
        if path not in files:
            problems.append(f"{path}:{line}: {member} is written here; the docstring says {files}")
    for member, (fields, _, _) in declared.items():
        unwritten = fields - written.get(member, set())
        if unwritten and member in written:
            problems.append(f"{member}: declared {sorted(unwritten)}, written by no writer")
    return problems


def test_every_event_declares_its_fields_and_writers_and_each_write_keeps_to_them() -> None:
    """The fields under each member are the event's one definition: a writer that adds an
    undeclared field, splats a record into an event that takes none, or is not named as a
    writer fails here; so does a declared field that no writer writes."""
    sources = {str(p.relative_to(SRC)): p.read_text() for p in SRC.rglob("*.py")}
    assert set(_declared()) == {e.name for e in Event}
    written = {w[0] for w in _writes(sources)}
    assert written == {e.name for e in Event}  # every event has a writer the check sees
    assert _problems(sources) == []
    bad = {
        "faults/runner.py": "j.write(Event.FAULT_FAILED, kind=1, replica=0, eror='x')\n"
        "j.write(Event.RUN_FAILED, **rec)\n"
    }
    found = _problems(bad)
    assert any("undeclared ['eror']" in p for p in found)
    assert any("RUN_FAILED passes a record along" in p for p in found)
    assert any("RUN_FAILED is written here" in p for p in found)
