"""``arfl deploy SPEC``: run one experiment with live percentiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from arfl.cli.app import app
from arfl.cli.console import err, out
from arfl.cli.live import LiveView, PlainPrinter, use_live
from arfl.configs.load import load_spec
from arfl.configs.spec import SUPPORTED_MASTERS, check_master
from arfl.orchestrate.context import METRICS_HOST
from arfl.orchestrate.deploy import DeployOptions
from arfl.orchestrate.deploy import deploy as run_deploy
from arfl.orchestrate.exporter import metrics_url
from arfl.report.model import Report


def _fmt_ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


SpecArg = Annotated[Path, typer.Argument(help="The experiment spec (TOML).", metavar="SPEC")]
NoLiveOpt = Annotated[
    bool,
    typer.Option(
        "--no-live",
        help="Plain lines instead of the live table (the default when output is no terminal).",
    ),
]


def _master(value: str | None) -> str | None:
    """``--master``, checked as ``spark.master`` is (a usage error otherwise)."""
    if value is None:
        return None
    try:
        return check_master(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


MasterOpt = Annotated[
    str | None,
    typer.Option(
        "--master",
        help=f"Override spark.master ({SUPPORTED_MASTERS}).",
        callback=_master,
    ),
]
"""Options shared by ``deploy`` and ``experiment``."""
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=1,
        max=65535,
        help="Serve Prometheus metrics (latency histogram, rates, replicas, faults) on this "
        "port at /metrics while the deployment runs (docs/metrics.md).",
    ),
]
MetricsHostOpt = Annotated[
    str,
    typer.Option("--metrics-host", help="The address --metrics-port listens on."),
]


@app.command()
def deploy(
    spec_path: SpecArg,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Write the run here instead of runs/.")
    ] = None,
    runs_root: Annotated[
        Path, typer.Option("--runs", help="Parent folder of run directories.")
    ] = Path("runs"),
    no_live: NoLiveOpt = False,
    master: MasterOpt = None,
    drain: Annotated[
        float | None,
        typer.Option("--drain-s", help="Longest wait (s) for replicas to catch up."),
    ] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = METRICS_HOST,
) -> None:
    """Run SPEC end to end: stack, replicas, injector, merger, chaos; live percentiles."""
    spec = load_spec(spec_path)
    options = DeployOptions(
        runs_root=runs_root,
        run_dir=run_dir,
        master=master,
        drain_s=drain,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )

    def announce(path: Path) -> None:
        err.print(f"run directory: [bold]{escape(str(path))}[/]", highlight=False, soft_wrap=True)
        if metrics_port is not None:
            url = metrics_url(metrics_host, metrics_port)
            err.print(f"metrics: [bold]{escape(url)}[/]", highlight=False, soft_wrap=True)

    view = LiveView(console=out) if use_live(no_live, out) else PlainPrinter(console=out)
    with view:
        result = run_deploy(spec, spec_path, options, on_tick=view.update, on_run_dir=announce)
    s = result.summary
    lat = s.get("latency_ms") or {}
    out.print(
        f"[green]done[/] {result.run_dir}: produced {s.get('produced')}, results "
        f"{s.get('results')}, duplicates dropped {s.get('duplicates_dropped')}, divergent "
        f"{s.get('divergent')}, bad {s.get('bad_records')}; latency ms (whole run) "
        + " ".join(f"{k}={_fmt_ms(v)}" for k, v in lat.items())
        + f"; longest gap {_fmt_ms(s.get('longest_gap_ms'))} ms",
        highlight=False,
    )
    _print_report_lines(result.run_dir)


def _print_report_lines(run_dir: Path) -> None:
    """The report's closing lines (:func:`report_lines`), or why there are none."""
    from arfl.errors import ArflError
    from arfl.report.build import build_report

    try:
        report = build_report(run_dir)
    except (ArflError, OSError, ValueError) as e:
        err.print(f"[yellow]no report figures[/]: {escape(str(e))}", highlight=False)
        return
    for line in report_lines(report):
        out.print(line, highlight=False, soft_wrap=True)


def report_lines(report: Report) -> list[str]:
    """What deploy says last, from the run's report (the figures and verdicts ``arfl report``
    gives, computed there): the latency after the warm-up (the report's ``overall``, from the
    warm-up's end or an earlier first fault; the ``done`` line's whole-run figures include the
    start-up's first seconds, which no verdict uses), then one line per
    injected fault: masked or not, with the figure that decided it. Rich markup."""
    lines = []
    o = report.overall
    if o.count:
        pct = " ".join(f"{k}={_fmt_ms(v)}" for k, v in o.percentiles_ms.items())
        lines.append(
            f"after the {o.start_s:g}-s warm-up: latency ms {pct} max={_fmt_ms(o.max_ms)} "
            f"({o.count:,} results)"
        )
    for f in report.faults:
        where = f" on replica {f.target}" if f.target is not None else ""
        at = f" at {f.at_s:.1f}s" if f.at_s is not None else ""
        word = {
            "masked": "[green]masked[/]",
            "not masked": "[red]NOT masked[/]",
            "no effect": "[yellow]no effect[/]",
            "unjudged": "[yellow]unjudged[/]",
        }
        if f.error:
            lines.append(f"fault {f.index} {f.kind}{where}{at}: [red]failed[/]: {escape(f.error)}")
            continue
        said = word.get(f.outcome, "masking unknown")
        lines.append(f"fault {f.index} {f.kind}{where}{at}: {said} ({escape(f.verdict)})")
    return lines
