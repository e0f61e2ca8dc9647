"""Plain lines (``--no-live``, output that is no terminal): when a line comes, and what it says."""

from __future__ import annotations

import io
import itertools
import re

from rich.console import Console

from arfl.cli.live import PLAIN_EVERY_S, PlainPrinter, phase_text, plain_line, use_live
from arfl.orchestrate.watch import Tick
from arfl.run.streams import InjectorSecond, MonitorSnapshot

T0 = 1_764_106_200.0
STAMP = re.compile(r"^\d\d:\d\d:\d\d ")


class Clock:
    """A fake clock the test moves."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _printer() -> tuple[PlainPrinter, Clock, io.StringIO]:
    buf = io.StringIO()
    clock = Clock()
    return PlainPrinter(Console(file=buf, width=400, color_system=None), clock=clock), clock, buf


def _snapshot(t: float) -> MonitorSnapshot:
    pct: dict[str, float | None] = {"p50": 6.2, "p90": 9.0, "p99": 16.5, "max": 30.0}
    return MonitorSnapshot(
        t=t, interval_s=1.0, output_rate=998, received=1996, duplicates=998, interval=pct,
        cumulative=pct, longest_gap_ms=12.0, current_gap_ms=0.0, input_flowing=True,
        results=12_000, duplicates_total=12_000, divergent=0, bad=0, evicted=0,
    )  # fmt: skip


def test_the_start_up_gets_a_line_at_once_and_at_least_every_10_s_without_any_snapshot() -> None:
    printer, clock, buf = _printer()
    printed_at: list[float] = []
    phases = ["starting the stack"] * 25 + ["starting replicas"] * 40 + ["waiting for the standby"]
    for second, phase in enumerate(phases):  # one tick a second, as the heartbeat gives
        clock.now = T0 + second
        before = len(buf.getvalue().splitlines())
        printer.update(Tick(float(second), phase, None, None, {0: "starting", 1: "starting"}))
        if len(buf.getvalue().splitlines()) > before:
            printed_at.append(second)
    assert printed_at[0] == 0
    assert max(b - a for a, b in itertools.pairwise(printed_at)) <= 10
    assert 25 in printed_at and len(phases) - 1 in printed_at  # each new phase at once
    lines = buf.getvalue().splitlines()
    assert all(STAMP.match(line) for line in lines)
    assert lines[0].endswith(" starting the stack | r0:starting r1:starting")
    assert lines[-1].endswith(" waiting for the standby | r0:starting r1:starting")
    assert "waiting for merger" not in buf.getvalue()  # no input yet: nothing to wait for


def test_once_results_flow_a_line_per_merger_second_with_rate_percentiles_and_faults() -> None:
    printer, clock, buf = _printer()
    inj = InjectorSecond(t=T0, t0=T0 - 12, sent=1000, target=1000, behind_ms=0.0, total=12_000)
    for i, t in enumerate([T0, T0, T0 + 1]):  # the watch ticks twice per merger second
        clock.now = T0 + i * 0.5
        tick = Tick(
            12.0 + i * 0.5, "warming up", _snapshot(t), inj, {0: "running", 1: "running"},
            faults=["pause replica 1"], warmup_s=35.0,
        )  # fmt: skip
        printer.update(tick)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    head, *bits = lines[0].split(" | ")
    assert STAMP.match(head) and head.endswith(" warming up 12/35 s")
    assert bits[:2] == ["in 1000/s", "out 998/s"]
    assert "1s p50=6.2 p90=9.0 p99=16.5 max=30.0" in bits
    assert "faults: pause replica 1" in bits


def test_a_merger_that_stops_writing_still_gets_a_line_every_10_s() -> None:
    printer, clock, buf = _printer()
    for second in range(31):
        clock.now = T0 + second
        printer.update(Tick(40.0 + second, "running", _snapshot(T0), None, {0: "running"}))
    assert len(buf.getvalue().splitlines()) == 1 + int(30 // PLAIN_EVERY_S)


def test_phase_text_counts_the_warm_up_and_marks_an_automatic_one_as_expected() -> None:
    assert phase_text(Tick(12.4, "warming up", None, None, {}, warmup_s=35.0)) == (
        "warming up 12/35 s"
    )
    auto = Tick(3.0, "warming up", None, None, {}, warmup_s=32.0, warmup_auto=True)
    assert phase_text(auto) == "warming up 3/~32 s"
    assert phase_text(Tick(-20.0, "starting the merger", None, None, {})) == "starting the merger"
    assert plain_line(Tick(0.0, "stopping", None, None, {}), T0).endswith(" stopping")


def test_the_live_table_only_on_a_terminal_and_without_no_live() -> None:
    assert not use_live(False, Console(file=io.StringIO()))
    assert use_live(False, Console(file=io.StringIO(), force_terminal=True))
    assert not use_live(True, Console(file=io.StringIO(), force_terminal=True))
