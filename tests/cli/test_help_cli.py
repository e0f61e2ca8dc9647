"""``arfl --help`` and each group's ``--help``: every command's summary is one whole sentence."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from arfl.cli.app import app
from arfl.cli.main import _register, main

_register()
ROOT = typer.main.get_command(app)
assert isinstance(ROOT, TyperGroup)
GROUPS: list[tuple[list[str], TyperGroup]] = [([], ROOT)] + [
    ([name], cmd) for name, cmd in ROOT.commands.items() if isinstance(cmd, TyperGroup)
]


def _summary(cmd: Any) -> str:
    """The first paragraph of a command's help, the summary typer lists it with."""
    return inspect.cleandoc(cmd.help or "").split("\n\n")[0]


@pytest.mark.parametrize(("path", "group"), GROUPS, ids=[" ".join(["arfl", *p]) for p, _ in GROUPS])
def test_every_command_summary_is_one_whole_sentence(
    path: list[str],
    group: TyperGroup,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: each summary is one row
    assert main([*path, "--help"]) == 0
    rows = [line.strip("│ ").split(None, 1) for line in capsys.readouterr().out.splitlines()]
    shown = {r[0]: r[1].strip() for r in rows if len(r) == 2}
    assert group.commands
    for name, cmd in group.commands.items():
        summary = " ".join(_summary(cmd).split())
        assert shown.get(name) == summary, f"{name}: cut to {shown.get(name)!r}"
        assert summary.endswith("."), f"{name}: no whole sentence: {summary!r}"
