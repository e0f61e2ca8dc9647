"""The warm-up: fixed, or decided by the run (run/steady)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.run.steady import (
    AUTO_MARGIN_S,
    MSER_BATCH,
    SETTLE_MAX_BATCHES,
    expected_warmup_s,
    first_boundary_passed,
    resolve_warmup,
    settled_at,
)

T0 = 1_796_000_000.0


def _line(start: float, ms: float) -> dict[str, Any]:
    ts = datetime.fromtimestamp(start, UTC).isoformat().replace("+00:00", "Z")
    return {"timestamp": ts, "batchDuration": ms, "durationMs": {"triggerExecution": ms}}


def _spec(**workload: Any) -> Any:
    return parse_spec(
        {
            "name": "w",
            "source": {"topic": "in", "partitions": 2},
            "steps": [{"filter": "amount > 10"}],
            "sink": {"topic": "out"},
            "replication": {"mode": "active", "replicas": 2, "trigger": "realtime"},
            "workload": {"duration": "120s", **workload},
        }
    )


def test_a_written_warmup_is_kept() -> None:
    w = resolve_warmup(_spec(warmup="12s"), T0, {})
    assert (w.seconds, w.auto, w.why) == (12.0, False, "workload.warmup")


def test_auto_waits_for_every_replicas_first_boundary_after_the_input_started() -> None:
    # Replica 0's query started 15 s before the input, replica 1's just before it (the stagger);
    # both on 30-s batches, each boundary's stall about 1 s.
    r0 = [_line(T0 - 15, 30_000), _line(T0 + 16, 30_000), _line(T0 + 47, 30_000)]
    r1 = [_line(T0 - 0.5, 30_500), _line(T0 + 31, 30_000)]
    w = resolve_warmup(_spec(), T0, {0: r0, 1: r1})
    assert w.auto and w.seconds == pytest.approx(31.0 + AUTO_MARGIN_S)
    assert w.why == "auto: every replica past its first batch boundary"
    # The same with "auto" written.
    assert resolve_warmup(_spec(warmup="auto"), T0, {0: r0, 1: r1}) == w
    # A boundary seen, its next batch not (yet): its end counts.
    assert first_boundary_passed(r1[:1], T0) == pytest.approx(T0 + 30.0)
    # Micro-batches end at once: the floor.
    quick = [_line(T0 - 1, 1500), _line(T0 + 0.6, 400)]
    assert resolve_warmup(_spec(), T0, {0: quick, 1: quick}).seconds == 5.0


def test_auto_without_a_boundary_or_past_half_the_input_keeps_half() -> None:
    late = [_line(T0 - 1, 90_000), _line(T0 + 90, 30_000)]
    w = resolve_warmup(_spec(), T0, {0: late, 1: late})
    assert w.seconds == 60.0 and "half the input" in w.why
    w = resolve_warmup(_spec(), T0, {0: late})
    assert w.seconds == 60.0
    assert w.why == "auto: replica 1 passed no batch boundary after the input started"


def test_validate_expects_about_one_interval_on_real_time_mode() -> None:
    # arfl's 60-s interval for an active real-time spec of filters, plus a stall and the
    # margin; at most half the input.
    assert expected_warmup_s(_spec(duration="200s")) == pytest.approx(63.0)
    assert expected_warmup_s(_spec()) == pytest.approx(60.0)
    assert expected_warmup_s(_spec(warmup="4s")) == 4.0


def test_the_injectors_late_events_start_after_the_floor_of_an_automatic_warmup() -> None:
    from arfl.configs.lateness import late_from_seq

    assert late_from_seq(_spec(rate=100)) == 500
    assert late_from_seq(_spec(rate=100, warmup="20s")) == 2000


def test_a_written_warmup_shorter_than_the_first_boundaries_is_named() -> None:
    from arfl.run.steady import short_warmup

    said = short_warmup(_spec(warmup="15s", duration="200s"))
    assert said is not None and "workload.warmup 15s ends before" in said
    assert "about 63 s here" in said and "at least 63s" in said
    assert short_warmup(_spec(warmup="65s", duration="200s")) is None
    assert short_warmup(_spec(duration="200s")) is None


def _ticks(start: float, p99s: list[float | None]) -> list[tuple[float, float | None]]:
    return [(start + i + 1.0, p) for i, p in enumerate(p99s)]


def test_the_output_settles_after_a_first_boundary_that_shook_it() -> None:
    # Replica 1's first boundary at +29 s; the output's 1-s p99 stayed at 200-355 ms for 5 s
    # after it (the replicas' first batch with data ending on a full host), then ~13 ms.
    r0 = [_line(T0 - 17, 30_500), _line(T0 + 13.6, 30_500), _line(T0 + 44.3, 30_400)]
    r1 = [_line(T0 - 2, 30_900), _line(T0 + 29.4, 31_400), _line(T0 + 60.8, 30_300)]
    warm = T0 + 29.4 + AUTO_MARGIN_S
    shaken = [314.0, 355.0, 325.0, 204.0, 340.0] + [13.0, 12.0, 14.0, 12.5] * 14
    out = _ticks(warm, shaken)
    w = resolve_warmup(_spec(), T0, {0: r0, 1: r1}, output=out, until=T0 + 90)
    assert w.seconds == pytest.approx(30.4 + 5.0) and "settled" in w.why, w
    # A calm output cuts nothing; nor does one too short to judge before the first fault.
    calm = _ticks(warm, [13.0, 12.0, 14.0, 12.5, 15.0] * 12)
    assert resolve_warmup(_spec(), T0, {0: r0, 1: r1}, output=calm).seconds == pytest.approx(30.4)
    w = resolve_warmup(_spec(), T0, {0: r0, 1: r1}, output=out, until=warm + 15)
    assert w.seconds == pytest.approx(30.4) and "settled" not in w.why
    # A run that never settles keeps at most SETTLE_MAX_BATCHES batches of warm-up more.
    rising = _ticks(warm, [float(10 + 5 * i) for i in range(60)])
    w = resolve_warmup(_spec(), T0, {0: r0, 1: r1}, output=rising)
    assert w.seconds <= 30.4 + SETTLE_MAX_BATCHES * MSER_BATCH + 1e-6


def test_settled_at_leaves_seconds_without_results_out() -> None:
    # The first batch (5 seconds with results) spans 7 s: the cut ends where its last one does.
    gappy = _ticks(T0, [300.0, None, 320.0, None, 310.0, 290.0, 305.0] + [10.0, None] * 30)
    assert settled_at(gappy, T0, T0 + 200) == T0 + 7.0
