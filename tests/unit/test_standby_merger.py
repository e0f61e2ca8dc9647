"""The standby merger's bookkeeping (what the serving merger owes), its take-over causes and its
fence, against fake Kafka clients; the real take-over is in
tests/integration/test_merger_standby.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from arfl.errors import DeployError
from arfl.measure.merger import process, recovery, standby, transactions
from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.core import MergeCore
from arfl.measure.merger.process import Merger
from arfl.measure.merger.standby import Follower
from arfl.run.records import replica_topic
from arfl.run.rundir import Journal, read_jsonl

SINK = "out"


def rec(rid: str, src_ts: int, h: str = "h1") -> bytes:
    return json.dumps({"rid": rid, "src_ts": src_ts, "replica": 0, "hash": h, "data": {}}).encode()


class Msg:
    def __init__(
        self,
        topic: str,
        value: bytes,
        partition: int = 0,
        offset: int = 0,
        n: int | None = None,
        appended: float | None = None,
    ) -> None:
        self._t, self._v, self._p, self._o = topic, value, partition, offset
        self._appended = appended
        """The broker's append time (``LogAppendTime``, s), or None: the producer's."""
        self._h = None if n is None else [(recovery.SEQ_HEADER, str(n).encode())]

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes:
        return self._v

    def error(self) -> Any:
        return None

    def timestamp(self) -> tuple[int, int]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

        if self._appended is not None:
            return (TIMESTAMP_LOG_APPEND_TIME, int(self._appended * 1000))
        return (TIMESTAMP_CREATE_TIME, int(time.time() * 1000))

    def headers(self) -> Any:
        return self._h


class Meta:
    def __init__(self, topic: str) -> None:
        part = type("P", (), {"partitions": {0: object()}, "error": None})()
        self.topics = {topic: part}


class Consumer:
    def __init__(self, batches: list[list[Msg]]) -> None:
        self.batches = batches
        self.assigned: list[tuple[str, int, int]] = []
        self.unassigned: list[tuple[str, int]] = []
        self.high = 0

    def list_topics(self, topic: str, timeout: float = -1) -> Meta:
        return Meta(topic)

    def get_watermark_offsets(
        self, tp: Any, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        return (0, self.high)

    def assign(self, parts: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in parts]

    def incremental_assign(self, parts: list[Any]) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in parts]

    def incremental_unassign(self, parts: list[Any]) -> None:
        self.unassigned += [(tp.topic, tp.partition) for tp in parts]

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []

    def poll(self, timeout: float = 0) -> Msg | None:
        time.sleep(min(timeout, 0.005))
        return None

    def committed(self, parts: list[Any], timeout: float = -1) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in parts]

    def close(self) -> None:
        pass


class Producer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def init_transactions(self, timeout: float = -1) -> None:
        self.calls.append("init_transactions")

    def close(self) -> bool:
        self.calls.append("close")
        return True


@pytest.fixture(autouse=True)
def _no_end_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    # The producers the fence tries are real ones.
    monkeypatch.setattr(Merger, "_new_producer", lambda self: Producer())
    monkeypatch.setattr(Merger, "_fresh_clients", lambda self: (None, None))


def _follower(tmp_path: Path, batches: list[list[Msg]], serving: int, lease_s: float) -> Follower:
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="arfl-t",
        standby=True, serving_pid=serving, lease_s=lease_s,
    )  # fmt: skip
    consumer = Consumer(batches)
    f = Follower(
        cfg, consumer, Producer(), MergeCore(2, time.time()), stop=threading.Event(),
        owner_gone=lambda: False, assign=lambda: consumer.assign([]), make_producer=Producer,
    )  # fmt: skip
    return f


def r0(rid: str) -> Msg:
    return Msg(replica_topic(SINK, 0), rec(rid, 1))


def r1(rid: str) -> Msg:
    return Msg(replica_topic(SINK, 1), rec(rid, 1))


class Appending(Consumer):
    """After its batches, the broker goes on appending: a new replica copy every 5 ms, from
    ``resume_s`` after the first empty read on (a broker stalled until then)."""

    def __init__(self, batches: list[list[Msg]], resume_s: float = 0.0) -> None:
        super().__init__(batches)
        self.resume_s, self.began, self.n = resume_s, 0.0, 0

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Msg]:
        if self.batches:
            return self.batches.pop(0)
        now = time.time()
        self.began = self.began or now
        time.sleep(0.005)
        if now - self.began < self.resume_s:
            return []
        self.n += 1
        return [Msg(replica_topic(SINK, 1), rec(f"1:{self.n}", 1), appended=time.time())]


def test_the_standby_owes_what_the_sink_lacks_and_takes_over_when_it_is_late(
    tmp_path: Path,
) -> None:
    # Serving: this test's own process (alive). 0:1 reaches the sink, 0:3 reached it before
    # its replica copies; 0:2 never does, while the broker goes on appending.
    batches = [
        [r0("0:1"), r1("0:1"), Msg(SINK, rec("0:3", 1), offset=0, n=1)],
        [r0("0:2"), r0("0:3"), Msg(SINK, rec("0:1", 1), offset=1, n=2), r1("0:3")],
    ]
    f = _follower(tmp_path, batches, serving=os.getpid(), lease_s=0.2)
    f.consumer = Appending(batches)
    t0 = time.time()
    threading.Timer(10, f._stop.set).start()
    took = f.follow({})
    assert took is not None and took.why == "lease"
    assert 0.2 <= time.time() - t0 < 2.0
    assert next(iter(f.owed)) == "0:2"  # 0:1 and 0:3 are in the sink; their copies are duplicates
    assert [r.n for r in f.tail] == [1, 2]
    assert f.core.duplicates == 3  # replica 1's 0:1, and both copies of 0:3
    # The sink is read from its start, the replica topics' assignment is the merger's.
    assert (SINK, 0, 0) in f.consumer.assigned


def test_the_lease_runs_only_while_the_broker_appends(tmp_path: Path) -> None:
    # The serving merger (alive) forwarded 0:0; 0:1 is owed. The broker then appends nothing
    # for 0.6 s (three leases): it held up the serving merger's writes too, so no take-over;
    # once it appends again, the lease counts from there.
    t0 = time.time()
    batches = [[Msg(SINK, rec("0:0", 1)), r0("0:0"), Msg(replica_topic(SINK, 0), rec("0:1", 1),
                                                           appended=t0)]]  # fmt: skip
    f = _follower(tmp_path, batches, serving=os.getpid(), lease_s=0.2)
    f.consumer = Appending(batches, resume_s=0.6)
    threading.Timer(10, f._stop.set).start()
    took = f.follow({})
    assert took is not None and took.why == "lease" and next(iter(f.owed)) == "0:1"
    assert 0.8 <= took.detected_at - t0 < 1.5, took.detected_at - t0


def test_a_result_owed_long_enough_is_late_whatever_the_broker_does(tmp_path: Path) -> None:
    # An input that ended appends nothing more: a paused merger is still taken over, after
    # LEASE_CAP leases.
    t0 = time.time()
    batches = [[Msg(SINK, rec("0:0", 1)), r0("0:0"), Msg(replica_topic(SINK, 0), rec("0:1", 1),
                                                           appended=t0)]]  # fmt: skip
    f = _follower(tmp_path, batches, serving=os.getpid(), lease_s=0.1)
    threading.Timer(10, f._stop.set).start()
    took = f.follow({})
    assert took is not None and took.why == "lease"
    assert standby.LEASE_CAP * 0.1 <= took.detected_at - t0 < standby.LEASE_CAP * 0.1 + 0.5


def test_the_standby_takes_over_at_once_when_the_serving_merger_dies(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    f = _follower(tmp_path, [[r0("0:1")]], serving=gone.pid, lease_s=30.0)
    t0 = time.time()
    took = f.follow({})
    assert took is not None and took.why == "died" and time.time() - t0 < 1.0
    f._read_to_end = lambda between=None: None  # type: ignore[method-assign]
    taken = f.take_over(took)
    assert f.producer.calls == ["init_transactions"]  # the fence
    assert list(f.owed) == ["0:1"] and taken.tail == []


def test_a_late_serving_merger_is_killed_before_the_fence(tmp_path: Path) -> None:
    serving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # The serving merger forwarded 0:0, then stopped: 0:1 is late.
        batches = [[Msg(SINK, rec("0:0", 1)), r0("0:0"), r0("0:1")]]
        f = _follower(tmp_path, batches, serving=serving.pid, lease_s=0.1)
        threading.Timer(10, f._stop.set).start()  # a hang fails, not blocks, the test
        took = f.follow({})
        assert took is not None and took.why == "lease"
        f._read_to_end = lambda between=None: None  # type: ignore[method-assign]
        f.take_over(took)
        assert serving.wait(timeout=5) == -9
        assert f.producer.calls == ["init_transactions"]
    finally:
        serving.kill()


def _standby_config(run_dir: Path, serving: int) -> MergerConfig:
    return MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=run_dir, transactional_id="t",
        standby=True, serving_pid=serving, lease_s=5.0, connect_timeout_s=1.0,
    )  # fmt: skip


def test_a_stopped_standby_writes_nothing(tmp_path: Path) -> None:
    serving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cfg = _standby_config(tmp_path, serving.pid)
        consumer = Consumer([[r0("0:1")]])
        m = Merger(cfg, consumer=consumer, producer=Producer())  # type: ignore[arg-type]
        threading.Timer(0.3, m.stop).start()
        final = m.run()
        assert final == {"stop_reason": "signal", "standby": True}
        assert not (tmp_path / "merger.json").exists()
        assert not (tmp_path / "latency.hlog").exists()
        assert not (tmp_path / "monitor.jsonl").exists()
    finally:
        serving.kill()


def test_unlogged_results_are_those_numbered_after_the_last_count() -> None:
    now_ms = int(time.time() * 1000)
    tail = [recovery.SinkRecord(0, rec(f"0:{i}", now_ms - 50), now_ms, n=i) for i in range(1, 6)]
    lost, _sent = recovery.unlogged(tail, 3, now_ms / 1000 - 1, now_ms / 1000)
    assert lost.count == 2  # numbers 4 and 5


def test_sequence_header() -> None:
    assert recovery.sequence([("x", b"1"), (recovery.SEQ_HEADER, b"42")]) == 42
    assert recovery.sequence(None) is None
    assert recovery.sequence([(recovery.SEQ_HEADER, b"x")]) is None


def test_a_fenced_merger_stops_and_writes_no_counts(tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, KafkaException

    class FencedProducer(Producer):
        def produce(self, *a: Any, **kw: Any) -> None:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

        def begin_transaction(self) -> None:
            self.calls.append("begin_transaction")

        def poll(self, timeout: float = 0) -> int:
            return 0

        def flush(self, timeout: float = 0) -> int:
            return 0

    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="t",
        connect_timeout_s=1.0,
    )  # fmt: skip
    consumer = Consumer([[r0("0:1")]])
    producer = FencedProducer()
    m = Merger(cfg, consumer=consumer, producer=producer)  # type: ignore[arg-type]
    assert m.run() == {"stop_reason": "fenced"}
    assert producer.calls == ["init_transactions", "begin_transaction"]
    assert not (tmp_path / "merger.json").exists()
    assert [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")][-1] == "merger-fenced"


@pytest.mark.parametrize("standby", [2, -1])
def test_the_spec_allows_one_standby_merger(standby: int) -> None:
    from pydantic import ValidationError

    from arfl.configs.spec import Merger as MergerSpec

    assert MergerSpec.model_validate({"standby": 1, "lease": "500ms"}).lease == 0.5
    with pytest.raises(ValidationError, match="standby"):
        MergerSpec.model_validate({"standby": standby})
    with pytest.raises(ValidationError, match="lease"):
        MergerSpec.model_validate({"lease": "10ms"})


def test_no_lease_is_judged_while_the_standby_still_reads_the_sink(tmp_path: Path) -> None:
    # Its own backlog on the final topic (high watermark 100, read up to 1): what it owes may
    # be there; only the stop ends the follow.
    f = _follower(
        tmp_path, [[r0("0:1"), Msg(SINK, rec("0:9", 1), offset=0)]], serving=os.getpid(),
        lease_s=0.05,
    )  # fmt: skip
    f.consumer.high = 100  # type: ignore[attr-defined]
    threading.Timer(0.4, f._stop.set).start()
    assert f.follow({}) is None and f.stop_reason == "signal"
    assert list(f.owed) == ["0:1"]


def test_a_standby_reads_the_replica_topics_on_from_the_committed_positions(
    tmp_path: Path,
) -> None:
    from confluent_kafka import TopicPartition

    serving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cfg = _standby_config(tmp_path, serving.pid)
        consumer = Consumer([])
        consumer.committed = lambda parts, timeout=-1: [  # type: ignore[method-assign]
            TopicPartition(tp.topic, tp.partition, 40) for tp in parts
        ]
        starts = {0: 7}
        m = Merger(cfg, consumer=consumer, producer=Producer())  # type: ignore[arg-type]
        threading.Timer(0.3, m.stop).start()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(recovery, "sink_starts", lambda *a: starts)
            m.run()
        assert sorted(consumer.assigned) == [
            (SINK, 0, 7), (replica_topic(SINK, 0), 0, 40), (replica_topic(SINK, 1), 0, 40),
        ]  # fmt: skip
    finally:
        serving.kill()


def test_the_fence_asks_again_with_another_producer_at_once() -> None:
    # librdkafka asks again only 500 ms after CONCURRENT_TRANSACTIONS: the next producer asks.
    from confluent_kafka import KafkaError, KafkaException

    from arfl.measure.merger import transactions

    class Busy(Producer):
        def init_transactions(self, timeout: float = -1) -> None:
            self.calls.append("init_transactions")
            raise KafkaException(KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, "busy"))

    # Four ask while the old transaction is aborted; then the four servers ask.
    assert transactions.SERVERS == 4
    tries = [Busy(), Busy(), Producer(), Producer(), Busy(), Producer(), Producer(), Producer()]
    assert transactions.fence(tries, SINK, 5.0) is tries[5]  # type: ignore[arg-type]
    asked, closed = ["init_transactions", "close"], ["close"]
    # All but the server are closed: a refused one would ask again 500 ms later and fence it.
    assert [p.calls for p in tries] == [asked, asked, asked, closed, asked, ["init_transactions"],
                                        closed, closed]  # fmt: skip
    with pytest.raises(DeployError, match="init_transactions"):
        transactions.fence([Busy(), Busy()], SINK, 0.1)  # type: ignore[list-item]


def test_no_lease_is_judged_before_the_serving_merger_forwarded_anything(tmp_path: Path) -> None:
    # A serving merger still starting owes nothing yet: only its death would end the follow.
    f = _follower(tmp_path, [[r0("0:1")]], serving=os.getpid(), lease_s=0.05)
    threading.Timer(0.4, f._stop.set).start()
    assert f.follow({}) is None and list(f.owed) == ["0:1"]


def test_the_report_times_a_merger_kill_from_the_standbys_take_over() -> None:
    # The standby takes over before the watch (twice a second) journals the death.
    from arfl.report.faults import journaled_faults

    t = 1_000.0
    journal: list[dict[str, Any]] = [
        {"t": t + 0.01, "event": "fault-injected", "kind": "kill-merger", "replica": None,
         "started": t, "ended": t + 0.01, "details": {"pid": 7}},
        {"t": t + 0.12, "event": "merger-took-over", "pid": 7, "why": "died",
         "detected": t + 0.02, "owed": 3},
        {"t": t + 0.40, "event": "merger-died", "pid": 7, "exit_code": -9},
    ]  # fmt: skip
    (f,) = journaled_faults(journal)
    assert f.detect_s == pytest.approx(0.02) and f.restored_s == pytest.approx(0.12)
    without = [e for e in journal if e["event"] != "merger-took-over"]
    (g,) = journaled_faults(without)
    assert g.detect_s == pytest.approx(0.40) and g.restored_s is None  # no merger took over


def test_a_following_standby_keeps_no_trail_of_what_both_replicas_delivered(
    tmp_path: Path,
) -> None:
    # Its merge core never ticks; were the replicas' trails not trimmed each second, they
    # would hold every result of the follow, and the first tick after a take-over would walk
    # them all at once.
    batches = [
        [r0(f"0:{i}"), r1(f"0:{i}"), Msg(SINK, rec(f"0:{i}", 1), offset=i)] for i in range(50)
    ]
    f = _follower(tmp_path, batches, serving=os.getpid(), lease_s=30.0)
    threading.Timer(1.5, f._stop.set).start()
    assert f.follow({}) is None
    assert f.core.duplicates == 50 and not f.owed
    assert all(len(trail) == 0 for trail in f.core.dedup._owed.values())


class Done:
    """A settled future."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def exception(self) -> None:
        return None

    def result(self) -> Any:
        return self.value


class Admin:
    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends
        self.asked: list[tuple[str, int]] = []

    def list_offsets(self, parts: dict[Any, Any], **_: Any) -> dict[Any, Done]:
        self.asked = [(tp.topic, tp.partition) for tp in parts]
        offset = type("Info", (), {})
        out = {}
        for tp in parts:
            info = offset()
            info.offset = self.ends[(tp.topic, tp.partition)]
            out[tp] = Done(info)
        return out


class FreshProducer:
    def __init__(self) -> None:
        self.produced: list[bytes] = []

    def produce(self, topic: str, value: bytes, key: Any = None, on_delivery: Any = None) -> None:
        self.produced.append(value)

    def poll(self, timeout: float = 0) -> int:
        return 0


class SlowFence(Producer):
    def init_transactions(self, timeout: float = -1) -> None:
        time.sleep(0.3)
        super().init_transactions(timeout)


class Positions(Consumer):
    """Tracks what was consumed per partition (``position``), is assigned both replica
    topics' partition 0, and gives nothing until ``gate`` opens."""

    def __init__(self, batches: list[list[Msg]]) -> None:
        super().__init__(batches)
        self.at: dict[tuple[str, int], int] = {}
        self.gate: Any = lambda: True

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Msg]:
        got = super().consume(num_messages, timeout) if self.gate() else []
        for m in got:
            self.at[(m.topic(), m.partition())] = m.offset() + 1
        return got

    def assignment(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(replica_topic(SINK, r), 0) for r in (0, 1)] + [
            TopicPartition(SINK, 0)
        ]

    def position(self, parts: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [
            TopicPartition(tp.topic, tp.partition, self.at.get((tp.topic, tp.partition), 0))
            for tp in parts
        ]


@pytest.mark.parametrize("reached", ["horizon", "appended", "not"])
def test_results_after_the_horizon_go_out_during_the_fence_and_the_rest_waits_for_it(
    tmp_path: Path, reached: str
) -> None:
    # The serving merger is dead. At its death replica 0's topic ended at offset 2 and
    # replica 1's at 1: 0:1 (both copies) and 0:2 (replica 0's copy) can have been read by it,
    # so they wait for the fence; 0:3 and 0:4 were written after, and go out at once. Replica
    # 1's topic is read past the death when its horizon is reached, or when a record the broker
    # appended after the death is read. Else every result waits.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    t0, t1 = replica_topic(SINK, 0), replica_topic(SINK, 1)
    ends = {(t0, 0): 2, (t1, 0): 1 if reached == "horizon" else 5}
    after = time.time() + 60 if reached == "appended" else None
    batches = [
        [Msg(t0, rec("0:1", 1), offset=0), Msg(t1, rec("0:1", 1), offset=0)],
        [Msg(t0, rec("0:2", 1), offset=1), Msg(t1, rec("0:0", 1), offset=1, appended=after)],
        [Msg(t0, rec("0:3", 1), offset=2), Msg(t1, rec("0:2", 1), offset=2)],
        # The final topic: 0:1 from the dead merger, 0:3 from this one (no number).
        [Msg(SINK, rec("0:1", 1), offset=0, n=7), Msg(SINK, rec("0:3", 1), offset=1)],
        [Msg(t1, rec("0:3", 1), offset=3), Msg(t0, rec("0:4", 1), offset=3)],
    ]
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="arfl-t",
        standby=True, serving_pid=gone.pid, lease_s=30.0,
    )  # fmt: skip
    consumer = Positions(batches)
    fresh, admin = FreshProducer(), Admin(ends)
    f = Follower(
        cfg, consumer, SlowFence(), MergeCore(2, time.time()), stop=threading.Event(),
        owner_gone=lambda: False, assign=lambda: None, make_producer=SlowFence,
        make_fresh=lambda: (fresh, admin),
    )  # fmt: skip
    consumer.gate = f._gone.is_set  # what the replicas wrote, read once the death is seen
    took = f.follow({})
    assert took is not None and took.why == "died"
    f._read_to_end = lambda between=None: None  # type: ignore[method-assign]
    taken = f.take_over(took)
    assert sorted(admin.asked) == [(t0, 0), (t1, 0)]  # the replica topics only
    if reached != "not":
        assert [json.loads(v)["rid"] for v in fresh.produced] == ["0:3", "0:4"]
        assert took.fresh == 2 and took.fresh_s is not None and len(f.fresh) == 2
        assert list(f.owed) == ["0:2", "0:0"]  # 0:1 is in the final topic
        assert [r.n for r in taken.tail] == [7]  # its own 0:3 is not the dead merger's
    else:
        assert fresh.produced == [] and took.fresh == 0 and took.fresh_s is None
        assert list(f.owed) == ["0:2", "0:0", "0:4"]  # 0:3's record in the final topic
    assert f.core.duplicates == 3  # replica 1's 0:1, 0:2 and 0:3


def test_the_producers_fatal_error_is_recognised_however_it_comes() -> None:
    from confluent_kafka import KafkaError, KafkaException

    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    assert transactions.fatal(fenced)
    # produce after it: code _FATAL, not flagged fatal
    assert transactions.fatal(KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce")))
    # a delivery report served in the same poll after it was raised
    wrapped = SystemError("returned a result with an exception set")
    wrapped.__cause__ = fenced
    assert transactions.fatal(wrapped)
    assert not transactions.fatal(KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT)))
    assert not transactions.fatal(SystemError("other"))
    assert not transactions.fatal(None)


def test_a_fence_is_taken_for_a_late_answer_only_soon_after_a_raced_fence(tmp_path: Path) -> None:
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="t",
        connect_timeout_s=1.0,
    )  # fmt: skip
    m = Merger(cfg, consumer=Consumer([]), producer=Producer())  # type: ignore[arg-type]
    error = Exception("fenced")
    assert not m._refence(error)  # no raced fence: a first start fences with one producer
    m._raced(Journal(tmp_path / "journal.jsonl"))
    m._refence_until = time.time() - 0.1
    assert not m._refence(error)  # past the window: a newer merger's fence
    m._refence_until = time.time() + 10
    m._refences = transactions.MAX_REFENCES
    assert not m._refence(error)  # more than the fence's racers could answer late


def test_a_re_fence_that_fails_partway_stops_the_merger_as_fenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopping as fenced commits no position: a merger that went on to its usual finish
    # committed positions past the records it had not sent again yet.
    class Fenced(Producer):
        def purge(self, *a: Any) -> None:
            self.calls.append("purge")

        def poll(self, timeout: float = 0) -> int:
            return 0

        def __len__(self) -> int:
            return 0

    def unreachable(self: Merger) -> Any:
        raise DeployError("merger: no broker at x:1")

    monkeypatch.setattr(Merger, "_new_producer", unreachable)
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="t",
        connect_timeout_s=1.0,
    )  # fmt: skip
    old = Fenced()
    m = Merger(cfg, consumer=Consumer([]), producer=old)  # type: ignore[arg-type]
    m._raced(Journal(tmp_path / "journal.jsonl"))
    with pytest.raises(transactions.Fenced, match="fencing again failed: merger: no broker"):
        m._refence(Exception("fenced"))
    assert old.calls == ["purge", "close"]


def test_only_writes_no_try_can_help_are_lost_for_good() -> None:
    from confluent_kafka import KafkaError

    for code in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._MSG_TIMED_OUT,
                 KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED):  # fmt: skip
        assert not transactions.lost_for_good(KafkaError(code))
    for code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED):
        assert transactions.lost_for_good(KafkaError(code))


@pytest.mark.parametrize(
    "final",
    [{"stop_reason": "signal", "standby": True}, {"stop_reason": "fenced"}],
    ids=["standby-stopped", "fenced"],
)
def test_a_merger_that_wrote_no_counts_exits_cleanly(
    final: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A standby stopped at the run's end, or a merger fenced by the one that took over, has no
    # counts to print: it used to end in a KeyError traceback and exit 1.
    import gc

    import arfl.measure.merger.process as process

    class Stopped:
        config = MergerConfig(bootstrap="x:1", sink=SINK, replicas=2, run_dir=Path("/nonexistent"))

        def run(self) -> dict[str, Any]:
            return final

        def stop(self) -> None:
            pass

    monkeypatch.setattr(process, "build_from_argv", lambda *a: Stopped())
    monkeypatch.setattr(process, "stop_on_termination", lambda stop: None)
    monkeypatch.setattr(gc, "disable", lambda: None)  # main stops the collector
    assert process.main(["--config", "unused"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == final
    assert err == ""


class _Delivering(Producer):
    """A transactional sink producer that keeps each record's delivery callback and reports
    them at its flush (delivered) or its purge (purged from the queue, as a fence's purge
    does)."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[Any, Msg]] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin_transaction")

    def commit_transaction(self, timeout: float = -1) -> None:
        self.calls.append("commit_transaction")

    def produce(self, topic: str, value: bytes, key: Any = None, **kw: Any) -> None:
        self.calls.append("produce")
        self.pending.append((kw["on_delivery"], Msg(topic, value)))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def purge(self, *a: Any) -> None:
        from confluent_kafka import KafkaError

        self.calls.append("purge")
        for cb, msg in self.pending:
            cb(KafkaError(KafkaError._PURGE_QUEUE), msg)
        self.pending = []

    def flush(self, timeout: float = 0) -> int:
        self.calls.append("flush")
        for cb, msg in self.pending:
            cb(None, msg)
        self.pending = []
        return 0

    def __len__(self) -> int:
        return 0


class _FencedAtFlush(_Delivering):
    def flush(self, timeout: float = 0) -> int:
        from confluent_kafka import KafkaError, KafkaException

        self.calls.append("flush")
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))


def _committing(batches: list[list[Msg]], calls: list[str]) -> Positions:
    """A consumer whose position commits land in ``calls`` (``commit``)."""
    consumer = Positions(batches)
    consumer.commit = lambda **kw: calls.append("commit")  # type: ignore[attr-defined]
    return consumer


def test_a_merger_fenced_while_it_flushes_at_its_end_stops_as_fenced(tmp_path: Path) -> None:
    # Its flush serves the fence's fatal error: it used to escape from _finish as a traceback.
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="t",
        connect_timeout_s=1.0, until=time.time() + 0.3,
    )  # fmt: skip
    producer = _FencedAtFlush()
    consumer = _committing([[r0("0:1")]], producer.calls)
    m = Merger(cfg, consumer=consumer, producer=producer)  # type: ignore[arg-type]
    assert m.run() == {"stop_reason": "fenced"}
    # Nothing after the flush that found the fence (a tick in the run may have committed).
    assert producer.calls[producer.calls.index("flush") :] == ["flush"], producer.calls
    assert not (tmp_path / "merger.json").exists()
    assert [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")][-1] == "merger-fenced"


def test_a_merger_fenced_by_a_late_racer_at_its_last_flush_fences_again_and_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Soon after a raced fence the fence its last flush serves is a racer's late answer, as
    # during the run: stopping as fenced there left the records the fence failed unwritten
    # with no merger to write them.
    calls: list[str] = []
    made: list[_Delivering] = []

    def new_producer(self: Merger) -> _Delivering:
        made.append(_Delivering())
        made[-1].calls = calls
        return made[-1]

    monkeypatch.setattr(Merger, "_new_producer", new_producer)
    # A restart: positions committed, so the fence raced producers (their answers may be late).
    monkeypatch.setattr(
        Merger, "_take_over", lambda self, *a: recovery.Taken(positions={("t", 0): 1})
    )
    monkeypatch.setattr(transactions, "fence", lambda producers, *a: producers[0])
    monkeypatch.setattr(recovery, "sink_rids_since", lambda *a: set())  # the record is not there
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="t",
        connect_timeout_s=1.0, until=time.time() + 0.3,
    )  # fmt: skip
    first = _FencedAtFlush()
    m = Merger(cfg, consumer=_committing([[r0("0:1")]], calls), producer=first)  # type: ignore[arg-type]
    final = m.run()
    assert final["stop_reason"] == "until" and final["complete_output"] is True, final
    assert final["delivery_failures"] == 0 and m._acked == m._produced == 2, final
    assert first.calls[first.calls.index("flush") :] == ["flush", "purge", "close"]
    # The new server: the fence, the purged record again, its flush (delivered), then the
    # last commits; the consumer's positions only after that flush.
    after = calls[calls.index("init_transactions") :]
    assert after[:4] == ["init_transactions", "begin_transaction", "produce", "flush"], calls
    assert after[4:] == ["commit_transaction", "begin_transaction", "commit_transaction", "commit"]
    events = [e["event"] for e in read_jsonl(tmp_path / "journal.jsonl")]
    assert "merger-refenced" in events and "merger-fenced" not in events, events
    assert events[-1] == "merger_finished"


class _Unanswered(_Delivering):
    """A transactional producer whose commit and abort calls answer in turn as ``script``
    says: ``timeout`` (the broker away: the call stays in progress, as librdkafka's do),
    ``abort`` (a record failed: the transaction needs an abort), ``fatal`` (the broker
    aborted the transaction itself: ``INVALID_TXN_STATE``), then success. While a call
    is in progress it takes no record."""

    def __init__(self, script: list[str]) -> None:
        super().__init__()
        self.script = script
        self.in_progress = False

    def _call(self, name: str) -> None:
        from confluent_kafka import KafkaError, KafkaException

        self.calls.append(name)
        answer = self.script.pop(0) if self.script else "ok"
        self.in_progress = answer == "timeout"
        if answer == "timeout":
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))
        if answer == "abort":
            raise KafkaException(KafkaError(KafkaError._INCONSISTENT, txn_requires_abort=True))
        if answer == "fatal":
            raise KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, "end", fatal=True))

    def commit_transaction(self, timeout: float = -1) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float = -1) -> None:
        self._call("abort_transaction")

    def produce(self, topic: str, value: bytes, key: Any = None, **kw: Any) -> None:
        from confluent_kafka import KafkaError, KafkaException

        if self.in_progress:
            raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))
        super().produce(topic, value, key, **kw)


def test_a_transaction_the_broker_does_not_end_in_time_is_ended_by_the_next_call() -> None:
    p = _Unanswered(["timeout", "abort", "timeout"])
    assert transactions.commit(p) == "commit"  # timed out: still in progress
    assert transactions.commit(p, pending="commit") == "abort"  # failed, and the abort timed out
    assert transactions.commit(p, pending="abort") is None  # aborted, the next one begun
    assert p.calls == [
        "commit_transaction", "commit_transaction", "abort_transaction", "abort_transaction",
        "begin_transaction",
    ]  # fmt: skip


def _transactional(tmp_path: Path, producer: _Unanswered, **kw: Any) -> Merger:
    cfg = MergerConfig(
        bootstrap="x:1", sink=SINK, replicas=2, run_dir=tmp_path, transactional_id="t",
        connect_timeout_s=1.0, **kw,
    )  # fmt: skip
    consumer = _committing([], [])
    return Merger(cfg, consumer=consumer, producer=producer)  # type: ignore[arg-type]


def test_a_record_forwarded_while_a_commit_is_in_progress_waits_for_its_end(
    tmp_path: Path,
) -> None:
    # librdkafka refuses a record while a timed-out commit is in progress (_STATE): the
    # merger used to end there with a traceback.
    producer = _Unanswered(["timeout", "abort"])
    m = _transactional(tmp_path, producer)
    m._commit()  # the tick's commit times out
    assert m._txn_pending == "commit" and producer.in_progress
    m._produce(SINK, None, rec("0:1", 1), 1)
    assert m._txn_pending is None
    assert producer.calls[-3:] == ["abort_transaction", "begin_transaction", "produce"]


def test_a_record_refused_after_one_of_its_transaction_failed_ends_that_transaction_first(
    tmp_path: Path,
) -> None:
    # A record of the open transaction failed between ticks: librdkafka refuses the next
    # one (_STATE) although no commit is in progress; the merger used to end in a traceback.
    producer = _Unanswered(["abort"])
    producer.in_progress = True  # abortable: no record taken
    m = _transactional(tmp_path, producer)
    m._produce(SINK, None, rec("0:1", 1), 1)
    assert m._txn_pending is None
    assert producer.calls == [
        "commit_transaction",
        "abort_transaction",
        "begin_transaction",
        "produce",
    ]


def test_a_transaction_the_broker_aborted_past_its_timeout_is_fenced_again_not_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker away longer than the transaction timeout aborts the open transaction itself
    # and bumps the epoch: librdkafka's next commit ends in a fatal error though no merger
    # took over. The merger stopped there as fenced, and nothing forwarded its results.
    made: list[_Unanswered] = []

    def new_producer(self: Merger) -> _Unanswered:
        made.append(_Unanswered(["ok", "fatal"]))
        return made[-1]

    now = [1000.0]
    clock = SimpleNamespace(time=time.time, monotonic=lambda: now[0], sleep=time.sleep)
    monkeypatch.setattr(process, "time", clock)
    monkeypatch.setattr(Merger, "_new_producer", new_producer)
    first = _Unanswered(["fatal", "timeout", "fatal"])
    m = _transactional(tmp_path, first, transaction_timeout_ms=5000)
    m._journal = Journal(tmp_path / "journal.jsonl")
    m._begin()
    now[0] += 4.9
    with pytest.raises(transactions.Fenced):
        m._commit()  # open for less than the timeout: only a newer merger's fence does that
    assert not made
    m._begin()
    m._commit()  # the broker away: the commit stays in progress, the transaction open
    assert m._txn_pending == "commit"
    now[0] += 5.0
    m._commit()  # open for the timeout now: the broker's own abort, fenced again
    assert [p.calls[:2] for p in made] == [["init_transactions", "begin_transaction"]]
    (refenced,) = read_jsonl(tmp_path / "journal.jsonl")
    assert refenced["event"] == "merger-refenced"
    assert refenced["message"].startswith("its transaction outlived the broker's timeout")
    # The new producer serves: it commits, and its fresh transaction's fatal error is a fence.
    now[0] += 10.0
    m._commit()
    assert made[0].calls[-2:] == ["commit_transaction", "begin_transaction"]
    with pytest.raises(transactions.Fenced):
        m._commit()
    assert len(made) == 1
