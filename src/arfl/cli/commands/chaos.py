"""``arfl chaos``: inject a fault into a running deployment by hand, list targets, recover.

Sub-commands::

    arfl chaos inject RUN FAULT [--replica N|leader] [--duration 10s] [--after-boundary 3s]
                                [the kind's own options: --cpu 5, --delay 50ms, --from 1,2,
                                 --executor ID, --no-restart] [--dry-run]
    arfl chaos list RUN [--json]
    arfl chaos recover [RUN] [--force]
    arfl chaos kinds [--json]

The forms from before the sub-commands, ``arfl chaos RUN FAULT ...`` and
``arfl chaos RUN --list``, still work: :class:`ChaosGroup` rewrites them to ``inject`` and
``list`` and says so in one deprecation line on stderr.
"""

from __future__ import annotations

import dataclasses
import json
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from arfl.cli.app import app
from arfl.cli.console import err, out
from arfl.errors import ExitCode, FaultError
from arfl.faults.base import FaultParams
from arfl.faults.listing import resolve_run_dir, summarize
from arfl.faults.runner import ChaosRunner, FaultOutcome, recover, runs_with_pending
from arfl.params import CliOption, ParamError, cli_options, parse_cli
from arfl.registry import FAULTS, UnknownKind
from arfl.targets.local import LocalTarget
from arfl.units import format_duration, parse_duration

DEFAULT_DURATION = "10s"

LEGACY_INJECT = "arfl chaos RUN FAULT"
LEGACY_LIST = "arfl chaos RUN --list"


def legacy_args(args: list[str], commands: set[str], value_options: set[str]) -> list[str] | None:
    """Rewrite a pre-sub-command ``arfl chaos`` argument list into the sub-command form.

    ``RUN FAULT ...`` becomes ``inject RUN FAULT ...`` and ``RUN ... --list`` becomes
    ``list RUN ...``; a sub-command named after options (``--runs DIR recover``) moves to the
    front, as the old single command accepted options anywhere. A word close to a sub-command
    name that names no directory (``kind``, ``lst``) is left alone: it is a typo, and typer's
    "did you mean" says more than an old form would.

    Args:
        args: the arguments after ``chaos``.
        commands: the sub-command names.
        value_options: the options that take a value (their value is not a positional).

    Returns:
        The rewritten arguments, or None when ``args`` need no rewriting.
    """
    first: int | None = None
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":  # too rare in the old forms to be worth guessing what follows
            return None
        if tok.startswith("-") and len(tok) > 1:
            i += 2 if tok in value_options else 1
            continue
        first = i
        break
    if first is None:
        return None
    word = args[first]
    rest = args[:first] + args[first + 1 :]
    if word in commands:
        return None if first == 0 else [word, *rest]
    if get_close_matches(word, commands, n=1, cutoff=0.75) and not (
        Path(word).exists() or Path("runs", word).exists()
    ):
        return None
    if "--list" in rest:
        return ["list", word, *(a for a in rest if a != "--list")]
    return ["inject", word, *rest]


class ChaosGroup(TyperGroup):
    """The ``chaos`` group; also accepts the forms from before its sub-commands (deprecated)."""

    # ctx is Any: typer hands in its own click Context, whose class depends on typer's version
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Rewrite a deprecated form (saying so on stderr), then parse as a group."""
        value_options = {
            opt
            for cmd in self.commands.values()
            for p in cmd.params
            if p.param_type_name == "option"
            and not getattr(p, "is_flag", False)
            and not getattr(p, "count", False)
            for opt in p.opts
        } | {o.flag for o in kind_options() if o.metavar}
        new = legacy_args(list(args), set(self.commands), value_options)
        if new is not None:
            if new[0] in ("inject", "list") and not ctx.resilient_parsing:
                old, now = (
                    (LEGACY_LIST, "arfl chaos list RUN")
                    if new[0] == "list"
                    else (LEGACY_INJECT, "arfl chaos inject RUN FAULT")
                )
                err.print(
                    f"[yellow]deprecated:[/] '{escape(old)}' is now '{escape(now)}'",
                    highlight=False,
                    soft_wrap=True,
                )
            args = new
        return super().parse_args(ctx, args)


def kind_options() -> list[CliOption]:
    """Every fault kind's own options (one flag is one option whichever kinds take it)."""
    seen: dict[str, CliOption] = {}
    for name in FAULTS.names():
        for o in cli_options(FAULTS.info(name).params):
            seen.setdefault(o.flag, o)
    return list(seen.values())


def split_kind_args(args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` without the kind options (``--cpu 5``, ``--from=1,2``, ``--no-restart``) and
    those options, wherever they stand: the kind's model validates them once FAULT is known."""
    options = {o.flag: o for o in kind_options()}
    rest: list[str] = []
    own: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            rest.extend(args[i:])
            break
        opt = options.get(word.partition("=")[0])
        if opt is None:
            rest.append(word)
        elif opt.metavar and "=" not in word and i + 1 < len(args):
            own.extend(args[i : i + 2])
            i += 1
        else:
            own.append(word)
        i += 1
    return rest, own


class InjectCommand(TyperCommand):
    """``chaos inject``: the fault kinds' own options are taken out before click parses the
    rest, and validated by the kind's model (:func:`arfl.params.parse_cli`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Keep the kind options in ``ctx.meta``; parse the others."""
        rest, own = split_kind_args(list(args))
        ctx.meta["kind_args"] = own
        return super().parse_args(ctx, rest)


def _kind_options_help() -> str:
    lines = []
    for name in FAULTS.names():
        opts = cli_options(FAULTS.info(name).params)
        if opts:
            lines.append(f"{name} " + ", ".join(f"{o.usage}: {o.help}" for o in opts))
    return escape(". ".join(lines)) + "."


chaos_app = typer.Typer(
    cls=ChaosGroup,
    help="Inject faults into a running deployment by hand, list its targets, recover.",
    epilog=(
        "A fault that cannot be injected or reverted exits 5; usage errors exit 2; Ctrl-C "
        f"exits 130. Fault kinds: {', '.join(FAULTS.names())} ('arfl chaos kinds'). "
        f"Deprecated forms, still accepted: '{LEGACY_INJECT} \\[options]' (now 'inject'), "
        f"'{LEGACY_LIST}' (now 'list'); 'arfl chaos recover [RUN]' is unchanged."
    ),
    no_args_is_help=True,
)
app.add_typer(chaos_app, name="chaos")

RunArg = Annotated[
    str,
    typer.Argument(
        metavar="RUN", help="Run directory (as 'arfl deploy' printed it), or run name under --runs."
    ),
]
RunsOpt = Annotated[Path, typer.Option("--runs", help="Where run directories live.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


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


@chaos_app.command(
    "inject",
    cls=InjectCommand,
    epilog=(
        "Injects one fault and always reverts it: a fault with a duration blocks until "
        "reverted (Ctrl-C reverts early and exits 130). With --after-boundary it first waits "
        "for a batch boundary (Ctrl-C then injects nothing). A fault that cannot be injected or "
        "reverted exits 5. See 'arfl chaos list RUN' for targets, 'arfl chaos kinds' for faults. "
        f"Each kind's own options: {_kind_options_help()}"
    ),
)
def inject_cmd(
    ctx: typer.Context,
    run: RunArg,
    fault: Annotated[
        str,
        typer.Argument(
            metavar="FAULT",
            help=f"Fault kind: {', '.join(FAULTS.names())} (see 'arfl chaos kinds').",
            show_default=False,
        ),
    ],
    replica: Annotated[
        str | None, typer.Option("--replica", "-r", help="Replica index, or 'leader'.")
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(help=f"How long a pause/slow/partition/delay lasts [{DEFAULT_DURATION}]."),
    ] = None,
    after_boundary: Annotated[
        str | None,
        typer.Option(
            "--after-boundary",
            help="Wait for the next batch boundary of another replica (the only one's if it "
            "is alone), then this long, e.g. 3s.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Resolve and show what would be done; inject nothing.")
    ] = False,
    runs: RunsOpt = Path("runs"),
) -> None:
    """Inject one fault into a running deployment, then revert it."""
    try:
        kind = FAULTS.info(fault)
    except UnknownKind as e:  # a usage error (exit 2), told before the run is looked up
        raise typer.BadParameter(
            f"{e}; 'arfl chaos kinds' describes each", param_hint="FAULT"
        ) from None
    run_dir = resolve_run_dir(run, runs)
    target = LocalTarget.from_run_dir(run_dir)
    dur = _duration(duration, "--duration")
    if kind.takes_duration and dur is None:
        dur = parse_duration(DEFAULT_DURATION)
    if not kind.takes_duration and dur is not None:
        raise typer.BadParameter(f"{fault} takes no duration", param_hint="--duration")
    try:
        options = parse_cli(kind.params, fault, list(ctx.meta.get("kind_args", [])))
    except ParamError as e:
        raise typer.BadParameter(str(e), param_hint=e.flag) from None
    params = FaultParams(
        kind=fault,
        replica="leader" if kind.targets_leader else _replica(replica),
        duration_s=dur,
        after_boundary_s=_duration(after_boundary, "--after-boundary"),
        options=options,
    )
    runner = ChaosRunner(target)
    if dry_run:
        planned, record = runner.plan(params)
        out.print(f"[bold]dry run[/] {planned.describe()} on run {target.run}", highlight=False)
        out.print(json.dumps({"details": planned.details, "undo": record}, indent=2, default=str))
        why = runner.refusal(planned, record)
        if why:
            raise FaultError(f"it would be refused: {why}")
        return
    ChaosRunner.handle_signals()

    def injected(o: FaultOutcome) -> None:
        extra = (
            f"; reverting in {format_duration(o.params.duration_s)} (Ctrl-C reverts now)"
            if o.params.duration_s
            else ""
        )
        out.print(f"[yellow]injected[/] {o.description} (replica {o.replica}){extra}")

    if params.after_boundary_s is not None:
        out.print(
            f"waiting for a batch boundary, then {format_duration(params.after_boundary_s)} "
            "(Ctrl-C: inject nothing)"
        )
    try:
        outcome = runner.run_fault(params, on_injected=injected)
    except KeyboardInterrupt:
        last = runner.outcomes[-1]
        if last.injected_at is None:  # still waiting for a batch boundary
            out.print(f"[yellow]not injected[/] {last.description}")
        else:
            out.print(f"[yellow]reverted early[/] {last.description}")
        # typer turns KeyboardInterrupt into a *returned* 130 that main() does not propagate
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    took = (outcome.reverted_at or 0) - (outcome.injected_at or 0)
    out.print(
        f"[green]reverted[/] {outcome.description} after {took:.2f}s "
        f"{json.dumps(outcome.details, default=str)}",
        highlight=False,
    )


@chaos_app.command("list")
def list_cmd(run: RunArg, as_json: JsonOpt = False, runs: RunsOpt = Path("runs")) -> None:
    """Show what a fault can target in a running deployment.

    Its replicas with their pids, executors and network, the leader, the merger, standbys.
    """
    s = summarize(LocalTarget.from_run_dir(resolve_run_dir(run, runs)))
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(s), indent=2, default=str))
        return
    table = Table(title=f"{s.run} ({s.mode})  {s.run_dir}")
    docker_target = any(r.container for r in s.replicas)
    cols = ["replica", "state", "driver", "pids", "executors", "netns", "address"]
    for col in cols + (["container"] if docker_target else []):
        table.add_column(col)
    for r in s.replicas:
        extra = [r.container or "-"] if docker_target else []
        table.add_row(
            str(r.index) + (" (leader)" if s.leader == r.index else ""),
            r.state,
            str(r.driver_pid or "-"),
            " ".join(map(str, r.pids)) or (r.problem or "-"),
            " ".join(f"{e}:{p}" for e, p in sorted(r.executors.items())) or "-",
            r.netns or "-",
            r.address or "-",
            *extra,
        )
    out.print(table)
    for sb in s.standbys:
        out.print(
            f"standby {sb.index}: driver {sb.pid}, pids {' '.join(map(str, sb.pids)) or 'gone'}",
            highlight=False,
        )
    if s.leader_problem:
        out.print(f"leader: unknown ({s.leader_problem})", highlight=False)
    elif s.leader is not None:
        out.print(f"leader: replica {s.leader}")
    out.print(
        (f"merger: pid {s.merger}" if s.merger is not None else f"merger: {s.merger_problem}")
        + (f", standby pid {s.merger_standby}" if s.merger_standby is not None else ""),
        highlight=False,
    )


@chaos_app.command(
    "recover",
    epilog="A revert that fails exits 5 (after every run was tried).",
)
def recover_cmd(
    run: Annotated[
        str | None,
        typer.Argument(
            metavar="RUN",
            help="Run directory or run name (default: every run under --runs with something "
            "to recover).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also undo faults whose injector still runs, and stop the processes of a "
            "deployment whose arfl still runs.",
        ),
    ] = False,
    runs: RunsOpt = Path("runs"),
) -> None:
    """Undo faults left behind by an arfl that was killed, and stop what it left running.

    Faults: partitions, SIGSTOP, cgroups, qdiscs, namespaces. Processes: the deployment's
    replica drivers with their JVMs, merger and injector.
    """
    dirs = [resolve_run_dir(run, runs)] if run else runs_with_pending(runs)
    if not dirs:
        out.print(f"nothing to recover: no run under {runs} has pending faults or leftovers")
        return
    recover_runs(dirs, force)


@chaos_app.command("kinds")
def kinds_cmd(as_json: JsonOpt = False) -> None:
    """List the fault kinds 'inject' takes, with what each does."""
    if as_json:
        rows = []
        for n in FAULTS.names():
            info = FAULTS.info(n)
            row = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
            row["params"] = [dataclasses.asdict(o) for o in cli_options(info.params)]
            rows.append({"kind": n, **row})
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="fault kinds")
    table.add_column("kind", no_wrap=True)
    table.add_column("lasts", no_wrap=True)
    table.add_column("options")
    table.add_column("needs")
    table.add_column("what it does")
    for name in FAULTS.names():
        info = FAULTS.info(name)
        needs = [
            w
            for w, on in (
                ("root, netns", info.network),
                ("active-leader mode", info.targets_leader),
            )
            if on
        ]
        table.add_row(
            name,
            "--duration" if info.takes_duration else "instant",
            ", ".join(o.usage for o in cli_options(info.params)) or "-",
            ", ".join(needs) or "-",
            info.summary,
        )
    out.print(table)


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
        for line in rep.stopped:
            out.print(f"[green]stopped[/] {line}  ({d})", highlight=False)
        if rep.removed_network:
            out.print(f"removed {', '.join(rep.removed_network)}", highlight=False)
        if rep.removed_cgroups:
            out.print(f"removed cgroups {', '.join(rep.removed_cgroups)}", highlight=False)
        for line in rep.kept:
            out.print(f"[yellow]kept[/] {line}  ({d}; recover again later)", highlight=False)
        if rep.removed_spark_home:
            out.print(f"removed {rep.removed_spark_home}  ({d})", highlight=False, soft_wrap=True)
        if not (
            rep.reverted or rep.skipped or rep.stopped or rep.removed_network
            or rep.removed_cgroups or rep.removed_spark_home or rep.kept
        ):  # fmt: skip
            out.print(f"nothing pending in {d}", highlight=False)
    if failures:
        raise FaultError("\n".join(failures))
