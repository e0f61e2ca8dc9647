"""active-leader against real Kafka and ZooKeeper: election, overlap of two leaders, failover."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.recipe.election import Election

from arfl.replica.modes.leader import LeaderPolicy
from arfl.replica.source import BatchOffset, SourceOptions
from arfl.replica.source.decisions import Decision, DecisionLog
from arfl.replica.source.kafka import TopicLog
from arfl.replica.source.offsets import NO_BATCH
from arfl.run.names import leader_path
from arfl.stack import StackInfo
from arfl.stack.topics import ensure_topic


def wait_until(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    p.flush(10)


@pytest.fixture
def zk(stack: StackInfo) -> Iterator[KazooClient]:
    client = KazooClient(hosts=stack.zookeeper)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


class Replica:
    """One replica's policy and input view (what the Spark reader would hold)."""

    def __init__(self, stack: StackInfo, topic: str, pipeline: str, dtopic: str, r: int) -> None:
        self.opts = SourceOptions(
            bootstrap=stack.kafka,
            topic=topic,
            mode="active-leader",
            replica=r,
            pipeline=pipeline,
            zookeeper=stack.zookeeper,
            decision_topic=dtopic,
            election_path=leader_path(pipeline, "t"),
            session_timeout_s=2.0,
            max_records_per_batch=7,
            batch_interval_s=0.1,  # the leader's decider thread: one decision per 100 ms
        )
        self.log = TopicLog(stack.kafka, topic)
        self.policy = LeaderPolicy(self.opts, self.log)
        self.pos = BatchOffset(NO_BATCH, self.log.low_watermarks())
        self.batches: list[BatchOffset] = []

    def step(self) -> None:
        end = self.policy.next_end(self.pos, None)
        if end != self.pos:
            self.batches.append(end)
            self.pos = end

    def close(self) -> None:
        self.policy.close()
        self.log.close()


@pytest.fixture
def replicas(stack: StackInfo, topic_name: str) -> Iterator[list[Replica]]:
    ensure_topic(stack.kafka, topic_name, 2)
    made: list[Replica] = []
    yield made
    for r in made:
        r.close()


def test_leader_elected_decides_and_fails_over_without_losing_decisions(
    stack: StackInfo, topic_name: str, replicas: list[Replica], zk: KazooClient
) -> None:
    pipeline = f"p{uuid.uuid4().hex[:8]}"
    dtopic = f"arfl.{pipeline}.decisions"
    for r in (0, 1, 2):
        replicas.append(Replica(stack, topic_name, pipeline, dtopic, r))
    election = Election(zk, leader_path(pipeline, "t"))
    wait_until(lambda: len(election.contenders()) == 3, 15, "three contenders")
    first = int(election.contenders()[0])
    leader = replicas[first]
    wait_until(lambda: leader.policy.election.is_leader, 10, f"replica {first} to lead")
    assert sum(r.policy.election.is_leader for r in replicas) == 1

    produce(stack.kafka, topic_name, 21, 2)

    def steps(rs: list[Replica], total: int) -> bool:
        for r in rs:  # each waits only ~50 ms per trigger for a decision
            r.step()
        return all(sum(r.pos.offsets.values()) >= total for r in rs)

    # Decisions come from the leader's decider thread, not from its own steps.
    wait_until(lambda: steps(replicas, 21), 15, "21 records read everywhere")
    assert len(leader.batches) >= 3
    starts = [BatchOffset(NO_BATCH, {0: 0, 1: 0}), *leader.batches[:-1]]
    sizes = [s.records_until(e) for s, e in zip(starts, leader.batches, strict=True)]
    assert sum(sizes) == 21 and max(sizes) <= 7, sizes
    for r in replicas:
        assert r.batches == leader.batches

    # Kill the leader's ZooKeeper session (what a dead driver does, without the timeout wait).
    t0 = time.monotonic()
    leader.policy.election.close()
    others = [r for i, r in enumerate(replicas) if i != first]
    wait_until(lambda: any(r.policy.election.is_leader for r in others), 10, "a new leader")
    failover = time.monotonic() - t0
    new = next(r for r in others if r.policy.election.is_leader)
    assert election.contenders()[0] == str(new.opts.replica)

    # The new leader continues: decisions 3.. for input arriving after the failover, none lost.
    produce(stack.kafka, topic_name, 9, 2)
    wait_until(lambda: steps(others, 30), 15, "the new leader's decisions applied")
    for r in others:
        assert [b.batch for b in r.batches] == list(range(len(r.batches)))
        assert r.batches[: len(leader.batches)] == leader.batches
        assert len(r.batches) > len(leader.batches)
        assert r.pos.offsets == {0: 11 + 5, 1: 10 + 4}  # 21 then 9 records, i % 2
    assert others[0].batches == others[1].batches
    book = new.policy.decisions.book
    after = new.batches[len(leader.batches) :]
    assert {d.leader for d in (book.get(b.batch) for b in after) if d} == {new.opts.replica}
    print(f"\nleader failover after session close: {failover * 1000:.0f} ms")


def test_two_leaders_appending_for_the_same_k_everyone_applies_the_first(
    stack: StackInfo, topic_name: str
) -> None:
    dtopic = f"arfl.{topic_name}.decisions"
    logs = [DecisionLog(stack.kafka, dtopic, r) for r in (0, 1, 2)]
    try:
        a = Decision(0, epoch=1, leader=0, start={0: 0}, end={0: 10})
        b = Decision(0, epoch=2, leader=1, start={0: 0}, end={0: 20})
        c = Decision(1, epoch=2, leader=1, start={0: 10}, end={0: 25})
        # Both proposers append before either reads: the overlap of a stale and a new leader.
        logs[0].append(a)
        logs[1].append(b)
        logs[1].append(c)
        for dl in logs:
            dl.catch_up()
            assert dl.book.get(0) == a
            assert dl.book.get(1) == c
            assert dl.book.ignored == 1
    finally:
        for dl in logs:
            dl.close()
