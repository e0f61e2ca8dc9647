"""Epoch cuts of the active-leaderless mode against a fake time index (no IV/O)."""

from __future__ import annotations

import pytest

from arfl.replica.modes.leaderless import EpochCuts
from arfl.replica.source.offsets import NO_BATCH, BatchOffset

IV = 100  # epoch length, ms


class FakeLog:
    """Partitions as lists of record timestamps (offset = index), like LogAppendTime."""

    def __init__(self, parts: dict[int, list[int]]) -> None:
        self.parts = parts
        self.requests = 0

    def append(self, p: int, ts: int) -> None:
        assert not self.parts[p] or self.parts[p][-1] <= ts, "broker time never goes back"
        self.parts[p].append(ts)

    def partitions(self) -> list[int]:
        return sorted(self.parts)

    def high_watermarks(self) -> dict[int, int]:
        return {p: len(r) for p, r in self.parts.items()}

    def low_watermarks(self) -> dict[int, int]:
        return dict.fromkeys(self.parts, 0)

    def offsets_for_time(self, ts_ms: int) -> dict[int, int | None]:
        self.requests += 1
        out: dict[int, int | None] = {}
        for p, recs in self.parts.items():
            out[p] = next((i for i, t in enumerate(recs) if t >= ts_ms), None)
        return out


def start_of(log: FakeLog) -> BatchOffset:
    return BatchOffset(NO_BATCH, log.low_watermarks())


def run_all(cuts: EpochCuts, start: BatchOffset, limit: int = 100) -> list[BatchOffset]:
    out = []
    for _ in range(limit):
        end = cuts.next_end(start)
        if end == start:
            break
        out.append(end)
        start = end
    return out


def test_each_batch_is_one_epoch_up_to_the_first_record_at_or_after_its_boundary() -> None:
    log = FakeLog({0: [1010, 1050, 1120, 1250, 1310], 1: [1005, 1190, 1205, 1330]})
    cuts = EpochCuts(log, IV, max_epochs=1, clock=lambda: 1400)
    batches = run_all(cuts, start_of(log))
    # Boundaries 1100, 1200, 1300 are final (both partitions have later records); 1400 is not.
    assert [(b.batch, dict(b.offsets)) for b in batches] == [
        (11, {0: 2, 1: 1}),
        (12, {0: 3, 1: 2}),
        (13, {0: 4, 1: 3}),
    ]


def test_a_boundary_is_not_final_until_every_partition_passed_it() -> None:
    log = FakeLog({0: [1010, 1150], 1: [1020]})
    cuts = EpochCuts(log, IV, max_epochs=1, clock=lambda: 1200)
    start = start_of(log)
    assert cuts.next_end(start) == start  # partition 1 has nothing >= 1100 yet: no batch
    log.append(1, 1160)  # a heartbeat (or data) in the idle partition finalises T=1100
    assert cuts.next_end(start) == BatchOffset(11, {0: 1, 1: 1})


def test_boundaries_in_the_future_are_never_used() -> None:
    log = FakeLog({0: [1010, 1500]})
    cuts = EpochCuts(log, IV, max_epochs=1, clock=lambda: 1099)
    assert cuts.next_end(start_of(log)) == start_of(log)


def test_replicas_asking_at_different_times_run_identical_batches() -> None:
    """The point of the mode: boundaries depend on the log only, not on trigger timing."""
    full = {0: [1000 + 7 * i for i in range(120)], 1: [1003 + 11 * i for i in range(80)]}
    eager_log = FakeLog({p: [] for p in full})
    eager = EpochCuts(
        eager_log,
        IV,
        max_epochs=1,
        clock=lambda: max(max(r, default=0) for r in eager_log.parts.values()),
    )
    eager_batches: list[BatchOffset] = []
    pos = start_of(eager_log)
    # Replica A triggers after every appended record...
    events = sorted((t, p) for p, ts in full.items() for t in ts)
    for t, p in events:
        eager_log.append(p, t)
        end = eager.next_end(pos)
        if end != pos:
            eager_batches.append(end)
            pos = end
    # ...replica B only once, at the end, then drains.
    late_log = FakeLog({p: list(ts) for p, ts in full.items()})
    late = EpochCuts(late_log, IV, max_epochs=1, clock=lambda: 2000)
    late_batches = run_all(late, start_of(late_log))
    n = len(eager_batches)
    assert n >= 7
    assert late_batches[:n] == eager_batches


def test_empty_epochs_are_skipped_with_few_lookups() -> None:
    # A year of silence between two records (no replica ran): bisect, not one probe per epoch.
    year = 365 * 24 * 3600 * 1000
    log = FakeLog(
        {
            0: [1010, 1020 + year, 1030 + year, 1105 + year],
            1: [1015, 1025 + year, 1035 + year, 1101 + year],
        }
    )
    cuts = EpochCuts(log, IV, max_epochs=1, clock=lambda: 1110 + year)
    first = cuts.next_end(start_of(log))
    assert first == BatchOffset(11, {0: 1, 1: 1})
    log.requests = 0
    second = cuts.next_end(first)
    assert second.offsets == {0: 3, 1: 3}
    assert second.batch == (1100 + year) // IV
    assert log.requests < 60


def test_from_the_beginning_the_first_batch_ends_at_the_first_records_epoch() -> None:
    log = FakeLog({0: [1_764_000_000_010, 1_764_000_000_120], 1: [1_764_000_000_150]})
    cuts = EpochCuts(log, IV, max_epochs=1, clock=lambda: 1_764_000_000_200)
    end = cuts.next_end(start_of(log))
    assert end == BatchOffset(17_640_000_001, {0: 1, 1: 0})
    assert cuts.probes < 50


def test_a_given_start_past_an_early_cut_is_never_moved_backwards() -> None:
    log = FakeLog({0: [1010, 1020, 1030, 1110], 1: [1012, 1150]})
    cuts = EpochCuts(log, IV, max_epochs=1, clock=lambda: 1200)
    end = cuts.next_end(BatchOffset(NO_BATCH, {0: 3, 1: 0}))
    assert end == BatchOffset(11, {0: 3, 1: 1})


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        EpochCuts(FakeLog({0: []}), 0)


def test_catch_up_ends_at_the_newest_final_boundary_which_is_still_an_agreed_cut() -> None:
    full = {0: [1000 + 7 * i for i in range(120)], 1: [1003 + 11 * i for i in range(80)]}
    strict = run_all(EpochCuts(FakeLog(dict(full)), IV, max_epochs=1, clock=lambda: 2000), START)
    log = FakeLog(dict(full))
    catch_up = EpochCuts(log, IV, max_epochs=0, clock=lambda: 2000)
    log.requests = 0
    merged = run_all(catch_up, START)
    # A replica that fell behind takes everything final in one batch, ending on an epoch cut
    # that the strict sequence (and every other replica) also has.
    assert len(merged) == 1
    assert merged[0] == strict[-1]
    assert log.requests <= 12
    capped = run_all(EpochCuts(FakeLog(dict(full)), IV, max_epochs=3, clock=lambda: 2000), START)
    assert capped == strict[2::3] + ([strict[-1]] if len(strict) % 3 else [])
    assert all(c in strict for c in capped)
    # The record cap: merged batches stop before the group that would pass it, each still a
    # strict cut; a first group larger than the cap is taken whole.
    by_records = run_all(
        EpochCuts(FakeLog(dict(full)), IV, max_epochs=0, clock=lambda: 2000, max_records=60),
        START,
    )
    assert all(c in strict for c in by_records) and by_records[-1] == strict[-1]
    sizes = [a.records_until(b) for a, b in zip([START, *by_records], by_records, strict=False)]
    assert max(sizes) <= 60 and 1 < len(by_records) < len(strict), sizes
    tiny = EpochCuts(FakeLog(dict(full)), IV, max_epochs=0, clock=lambda: 2000, max_records=1)
    assert run_all(tiny, START) == strict


START = BatchOffset(NO_BATCH, {0: 0, 1: 0})


def test_the_default_runs_identical_batches_also_for_a_replica_that_fell_behind() -> None:
    # The old default (max_epochs 0) let a replica that triggered late merge every final
    # epoch into one batch: its batches (hence watermarks and late drops) differed from a
    # replica that kept up. The default now groups epochs on aligned boundaries only.
    full = {0: [1000 + 7 * i for i in range(120)], 1: [1003 + 11 * i for i in range(80)]}
    eager_log = FakeLog({p: [] for p in full})
    eager = EpochCuts(
        eager_log, IV, group=3,
        clock=lambda: max(max(r, default=0) for r in eager_log.parts.values()),
    )  # fmt: skip
    eager_batches: list[BatchOffset] = []
    pos = start_of(eager_log)
    for t, p in sorted((t, p) for p, ts in full.items() for t in ts):
        eager_log.append(p, t)
        end = eager.next_end(pos)
        if end != pos:
            eager_batches.append(end)
            pos = end
    behind = run_all(EpochCuts(FakeLog(dict(full)), IV, group=3, clock=lambda: 2000), START)
    assert len(eager_batches) >= 2
    assert behind[: len(eager_batches)] == eager_batches
    # Every batch ends on an aligned boundary (j multiple of G) and holds at most G epochs.
    assert all(b.batch % 3 == 0 for b in behind)
    assert [b.batch for b in behind] == [12, 15, 18]  # 2100 is not final (no record after it)
    old_default = run_all(
        EpochCuts(FakeLog(dict(full)), IV, max_epochs=0, clock=lambda: 2000), START
    )
    assert len(old_default) == 1 and old_default != behind[:1]


def test_aligned_groups_skip_empty_groups_and_wait_for_finality() -> None:
    year = 365 * 24 * 3600 * 1000
    later = [1000 + year, 1700 + year]
    log = FakeLog({0: [1005, 1210, *later], 1: [1003, 1390, *later]})
    cuts = EpochCuts(log, IV, group=5, clock=lambda: 2000 + year)
    batches = run_all(cuts, start_of(log))
    # Group boundaries at 1000, 1500, ...: the first batch ends at 1500 (both partitions past
    # it), the next at the first non-empty group after a year of empty ones (its boundary at
    # 1500 + year, the first aligned one past the record at 1000 + year).
    assert [b.batch for b in batches] == [15, (1500 + year) // IV]
    assert batches[1].offsets == {0: 3, 1: 3}
    assert log.requests <= 2 * 40
    # Not final yet: a boundary in partition 1's future.
    young = FakeLog({0: [1005, 1600], 1: [1003]})
    assert EpochCuts(young, IV, group=5, clock=lambda: 1600).next_end(start_of(young)) == start_of(
        young
    )


def test_batch_interval_must_be_a_multiple_of_the_epoch() -> None:
    from arfl.configs.load import parse_spec
    from arfl.errors import SpecError

    base = {"name": "x", "source": {"topic": "in"}, "sink": {"topic": "out"}}
    ok = parse_spec({**base, "replication": {"mode": "active-leaderless", "replicas": 2,
                                               "batch_interval": "2s"}})  # fmt: skip
    assert ok.replication.batch_interval == 2.0
    with pytest.raises(SpecError) as e:
        parse_spec({**base, "replication": {"mode": "active-leaderless", "replicas": 2,
                                              "heartbeat_interval": "300ms",
                                              "batch_interval": "1s"}})  # fmt: skip
    assert "whole multiple of heartbeat_interval (300ms)" in str(e.value.problems)
    # active-leader decides one batch per interval: any positive interval.
    leader = parse_spec({**base, "replication": {"mode": "active-leader", "replicas": 2,
                                                   "batch_interval": "1300ms"}})  # fmt: skip
    assert leader.replication.batch_interval == 1.3
    with pytest.raises(SpecError) as e:
        parse_spec({**base, "replication": {"mode": "passive", "batch_interval": "1s"}})
    assert any("replication.batch_interval: only for mode" in p for p in e.value.problems)
