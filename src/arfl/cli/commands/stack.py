"""``arfl stack install|up|down|status``: the embedded ZooKeeper + Kafka stack."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from arfl.cli.app import app
from arfl.cli.console import err, out
from arfl.errors import FaultError
from arfl.stack import down as stack_down
from arfl.stack import install as stack_install
from arfl.stack import status as stack_status
from arfl.stack import up as stack_up
from arfl.stack.lifecycle import layout_of, load_state

stack_app = typer.Typer(
    help="Install, start, stop and inspect the embedded ZooKeeper + Kafka stack.",
    no_args_is_help=True,
)
app.add_typer(stack_app, name="stack")

StateOpt = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="State directory (data, logs, pids) (default $ARFL_STATE_DIR/stack).",
        show_default=False,
    ),
]


@stack_app.command("install")
def install_cmd(
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache", help="Cache directory (default $ARFL_CACHE_DIR).", show_default=False
        ),
    ] = None,
) -> None:
    """Fetch Kafka's jars and Spark's Kafka connector and compile arfl's JVM reader, once."""
    t0 = time.monotonic()
    with err.status(
        "fetching Kafka and spark-sql-kafka jars (once; mvn), compiling arfl's reader..."
    ):
        installed = stack_install.ensure_installed(cache)
    out.print(
        f"[green]kafka[/] {stack_install.KAFKA_VERSION} jars in {installed.kafka_jars}",
        highlight=False,
        soft_wrap=True,
    )
    pyver = stack_install.pyspark_version()
    note = (
        ""
        if installed.spark_kafka_version == pyver
        else f" [yellow](Maven Central has no {pyver}; using {installed.spark_kafka_version})[/]"
    )
    out.print(
        f"[green]spark-sql-kafka[/] {installed.spark_kafka_version} for pyspark {pyver}: "
        f"{len(installed.spark_kafka_jars)} jars{note}",
        highlight=False,
        soft_wrap=True,
    )
    for jar in installed.spark_kafka_jars:
        out.print(f"  {jar}", highlight=False, soft_wrap=True)
    out.print(f"done in {time.monotonic() - t0:.1f}s", style="dim")


@stack_app.command("up")
def up_cmd(
    host: Annotated[
        str | None, typer.Option("--host", help="Address to listen on (default 127.0.0.1).")
    ] = None,
    zk_port: Annotated[
        int | None, typer.Option("--zk-port", help="ZooKeeper client port (default 2181).")
    ] = None,
    kafka_port: Annotated[
        int | None, typer.Option("--kafka-port", help="Kafka listener port (default 9092).")
    ] = None,
    controller_port: Annotated[
        int | None,
        typer.Option("--controller-port", help="Kafka KRaft controller port (default 9093)."),
    ] = None,
    state: StateOpt = None,
) -> None:
    """Start ZooKeeper and Kafka in the background (a running stack is reused).

    Options not given take the running stack's settings, else the defaults.
    """
    last = load_state(layout_of(state))
    host = host or (last.host if last else "127.0.0.1")
    zk_port = zk_port or (last.zk_port if last else 2181)
    kafka_port = kafka_port or (last.kafka_port if last else 9092)
    controller_port = controller_port or (last.controller_port if last else 9093)
    t0 = time.monotonic()
    with err.status(f"starting ZooKeeper and Kafka on {host}..."):
        info = stack_up(host, zk_port, kafka_port, controller_port, state=state)
    out.print(
        f"[green]up[/] kafka {info.kafka}  zookeeper {info.zookeeper}  "
        f"({time.monotonic() - t0:.1f}s)",
        highlight=False,
    )


@stack_app.command("down")
def down_cmd(
    purge: Annotated[bool, typer.Option("--purge", help="Also delete data and logs.")] = False,
    state: StateOpt = None,
    runs: Annotated[
        Path, typer.Option("--runs", help="Run directories whose leftovers to undo first.")
    ] = Path("runs"),
) -> None:
    """Undo what dead deployments left behind, then stop what 'arfl stack up' started.

    What deployments under --runs left: pending faults, replica drivers with their JVMs,
    mergers, injectors, namespaces. What 'up' started: exactly its own processes, by pid.
    """
    from arfl.cli.commands.chaos import recover_runs
    from arfl.faults.runner import runs_with_pending

    recover_error: FaultError | None = None
    leftovers = runs_with_pending(runs)
    if leftovers:
        try:
            recover_runs(leftovers)
        except FaultError as e:
            recover_error = e
    with err.status("stopping Kafka and ZooKeeper..."):
        stopped = stack_down(state, purge=purge)
    if stopped:
        out.print(f"[green]stopped[/] {', '.join(stopped)}", highlight=False)
    else:
        out.print("nothing was running", highlight=False)
    if purge:
        out.print("data and logs deleted", style="dim")
    if recover_error is not None:
        raise recover_error


@stack_app.command("status")
def status_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    state: StateOpt = None,
) -> None:
    """Show each service: pid, address, and whether it answers."""
    services = stack_status(state)
    if as_json:
        typer.echo(json.dumps([s.to_json() for s in services], indent=2))
        return
    table = Table(title="arfl stack")
    for col in ("service", "pid", "address", "state"):
        table.add_column(col)
    table.add_column("log", overflow="fold")
    for s in services:
        st = (
            "[green]healthy[/]"
            if s.healthy
            else ("[yellow]running, not answering[/]" if s.running else "[red]stopped[/]")
        )
        table.add_row(s.name, str(s.pid or "-"), s.address or "-", st, s.log or "-")
    out.print(table)
