"""LagWatch: a replica's lag in seconds, replica-behind / -back, the not-catching-up warning."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.orchestrate.lag import TREND_S, LagWatch, cadence_s, threshold_s
from arfl.run.rundir import Journal, read_jsonl

WINDOW = [{"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}]


def _spec(
    mode: str = "none", replicas: int = 1, steps: list[Any] | None = None, **replication: Any
) -> Spec:
    return parse_spec(
        {
            "name": "lag",
            "source": {"topic": "in", "partitions": 2, "event_time": "ts"},
            "steps": steps or [],
            "sink": {"topic": "out"},
            "replication": {"mode": mode, "replicas": replicas, **replication},
        }
    )


def _progress(offsets: dict[int, int], at: float) -> dict[str, Any]:
    return {
        "timestamp": datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z"),
        "durationMs": {"triggerExecution": 100},
        "sources": [{"endOffset": {"in": {str(p): o for p, o in offsets.items()}}}],
    }


class _World:
    """The input grows 10 records a second per partition; replicas read what they are told."""

    def __init__(self) -> None:
        self.now = 0.0
        self.read: dict[int, dict[int, int] | None] = {0: None, 1: None}
        self.batch_at: dict[int, float] = {0: 0.0, 1: 0.0}
        self.fail = False

    def ends(self) -> dict[int, int]:
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        n = int(self.now * 10)
        return {0: n, 1: n}

    def progress(self, r: int) -> dict[str, Any] | None:
        got = self.read[r]
        return None if got is None else _progress(got, self.batch_at[r])

    def set_read(self, r: int, offsets: dict[int, int]) -> None:
        """Replica ``r`` finished a batch now that read up to ``offsets``."""
        self.read[r] = offsets
        self.batch_at[r] = self.now

    def caught_up(self, r: int) -> None:
        self.set_read(r, self.ends())


def _events(j: Journal, name: str) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(j.path) if e["event"] == name]


def _watch(tmp_path: Path, spec: Spec, w: _World) -> tuple[LagWatch, Journal]:
    j = Journal(tmp_path / "journal.jsonl")
    return LagWatch(j, spec, w.ends, w.progress), j


def test_lag_is_the_age_of_the_oldest_unread_record(tmp_path: Path) -> None:
    w = _World()
    lw, _ = _watch(tmp_path, _spec(), w)
    for t in range(0, 21):
        w.now = float(t)
        lw.observe(w.now, {0: 0.0})
    # Samples at 0 s ({0: 0}), 1 s ({0: 10}), ... 20 s ({0: 200}).
    assert lw.lag(20.0, {0: 200, 1: 200}) == 0.0
    assert lw.lag(20.0, {0: 200, 1: 95}) == 10.0  # partition 1: record 95 arrived by 10 s
    assert lw.lag(20.0, {0: 0, 1: 0}) == 19.0  # nothing read: the first records arrived by 1 s
    assert lw.lag(20.0, {}) == 19.0


def test_behind_warned_when_not_catching_up_then_back(tmp_path: Path) -> None:
    w = _World()
    lw, j = _watch(tmp_path, _spec(), w)
    assert lw.threshold == 10.0
    w.caught_up(0)
    t = 0.0
    # A stalled replica: its progress stays at the start while the input grows.
    while t < 12.0 + TREND_S + 1:
        t += 0.5
        w.now = t
        lw.observe(t, {0: 0.0})
    (behind,) = _events(j, "replica-behind")
    assert behind["replica"] == 0 and 10.0 < behind["lag_s"] <= 11.0
    (warning,) = _events(j, "warning")
    assert warning["replica"] == 0 and warning["kind"] == "not-catching-up"
    assert "not catching up" in warning["message"]
    assert "batch_interval" not in warning["message"]  # not an agreed-batch mode
    assert lw.lags[0] > 40.0
    # It catches up: back below half the threshold, the episode ends, once.
    w.caught_up(0)
    lw.observe(t + 0.5, {0: 0.0})
    lw.observe(t + 1.0, {0: 0.0})
    (back,) = _events(j, "replica-back")
    assert back["replica"] == 0 and back["lag_s"] < 5.0
    assert back["max_lag_s"] > 40.0 and back["behind_s"] > TREND_S
    lw.finish(t + 2.0)
    assert not _events(j, "replica-behind-at-end")
    (summary,) = _events(j, "replica-lag")
    assert summary["max_lag_s"]["0"] == back["max_lag_s"] and summary["threshold_s"] == 10.0


def test_a_replica_catching_up_slowly_is_not_warned(tmp_path: Path) -> None:
    w = _World()
    lw, j = _watch(tmp_path, _spec(), w)
    w.set_read(0, {0: 0, 1: 0})
    t = 0.0
    # 20 s stalled, then it reads 2 s of input per second: behind, lag shrinking.
    while t < 20.0:
        t += 0.5
        w.now = t
        lw.observe(t, {0: 0.0})
    assert _events(j, "replica-behind")
    pos = 0.0
    while t < 20.0 + TREND_S + 5:
        t += 0.5
        w.now = t
        pos = min(t, pos + 1.0)
        n = int(pos * 10)
        w.set_read(0, {0: n, 1: n})
        lw.observe(t, {0: 0.0})
    assert not _events(j, "warning")
    assert _events(j, "replica-back")


@pytest.mark.parametrize("aligned", [True, False])
def test_agreed_batch_warning_names_the_batch_interval(tmp_path: Path, aligned: bool) -> None:
    # Only where a replica runs one agreed batch at a time (catch_up = "aligned"): with the
    # default a replica merges the ready ones, and the batch interval is not what holds it back.
    w = _World()
    catch_up = "aligned" if aligned else "auto"
    spec = _spec("active-leaderless", 2, WINDOW, batch_interval="5s", catch_up=catch_up)
    assert threshold_s(spec) == 15.0
    lw, j = _watch(tmp_path, spec, w)
    w.caught_up(0)
    w.caught_up(1)
    t = 0.0
    while t < 16.0 + TREND_S + 1:
        t += 0.5
        w.now = t
        w.caught_up(1)  # replica 1 keeps up, replica 0 does not
        lw.observe(t, {0: 0.0, 1: 0.0})
    assert [e["replica"] for e in _events(j, "replica-behind")] == [0]
    (warning,) = _events(j, "warning")
    assert ("one agreed batch per 5 s" in warning["message"]) == aligned
    assert ("replication.batch_interval" in warning["message"]) == aligned
    lw.finish(t)
    (end,) = _events(j, "replica-behind-at-end")
    assert end["replica"] == 0 and end["lag_s"] > 40.0


def test_the_trend_counts_from_the_first_batch_of_a_restarted_driver(tmp_path: Path) -> None:
    w = _World()
    lw, j = _watch(tmp_path, _spec(), w)
    w.caught_up(0)
    t = 0.0
    while t < 12.0 + TREND_S + 1:
        t += 0.5
        w.now = t
        w.fail = 20.0 < t < 25.0  # the broker does not answer for a while: samples skipped
        lw.observe(t, {0: None})  # being restarted
    assert _events(j, "replica-behind")
    assert not _events(j, "warning")
    restarted = t
    # Running again, but its first (cold) batch takes long: not judged yet.
    while t < restarted + TREND_S + 10:
        t += 0.5
        w.now = t
        lw.observe(t, {0: restarted})
    assert not _events(j, "warning")
    # Its first batch read one more second of input; then it stalls again for good.
    w.set_read(0, {0: 10, 1: 10})
    first = t
    while t < first + TREND_S - 1:
        t += 0.5
        w.now = t
        lw.observe(t, {0: restarted})
    assert not _events(j, "warning")
    while t < first + TREND_S + 1:
        t += 0.5
        w.now = t
        lw.observe(t, {0: restarted})
    assert _events(j, "warning")


def test_a_lag_coming_down_from_a_peak_is_catching_up(tmp_path: Path) -> None:
    w = _World()
    lw, j = _watch(tmp_path, _spec(), w)
    w.caught_up(0)
    t = 0.0
    # Stalled for 40 s (lag 40), then reading 1.5 s of input per second: 60 s after entering
    # the episode (at ~10.5 s) the lag (~25) is above where it started but far below the peak.
    pos = 0.0
    while t < 80.0:
        t += 0.5
        w.now = t
        if t > 40.0:
            pos = min(t, pos + 0.75)
            n = int(pos * 10)
            w.set_read(0, {0: n, 1: n})
        lw.observe(t, {0: 0.0})
    assert _events(j, "replica-behind") and 15.0 < lw.lags[0] < 30.0
    assert not _events(j, "warning")


def test_records_after_the_end_of_input_do_not_count(tmp_path: Path) -> None:
    w = _World()
    lw, j = _watch(tmp_path, _spec(), w)
    t = 0.0
    while t < 20.0:
        t += 0.5
        w.now = t
        w.caught_up(0)
        lw.observe(t, {0: 0.0})
    lw.input_ended(w.ends())
    # Heartbeats go on after the input; the replica read the input, not them.
    while t < 40.0:
        t += 0.5
        w.now = t
        lw.observe(t, {0: 0.0})
    assert lw.lags[0] == 0.0 and not _events(j, "replica-behind")


def test_real_time_mode_is_not_watched(tmp_path: Path) -> None:
    w = _World()
    spec = _spec(trigger="realtime", trigger_interval="5s")
    lw, j = _watch(tmp_path, spec, w)
    for t in range(60):
        w.now = float(t)
        lw.observe(w.now, {0: 0.0})
    assert lw.lags == {} and not read_jsonl(j.path)


def test_the_cadence_is_the_agreed_batch_interval_the_replicas_use() -> None:
    assert cadence_s(_spec()) == 0.0
    # Filter/select replicas that merge ready agreed batches cut them every 500 ms by default;
    # windows (slower batches) and one agreed batch per Spark batch need the longer default.
    assert cadence_s(_spec("active-leader", 2)) == 0.5
    assert cadence_s(_spec("active-leader", 2, catch_up="aligned")) == 2.0
    assert cadence_s(_spec("active-leaderless", 2, [{"transform": "mod:fn"}])) == 2.0
    window = {"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}
    assert cadence_s(_spec("active-leaderless", 2, [window])) == 2.0
    assert cadence_s(_spec("active-leaderless", 2, heartbeat_interval="3s")) == 3.0
    assert cadence_s(_spec("active-leaderless", 2, batch_interval="4s")) == 4.0
    assert threshold_s(_spec("active-leader", 2, batch_interval="6s")) == 18.0
