"""The executor warm-up of a real-time replica: its topic, and that a failed warm-up never
stops the replica (it only saves time)."""

from __future__ import annotations

from typing import Any

import pytest

from arfl.replica import driver, warmup


def test_warmup_topic_is_the_replicas_own() -> None:
    assert warmup.warmup_topic("out.r1") == "out.r1.warmup"
    assert warmup.warmup_topic("out.r0") != warmup.warmup_topic("out.r1")


def test_failed_warm_up_is_logged_and_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(spark: Any, sink_options: dict[str, str], tasks: int) -> warmup.Warmup:
        raise RuntimeError("kafka unreachable")

    monkeypatch.setattr(driver, "warm_up", boom)
    driver._warm_up(object(), {"topic": "t", "kafka.bootstrap.servers": "b"}, 2)
    err = capsys.readouterr().err
    assert "executor warm-up skipped" in err and "kafka unreachable" in err


def test_warm_up_logs_what_it_did(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def fake(spark: Any, sink_options: dict[str, str], tasks: int) -> warmup.Warmup:
        seen.update(options=sink_options, tasks=tasks)
        return warmup.Warmup(topic="t.warmup", records=200, write_s=1.0, read_s=0.5)

    monkeypatch.setattr(driver, "warm_up", fake)
    driver._warm_up(object(), {"topic": "t", "kafka.bootstrap.servers": "b"}, 3)
    assert seen == {"options": {"topic": "t", "kafka.bootstrap.servers": "b"}, "tasks": 3}
    assert "executors warmed up in" in capsys.readouterr().err
