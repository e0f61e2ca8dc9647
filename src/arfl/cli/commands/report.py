"""``arfl report RUN [RUN...]``: per-phase latency, fault verdicts, correctness, SLOs, HTML.

Exit codes: 0 every SLO met, 1 an SLO breached (the breached lines are printed), 6 the report
could not be produced (``ReportError``, e.g. an SLO naming an unknown metric).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table

from arfl.cli.app import app
from arfl.cli.console import err, out
from arfl.errors import ExitCode

if TYPE_CHECKING:
    from arfl.report.comparison import Comparison
    from arfl.report.model import Report


def _bad(cell: str) -> bool:
    return cell in ("NO", "never") or cell.startswith("failed")


_WORD_FOLD = 14
"""Words without a digit longer than this may fold (a path in an error), to keep a column
narrow enough; the names of kinds and phases are shorter."""


def _whole(header: str, cells: list[str]) -> int:
    """The width a column needs to show its header's words and its numbers whole: a number
    folded over two lines ("35.0-11" / "6.0") reads as two others. Other words are kept whole
    up to :data:`_WORD_FOLD` characters."""
    words = [w for c in cells for w in c.split()]
    digits = [cell_len(w) for w in words if any(ch.isdigit() for ch in w)]
    others = [min(cell_len(w), _WORD_FOLD) for w in words]
    return max([*map(cell_len, header.split()), *digits, *others], default=1)


def _table(
    title: str,
    headers: list[str],
    rows: list[list[str]],
    keep: int,
    red: list[bool],
    width: int | None = None,
) -> Table:
    """A plain table whose first ``keep`` columns (names, times) never wrap; in the others a
    cell wraps between words, never inside a number, and is never cut: "1…" for 15.0 reads as
    another number. ``red``: per row. ``width``: the columns are fitted to it (:func:`_fit`)."""
    table = Table(
        title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, collapse_padding=True,  # two spaces between columns, not three
    )  # fmt: skip
    natural: list[int] = []
    least: list[int] = []
    for i, h in enumerate(headers):
        cells = [r[i] for r in rows]
        natural.append(max(map(cell_len, [h, *cells])))
        least.append(natural[-1] if i < keep else _whole(h, cells))
        table.add_column(
            escape(h), justify="left" if i == 0 else "right", min_width=least[-1],
            no_wrap=i < keep, overflow="fold",
        )  # fmt: skip
    for row, bad in zip(rows, red, strict=True):
        table.add_row(*(escape(c) for c in row), style="red" if bad else None)
    if width is not None:
        _fit(table, natural, least, width)
    return table


def _fit(table: Table, natural: list[int], least: list[int], width: int) -> None:
    """Fix the columns' widths when the table is wider than ``width``: each gets what it must
    show whole, and the room left is shared in proportion to what each would take beyond that.
    Rich's own squeeze narrows the widest columns first, below their longest number if need
    be; this never does (a table whose least width does not fit stays wider)."""
    overhead = _natural_width(table) - sum(natural)  # padding, edges, dividers
    if sum(natural) + overhead <= width:
        return
    room = max(0, width - overhead - sum(least))
    extra = [n - m for n, m in zip(natural, least, strict=True)]
    total = sum(extra) or 1
    for column, m, e in zip(table.columns, least, extra, strict=True):
        column.width = m + room * e // total


def _layout(
    title: str, headers: list[str], rows: list[list[str]], side: bool, width: int | None = None
) -> Table:
    """The table as it is (a row in red when it holds a failure), or on its side: one column
    per row (that column in red), the headers down the first; fitted to ``width``."""
    red = [any(_bad(c) for c in r) for r in rows]
    if not side:
        return _table(title, headers, rows, keep=2, red=red, width=width)
    table = _table(
        title,
        [headers[0], *(r[0] for r in rows)],
        [[h, *(r[i] for r in rows)] for i, h in enumerate(headers) if i > 0],
        keep=1,
        red=[False] * (len(headers) - 1),
        width=width,
    )
    for j, bad in enumerate(red):
        if bad:
            table.columns[j + 1].style = "red"
    return table


def _sideways(headers: list[str], rows: list[list[str]]) -> bool:
    """Whether the table reads better on its side: wider than the terminal as it is, and
    narrower on its side (a fault or correctness table of a few rows in 80 columns), unless
    only the table as it is fits with its headers and text wrapped (a phase table of many
    phases: on its side each phase is a column of whole numbers)."""
    if not rows:
        return False
    flat, side = _layout("", headers, rows, side=False), _layout("", headers, rows, side=True)
    width = _natural_width(flat)
    if width <= out.width:
        return False
    if _natural_width(side) <= out.width:
        return True
    if _least_width(flat) <= out.width < _least_width(side):
        return False
    return _natural_width(side) < width


def _rich_table(
    title: str, headers: list[str], rows: list[list[str]], side: bool | None = None
) -> Table:
    """The table of ``rows``, on its side when :func:`_sideways` says so (or ``side``)."""
    if any(len(r) != len(headers) for r in rows):
        raise ValueError(f"table {title!r}: a row does not have one cell per header")
    side = _sideways(headers, rows) if side is None else side
    return _layout(title, headers, rows, side, width=out.width)


def _natural_width(table: Table) -> int:
    """The table's width with no column squeezed (``Console.measure`` caps at the terminal)."""
    return out.measure(table, options=out.options.update_width(1_000_000)).maximum


def _least_width(table: Table) -> int:
    """The table's width with every column squeezed to what it must show whole."""
    return out.measure(table, options=out.options.update_width(1_000_000)).minimum


def _print_report(rep: Report) -> None:
    from arfl.report.tables import (
        HOPS_NOTE,
        correctness_rows,
        fault_rows,
        hop_rows,
        hot_key_rows,
        phase_rows,
        resource_rows,
        workload_rows,
    )

    out.print(
        f"[bold]{escape(rep.run)}[/]  mode {rep.mode}, {rep.replicas} replica(s), "
        f"input {rep.input_end_s or 0:.1f} s, warm-up {rep.warmup_s:g} s excluded"
        f"{' (' + escape(rep.warmup_rule) + ')' if rep.warmup_rule.startswith('auto') else ''}, "
        f"tolerance {rep.tolerance:g}x",
        highlight=False,
    )
    share = rep.resources.placement_line()
    if share:
        out.print(escape(share), highlight=False, soft_wrap=True)
    for w in rep.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    out.print(_rich_table("phases (latency, gaps: ms; * warm-up, excluded)", *phase_rows(rep)))
    out.print(f"[dim]output gaps: {escape(rep.gap_resolution)}[/]", highlight=False)
    if rep.faults:
        out.print(
            _rich_table(
                "faults (at: s after input start; others: s after injection)", *fault_rows(rep)
            )
        )
        for f in rep.faults:
            out.print(f"  fault-{f.index} {escape(f.kind)}: {escape(f.verdict)}", highlight=False)
    out.print(_rich_table("correctness", *correctness_rows(rep)))
    for note in rep.correctness.notes:
        out.print(f"[dim]  {escape(note)}[/]", highlight=False)
    if rep.workload is not None:
        out.print(_rich_table("workload (input per partition and key)", *workload_rows(rep)))
        out.print(_rich_table("hot keys", *hot_key_rows(rep)))
    if rep.hops is not None and rep.hops.hops:
        out.print(_rich_table("latency by hop (ms, after the warm-up)", *hop_rows(rep)))
        out.print(f"[dim]  {escape(HOPS_NOTE)}[/]", highlight=False)
    if rep.resources.cpu_s is not None:
        out.print(_rich_table("resources", *resource_rows(rep)))


def _print_slo(rep: Report) -> None:
    if not rep.slo.checks:
        out.print("[dim]no SLO in the spec (\\[report.slo])[/]")
        return
    for c in rep.slo.checks:
        mark = "[green]met[/]     " if c.passed else "[bold red]BREACHED[/]"
        out.print(f"{mark} {escape(c.line)}", highlight=False)


def print_comparison(comp: Comparison) -> None:
    """The comparison tables (one per metric) on stdout."""
    from arfl.report.tables import comparison_tables

    tables = comparison_tables(comp)
    # One orientation for all of them: the same runs, read side by side.
    side = any(_sideways(headers, rows) for _, headers, rows in tables)
    for metric, headers, rows in tables:
        out.print(_rich_table(metric, headers, rows, side))


@app.command()
def report(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (several: compare them, the first is the reference).",
            metavar="RUN",
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (a stable contract).")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write the HTML report here (default: RUN/report.html; for several runs "
            "FIRST_RUN/compare.html).",
        ),
    ] = None,
    no_html: Annotated[bool, typer.Option("--no-html", help="Write no HTML report.")] = False,
    recompute: Annotated[
        bool,
        typer.Option(
            "--recompute",
            help="Check correctness by recomputing the results from the "
            "input topic (needs the run's Kafka; starts a Spark batch job).",
        ),
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Run the independent check (no Spark) against the run's Kafka now, instead "
            "of reading the check.json deploy wrote.",
        ),
    ] = False,
) -> None:
    """Show per-phase latency, fault recovery and masking, correctness and SLOs of runs.

    Exits 1 if an SLO is breached.
    """
    # Imported here so that 'arfl --help' and other commands do not load plotly.
    from arfl.report import build_report, compare, render_compare_html, render_html

    reports = [build_report(r, recompute=recompute, check=check) for r in runs]
    comp = compare(reports) if len(reports) > 1 else None
    written: Path | None = None
    if not no_html:
        if comp is None:
            written = render_html(reports[0], html or runs[0] / "report.html")
        else:
            written = render_compare_html(comp, html or runs[0] / "compare.html")
    if as_json:
        if comp is None:
            doc = reports[0].to_dict()
        else:
            doc = {"runs": [r.to_dict() for r in reports], "comparison": comp.to_dict()}
        typer.echo(json.dumps(doc, indent=2))
    else:
        for rep in reports:
            _print_report(rep)
            _print_slo(rep)
            out.print()
        if comp is not None:
            print_comparison(comp)
    if written is not None:
        err.print(f"HTML report: [bold]{escape(str(written))}[/]", highlight=False, soft_wrap=True)
    breached = [r for r in reports if not r.slo.passed]
    if breached:
        for rep in breached:
            for c in rep.slo.breaches:
                err.print(
                    f"[bold red]SLO breached[/] ({escape(rep.run)}): {escape(c.line)}",
                    highlight=False,
                )
        raise typer.Exit(int(ExitCode.SLO_BREACHED))
