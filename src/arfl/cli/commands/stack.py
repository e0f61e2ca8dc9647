"""``arfl stack up|down|status|install``: built by the stack module."""

from __future__ import annotations

import typer

from arfl.cli.main import app

stack_app = typer.Typer(help="The embedded ZooKeeper + Kafka stack.", no_args_is_help=True)
app.add_typer(stack_app, name="stack")
