"""The live view: what a frame and a plain line show."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from arfl.cli.live import LiveView, PlainPrinter, effect_lines, format_line, render
from arfl.orchestrate.watch import Tick
from arfl.run.streams import InjectorSecond, MonitorSnapshot, ReplicaSnapshot

T0 = 1_764_106_200.0


def _snapshot(t: float = T0, divergent: int = 0) -> MonitorSnapshot:
    pct: dict[str, float | None] = {
        "p50": 12.3, "p90": 45.6, "p99": 150.0, "p99.9": 2500.0, "max": 3100.0, "count": 1000.0
    }  # fmt: skip
    return MonitorSnapshot(
        t=t, interval_s=1.0, output_rate=987, received=1974, duplicates=987,
        interval=pct, cumulative={**pct, "p50": 11.0}, longest_gap_ms=4321.0,
        current_gap_ms=0.0, input_flowing=True, results=50_000, duplicates_total=49_000,
        divergent=divergent, bad=2, evicted=0,
        replicas={0: ReplicaSnapshot(25_000, 30_000, t, 5, 14.0),
                  1: ReplicaSnapshot(24_000, 20_000, t - 9, 5, 9100.0, trail_ms=6789.0)},
    )  # fmt: skip


def _text(renderable: object) -> str:
    c = Console(file=io.StringIO(), width=140, color_system=None)
    c.print(renderable)
    out = c.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_render_shows_percentiles_rates_gap_replicas_and_faults() -> None:
    inj = InjectorSecond(t=T0, t0=T0 - 10, sent=1000, target=1000, behind_ms=0.0, total=10_000)
    text = _text(
        render(
            _snapshot(divergent=3), inj, {0: "running", 1: "restarting"}, ["kill-driver replica 1"]
        )
    )
    for s in (
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "12.3",
        "45.6",
        "150",
        "2,500",
        "3,100",
        "11.0",
        "input 1000/s",
        "output 987/s",
        "longest gap 4,321 ms",
        "running",
        "restarting",
        "9,100",
        "trail ms",
        "6,789",
        "kill-driver replica 1",
        "divergent 3",
    ):
        assert s in text, s


def test_render_before_first_snapshot() -> None:
    text = _text(render(None, None, {0: "starting"}, []))
    assert "waiting for the merger" in text
    assert "starting" in text and "faults active: none" in text


def test_plain_line_and_printer_print_once_per_second() -> None:
    line = format_line(_snapshot(), None, {0: "running", 1: "dead"}, ["pause r0"])
    assert "out 987/s" in line and "p99.9=2,500" in line and "r1:dead/9,100" in line
    assert "faults: pause r0" in line
    buf = io.StringIO()
    p = PlainPrinter(Console(file=buf, width=300, color_system=None), clock=lambda: T0)
    for snap in (_snapshot(T0), _snapshot(T0), _snapshot(T0 + 1), None):
        p.update(Tick(0.0, "running", snap, None, {}))
    assert len(buf.getvalue().splitlines()) == 2


def test_live_view_context_manager_draws() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=140, color_system=None, force_terminal=True)
    with LiveView(console=console, refresh_per_second=20) as view:
        view.update(Tick(3.0, "running", _snapshot(), None, {0: "running"}))
    assert "output 987/s" in buf.getvalue() and "arfl live: running" in buf.getvalue()


def test_the_view_says_which_merger_serves() -> None:
    text = _text(render(_snapshot(), None, {0: "running"}, [], "pid 4242, restarted 1x"))
    assert "merger pid 4242, restarted 1x" in text
    line = format_line(_snapshot(), None, {0: "running"}, [], "pid 4242")
    assert line.endswith("merger pid 4242")
    assert "merger" not in format_line(_snapshot(), None, {0: "running"}, [])


def test_the_view_shows_a_faults_effect_as_the_merger_sees_it() -> None:
    # Replica 1 delivered nothing for 9 s while replica 0 delivered at once: called out, in
    # the frame and in the plain line.
    snap = _snapshot()
    assert effect_lines(snap) == ["replica 1: no output for 9.0 s"]
    assert "seen: replica 1: no output for 9.0 s" in _text(render(snap, None, {}, []))
    assert "seen: replica 1: no output for 9.0 s" in format_line(snap, None, {}, [])
    # Delivering again but still behind (its trail): called behind instead.
    back = replace(snap, replicas={**snap.replicas, 1: replace(snap.replicas[1], last_seen_t=T0)})
    assert effect_lines(back) == ["replica 1: 6.8 s behind"]
    # Nothing to say once it has caught up, or while no input flows (silence is no effect).
    caught = replace(back, replicas={**back.replicas, 1: replace(back.replicas[1], trail_ms=3.0)})
    assert effect_lines(caught) == []
    assert "seen:" not in format_line(caught, None, {}, [])
    assert effect_lines(replace(snap, input_flowing=False)) == []
    # Both silent alike (a host-wide stall, or micro-batches between batches): nobody stands out.
    both = replace(snap, replicas={r: replace(rs, last_seen_t=T0 - 3, trail_ms=0.0)
                                   for r, rs in snap.replicas.items()})  # fmt: skip
    assert effect_lines(both) == []


def test_a_lone_replicas_lag_between_micro_batches_is_not_called_behind() -> None:
    snap = _snapshot()
    lone = replace(snap, replicas={0: replace(snap.replicas[0], lag_ms=2500.0)})
    assert effect_lines(lone) == []
