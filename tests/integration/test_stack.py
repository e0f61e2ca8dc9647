"""The embedded stack for real: ZooKeeper and Kafka JVMs, their clients, up/down by pid."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from arfl import stack as arfl_stack
from arfl.configs.spec import Stack
from arfl.errors import ReportError, StackError
from arfl.priority import priority_of
from arfl.processes import create_time
from arfl.stack import StackInfo, config, lifecycle
from arfl.stack.topics import (
    delete_topics,
    end_offsets,
    ensure_topic,
    read_to_end,
    watermarks,
)
from arfl.testing import EmbeddedStack, free_ports

pytestmark = pytest.mark.integration


def _consume(bootstrap: str, topic: str, n: int, timeout: float = 30.0) -> list[tuple[bytes, int]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[bytes, int]] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.value() or b"", msg.timestamp()[0]))
    finally:
        c.close()
    return got


def test_produce_and_consume_through_kafka(stack: StackInfo, topic_name: str) -> None:
    ensure_topic(stack.kafka, topic_name, 2, log_append_time=True)
    p = Producer({"bootstrap.servers": stack.kafka, "acks": "all", "enable.idempotence": True})
    for i in range(10):
        p.produce(topic_name, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0
    del p  # a librdkafka client lives (and reconnects) until it is collected
    got = _consume(stack.kafka, topic_name, 10)
    assert sorted(v for v, _ in got) == sorted(f"v{i}".encode() for i in range(10))
    # LogAppendTime topics carry the broker's timestamp type (2 = TIMESTAMP_LOG_APPEND_TIME).
    assert {ts_type for _, ts_type in got} == {2}


def test_ensure_topic_is_idempotent_and_checks_partitions(
    stack: StackInfo, topic_name: str
) -> None:
    ensure_topic(stack.kafka, topic_name, 3)
    ensure_topic(stack.kafka, topic_name, 3)  # exists: nothing to do
    ensure_topic(stack.kafka, topic_name, 2)  # more partitions than needed is fine
    with pytest.raises(StackError, match=rf"topic {topic_name} .* has 3 partitions, 4 needed"):
        ensure_topic(stack.kafka, topic_name, 4)
    delete_topics(stack.kafka, [topic_name, topic_name + "-never-created"])
    assert topic_name not in _topics(stack.kafka)


def test_end_offsets_and_watermarks_follow_the_log(stack: StackInfo, topic_name: str) -> None:
    ensure_topic(stack.kafka, topic_name, 2)
    p = Producer({"bootstrap.servers": stack.kafka, "acks": "all"})
    for _ in range(5):
        p.produce(topic_name, value=b"x", partition=0)
    p.produce(topic_name, value=b"y", partition=1)
    assert p.flush(30) == 0
    del p
    assert end_offsets(stack.kafka, topic_name) == {0: 5, 1: 1}
    assert end_offsets(stack.kafka, topic_name, 1) == {0: 5}  # partitions 0 .. n-1
    c = Consumer({"bootstrap.servers": stack.kafka, "group.id": topic_name})
    try:
        assert watermarks(c, topic_name, [1, 0]) == {1: (0, 1), 0: (0, 5)}
    finally:
        c.close()
    with pytest.raises(StackError, match="does not exist"):
        end_offsets(stack.kafka, topic_name + "-missing")


def test_read_to_end_reads_every_record_then_stops(stack: StackInfo, topic_name: str) -> None:
    hints = {"missing_hint": "create it", "unreachable_hint": "start it"}
    ensure_topic(stack.kafka, topic_name, 3)  # partition 2 stays empty
    try:
        assert read_to_end(stack.kafka, topic_name, error=ReportError, timeout_s=30, **hints) == []
        p = Producer({"bootstrap.servers": stack.kafka, "acks": "all"})
        for i in range(4):
            p.produce(
                topic_name, key=b"k", value=f"a{i}".encode(), partition=0, headers={"h": b"1"}
            )
        p.produce(topic_name, value=b"b0", partition=1)
        assert p.flush(30) == 0
        del p
        msgs = read_to_end(stack.kafka, topic_name, error=ReportError, timeout_s=30, **hints)
        by_part = {
            part: [(m.offset(), m.value()) for m in msgs if m.partition() == part]
            for part in (0, 1)
        }
        assert by_part == {0: [(i, f"a{i}".encode()) for i in range(4)], 1: [(0, b"b0")]}
        assert len(msgs) == 5  # nothing from the empty partition, nothing twice
        first = next(m for m in msgs if m.partition() == 0)
        assert (first.key(), first.headers()) == (b"k", [("h", b"1")])
        assert all(m.timestamp()[1] > 0 for m in msgs)
    finally:
        delete_topics(stack.kafka, [topic_name])
    with pytest.raises(ReportError, match=rf"topic '{topic_name}' does not exist .*; create it"):
        read_to_end(stack.kafka, topic_name, error=ReportError, timeout_s=30, **hints)


def test_auto_create_is_off(stack: StackInfo, topic_name: str) -> None:
    p = Producer({"bootstrap.servers": stack.kafka, "message.timeout.ms": 3000})
    errors: list[object] = []
    p.produce(topic_name, b"x", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(10)
    del p
    assert errors and errors[0] is not None, "producing to a missing topic must fail"


def test_znode_through_zookeeper(stack: StackInfo) -> None:
    zk = KazooClient(hosts=stack.zookeeper, timeout=5)
    zk.start(timeout=10)
    try:
        path = f"/arfl-test/{uuid.uuid4().hex}"
        zk.create(path, b"hello", makepath=True, ephemeral=True)
        data, stat = zk.get(path)
        assert data == b"hello"
        assert stat.ephemeralOwner == zk.client_id[0]
        # The short tick lets clients ask for sub-second sessions (fast leader failover).
        assert zk._session_timeout <= 5000
    finally:
        zk.stop()
        zk.close()


def test_resolve_reuses_the_running_embedded_stack(stack: StackInfo) -> None:
    # The session stack lives in $ARFL_STATE_DIR/stack, where resolve() looks.
    assert arfl_stack.resolve(Stack(), start=False) == stack
    assert arfl_stack.resolve(Stack(kind="external", kafka=stack.kafka)).kafka == stack.kafka


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def _rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def test_life_cycle_up_again_port_taken_down(own_stack: EmbeddedStack, tmp_path: Path) -> None:
    t0 = time.monotonic()
    info = own_stack.start()
    startup = time.monotonic() - t0
    procs = own_stack.processes()
    assert set(procs) == {"zookeeper", "kafka"}
    rss = {name: _rss_mb(rec.pid) for name, rec in procs.items()}
    print(
        f"\nstack start-up {startup:.1f}s; RSS zookeeper {rss['zookeeper']:.0f} MiB, "
        f"kafka {rss['kafka']:.0f} MiB (idle, just started)"
    )
    statuses = {s.name: s for s in lifecycle.status(own_stack.state)}
    assert all(s.healthy and s.running for s in statuses.values())
    assert statuses["kafka"].pid == procs["kafka"].pid
    # The broker every replica's results pass through runs ahead of them for the CPU: its
    # threads and its session's group (the kernel's autogroup); ZooKeeper at the default.
    if os.geteuid() == 0:  # a negative niceness needs root
        nice = config.harness_nice()
        assert nice < 0
        kafka = priority_of(procs["kafka"].pid)
        assert kafka["nice"] == nice and kafka["group_nice"] in (None, nice), kafka
        assert priority_of(procs["zookeeper"].pid)["nice"] == 0

    # up again: the same processes are reused, quickly.
    t0 = time.monotonic()
    host, _, kport = info.kafka.rpartition(":")
    zport = int(info.zookeeper.rpartition(":")[2])
    st = lifecycle.load_state(lifecycle.layout_of(own_stack.state))
    assert st is not None
    again = lifecycle.up(host, zport, int(kport), st.controller_port, state=own_stack.state)
    assert again == info
    assert own_stack.processes() == procs
    assert time.monotonic() - t0 < 10
    ensure_topic(info.kafka, "kept", 1)

    # Another stack wanting the same Kafka port gets a clear error naming port and owner.
    zk2, ctl2 = free_ports(2)
    with pytest.raises(StackError) as e:
        lifecycle.up(host, zk2, int(kport), ctl2, state=tmp_path / "other")
    msg = str(e.value)
    assert f"port {kport} on {host} is taken by another process (pid {procs['kafka'].pid}:" in msg
    assert "--kafka-port" in msg
    assert not (tmp_path / "other" / "zookeeper.pid").exists()

    # down stops exactly those pids; nothing is left.
    assert sorted(own_stack.stop()) == ["kafka", "zookeeper"]
    for rec in procs.values():
        assert not psutil.pid_exists(rec.pid) or (create_time(rec.pid) != rec.create_time), (
            f"pid {rec.pid} still exists (status {psutil.Process(rec.pid).status()})"
        )
    assert not any(s.running for s in lifecycle.status(own_stack.state))
    for port in (kport, zport):
        with socket.socket() as s:
            assert s.connect_ex((host, int(port))) != 0
    assert own_stack.stop() == []

    # up after down: new processes on the kept data (Kafka's storage is not formatted again).
    t0 = time.monotonic()
    assert lifecycle.up(host, zport, int(kport), st.controller_port, state=own_stack.state) == info
    print(f"restart on existing data {time.monotonic() - t0:.1f}s")
    assert "kept" in _topics(info.kafka)
    assert own_stack.processes()["kafka"].pid != procs["kafka"].pid
    assert sorted(own_stack.stop()) == ["kafka", "zookeeper"]


def test_broker_that_dies_at_start_reports_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker JVM that cannot start (its heap size is not a size): it exits at once, and up()
    # must say so with its log instead of waiting for the timeout.
    monkeypatch.setattr(config, "KAFKA_HEAP", "64q")
    state = tmp_path / "broken"
    zk, kafka, ctl = free_ports(3)
    t0 = time.monotonic()
    try:
        with pytest.raises(StackError) as e:
            lifecycle.up("127.0.0.1", zk, kafka, ctl, state=state, timeout=90)
        assert time.monotonic() - t0 < 60
        msg = str(e.value)
        assert "kafka exited during start-up; last 20 lines of" in msg
        assert "heap" in msg.lower()
        st = lifecycle.load_state(lifecycle.layout_of(state))
        assert st is not None and st.services == {}, "a failed up leaves no process behind"
    finally:
        lifecycle.down(state)
