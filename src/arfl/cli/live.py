"""Live view of a running deployment: latency percentiles, rates, gaps and replica states.

``render(...)`` builds one rich renderable from the merger's latest
:class:`~arfl.run.streams.MonitorSnapshot`; :class:`LiveView` redraws it about twice a
second; :class:`PlainPrinter` prints plain lines instead (``--no-live``, or output that is no
terminal: logs, CI, a pipe), one per merger second and at least one every 10 s from the start.
Both take the deployment's ticks (:class:`~arfl.orchestrate.watch.Tick`)::

    with (LiveView() if use_live(no_live, console) else PlainPrinter()) as view:
        deploy(spec, on_tick=view.update)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from arfl.cli.console import out
from arfl.orchestrate.watch import Tick
from arfl.run.streams import InjectorSecond, MonitorSnapshot, Percentiles

PLAIN_EVERY_S = 9.0
"""The longest a plain line waits for something new: ticks come at most a second apart, so
a line comes at least every 10 s."""

_STATE_STYLE = {
    "running": "green",
    "starting": "yellow",
    "restarting": "yellow",
    "recovering": "yellow",
    "paused": "magenta",
    "partitioned": "magenta",
    "dead": "bold red",
    "failed": "bold red",
}


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}"


def _keys(p: Percentiles) -> list[str]:
    """Percentile keys in display order (``p50``, ``p90``, ...), then ``max``."""
    ks = [k for k in p if k.startswith("p")]
    return [*sorted(ks, key=lambda k: float(k[1:])), "max"]


def _latency_table(snap: MonitorSnapshot) -> Table:
    keys = _keys(snap.cumulative or snap.interval) if (snap.cumulative or snap.interval) else [
        "p50", "p90", "p99", "p99.9", "max"
    ]  # fmt: skip
    t = Table(title="end-to-end latency (ms)", title_justify="left", expand=False)
    t.add_column("", style="bold")
    for k in keys:
        t.add_column(k, justify="right")
    t.add_row("last second", *[_ms(snap.interval.get(k)) for k in keys])
    t.add_row("cumulative", *[_ms(snap.cumulative.get(k)) for k in keys])
    return t


def _rates(snap: MonitorSnapshot | None, inj: InjectorSecond | None) -> Text:
    t = Text()
    if inj is not None:
        style = "red" if inj.sent < 0.95 * inj.target else ""
        t.append("input ", style="bold")
        t.append(f"{inj.sent}/s", style=style)
        t.append(f" (target {inj.target}/s")
        if inj.behind_ms >= 1:
            t.append(f", {inj.behind_ms:.0f} ms behind", style="yellow")
        t.append(")   ")
    else:
        t.append("input -   ", style="dim")
    if snap is not None:
        t.append("output ", style="bold")
        t.append(f"{snap.output_rate}/s   ")
        t.append("duplicates ", style="bold")
        t.append(f"{snap.duplicates}/s   ")
        t.append("longest gap ", style="bold")
        gap_style = "red" if snap.longest_gap_ms >= 1000 else ""
        t.append(f"{_ms(snap.longest_gap_ms)} ms", style=gap_style)
        if snap.current_gap_ms >= 500:
            t.append(f" (now {_ms(snap.current_gap_ms)} ms)", style="bold red")
        t.append("\n")
        t.append("results ", style="bold")
        t.append(f"{snap.results}   ")
        t.append("divergent ", style="bold")
        t.append(f"{snap.divergent}", style="bold red" if snap.divergent else "")
        t.append("   bad ", style="bold")
        t.append(f"{snap.bad}", style="red" if snap.bad else "")
        t.append("   dedup ", style="bold")
        t.append(f"{snap.dedup_entries} ids")
    return t


def _replica_table(snap: MonitorSnapshot | None, states: Mapping[int, str]) -> Table:
    t = Table(title="replicas", title_justify="left")
    for col, just in (
        ("replica", "left"),
        ("state", "left"),
        ("received", "right"),
        ("first-copy wins", "right"),
        ("lag ms", "right"),
        ("trail ms", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    ids = sorted(set(states) | set(snap.replicas if snap else {}))
    for r in ids:
        state = states.get(r, "?")
        rs = snap.replicas.get(r) if snap else None
        t.add_row(
            str(r),
            Text(state, style=_STATE_STYLE.get(state, "")),
            str(rs.received) if rs else "-",
            str(rs.wins) if rs else "-",
            _ms(rs.lag_ms) if rs else "-",
            _ms(rs.trail_ms) if rs else "-",
        )
    return t


EFFECT_S = 1.0
"""How long a replica must be silent, or behind, before the live view calls it out: a
steady real-time replica delivers every few ms; a micro-batch replica every batch, so one
longer than this is called out between batches too (true, and visible as such)."""


def effect_lines(snapshot: MonitorSnapshot | None) -> list[str]:
    """What the merger sees a fault do as it happens: a replica that delivered nothing for
    :data:`EFFECT_S` or more longer than the least silent replica (``no output for 3.2 s``),
    else one whose trail of the output is over :data:`EFFECT_S` (``2.1 s behind``; a lone
    replica has no trail, and its lag is seconds between micro-batches anyway); only while
    input flows. The report's verdicts judge the effect with the run's own steady state
    (docs/design.md §4); this line only shows it."""
    if snapshot is None or not snapshot.input_flowing:
        return []
    silent = {
        r: max(0.0, snapshot.t - rs.last_seen_t)
        for r, rs in snapshot.replicas.items()
        if rs.last_seen_t is not None
    }
    out = []
    for r in sorted(snapshot.replicas):
        others = [s for o, s in silent.items() if o != r]
        floor = min(others) if others else 0.0
        quiet = silent.get(r)
        behind = snapshot.replicas[r].trail_ms
        if quiet is not None and quiet >= EFFECT_S and quiet >= floor + EFFECT_S:
            out.append(f"replica {r}: no output for {quiet:.1f} s")
        elif behind is not None and behind >= EFFECT_S * 1000:
            out.append(f"replica {r}: {behind / 1000:.1f} s behind")
    return out


def use_live(no_live: bool, console: Console) -> bool:
    """Whether to draw the live table: only on a terminal, and without ``--no-live``; output
    piped or redirected gets plain lines (:class:`PlainPrinter`)."""
    return not no_live and console.is_terminal


def phase_text(tick: Tick) -> str:
    """What the deployment does, in words: its phase, and during the warm-up how far it is
    (``warming up 12/35 s``; ``/~65 s``: the automatic warm-up's expected length)."""
    if tick.phase == "warming up" and tick.warmup_s is not None:
        about = "~" if tick.warmup_auto else ""
        return f"warming up {tick.elapsed_s:.0f}/{about}{tick.warmup_s:.0f} s"
    return tick.phase


def render(
    snapshot: MonitorSnapshot | None,
    injector_stats: InjectorSecond | None,
    replica_states: Mapping[int, str],
    faults: Sequence[str],
    merger: str = "",
    phase: str = "",
) -> RenderableType:
    """One frame of the live view.

    Args:
        snapshot: the merger's latest monitor line (``None`` before the first one).
        injector_stats: the injector's latest per-second line (``None`` if unknown).
        replica_states: replica index -> state (``running``, ``restarting``, ``dead``, ...).
        faults: descriptions of the faults active now (empty: none).
        merger: which merger serves (its pid; empty: unknown).
        phase: what the deployment does (:func:`phase_text`; empty: unknown).

    Returns:
        A rich renderable (a panel).
    """
    parts: list[RenderableType] = []
    if snapshot is None:
        parts.append(Text("waiting for the merger's first second of output...", style="dim"))
    else:
        parts.append(_latency_table(snapshot))
    parts.append(_rates(snapshot, injector_stats))
    parts.append(_replica_table(snapshot, replica_states))
    ft = Text("faults active: ", style="bold")
    if faults:
        ft.append(", ".join(faults), style="bold red")
    else:
        ft.append("none", style="green")
    if merger:
        ft.append(f"   merger {merger}", style="bold red" if "restarted" in merger else "")
    parts.append(ft)
    effects = effect_lines(snapshot)
    if effects:
        parts.append(Text("seen: " + "; ".join(effects), style="yellow"))
    title = f"arfl live: {phase}" if phase else "arfl live"
    return Panel(Group(*parts), title=title, title_align="left")


def format_line(
    snapshot: MonitorSnapshot | None,
    injector_stats: InjectorSecond | None,
    replica_states: Mapping[int, str],
    faults: Sequence[str],
    merger: str = "",
) -> str:
    """The same information as :func:`render` on one plain-text line."""
    bits: list[str] = []
    if injector_stats is not None:
        bits.append(f"in {injector_stats.sent}/s")
    if snapshot is None:
        if injector_stats is not None:
            bits.append("waiting for merger")
    else:
        iv, cu = snapshot.interval, snapshot.cumulative
        keys = _keys(cu or iv) if (cu or iv) else []
        bits.append(f"out {snapshot.output_rate}/s")
        bits.append("1s " + " ".join(f"{k}={_ms(iv.get(k))}" for k in keys))
        bits.append("all " + " ".join(f"{k}={_ms(cu.get(k))}" for k in keys))
        bits.append(f"gap {_ms(snapshot.longest_gap_ms)}")
        if snapshot.divergent or snapshot.bad:
            bits.append(f"divergent {snapshot.divergent} bad {snapshot.bad}")
    reps = []
    for r in sorted(set(replica_states) | set(snapshot.replicas if snapshot else {})):
        rs = snapshot.replicas.get(r) if snapshot else None
        lag = f"/{_ms(rs.lag_ms)}" if rs and rs.lag_ms is not None else ""
        reps.append(f"r{r}:{replica_states.get(r, '?')}{lag}")
    if reps:
        bits.append(" ".join(reps))
    if faults:
        bits.append("faults: " + ", ".join(faults))
    effects = effect_lines(snapshot)
    if effects:
        bits.append("seen: " + "; ".join(effects))
    if merger:
        bits.append(f"merger {merger}")
    return " | ".join(bits)


def plain_line(tick: Tick, now: float) -> str:
    """One plain line: the time of day, what the deployment does (:func:`phase_text`), then
    what :func:`format_line` says of the tick."""
    head = f"{time.strftime('%H:%M:%S', time.localtime(now))} {phase_text(tick)}"
    rest = format_line(tick.snapshot, tick.injector, tick.replicas, tick.faults, tick.merger)
    return f"{head} | {rest}" if rest else head


class LiveView:
    """A rich ``Live`` display redrawn about twice a second; use as a context manager."""

    def __init__(self, console: Console | None = None, refresh_per_second: float = 2.0) -> None:
        self._live = Live(
            render(None, None, {}, []),
            console=console or out,
            refresh_per_second=refresh_per_second,
            transient=False,
        )

    def update(self, tick: Tick) -> None:
        """Show new data (drawn at the next refresh)."""
        self._live.update(
            render(
                tick.snapshot,
                tick.injector,
                tick.replicas,
                tick.faults,
                tick.merger,
                phase_text(tick),
            )
        )

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live.stop()


class PlainPrinter:
    """Plain lines, no cursor movement: one per new merger second, one when the phase changes,
    and one whenever :data:`PLAIN_EVERY_S` passed without (the start-up, a merger that stopped
    writing). A context manager, like :class:`LiveView`.

    Args:
        console: where the lines go.
        every_s: the longest wait between two lines while ticks come.
        clock: epoch seconds now (the lines' time of day).
    """

    def __init__(
        self,
        console: Console | None = None,
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._console = console or out
        self._every_s = every_s
        self._clock = clock
        self._last_t: float | None = None
        self._phase: str | None = None
        self._printed_at: float | None = None

    def update(self, tick: Tick) -> None:
        """Print a line for ``tick`` if it brings a new merger second or a new phase, or if
        the last line is ``every_s`` old."""
        now = self._clock()
        t = tick.snapshot.t if tick.snapshot is not None else None
        if not (
            (t is not None and t != self._last_t)
            or tick.phase != self._phase
            or self._printed_at is None
            or now - self._printed_at >= self._every_s
        ):
            return
        if t is not None:
            self._last_t = t
        self._phase = tick.phase
        self._printed_at = now
        self._console.print(plain_line(tick, now), highlight=False, markup=False, soft_wrap=True)

    def __enter__(self) -> PlainPrinter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None
