"""Rendering of zoo.cfg, server.properties and the JVM command lines."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from arfl.errors import StackError
from arfl.stack import config


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_zookeeper_config_standalone_admin_off_4lw_whitelisted() -> None:
    props = _parse(
        config.render_properties(config.zookeeper_properties(Path("/d/zk"), "10.9.0.1", 2281))
    )
    assert props["clientPort"] == "2281"
    assert props["clientPortAddress"] == "10.9.0.1"
    assert props["dataDir"] == "/d/zk"
    assert props["admin.enableServer"] == "false"
    assert props["4lw.commands.whitelist"] == "ruok,stat,srvr"
    assert not any(k.startswith("server.") for k in props), "standalone: no quorum peers"
    # Sessions as short as two ticks are allowed; long ones are not capped at 20 ticks.
    assert int(props["minSessionTimeout"]) == 2 * int(props["tickTime"])
    assert int(props["maxSessionTimeout"]) >= 30_000


def test_kafka_config_single_node_kraft() -> None:
    props = _parse(
        config.render_properties(config.kafka_properties(Path("/d/k"), "10.9.0.1", 9192, 9193))
    )
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"{props['node.id']}@10.9.0.1:9193"
    assert props["listeners"] == "PLAINTEXT://10.9.0.1:9192,CONTROLLER://10.9.0.1:9193"
    assert props["advertised.listeners"] == "PLAINTEXT://10.9.0.1:9192"
    assert props["log.dirs"] == "/d/k"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "default.replication.factor",
    ):
        assert props[key] == "1", key
    assert "message.timestamp.type" not in props
    # The log cleaner's dedupe buffer is live heap for the broker's whole life: small here.
    assert int(props["log.cleaner.dedupe.buffer.size"]) <= 32 * 1024 * 1024


def test_kafka_heap_is_fixed_and_its_gc_pauses_logged() -> None:
    logs = Path("/s/logs")
    cmd = config.kafka_command("java", Path("/k/libs"), Path("/c/server.properties"),
                               Path("/c/log4j2.xml"), logs)  # fmt: skip
    xmx = [a for a in cmd if a.startswith("-Xmx")]
    xms = [a for a in cmd if a.startswith("-Xms")]
    assert len(xmx) == len(xms) == 1 and xmx[0][4:] == xms[0][4:], "no heap resizing"
    gc_logs = [a for a in cmd if a.startswith("-Xlog:gc")]
    assert gc_logs and f"file={logs / config.KAFKA_GC_LOG}:" in gc_logs[0]
    # gc+phases: a concurrent collector (ZGC) logs its pauses only there.
    assert gc_logs[0].startswith("-Xlog:gc,gc+phases:")
    # The broker's collector: G1 with a 20-ms goal (docs/benchmarks.md, "The broker's collector").
    g1 = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35"]
    i = cmd.index(g1[0])
    assert cmd[i : i + 3] == g1 and "-XX:+UseZGC" not in cmd
    assert cmd[-2:] == [config.KAFKA_MAIN, "/c/server.properties"]
    # The storage tool shares the JVM flags but must not write over the broker's GC log.
    fmt = config.format_command("java", Path("/k/libs"), Path("/c/p"), Path("/c/l"), logs, "id")
    assert not any(a.startswith("-Xlog") for a in fmt)


def test_render_keeps_order_and_one_line_per_key() -> None:
    assert config.render_properties({"b": 1, "a": "x"}) == "b=1\na=x\n"


def test_cluster_id_is_a_kafka_uuid() -> None:
    ids = {config.new_cluster_id() for _ in range(500)}
    assert len(ids) == 500
    for cid in ids:
        assert len(cid) == 22 and "=" not in cid
        assert not cid.startswith("-"), "kafka-storage would read it as an option"
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_command_lines_name_main_class_heap_and_classpath() -> None:
    zk = config.zookeeper_command("/j/java", Path("/py/jars"), Path("/c/zoo.cfg"), Path("/c/l.xml"))
    assert zk[0] == "/j/java"
    assert zk[-2:] == [config.ZK_MAIN, "/c/zoo.cfg"]
    assert "-Xmx128m" in zk and "/py/jars/*" in zk
    assert "-Dlog4j2.configurationFile=/c/l.xml" in zk

    k = config.kafka_command("/j/java", Path("/libs"), Path("/c/s.p"), Path("/c/l.xml"), Path("/l"))
    assert k[-2:] == ["kafka.Kafka", "/c/s.p"]
    assert f"-Xmx{config.KAFKA_HEAP}" in k and "/libs/*" in k

    f = config.format_command(
        "/j/java", Path("/libs"), Path("/c/s.p"), Path("/c/l.xml"), Path("/l"), "CID"
    )
    i = f.index(config.STORAGE_TOOL)
    assert f[i:] == ["kafka.tools.StorageTool", "format", "-t", "CID", "-c", "/c/s.p",
                     "--ignore-formatted"]  # fmt: skip


def test_layout_paths(tmp_path: Path) -> None:
    lay = config.Layout(tmp_path)
    assert lay.state_file == tmp_path / "stack.json"
    assert lay.log("kafka") == tmp_path / "logs" / "kafka.log"
    assert lay.pid_file("zookeeper") == tmp_path / "zookeeper.pid"
    assert lay.data("kafka") == tmp_path / "data" / "kafka"


def test_harness_nice_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARFL_HARNESS_NICE", raising=False)
    assert config.harness_nice() == config.HARNESS_NICE < 0
    monkeypatch.setenv("ARFL_HARNESS_NICE", "0")
    assert config.harness_nice() == 0
    monkeypatch.setenv("ARFL_HARNESS_NICE", "+5")
    assert config.harness_nice() == 5
    for bad in ("fast", "-21", "20", "--5", "1.5"):
        monkeypatch.setenv("ARFL_HARNESS_NICE", bad)
        with pytest.raises(StackError, match="ARFL_HARNESS_NICE"):
            config.harness_nice()
