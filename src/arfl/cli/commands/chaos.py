"""``arfl chaos``: inject a fault into a running deployment by hand, list targets, recover.

Forms (one command; the first argument ``recover`` selects recovery)::

    arfl chaos RUN FAULT [--replica N|leader] [--duration 10s] [--executor ID] [--delay 50ms]
                         [--from 1,2] [--no-restart] [--dry-run]
    arfl chaos RUN --list
    arfl chaos recover [RUN] [--force]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.table import Table

from arfl.cli.console import out
from arfl.cli.main import app
from arfl.errors import ExitCode, FaultError
from arfl.faults.base import FaultParams
from arfl.faults.listing import resolve_run_dir, summarize
from arfl.faults.local import LocalTarget
from arfl.faults.runner import ChaosRunner, FaultOutcome, recover, runs_with_pending
from arfl.registry import FAULTS, UnknownKind
from arfl.units import format_duration, parse_duration

DEFAULT_DURATION = "10s"


def _duration(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=option) from e


def _replica(value: str | None) -> int | Literal["leader"] | None:
    if value is None:
        return None
    if value == "leader":
        return "leader"
    try:
        return int(value)
    except ValueError as e:
        raise typer.BadParameter("a replica index or 'leader'", param_hint="--replica") from e


def _peers(value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    try:
        return tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError as e:
        raise typer.BadParameter(
            "comma-separated replica indices, e.g. 1,2", param_hint="--from"
        ) from e


@app.command(
    epilog=(
        "Forms: 'arfl chaos RUN FAULT \\[options]' injects and reverts one fault (a fault with a "
        "duration blocks until reverted; Ctrl-C reverts early); 'arfl chaos RUN --list' shows "
        "replicas, pids, executors and the leader; 'arfl chaos recover [RUN]' undoes faults "
        "left behind by a killed arfl (without RUN: every run under --runs with pending faults)."
        f" Fault kinds: {', '.join(FAULTS.names())}. A fault that cannot be injected or "
        "reverted exits 5."
    )
)
def chaos(
    run: Annotated[
        str, typer.Argument(help="Run directory (or run name under --runs), or 'recover'.")
    ],
    fault: Annotated[
        str | None,
        typer.Argument(
            help=f"Fault kind ({', '.join(FAULTS.names())}); after 'recover': the RUN.",
            show_default=False,
        ),
    ] = None,
    replica: Annotated[
        str | None, typer.Option("--replica", "-r", help="Replica index, or 'leader'.")
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(help=f"How long a pause/slow/partition/delay lasts [{DEFAULT_DURATION}]."),
    ] = None,
    executor: Annotated[
        str | None, typer.Option(help="kill-executor: executor id (default: the lowest).")
    ] = None,
    delay: Annotated[str | None, typer.Option(help="delay: added latency, e.g. 50ms.")] = None,
    from_: Annotated[
        str | None, typer.Option("--from", help="partition: cut only these peers, e.g. 1,2.")
    ] = None,
    no_restart: Annotated[
        bool, typer.Option("--no-restart", help="kill-replica: the supervisor must not restart.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Resolve and show what would be done; inject nothing.")
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="Show what can be targeted.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="recover: also undo faults whose injector still runs.")
    ] = False,
    runs: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("runs"),
) -> None:
    """Inject a fault into a running deployment (always reverted), list targets, or recover."""
    if run == "recover":
        _recover(fault, runs, force)
        return
    run_dir = resolve_run_dir(run, runs)
    target = LocalTarget.from_run_dir(run_dir)
    if list_:
        _list(target)
        return
    if fault is None:
        raise typer.BadParameter(
            f"which fault? one of {', '.join(FAULTS.names())} (or --list)", param_hint="FAULT"
        )
    try:
        kind = FAULTS.info(fault)
    except UnknownKind as e:
        raise FaultError(str(e)) from None
    dur = _duration(duration, "--duration")
    if kind.takes_duration and dur is None:
        dur = parse_duration(DEFAULT_DURATION)
    if not kind.takes_duration and dur is not None:
        raise typer.BadParameter(f"{fault} takes no duration", param_hint="--duration")
    params = FaultParams(
        kind=fault,
        replica="leader" if kind.targets_leader else _replica(replica),
        duration_s=dur,
        restart=not no_restart,
        executor=executor,
        delay_s=_duration(delay, "--delay"),
        from_=_peers(from_),
    )
    runner = ChaosRunner(target)
    if dry_run:
        planned, record = runner.plan(params)
        out.print(f"[bold]dry run[/] {planned.describe()} on run {target.run}", highlight=False)
        out.print(json.dumps({"details": planned.details, "undo": record}, indent=2, default=str))
        return
    ChaosRunner.handle_signals()

    def injected(o: FaultOutcome) -> None:
        extra = (
            f"; reverting in {format_duration(o.params.duration_s)} (Ctrl-C reverts now)"
            if o.params.duration_s
            else ""
        )
        out.print(f"[yellow]injected[/] {o.description} (replica {o.replica}){extra}")

    try:
        outcome = runner.run_fault(params, on_injected=injected)
    except KeyboardInterrupt:
        out.print(f"[yellow]reverted early[/] {runner.outcomes[-1].description}")
        # typer turns KeyboardInterrupt into a *returned* 130 that main() does not propagate
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    took = (outcome.reverted_at or 0) - (outcome.injected_at or 0)
    out.print(
        f"[green]reverted[/] {outcome.description} after {took:.2f}s "
        f"{json.dumps(outcome.details, default=str)}",
        highlight=False,
    )


def _list(target: LocalTarget) -> None:
    s = summarize(target)
    table = Table(title=f"{s.run} ({s.mode})  {s.run_dir}")
    for col in ("replica", "state", "driver", "pids", "executors", "netns", "address"):
        table.add_column(col)
    for r in s.replicas:
        table.add_row(
            str(r.index) + (" (leader)" if s.leader == r.index else ""),
            r.state,
            str(r.driver_pid or "-"),
            " ".join(map(str, r.pids)) or (r.problem or "-"),
            " ".join(f"{e}:{p}" for e, p in sorted(r.executors.items())) or "-",
            r.netns or "-",
            r.address or "-",
        )
    out.print(table)
    if s.leader_problem:
        out.print(f"leader: unknown ({s.leader_problem})", highlight=False)
    elif s.leader is not None:
        out.print(f"leader: replica {s.leader}")


def _recover(run: str | None, runs: Path, force: bool) -> None:
    dirs = [resolve_run_dir(run, runs)] if run else runs_with_pending(runs)
    if not dirs:
        out.print(f"nothing to recover: no run under {runs} has pending faults")
        return
    recover_runs(dirs, force)


def recover_runs(dirs: list[Path], force: bool = False) -> None:
    """Recover each run directory and say what was undone.

    Raises:
        FaultError: a revert failed (after every directory was tried).
    """
    failures: list[str] = []
    for d in dirs:
        try:
            rep = recover(d, force=force)
        except FaultError as e:
            failures.append(str(e))
            continue
        for line in rep.reverted:
            out.print(f"[green]reverted[/] {line}  ({d})", highlight=False)
        for line in rep.skipped:
            out.print(f"[yellow]skipped[/] {line}  (use --force)", highlight=False)
        if rep.removed_network:
            out.print(f"removed {', '.join(rep.removed_network)}", highlight=False)
        if not (rep.reverted or rep.skipped or rep.removed_network):
            out.print(f"nothing pending in {d}", highlight=False)
    if failures:
        raise FaultError("\n".join(failures))
