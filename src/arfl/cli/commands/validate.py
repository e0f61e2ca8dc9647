"""``arfl validate SPEC...``"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from arfl.cli.app import app
from arfl.cli.console import err, out
from arfl.configs.chaos import in_warmup, unjudgeable
from arfl.configs.checks import placement_warning
from arfl.configs.load import load_spec
from arfl.configs.masking import masking_problems
from arfl.configs.realtime import host_cores, plan_slots
from arfl.errors import SpecError
from arfl.run.steady import expected_warmup_s, short_warmup


@app.command()
def validate(
    specs: Annotated[list[Path], typer.Argument(help="Spec files (TOML) to check.")],
) -> None:
    """Check spec files and report every problem at once (exit 2 on any).

    For each valid spec, also say what it will ask of this host: replicas, the master each one
    uses and its task slots; a warning when they oversubscribe the host, when a fault comes
    too late for its impact window to close before the input ends, when the replicas' CPU
    quotas (``[placement]``) add up to more than the host's cores, or when a spec that asks
    for masking will likely not get it, with what to set (exit code unchanged).
    """
    failed: list[SpecError] = []
    cores = host_cores()
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
            soft_wrap=True,
        )
        plan = plan_slots(spec, cores)
        out.print(
            f"{escape(path.name)}: {escape(plan.describe())}", highlight=False, soft_wrap=True
        )
        if spec.restart_plan:
            out.print(
                f"{escape(path.name)}: {escape(spec.restart_plan)}", highlight=False, soft_wrap=True
            )
        for chosen in spec.chosen_defaults:
            out.print(
                f"{escape(path.name)}: arfl sets {escape(chosen.describe())}",
                highlight=False,
                soft_wrap=True,
            )
        if plan.note:
            out.print(
                f"{escape(path.name)}: note: {escape(plan.note)}", highlight=False, soft_wrap=True
            )
        warnings = [plan.warning] if plan.warning else []
        warnings += unjudgeable(spec.chaos, spec.workload.duration, spec.report.settle)
        auto = spec.workload.warmup is None
        warnings += in_warmup(spec.chaos, expected_warmup_s(spec), auto)
        short = short_warmup(spec)
        warnings += [short] if short else []
        warnings += [f"will likely not mask: {w}" for w in masking_problems(spec, cores)]
        overcommit = placement_warning(spec, cores)
        warnings += [overcommit] if overcommit else []
        for warning in warnings:
            err.print(
                f"[yellow]warning:[/] {escape(path.name)}: {escape(warning)}",
                highlight=False,
                soft_wrap=True,
            )
    if failed:
        for earlier in failed[:-1]:
            err.print(f"[bold red]error:[/] {earlier}", highlight=False)
        raise failed[-1]
