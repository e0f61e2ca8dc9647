"""active-leader decisions: first entry wins, leader/follower logic (fake log and election)."""

from __future__ import annotations

import pytest

from arfl.errors import DeployError
from arfl.replica.modes.leader import Decider, LeaderPolicy
from arfl.replica.source import BatchOffset, SourceOptions
from arfl.replica.source.decisions import Decision, DecisionBook
from arfl.replica.source.late import LateRule
from arfl.replica.source.offsets import NO_BATCH, AgreedGroup
from arfl.run.names import decision_topic, leader_path


class FakeInput:
    def __init__(self, hw: dict[int, int]) -> None:
        self.hw = hw

    def partitions(self) -> list[int]:
        return sorted(self.hw)

    def high_watermarks(self) -> dict[int, int]:
        return dict(self.hw)

    def low_watermarks(self) -> dict[int, int]:
        return dict.fromkeys(self.hw, 0)

    def offsets_for_time(self, ts_ms: int) -> dict[int, int | None]:
        raise AssertionError("not used by the leader mode")


class FakeDecisionLog:
    """Shares one list (the one-partition topic) between replicas; each reads in log order."""

    def __init__(self, topic: list[Decision]) -> None:
        self.topic_entries = topic
        self.topic = "decisions"
        self.book = DecisionBook()
        self.pos = 0
        self.stale_until_append = False

    def poll(self, timeout_s: float = 0.0) -> int:
        if self.stale_until_append:
            return 0  # the broker has not delivered the other leader's entry to us yet
        n = 0
        while self.pos < len(self.topic_entries):
            self.book.add(self.topic_entries[self.pos])
            self.pos += 1
            n += 1
        return n

    def catch_up(self, timeout_s: float = 0.0) -> None:
        self.poll()

    def append(self, d: Decision) -> None:
        self.topic_entries.append(d)
        self.stale_until_append = False

    def wait_for(self, k: int, timeout_s: float) -> Decision | None:
        self.poll()
        return self.book.get(k)

    def close(self) -> None:
        pass


class FakeElection:
    def __init__(self, leader: bool, epoch: int = 1) -> None:
        self.is_leader = leader
        self.epoch = epoch

    def close(self) -> None:
        pass


def policy(
    topic: list[Decision],
    hw: dict[int, int],
    leader: bool,
    replica: int = 0,
    cap: int = 1000,
    merge: bool = False,
) -> tuple[LeaderPolicy, FakeDecisionLog, FakeInput]:
    opts = SourceOptions(
        bootstrap="b:1",
        topic="in",
        mode="active-leader",
        replica=replica,
        zookeeper="z:1",
        decision_topic="decisions",
        max_records_per_batch=cap,
        merge_decisions=merge,
    )
    dlog = FakeDecisionLog(topic)
    inp = FakeInput(hw)
    election = FakeElection(leader, epoch=replica)
    # The decider gets its own log client in production; one fake shared here (no thread).
    dec = Decider(opts, inp, dlog, election, dict.fromkeys(hw, 0))  # type: ignore[arg-type]
    pol = LeaderPolicy(opts, inp, decisions=dlog, election=election, decider=dec)  # type: ignore[arg-type]
    return pol, dlog, inp


def decide(pol: LeaderPolicy) -> Decision | None:
    """What the leader's decider thread does once per batch interval."""
    assert pol.decider is not None
    return pol.decider.decide_once() if pol.election.is_leader else None


START = BatchOffset(NO_BATCH, {0: 0, 1: 0})


def test_first_entry_for_k_wins_in_the_book() -> None:
    book = DecisionBook()
    a = Decision(0, epoch=3, leader=0, start={0: 0}, end={0: 10})
    b = Decision(0, epoch=4, leader=1, start={0: 0}, end={0: 20})
    assert book.add(a)
    assert not book.add(b)
    assert book.get(0) == a
    assert book.ignored == 1
    assert book.max_k == 0


def test_decision_json_round_trip() -> None:
    d = Decision(5, epoch=7, leader=1, start={0: 3, 10: 4}, end={0: 9, 10: 4})
    assert Decision.from_json(d.to_json()) == d
    with pytest.raises(ValueError, match="not a decision"):
        Decision.from_json(b'{"k": 1}')


def test_leader_decides_and_follower_applies_the_same_end() -> None:
    topic: list[Decision] = []
    lead, _, inp = policy(topic, {0: 5, 1: 3}, leader=True, replica=0)
    follow, _, _ = policy(topic, {0: 999, 1: 999}, leader=False, replica=1)
    assert follow.next_end(START, None) == START  # nothing decided yet: no batch
    assert lead.next_end(START, None) == START  # the leader's query does not decide either
    decide(lead)
    e0 = lead.next_end(START, None)
    assert e0 == BatchOffset(0, {0: 5, 1: 3})
    assert follow.next_end(START, None) == e0
    assert decide(lead) is None  # nothing new: no empty decision
    assert len(topic) == 1
    inp.hw = {0: 8, 1: 3}
    decide(lead)
    e1 = lead.next_end(e0, None)
    assert e1 == BatchOffset(1, {0: 8, 1: 3})
    assert follow.next_end(e0, None) == e1
    assert [d.k for d in topic] == [0, 1]


def test_the_leader_decides_while_its_own_query_stalls() -> None:
    # The leader's Spark is stuck in batch 0 (its executor was killed): decisions go on, on the
    # leader's clock, and a follower runs batches 0, 1, 2 meanwhile (a leader proposing batch k
    # inside its own latestOffset for k would make the follower wait).
    topic: list[Decision] = []
    lead, _, inp = policy(topic, {0: 5, 1: 3}, leader=True, replica=0)
    follow, _, _ = policy(topic, {0: 0, 1: 0}, leader=False, replica=1)
    pos = START
    for hw in ({0: 5, 1: 3}, {0: 9, 1: 4}, {0: 12, 1: 10}):
        inp.hw = hw
        decide(lead)
        end = follow.next_end(pos, None)
        assert end == BatchOffset(pos.batch + 1, hw)
        pos = end
    assert lead.proposed == 3


def test_leader_caps_a_batch() -> None:
    topic: list[Decision] = []
    lead, _, _ = policy(topic, {0: 100, 1: 100}, leader=True, cap=10)
    decide(lead)
    assert lead.next_end(START, None) == BatchOffset(0, {0: 5, 1: 5})


def test_two_leaders_overlapping_everyone_applies_the_first_entry() -> None:
    """A deposed leader that has not noticed yet appends a different end for the same k."""
    topic: list[Decision] = []
    old, _, _ = policy(topic, {0: 10, 1: 10}, leader=True, replica=0)
    new, new_log, _ = policy(topic, {0: 20, 1: 20}, leader=True, replica=1)
    follower, _, _ = policy(topic, {0: 0, 1: 0}, leader=False, replica=2)
    # The new leader does not see the old one's entry before appending its own for k=0.
    new_log.stale_until_append = True
    decide(old)
    decide(new)
    e_old = old.next_end(START, None)
    e_new = new.next_end(START, None)
    assert len(topic) == 2 and topic[0].end != topic[1].end  # both proposed k=0
    assert e_old == e_new == follower.next_end(START, None) == BatchOffset(0, {0: 10, 1: 10})
    assert new_log.book.ignored == 1


def test_a_new_leader_reads_the_log_before_proposing() -> None:
    topic: list[Decision] = []
    old, _, _ = policy(topic, {0: 4, 1: 4}, leader=True, replica=0)
    decide(old)
    e0 = old.next_end(START, None)
    new, new_log, _ = policy(topic, {0: 50, 1: 50}, leader=True, replica=1)
    # The new leader continues the log from k=0's end; its replica, behind at START, applies
    # k=0 as decided.
    d1 = decide(new)
    assert d1 is not None and (d1.k, dict(d1.start)) == (1, dict(e0.offsets))
    assert new.next_end(START, None) == e0
    assert [d.k for d in topic] == [0, 1]
    assert new_log.book.max_k == 1


def test_a_decision_that_starts_elsewhere_is_an_error() -> None:
    topic = [Decision(0, epoch=1, leader=0, start={0: 7, 1: 0}, end={0: 9, 1: 0})]
    follower, _, _ = policy(topic, {0: 0, 1: 0}, leader=False)
    with pytest.raises(DeployError, match="replicas disagree on their start"):
        follower.next_end(START, None)


def test_decision_topic_names_are_legal_and_per_run() -> None:
    a = decision_topic("clicks", "clicks-20261125-2200")
    b = decision_topic("clicks", "clicks 2026/11/25")
    assert a == "arfl.clicks.clicks-20261125-2200.decisions"
    assert b == "arfl.clicks.clicks_2026_11_25.decisions"


def test_two_runs_of_one_spec_elect_their_leaders_apart() -> None:
    # The election was per spec name: two runs of one spec on a shared stack joined one
    # election, and one run's leader proposed nothing for the other's log.
    from pathlib import Path

    from arfl.configs.load import parse_spec
    from arfl.replica.modes.base import ReplicaContext
    from arfl.replica.modes.leader import source_options

    spec = parse_spec(
        {"name": "clicks", "source": {"topic": "in", "partitions": 2}, "sink": {"topic": "out"},
         "replication": {"mode": "active-leader", "replicas": 2}}
    )  # fmt: skip

    def opts(run: str, r: int) -> SourceOptions:
        ctx = ReplicaContext(r, "127.0.0.1:9092", "out-r", Path("/nonexistent"),
                             options={"zookeeper": "127.0.0.1:2181", "run_id": run})  # fmt: skip
        return source_options(spec, ctx)

    a0, a1, b0 = opts("clicks-a", 0), opts("clicks-a", 1), opts("clicks-b", 0)
    assert a0.election_path == a1.election_path == leader_path("clicks", "clicks-a")
    assert a0.election_path != b0.election_path
    assert a0.election_path.startswith("/arfl/clicks/")
    assert leader_path("clicks", "x y/z") == "/arfl/clicks/x_y_z/leader"


def test_a_follower_behind_merges_the_ready_decisions_only_when_asked() -> None:
    # merge_decisions (filters, selects, windows): a follower that fell behind runs every decision
    # that is ready as one batch, ending exactly where the newest one ends; the others keep
    # one decision per batch. Both end at the same offsets.
    topic: list[Decision] = []
    lead, _, inp = policy(topic, {0: 5, 1: 3}, leader=True, replica=0)
    for hw in ({0: 5, 1: 3}, {0: 9, 1: 4}, {0: 12, 1: 10}):
        inp.hw = hw
        decide(lead)
    aligned, _, _ = policy(topic, {}, leader=False, replica=1)
    merging, _, _ = policy(topic, {}, leader=False, replica=2, merge=True)
    assert aligned.next_end(START, None) == BatchOffset(0, {0: 5, 1: 3})
    caught_up = merging.next_end(START, None)
    assert caught_up.batch == 2 and caught_up.same_position(BatchOffset(2, {0: 12, 1: 10}))
    # It names where each merged decision begins (the agreed watermark is per decision).
    assert caught_up.groups == (AgreedGroup({0: 5, 1: 3}), AgreedGroup({0: 9, 1: 4}))
    # and it goes on with decision 3 like everyone else
    inp.hw = {0: 13, 1: 10}
    decide(lead)
    assert merging.next_end(caught_up, None) == BatchOffset(3, {0: 13, 1: 10})


def test_merged_decisions_stay_within_the_batch_cap() -> None:
    topic: list[Decision] = []
    lead, _, inp = policy(topic, {0: 4, 1: 4}, leader=True, cap=10)
    for hw in ({0: 4, 1: 4}, {0: 6, 1: 6}, {0: 8, 1: 8}):
        inp.hw = hw
        decide(lead)
    merging, _, _ = policy(topic, {}, leader=False, replica=1, cap=10, merge=True)
    # 8 positions in decision 0, +4 in decision 1 would be 12 > 10: decision 0 alone
    assert merging.next_end(START, None) == BatchOffset(0, {0: 4, 1: 4})


@pytest.mark.parametrize(
    ("steps", "catch_up", "merges"),
    [
        ([{"filter": "amount > 10"}, {"select": ["user", "amount"]}], "auto", True),
        ([{"filter": "amount > 10"}], "aligned", False),
        ([{"window": {"size": "2s", "key": "user", "agg": {"n": "count(*)"}}}], "auto", True),
        ([{"window": {"size": "2s", "key": "user", "agg": {"n": "count(*)"}}}], "aligned", False),
        ([{"transform": "mod:fn"}], "auto", False),
    ],
)
def test_filters_selects_and_windows_catch_up_by_merging_agreed_batches(
    steps: list[dict[str, object]], catch_up: str, merges: bool
) -> None:
    from pathlib import Path

    from arfl.configs.load import parse_spec
    from arfl.replica.modes import leader, leaderless
    from arfl.replica.modes.base import ReplicaContext

    def spec(mode: str) -> object:
        return parse_spec(
            {"name": "c", "source": {"topic": "in", "event_time": "ts"}, "steps": steps,
             "sink": {"topic": "out"},
             "replication": {"mode": mode, "replicas": 2, "catch_up": catch_up}}
        )  # fmt: skip

    ctx = ReplicaContext(0, "127.0.0.1:9092", "out-r", Path("/nonexistent"),
                         options={"zookeeper": "127.0.0.1:2181", "run_id": "r"})  # fmt: skip
    lo = leaderless.source_options(spec("active-leaderless"), ctx)  # type: ignore[arg-type]
    le = leader.source_options(spec("active-leader"), ctx)  # type: ignore[arg-type]
    assert (lo.max_epochs_per_batch == 0) == merges and lo.max_epochs_per_batch in (0, 1)
    assert le.merge_decisions == merges
    # A window's replicas drop late rows by the agreed watermark, merging or not.
    windowed = any("window" in s for s in steps)
    for opts in (lo, le):
        assert (opts.late_rule is not None) == windowed
        if windowed:
            assert opts.late_rule == LateRule("ts", 0)
