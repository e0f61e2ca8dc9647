"""``arfl experiment SPEC --modes ...``: one run per replication mode, then the comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from arfl.cli.app import app
from arfl.cli.commands.deploy import (
    MasterOpt,
    MetricsHostOpt,
    MetricsPortOpt,
    NoLiveOpt,
    SpecArg,
)
from arfl.cli.console import err, out
from arfl.cli.live import LiveView, PlainPrinter, use_live
from arfl.configs.load import load_spec
from arfl.errors import ExitCode
from arfl.orchestrate.context import METRICS_HOST
from arfl.orchestrate.deploy import DeployOptions, DeployResult, Tick
from arfl.orchestrate.exporter import metrics_url
from arfl.registry import mode_names


@app.command()
def experiment(
    spec_path: SpecArg,
    modes: Annotated[
        str,
        typer.Option(
            "--modes",
            help="Comma-separated replication modes, run in this order; the first is the "
            "reference of the comparison.",
        ),
    ] = ",".join(mode_names()),
    runs_root: Annotated[
        Path, typer.Option("--runs", help="Parent folder of the experiment directory.")
    ] = Path("runs"),
    no_live: NoLiveOpt = False,
    master: MasterOpt = None,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = METRICS_HOST,
) -> None:
    """Run SPEC once per mode (same workload, seed and chaos), then compare the runs.

    One report compares latency per phase, masking, correctness, CPU seconds and memory.
    """
    from arfl.cli.commands.report import print_comparison
    from arfl.orchestrate.experiment import parse_modes, run_experiment

    spec = load_spec(spec_path)
    mode_list = parse_modes(modes)
    printer = None if use_live(no_live, out) else PlainPrinter(console=out)
    live: list[LiveView] = []

    def on_start(mode: str, path: Path) -> None:
        if metrics_port is not None and mode == mode_list[0]:
            url = metrics_url(metrics_host, metrics_port)
            err.print(f"metrics: [bold]{escape(url)}[/]", highlight=False, soft_wrap=True)
        err.print(
            f"[bold]{mode}[/]: run directory {escape(str(path))}", highlight=False, soft_wrap=True
        )
        if printer is None:
            view = LiveView(console=out)
            view.__enter__()
            live.append(view)

    def on_tick(mode: str, t: Tick) -> None:
        del mode
        target = printer if printer is not None else (live[-1] if live else None)
        if target is not None:
            target.update(t)

    def on_done(mode: str, result: DeployResult | None, error: str | None) -> None:
        while live:
            live.pop().__exit__(None, None, None)
        if result is None:
            err.print(f"[bold red]{mode} failed[/]: {escape(str(error))}", highlight=False)
            return
        s = result.summary
        lat = s.get("latency_ms") or {}
        out.print(
            f"[green]{mode} done[/]: results {s.get('results')}, p50 "
            f"{lat.get('p50', 0):.0f} ms, p99 {lat.get('p99', 0):.0f} ms, CPU "
            f"{s.get('cpu_s_total')} s",
            highlight=False,
        )

    try:
        res = run_experiment(
            spec,
            mode_list,
            spec_path=spec_path,
            runs_root=runs_root,
            options=DeployOptions(
                master=master, metrics_port=metrics_port, metrics_host=metrics_host
            ),
            on_run_start=on_start,
            on_tick=on_tick,
            on_run_done=on_done,
        )
    finally:
        while live:
            live.pop().__exit__(None, None, None)
    for note in res.notes:
        err.print(f"[dim]chaos mapped: {escape(note)}[/]", highlight=False)
    if res.comparison is not None:
        print_comparison(res.comparison)
    err.print(f"experiment: [bold]{escape(str(res.root))}[/]", highlight=False, soft_wrap=True)
    if res.html is not None:
        err.print(
            f"HTML comparison: [bold]{escape(str(res.html))}[/]", highlight=False, soft_wrap=True
        )
    if res.failed:
        err.print(
            f"[bold red]{len(res.failed)} of {len(mode_list)} run(s) failed[/]: "
            + ", ".join(res.failed),
            highlight=False,
        )
        raise typer.Exit(int(ExitCode.DEPLOY))
