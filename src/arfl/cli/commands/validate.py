"""``arfl validate SPEC...``"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from arfl.cli.console import err, out
from arfl.cli.main import app
from arfl.configs.spec import load_spec
from arfl.errors import SpecError


@app.command()
def validate(
    specs: Annotated[list[Path], typer.Argument(help="Spec files (TOML) to check.")],
) -> None:
    """Check spec files and report every problem at once (exit 2 on any)."""
    failed: list[SpecError] = []
    for path in specs:
        try:
            spec = load_spec(path)
        except SpecError as e:
            failed.append(e)
            continue
        out.print(
            f"[green]ok[/] {path}: {spec.name}, mode {spec.replication.mode}, "
            f"{spec.replication.replicas} replica(s), {len(spec.steps)} step(s), "
            f"{len(spec.chaos)} fault(s)",
            highlight=False,
        )
    if failed:
        for earlier in failed[:-1]:
            err.print(f"[bold red]error:[/] {earlier}", highlight=False)
        raise failed[-1]
