"""Keeping real-time replicas' batch boundaries apart: who holds back, how long, and that a
hold freezes and always thaws the driver JVM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from arfl.replica import phase
from arfl.replica.phase import HOLD_CAP_FRACTION, PhaseKeeper, batch_span, hold_back_s


def _progress(start: float, dur_ms: int) -> dict[str, object]:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start)) + f".{int(start % 1 * 1000):03d}Z"
    return {"timestamp": ts, "durationMs": {"triggerExecution": dur_ms}, "batchId": 1}


def test_batch_span_reads_start_and_length() -> None:
    span = batch_span(_progress(1000.25, 5300))
    assert span is not None
    assert span[0] == pytest.approx(1000.25, abs=1e-3)
    assert span[1] == pytest.approx(1005.55, abs=1e-3)
    assert batch_span({"timestamp": "x", "durationMs": {"triggerExecution": 1}}) is None
    assert batch_span({"durationMs": {}}) is None


def test_the_replica_too_close_behind_holds_for_the_difference() -> None:
    # Period 5 s, R=2: boundaries should lie 2.5 s apart. A peer started 0.5 s before mine.
    assert hold_back_s(100.0, [99.5], 5.0, 2) == pytest.approx(HOLD_CAP_FRACTION * 5.0)
    assert hold_back_s(100.0, [98.0], 5.0, 2) == pytest.approx(0.5)


def test_the_replica_ahead_or_far_enough_does_not_hold() -> None:
    assert hold_back_s(100.0, [100.3], 5.0, 2) == 0.0  # the peer started after mine: it holds
    assert hold_back_s(100.0, [97.6], 5.0, 2) == 0.0  # 2.4 s: within the tolerance
    assert hold_back_s(100.0, [96.0], 5.0, 2) == 0.0  # 4 s behind the peer: far enough
    assert hold_back_s(100.0, [], 5.0, 2) == 0.0
    assert hold_back_s(100.0, [99.9], 5.0, 1) == 0.0


def test_of_two_replicas_at_the_same_boundary_only_one_holds() -> None:
    a, b = 100.0, 100.05
    assert hold_back_s(a, [b], 5.0, 2) == 0.0
    assert hold_back_s(b, [a], 5.0, 2) > 0.0


def test_three_replicas_keep_a_third_apart() -> None:
    assert hold_back_s(100.0, [99.0, 97.0], 6.0, 3) == pytest.approx(1.0)
    assert hold_back_s(100.0, [98.0, 96.0], 6.0, 3) == 0.0


def test_boundary_before_projects_a_peer_by_its_own_period() -> None:
    assert phase.boundary_before(112.0, 100.0, 5.0) == pytest.approx(110.0)
    assert phase.boundary_before(100.0, 100.0, 5.0) == pytest.approx(100.0)
    assert phase.boundary_before(99.0, 100.0, 5.0) is None


def _append(path: Path, spans: list[tuple[float, int]]) -> None:
    """Progress lines as a peer's listener appends them; a new file starts with its query's
    first batch (which gives no period), as long as the first span and just before it."""
    if not path.exists() and spans:
        start, dur = spans[0]
        spans = [(start - dur / 1000, dur), *spans]
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(_progress(s, d)) + "\n" for s, d in spans))


def test_a_dead_peer_is_not_kept_away_from(tmp_path: Path) -> None:
    peer = tmp_path / "replica-1.jsonl"
    now = time.time()
    _append(peer, [(now - 70, 5000), (now - 65, 5000)])
    keeper = PhaseKeeper(0, [peer], 2, lambda m: None)
    assert keeper.peer_phases(now) == []
    # A torn last line (still being written) waits for its newline.
    _append(peer, [(now - 12, 5500)])
    with peer.open("a") as f:
        f.write('{"timestamp": "2026-')
    [(start, period)] = keeper.peer_phases(now)
    assert start == pytest.approx(now - 6.5, abs=0.01)
    with peer.open("a") as f:
        f.write('x"}\n')  # completed: not a progress event, skipped
    _append(peer, [(now - 6.5, 5500)])
    [(start, period)] = keeper.peer_phases(now)
    assert start == pytest.approx(now - 1, abs=0.01) and period == pytest.approx(5.5)


def _planner(tmp_path: Path, name: str, peer_start: float, now: float) -> PhaseKeeper:
    """A keeper with 5 s batches whose last ended 2 s before ``now`` (next boundary in 3 s),
    and one peer whose current 5 s batch started at ``peer_start``."""
    peer = tmp_path / f"{name}.jsonl"
    _append(peer, [(peer_start - 5, 5000)])
    keeper = PhaseKeeper(0, [peer], 2, lambda m: None)
    for k in range(3):
        keeper.on_progress(_progress(now - 2 - 5 * (3 - k), 5000))
    return keeper


def test_plan_holds_the_next_boundary_when_it_follows_a_peers_too_soon(tmp_path: Path) -> None:
    now = time.time()
    # The peer's next boundary comes 0.5 s before this replica's.
    planned = _planner(tmp_path, "close", now - 2.5, now).plan(now)
    assert planned is not None
    mine, hold = planned
    assert mine == pytest.approx(now + 3, abs=0.01)
    assert hold == pytest.approx(HOLD_CAP_FRACTION * 5, abs=0.01)
    # 3.5 s apart: nothing to do. Nor when the peer's boundary follows this one's: it holds.
    assert _planner(tmp_path, "apart", now - 0.5, now).plan(now) is None
    assert _planner(tmp_path, "after", now - 1.8, now).plan(now) is None
    # Too late to freeze before the boundary.
    assert _planner(tmp_path, "late", now - 2.5, now).plan(now + 2.8) is None


def test_stopping_the_keeper_thaws_a_freeze_at_once(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = psutil.Process(child.pid)
        keeper = PhaseKeeper(child.pid, [], 2, lambda m: None)
        holding = threading.Thread(target=keeper._hold, args=(30.0, 15.0))
        holding.start()
        deadline = time.monotonic() + 5
        while proc.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.status() == psutil.STATUS_STOPPED
        t0 = time.monotonic()
        keeper.stop()
        holding.join(timeout=5)
        assert time.monotonic() - t0 < 2 and proc.status() != psutil.STATUS_STOPPED
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_a_hold_freezes_the_jvm_and_thaws_it(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = psutil.Process(child.pid)
        logs: list[str] = []
        keeper = PhaseKeeper(child.pid, [tmp_path / "replica-0.jsonl"], 2, logs.append)
        holding = threading.Thread(target=keeper._hold, args=(1.0, 0.5))
        holding.start()
        seen = set()
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:
            seen.add(proc.status())
            time.sleep(0.01)
        holding.join()
        assert psutil.STATUS_STOPPED in seen
        assert proc.status() != psutil.STATUS_STOPPED
        assert keeper.holds == [0.5] and "held the next batch back 0.50s" in logs[0]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_the_keeper_freezes_from_before_the_boundary_it_holds(tmp_path: Path) -> None:
    peer = tmp_path / "replica-0.jsonl"
    held: list[tuple[float, float, float]] = []

    class Recording(PhaseKeeper):
        def _hold(self, freeze: float, hold: float) -> None:
            held.append((time.time(), freeze, hold))

    keeper = Recording(0, [peer], 2, lambda m: None)
    keeper.start()
    try:
        now = time.time()
        _append(peer, [(now - 5.0 - 0.4 + 1.5 - 5, 5000)])  # peer boundary 0.4 s before mine
        for k in range(3):
            keeper.on_progress(_progress(now + 1.5 - 5 * (4 - k), 5000))  # mine at now + 1.5
        deadline = time.monotonic() + 5
        while not held and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        keeper.stop()
    [(at, freeze, hold)] = held
    assert at == pytest.approx(now + 1.5 - phase.MARGIN_S, abs=0.1)
    assert hold == pytest.approx(HOLD_CAP_FRACTION * 5, abs=0.01)
    assert freeze == pytest.approx(phase.MARGIN_S + hold)


def _app(path: Path, t: float, query_started: float | None = None) -> None:
    """A peer's app file as its driver writes it (``t``: when; ``query_started``: its query)."""
    info: dict[str, object] = {"app_id": "app-1", "pid": 1, "t": t}
    if query_started is not None:
        info["query_started"] = query_started
    path.write_text(json.dumps(info))


def test_a_restarted_peer_has_no_phase_until_its_new_query_reports_a_batch(
    tmp_path: Path,
) -> None:
    """While a peer is replaced (its app file deleted by the supervisor, or rewritten by its
    new driver after its last reported batch) it replays or catches up and covers nobody."""
    peer, app = tmp_path / "replica-0.jsonl", tmp_path / "replica-0.app.json"
    now = time.time()
    _append(peer, [(now - 40, 30000)])  # its last batch ended 10 s ago
    _app(app, now - 45, query_started=now - 41)
    keeper = PhaseKeeper(0, [peer], 2, lambda m: None, peer_apps=[app])
    [(start, period)] = keeper.peer_phases(now)
    assert start == pytest.approx(now - 10, abs=0.01) and period == pytest.approx(30)
    app.unlink()  # the supervisor deleted it: a standby is promoted, or a driver respawned
    assert keeper.peer_phases(now) == []
    _app(app, now - 3)  # its new driver is up, no query yet
    assert keeper.peer_phases(now) == []
    _app(app, now - 3, query_started=now - 2)  # its query started: replaying
    assert keeper.peer_phases(now) == []
    _append(peer, [(now - 2, 1500)])  # its first batch reported: a phase again
    [(start, _)] = keeper.peer_phases(now)
    assert start == pytest.approx(now - 0.5, abs=0.01)
    # Without app files, as before: the last reported batch.
    plain = PhaseKeeper(0, [peer], 2, lambda m: None)
    [(start, _)] = plain.peer_phases(now)
    assert start == pytest.approx(now - 0.5, abs=0.01)


def test_a_hold_planned_for_a_peer_that_then_restarted_is_dropped(tmp_path: Path) -> None:
    """A windowed kill (docs/benchmarks.md): the survivor planned, before the kill, to hold its next
    boundary 6.8 s away from the killed replica's projected one, and held it ~27 s later,
    after a standby had taken that replica's place; the hold moved the survivor's stall onto
    the newcomer's first boundary (merged p99 1.7 s for a second)."""
    peer, app = tmp_path / "replica-0.jsonl", tmp_path / "replica-0.app.json"
    held: list[tuple[float, float, float]] = []
    logs: list[str] = []

    class Recording(PhaseKeeper):
        def _hold(self, freeze: float, hold: float) -> None:
            held.append((time.time(), freeze, hold))

    keeper = Recording(0, [peer], 2, logs.append, peer_apps=[app])
    now = time.time()
    _app(app, now - 30, query_started=now - 29)
    _append(peer, [(now - 5.0 - 0.4 + 1.5 - 5, 5000)])  # peer boundary 0.4 s before mine
    for k in range(3):
        keeper.on_progress(_progress(now + 1.5 - 5 * (4 - k), 5000))  # mine at now + 1.5
    planned = keeper.plan(now)  # while the peer ran: hold
    assert planned is not None and planned[1] == pytest.approx(HOLD_CAP_FRACTION * 5, abs=0.01)
    # Then it was killed, and a standby's query started.
    _app(app, now - 0.2, query_started=now - 0.1)
    keeper._carry_out(*planned)
    assert held == []
    assert any("dropped a planned hold of 1.25s" in m for m in logs), logs
    # A hold planned toward a peer that still runs is carried out.
    _app(app, now - 30, query_started=now - 29)
    t = time.time()
    peer2 = tmp_path / "replica-2.jsonl"
    _append(peer2, [(t - 5.0 - 0.4 + 1.0 - 5, 5000)])  # its boundary 0.4 s before mine
    again = Recording(0, [peer2], 2, logs.append, peer_apps=[app])
    for k in range(3):
        again.on_progress(_progress(t + 1.0 - 5 * (4 - k), 5000))  # mine at t + 1.0
    planned = again.plan(t)
    assert planned is not None
    again._carry_out(*planned)
    [(_, freeze, hold)] = held
    assert hold == pytest.approx(planned[1]) and freeze == pytest.approx(phase.MARGIN_S + hold)


def test_a_hold_planned_on_a_peers_projection_is_dropped_when_its_newer_line_disagrees(
    tmp_path: Path,
) -> None:
    """The plan projects a peer's next boundary from its last reported batch; a newer progress
    line arriving before the freeze (a shorter batch: a held or restarted peer) puts its
    boundary far enough from this replica's, and the hold is not carried out."""
    peer = tmp_path / "replica-1.jsonl"
    held: list[float] = []
    logs: list[str] = []

    class Recording(PhaseKeeper):
        def _hold(self, freeze: float, hold: float) -> None:
            held.append(hold)

    keeper = Recording(0, [peer], 2, logs.append)
    now = time.time()
    _append(peer, [(now - 5.0 - 0.4 + 1.5 - 5, 5000)])  # projected 0.4 s before mine
    for k in range(3):
        keeper.on_progress(_progress(now + 1.5 - 5 * (4 - k), 5000))  # mine at now + 1.5
    planned = keeper.plan(now)
    assert planned is not None and planned[1] == pytest.approx(HOLD_CAP_FRACTION * 5, abs=0.01)
    # Its next line: that batch ended at now - 1.4, 2.9 s before mine (more than 5 s / 2).
    _append(peer, [(now - 4.9, 3500)])
    keeper._carry_out(*planned)
    assert held == []
    assert any("dropped a planned hold of 1.25s" in m for m in logs), logs


def _run_progress(start: float, dur_ms: int, run: str) -> dict[str, object]:
    return {**_progress(start, dur_ms), "runId": run}


def test_the_first_batch_of_a_query_does_not_set_the_period(tmp_path: Path) -> None:
    """A query's first real-time batch includes its start-up (44 s at a 30-s interval in a
    bench run, against 31.5-33.6 s after): taken for the period, it puts both of a replica's
    early holds 11 s past its boundaries, mid-batch, and the stagger stays at 5 s.
    Its end still is the replica's phase."""
    keeper = PhaseKeeper(0, [], 2, lambda m: None)
    t = 1000.0
    keeper.on_progress(_run_progress(t, 44_000, "a"))
    assert keeper.period() is None  # nothing but a first batch: no projection yet
    assert keeper.plan(t + 45) is None
    keeper.on_progress(_run_progress(t + 44, 33_300, "a"))
    assert keeper.period() == pytest.approx(33.3)
    # Restarted (a new run id): its first batch replays and starts up; not a period either.
    keeper.on_progress(_run_progress(t + 80, 50_000, "b"))
    assert keeper.period() == pytest.approx(33.3)
    keeper.on_progress(_run_progress(t + 130, 32_000, "b"))
    assert keeper.period() == pytest.approx(33.3)  # median_high of 33.3 and 32.0
    # A peer's likewise: its phase from its last batch, its period from the others.
    peer = tmp_path / "replica-1.jsonl"
    now = time.time()
    with peer.open("w") as f:
        f.write(json.dumps(_run_progress(now - 60, 44_000, "p")) + "\n")
    watcher = PhaseKeeper(0, [peer], 2, lambda m: None)
    assert watcher.peer_phases(now) == []  # only a first batch: no period to project by
    with peer.open("a") as f:
        f.write(json.dumps(_run_progress(now - 16, 31_500, "p")) + "\n")
    [(start, period)] = watcher.peer_phases(now + 20)
    assert start == pytest.approx(now + 15.5, abs=0.01) and period == pytest.approx(31.5)


def test_the_freeze_starts_early_enough_for_the_spread_of_batch_lengths(tmp_path: Path) -> None:
    """Real-time batches at a 30-s interval lasted 31.5-33.3 s (the boundary's planning and
    commit vary): a boundary predicted from their median came up to 1.3 s later than the real
    one, past a freeze 0.5 s before the prediction. The freeze now starts the spread of recent
    lengths before it (at least 0.5 s, at most a quarter of the period)."""
    keeper = PhaseKeeper(0, [], 2, lambda m: None)
    assert keeper.margin() == pytest.approx(phase.MARGIN_S)
    t = 1000.0
    for i, dur in enumerate([44_000, 31_500, 33_300, 32_000]):
        keeper.on_progress(_run_progress(t + 40 * i, dur, "a"))
    assert keeper.margin() == pytest.approx(33.3 - 31.5 + phase.MARGIN_S)
    short = PhaseKeeper(0, [], 2, lambda m: None)
    for i, dur in enumerate([9_000, 5_000, 8_000]):
        short.on_progress(_run_progress(t + 10 * i, dur, "a"))
    assert short.margin() == pytest.approx(8.0 / 4)


def test_a_batch_held_back_does_not_set_the_period(tmp_path: Path) -> None:
    """A batch this replica held at its end lasted its period plus the hold: its length would
    put the next projection a hold late."""
    peer = tmp_path / "replica-1.jsonl"

    class Recording(PhaseKeeper):
        def _hold(self, freeze: float, hold: float) -> None:
            self.holds.append(hold)

    keeper = Recording(0, [peer], 2, lambda m: None)
    now = time.time()
    _append(peer, [(now - 5.0 - 0.4 + 1.5 - 5, 5000)])  # projected 0.4 s before mine
    for k in range(3):
        keeper.on_progress(_progress(now + 1.5 - 5 * (4 - k), 5000))  # mine at now + 1.5
    planned = keeper.plan(now)
    assert planned is not None
    keeper._carry_out(*planned)
    assert keeper.holds == [pytest.approx(1.25, abs=0.01)]
    # The line of the batch before it, late (it ended before the freeze began): a period.
    keeper.on_progress(_progress(now - 8.55, 5000))
    assert list(keeper._periods) == [5.0, 5.0, 5.0]
    keeper.on_progress(_progress(now - 3.5, 6250))  # the held batch: 5 s + 1.25 s
    assert list(keeper._periods) == [5.0, 5.0, 5.0]
    keeper.on_progress(_progress(now + 2.75, 5100))  # the next one counts again
    assert list(keeper._periods) == [5.0, 5.0, 5.0, pytest.approx(5.1)]
