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
