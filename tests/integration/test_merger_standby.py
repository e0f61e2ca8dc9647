"""A standby merger takes over for real: the serving merger SIGKILLed, then a serving merger
paused past its lease, then a plain restart; against a real broker, the mergers run through
their process entry points, two fake replicas writing the same results meanwhile."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from test_injector_merger import _hlog_count, _result, _spawn, merger_topics

from arfl.measure.merger import transactions
from arfl.measure.merger.config import MergerConfig
from arfl.processes import create_time, wait_until
from arfl.run.records import replica_topic
from arfl.run.rundir import read_jsonl
from arfl.stack import StackInfo
from arfl.stack.lifecycle import status
from arfl.stack.topics import read_to_end
from arfl.testing import EmbeddedStack

pytestmark = pytest.mark.integration

RATE = 200
"""Results a second, each written by both fake replicas."""
BACKLOG = 30_000
"""Results waiting for the merger when it starts: it forwards them for seconds on any host."""


class Replicas(threading.Thread):
    """Two fake replicas writing ``head`` results at once, then ``rate`` results a second,
    ``0:0, 1:0, 0:1, ...``."""

    def __init__(self, bootstrap: str, sink: str, rate: int = RATE, head: int = 0) -> None:
        super().__init__(daemon=True)
        self.prod = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 1, "queue.buffering.max.messages": 10**6}
        )
        self.sink = sink
        self.rate = rate
        self.head = head
        self.sent = 0
        self.halt = threading.Event()

    def run(self) -> None:
        t0 = time.time()
        while not self.halt.is_set():
            due = self.head + int((time.time() - t0) * self.rate)
            for i in range(self.sent, due):
                now_ms = int(time.time() * 1000)
                rid = f"{i % 2}:{i // 2}"
                for r in (0, 1):
                    self.prod.produce(
                        replica_topic(self.sink, r), key=rid.encode(),
                        value=_result(rid, now_ms, r, {"n": i}, now_ms), partition=i % 2,
                    )  # fmt: skip
            self.sent = max(self.sent, due)
            self.prod.poll(0)
            time.sleep(0.005)
        self.prod.flush(10)


def _results(run_dir: Path) -> int:
    path = run_dir / "monitor.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return int(json.loads(lines[-1])["results"]) if lines else 0


def _assert_every_result_once(stack: StackInfo, sink: str, expected: int) -> None:
    """The sink, as a read_uncommitted consumer has it, holds results 0..expected-1 once."""
    out = read_to_end(
        stack.kafka, sink, error=AssertionError, missing_hint="", unreachable_hint="", timeout_s=60
    )
    got = [m.key().decode() for m in out]
    want = {f"{i % 2}:{i // 2}" for i in range(expected)}
    assert len(got) == len(set(got)), "a result written twice"
    assert set(got) == want, f"missing {len(want - set(got))}"


def _config(stack: StackInfo, sink: str, run_dir: Path, **kw: Any) -> MergerConfig:
    """A serving merger's config: two replicas, a transactional id of the sink's own."""
    tid = f"arfl-merger-{sink}"
    return MergerConfig(
        bootstrap=stack.kafka, sink=sink, replicas=2, run_dir=run_dir,
        input_start=time.time(), group_id=tid, transactional_id=tid, **kw,
    )  # fmt: skip


def _took_over(run_dir: Path, n: int) -> list[dict[str, object]]:
    def got() -> list[dict[str, object]] | None:
        events = [
            e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "merger-took-over"
        ]
        return events if len(events) >= n else None

    return wait_until(got, timeout_s=30, interval_s=0.05, what=f"take-over {n}")


def test_a_standby_merger_takes_over_a_killed_and_a_paused_one_and_the_sink_is_exact(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    sink = merger_topics(stack, topic_name)
    run_dir = tmp_path / "run"
    serving_cfg = _config(stack, sink, run_dir, lease_s=0.5)
    logs = iter(range(100))

    def start(cfg: MergerConfig) -> subprocess.Popen[bytes]:
        p = _spawn(cfg, tmp_path / f"merger-{next(logs)}.log")
        procs.append(p)
        return p

    def standby_of(serving: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        return start(
            dataclasses.replace(
                serving_cfg, standby=True, serving_pid=serving.pid,
                serving_create_time=create_time(serving.pid),
            )
        )  # fmt: skip

    # A fresh broker loads its transaction coordinator at the first transactional producer:
    # the serving merger's first transactions then outlast the lease, and the standby took
    # over before the kill (when this test ran first in a session).
    warm = Producer({"bootstrap.servers": stack.kafka, "transactional.id": f"warm-{topic_name}"})
    warm.init_transactions(60)
    warm.close()
    serving = start(serving_cfg)
    standby = standby_of(serving)
    # Results written before the serving merger reads are a backlog it owes the standby for
    # longer than the lease: it would take over before the kill.
    wait_until(
        lambda: (run_dir / "journal.jsonl").exists()
        and any(e["event"] == "merger_started" for e in read_jsonl(run_dir / "journal.jsonl")),
        timeout_s=60, what="the serving merger reading",
    )  # fmt: skip
    time.sleep(1)
    replicas = Replicas(stack.kafka, sink)
    replicas.start()
    try:
        wait_until(lambda: _results(run_dir) > 0, timeout_s=30, interval_s=0.1, what="serving")
        time.sleep(3)
        # 1. The serving merger dies: the standby takes over at once (nothing to wait out).
        serving.kill()
        serving.wait(10)
        (died,) = _took_over(run_dir, 1)
        assert died["why"] == "died" and died["pid"] == serving.pid
        assert float(died["took_s"]) < 5.0, died  # type: ignore[arg-type]
        serving, standby = standby, standby_of(standby)
        time.sleep(4)
        # 2. The serving merger is paused: the standby kills it once a result it owes is
        # later than the lease (0.5 s), and fences it.
        os.kill(serving.pid, signal.SIGSTOP)
        paused_at = time.time()
        _, paused = _took_over(run_dir, 2)
        assert paused["why"] == "lease" and paused["pid"] == serving.pid
        # The lease runs from the owed result's arrival or the serving merger's last write,
        # either of which may be a few ms before the SIGSTOP (`detected` is rounded to the
        # ms): a suite run saw 0.49995 s.
        assert 0.45 <= float(paused["detected"]) - paused_at < 5.0, paused  # type: ignore[arg-type]
        assert serving.wait(10) == -signal.SIGKILL
        serving = standby
        time.sleep(3)
        # 3. No standby left: a merger restarted in the dead one's place takes over from the
        # commits and the sink's tail, and fences it as well.
        serving.kill()
        serving.wait(10)
        serving = start(serving_cfg)
        time.sleep(4)
    finally:
        replicas.halt.set()
        replicas.join(30)
    expected = replicas.sent

    wait_until(
        lambda: _results(run_dir) >= expected,
        timeout_s=30,
        interval_s=0.2,
        what="every result forwarded",
    )
    serving.send_signal(signal.SIGTERM)
    assert serving.wait(30) == 0, (tmp_path / "merger-4.log").read_text()

    _assert_every_result_once(stack, sink, expected)
    final = json.loads((run_dir / "merger.json").read_text())
    assert final["results"] == expected and final["stop_reason"] == "signal"
    # The latency log across three take-overs: every result once, none counted twice.
    total, _ = _hlog_count(run_dir / "latency.hlog")
    assert total == expected
    # One monitor line a second across the take-overs: none repeats a second already logged.
    ts = [line["t"] for line in read_jsonl(run_dir / "monitor.jsonl")]
    assert all(b > a for a, b in itertools.pairwise(ts)), ts
    assert sum(line["output_rate"] for line in read_jsonl(run_dir / "monitor.jsonl")) == expected
    events = [e["event"] for e in read_jsonl(run_dir / "journal.jsonl")]
    assert events.count("merger-took-over") == 2 and "merger-recovered" in events
    # What the replicas wrote after a death went out during the fence (the sink is exact above).
    took = [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "merger-took-over"]
    assert any(int(e["fresh"]) > 0 for e in took), took


def test_the_producers_a_fence_refused_are_closed_before_they_would_ask_again(
    stack: StackInfo, topic_name: str
) -> None:
    # A producer refused while the old transaction is aborted asks again after librdkafka's
    # fixed 500 ms: alive then, it would fence the producer that won. The garbage collector
    # is held off, so that nothing but the fence itself can close them in time.
    sink = merger_topics(stack, topic_name)
    conf = {"bootstrap.servers": stack.kafka, "transactional.id": f"t-{topic_name}",
            "linger.ms": 1, "log_level": 0}  # fmt: skip
    old = Producer(conf)
    old.init_transactions(10)
    old.begin_transaction()
    for i in range(50):
        old.produce(sink, b"x", partition=i % 2)
    old.flush(10)
    tries = [Producer(conf) for _ in range(transactions.FENCERS)]
    for p in tries:
        p.list_topics(sink, timeout=10)
    gc.disable()
    try:
        winner = transactions.fence(tries, sink, 30.0)
        del tries
        time.sleep(1.5)  # every refused producer's retry is due by now
        winner.begin_transaction()
        winner.produce(sink, b"y", partition=0)
        winner.commit_transaction(10)  # raises (fenced) if a refused producer asked again
    finally:
        gc.enable()


def test_a_merger_fenced_by_a_late_racer_fences_again_and_the_sink_stays_exact(
    stack: StackInfo, topic_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    # On a slow broker one of the fence's racing producers, closed with its second
    # init_transactions on the way, was answered after the server was chosen and fenced it
    # (docs/benchmarks.md, "A merger kill at moments nobody chose"). The test plays that racer:
    # a producer of the transactional id, answered a few seconds after a restarted merger's fence.
    sink = merger_topics(stack, topic_name)
    run_dir = tmp_path / "run"
    cfg = _config(stack, sink, run_dir)
    tid = cfg.transactional_id
    serving = _spawn(cfg, tmp_path / "merger-0.log")
    procs.append(serving)
    replicas = Replicas(stack.kafka, sink)
    replicas.start()
    journal = run_dir / "journal.jsonl"

    def events() -> list[str]:
        return [str(e["event"]) for e in read_jsonl(journal)] if journal.exists() else []

    try:
        wait_until(lambda: _results(run_dir) > 0, timeout_s=30, interval_s=0.1, what="serving")
        time.sleep(2)
        serving.kill()
        serving.wait(10)
        # Restarted with commits to take over from: it fences with racing producers.
        serving = _spawn(cfg, tmp_path / "merger-1.log")
        procs.append(serving)
        wait_until(lambda: "merger-recovered" in events(), timeout_s=30, interval_s=0.05)
        before = _results(run_dir)
        wait_until(lambda: _results(run_dir) > before, timeout_s=30, interval_s=0.05)
        late = Producer({"bootstrap.servers": stack.kafka, "transactional.id": tid, "log_level": 0})
        late.init_transactions(10)
        late.close()
        wait_until(
            lambda: "merger-refenced" in events() or serving.poll() is not None,
            timeout_s=30, interval_s=0.05, what="the merger fenced again",
        )  # fmt: skip
        assert serving.poll() is None, (tmp_path / "merger-1.log").read_text()
        time.sleep(2)
    finally:
        replicas.halt.set()
        replicas.join(30)
    expected = replicas.sent
    wait_until(lambda: _results(run_dir) >= expected, timeout_s=30, interval_s=0.2)
    serving.send_signal(signal.SIGTERM)
    assert serving.wait(30) == 0, (tmp_path / "merger-1.log").read_text()

    _assert_every_result_once(stack, sink, expected)
    final = json.loads((run_dir / "merger.json").read_text())
    assert final["stop_reason"] == "signal" and final["complete_output"], final
    assert final["results"] == expected
    # The test's producer asks again itself after its first refusal: it can be answered after
    # the merger's new fence, a second late answer.
    assert events().count("merger-refenced") >= 1 and "merger-fenced" not in events()


def test_writes_that_failed_while_the_broker_was_stopped_are_written_again_once(
    stack: StackInfo,
    stack_harness: EmbeddedStack,
    topic_name: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    # The broker stops answering for longer than a transaction may stay open while the
    # merger forwards a backlog: its records queued or in flight then time out and the
    # transaction is aborted. Those writes used to count as acknowledged: missing
    # from the sink, and the positions past them committed, so that no restarted merger
    # would forward them either.
    sink = merger_topics(stack, topic_name)
    run_dir = tmp_path / "run"
    cfg = _config(stack, sink, run_dir, transaction_timeout_ms=2000)
    (kafka,) = [s for s in status(stack_harness.state) if s.name == "kafka"]
    assert kafka.pid is not None
    # A backlog the merger has fetched but not yet forwarded when the broker stops: its
    # writes queue in the producer then, and time out whatever the host's speed.
    replicas = Replicas(stack.kafka, sink, rate=500, head=BACKLOG)
    replicas.start()
    wait_until(lambda: replicas.sent >= BACKLOG, timeout_s=60, what="the backlog written")
    serving = _spawn(cfg, tmp_path / "merger.log")
    procs.append(serving)
    try:
        wait_until(lambda: _results(run_dir) > 0, timeout_s=60, interval_s=0.02, what="forwarding")
        # Half-way between two ticks, each of which commits (a commit waits for every record):
        # the broker stops while the merger's records are on their way, not once they are in.
        time.sleep((0.5 - time.time()) % 1.0)
        os.kill(kafka.pid, signal.SIGSTOP)
        try:
            time.sleep(4.0)  # twice the transaction timeout
        finally:
            os.kill(kafka.pid, signal.SIGCONT)
        time.sleep(2.0)
    finally:
        replicas.halt.set()
        replicas.join(30)
    expected = replicas.sent
    wait_until(lambda: _results(run_dir) >= expected, timeout_s=60, what="every result")
    time.sleep(2)  # a tick or two: what failed last is checked and sent again
    serving.send_signal(signal.SIGTERM)
    assert serving.wait(30) == 0, (tmp_path / "merger.log").read_text()
    _assert_every_result_once(stack, sink, expected)
    final = json.loads((run_dir / "merger.json").read_text())
    assert final["complete_output"] is True and final["delivery_failures"] == 0, final
    resent = [e for e in read_jsonl(run_dir / "journal.jsonl") if e["event"] == "merger-resent"]
    # The fault had an effect: writes failed, and those the sink lacked went out again.
    assert sum(int(e["again"]) for e in resent) > 0, resent
