"""The typer app that every command module registers on (:mod:`arfl.cli.commands`), with its
global options; :mod:`arfl.cli.main` runs it."""

from __future__ import annotations

from typing import Annotated

import typer

from arfl import __version__

app = typer.Typer(
    name="arfl",
    help="Active replication for latency-sensitive stream pipelines on Spark and Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"arfl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
) -> None:
    del debug  # read by main() before the app runs (its error boundary needs it first)
