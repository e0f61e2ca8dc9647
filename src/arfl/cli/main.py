"""Entry point: the commands registered on the app (:mod:`arfl.cli.app`) and the one error
boundary that maps errors to exit codes."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape
from typer.exceptions import TyperException

from arfl.cli.app import app
from arfl.cli.console import err
from arfl.errors import ArflError, ExitCode


def _register() -> None:
    # Imported for their side effect: each module adds its commands to ``app``.
    from arfl.cli.commands import chaos, deploy, experiment, report, stack, validate  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every ``ArflError`` becomes a red one-line message and its exit code."""
    _register()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        # prog_name: usage lines say "arfl", also when run as "python -m arfl" or from tests
        # under "python -m pytest" (click would take the name from sys.argv otherwise).
        rv = app(args=argv, prog_name="arfl", standalone_mode=False)
        if isinstance(rv, int):  # typer returns 130 for Ctrl-C in non-standalone mode
            return rv
    except ArflError as e:
        if debug:
            err.print_exception()
        err.print(
            f"[bold red]error:[/] {escape(str(e))}", highlight=False, markup=True, soft_wrap=True
        )
        return int(e.exit_code)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        return int(ExitCode.INTERRUPTED)
    except typer.Exit as e:
        return int(e.exit_code)
    except typer.Abort:
        err.print("[red]aborted[/]")
        return int(ExitCode.INTERRUPTED)
    except TyperException as e:  # usage errors (bad option, missing argument): exit 2
        show = getattr(e, "show", None)
        if callable(show):
            show()
        return int(getattr(e, "exit_code", ExitCode.SPEC))
    return int(ExitCode.OK)


def run() -> None:
    """Console-script entry (``arfl``)."""
    sys.exit(main())
